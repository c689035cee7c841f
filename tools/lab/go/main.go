// The capture lab's Go client (franz-go), built at lab time by
// tools/lab/go_client.py. One command:
//
//	labgo workload BOOTSTRAP
//	    create topic go-orders (2 partitions), produce one batch per codec
//	    (acks=all, record headers, some values not UTF-8), then consume
//	    everything with a consumer group and commit; prints a JSON manifest of
//	    what was sent, the offsets the produce results reported, what was
//	    consumed and what was committed (byte fields in base64).
//
//	labgo share-acks BOOTSTRAP GROUP TOPIC RECORDS
//	    share group GROUP (share.auto.offset.reset=earliest) reads the RECORDS
//	    records already in TOPIC: GROUP-releaser releases every third it gets
//	    and accepts the rest, then GROUP-rejecter gets the released ones again
//	    and rejects the even offsets; prints every delivery with its delivery
//	    count and acknowledgement, and each consumer's totals (share.go).
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	topic    = "go-orders"
	group    = "lab-go-group"
	perCodec = 4
)

var codecs = []struct {
	name  string
	codec kgo.CompressionCodec
}{
	{"none", kgo.NoCompression()},
	{"gzip", kgo.GzipCompression()},
	{"snappy", kgo.SnappyCompression()},
	{"lz4", kgo.Lz4Compression()},
	{"zstd", kgo.ZstdCompression()},
}

type produced struct {
	Client     string     `json:"client"`
	ClientID   string     `json:"client_id"`
	Topic      string     `json:"topic"`
	Partition  int32      `json:"partition"`
	Key        *string    `json:"key"`
	Value      *string    `json:"value"`
	Headers    [][]string `json:"headers"`
	Codec      string     `json:"codec"`
	Magic      int        `json:"magic"`
	Acks       string     `json:"acks"`
	APIVersion *int       `json:"api_version"`
	Delivered  bool       `json:"delivered"`
	Offset     *int64     `json:"offset"`
	Error      *string    `json:"error"`
}

type consumed struct {
	Client    string     `json:"client"`
	ClientID  string     `json:"client_id"`
	Group     string     `json:"group"`
	Topic     string     `json:"topic"`
	Partition int32      `json:"partition"`
	Offset    int64      `json:"offset"`
	Timestamp int64      `json:"timestamp"`
	Key       *string    `json:"key"`
	Value     *string    `json:"value"`
	Headers   [][]string `json:"headers"`
}

type operation struct {
	Client    string `json:"client"`
	Operation string `json:"operation"`
	Result    any    `json:"result"`
}

type manifest struct {
	Produced   []produced  `json:"produced"`
	Consumed   []consumed  `json:"consumed"`
	Operations []operation `json:"operations"`
}

func b64(b []byte) *string {
	if b == nil {
		return nil
	}
	s := base64.StdEncoding.EncodeToString(b)
	return &s
}

func headers(hs []kgo.RecordHeader) [][]string {
	out := [][]string{}
	for _, h := range hs {
		out = append(out, []string{h.Key, *b64(h.Value)})
	}
	return out
}

// valueOf: text, except every fourth value, which starts with \xff\xfe (not UTF-8)
func valueOf(tag string, i int) []byte {
	text := []byte(fmt.Sprintf("%s #%d: from the Go client", tag, i))
	if i%4 != 3 {
		return text
	}
	return append([]byte{0xff, 0xfe}, text...)
}

func createTopic(ctx context.Context, bootstrap string) (string, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.ClientID("lab-go-admin"))
	if err != nil {
		return "", err
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic, t.NumPartitions, t.ReplicationFactor = topic, 2, 1
	req.Topics = append(req.Topics, t)
	req.TimeoutMillis = 30000
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return "", err
	}
	if code := resp.Topics[0].ErrorCode; code != 0 {
		return "", fmt.Errorf("CreateTopics error code %d", code)
	}
	return "ok", nil
}

func produce(ctx context.Context, bootstrap string, name string, codec kgo.CompressionCodec) ([]produced, error) {
	clientID := "lab-go-producer-" + name
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.ClientID(clientID),
		kgo.ProducerBatchCompression(codec), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(50*time.Millisecond), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	tag := "go-orders-" + name
	var records []*kgo.Record
	for i := 0; i < perCodec; i++ {
		records = append(records, &kgo.Record{
			Topic: topic, Partition: int32(i % 2),
			Key:   []byte(fmt.Sprintf("%s-k%03d", tag, i)), Value: valueOf(tag, i),
			Headers: []kgo.RecordHeader{{Key: "seq", Value: []byte(strconv.Itoa(i))},
				{Key: "origin", Value: []byte("go")}},
		})
	}
	var rows []produced
	for _, result := range cl.ProduceSync(ctx, records...) {
		r := result.Record
		row := produced{Client: "franz-go", ClientID: clientID, Topic: r.Topic, Partition: r.Partition,
			Key: b64(r.Key), Value: b64(r.Value), Headers: headers(r.Headers), Codec: name, Magic: 2,
			Acks: "all", Delivered: result.Err == nil}
		if result.Err != nil {
			text := result.Err.Error()
			row.Error = &text
		} else {
			offset := r.Offset
			row.Offset = &offset
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func consume(ctx context.Context, bootstrap string, expect int) ([]consumed, operation, error) {
	clientID := "lab-go-consumer"
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.ClientID(clientID), kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	if err != nil {
		return nil, operation{}, err
	}
	defer cl.Close()
	var rows []consumed
	deadline, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for len(rows) < expect && deadline.Err() == nil {
		fetches := cl.PollFetches(deadline)
		fetches.EachRecord(func(r *kgo.Record) {
			rows = append(rows, consumed{Client: "franz-go", ClientID: clientID, Group: group, Topic: r.Topic,
				Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp.UnixMilli(),
				Key: b64(r.Key), Value: b64(r.Value), Headers: headers(r.Headers)})
		})
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		return nil, operation{}, err
	}
	committed := map[string]int64{}
	for t, partitions := range cl.CommittedOffsets() {
		for p, at := range partitions {
			committed[t+"-"+strconv.Itoa(int(p))] = at.Offset
		}
	}
	cl.LeaveGroup()
	result := map[string]any{"received": len(rows), "expected": expect, "committed": committed}
	return rows, operation{Client: "franz-go", Operation: "consume group=" + group, Result: result}, nil
}

func workload(bootstrap string) (manifest, error) {
	ctx := context.Background()
	out := manifest{Produced: []produced{}, Consumed: []consumed{}}
	status, err := createTopic(ctx, bootstrap)
	if err != nil {
		return out, err
	}
	out.Operations = append(out.Operations, operation{"franz-go", "create_topics " + topic + "(2)", status})
	for _, c := range codecs {
		rows, err := produce(ctx, bootstrap, c.name, c.codec)
		if err != nil {
			return out, err
		}
		out.Produced = append(out.Produced, rows...)
	}
	rows, op, err := consume(ctx, bootstrap, len(out.Produced))
	if err != nil {
		return out, err
	}
	out.Consumed = rows
	out.Operations = append(out.Operations, op)
	return out, nil
}

func main() {
	var out any
	var err error
	switch {
	case len(os.Args) == 3 && os.Args[1] == "workload":
		out, err = workload(os.Args[2])
	case len(os.Args) == 6 && os.Args[1] == "share-acks":
		records, convErr := strconv.Atoi(os.Args[5])
		if convErr != nil || records < 1 {
			fmt.Fprintln(os.Stderr, "labgo: RECORDS must be a positive number")
			os.Exit(2)
		}
		out, err = shareAcks(os.Args[2], os.Args[3], os.Args[4], records)
	default:
		fmt.Fprintln(os.Stderr, "usage: labgo workload BOOTSTRAP | labgo share-acks BOOTSTRAP GROUP TOPIC RECORDS")
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "labgo:", err)
		os.Exit(1)
	}
	text, _ := json.MarshalIndent(out, "", " ")
	fmt.Println(string(text))
}
