// labgo share-acks: a franz-go share group with explicit acknowledgements
// (see main.go for the command line).

package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

type shareDelivery struct {
	consumed
	DeliveryCount int32  `json:"delivery_count"`
	Acknowledged  string `json:"acknowledged"`
}

type shareManifest struct {
	Consumed   []shareDelivery `json:"consumed"`
	Operations []operation     `json:"operations"`
}

// setEarliest sets the group config share.auto.offset.reset=earliest
// (IncrementalAlterConfigs on a GROUP resource), so the share group starts at
// the records already written.
func setEarliest(ctx context.Context, bootstrap, group string) (operation, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.ClientID(group+"-admin"))
	if err != nil {
		return operation{}, err
	}
	defer cl.Close()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	resource := kmsg.NewIncrementalAlterConfigsRequestResource()
	resource.ResourceType, resource.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	config := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	value := "earliest"
	config.Name, config.Op, config.Value = "share.auto.offset.reset", kmsg.IncrementalAlterConfigOpSet, &value
	resource.Configs = append(resource.Configs, config)
	req.Resources = append(req.Resources, resource)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return operation{}, err
	}
	if code := resp.Resources[0].ErrorCode; code != 0 {
		return operation{}, fmt.Errorf("IncrementalAlterConfigs error code %d", code)
	}
	return operation{"franz-go", "incremental_alter_configs group " + group + " share.auto.offset.reset=earliest", "ok"}, nil
}

// shareConsume polls until it holds `expect` records, acknowledges each as
// decide says (by arrival index and record), flushes the acknowledgements and
// closes (which leaves the group). The totals come from the records it got and
// the per-partition answers of the acknowledgement callback.
func shareConsume(ctx context.Context, bootstrap, group, topic, clientID string, expect int,
	decide func(i int, r *kgo.Record) kgo.AckStatus) ([]shareDelivery, operation, error) {
	var mu sync.Mutex
	var answers []string
	callback := func(_ *kgo.Client, results kgo.ShareAckResults) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range results {
			outcome := "ok"
			if r.Err != nil {
				outcome = r.Err.Error()
			}
			answers = append(answers, fmt.Sprintf("%s-%d=%s", r.Topic, r.Partition, outcome))
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.ClientID(clientID), kgo.ShareGroup(group),
		kgo.ConsumeTopics(topic), kgo.ShareMaxRecords(int32(expect)), kgo.ShareMaxRecordsStrict(),
		kgo.ShareAckCallback(callback))
	if err != nil {
		return nil, operation{}, err
	}
	var rows []shareDelivery
	totals := map[string]int{"accept": 0, "release": 0, "reject": 0}
	deadline, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for len(rows) < expect && deadline.Err() == nil {
		fetches := cl.PollRecords(deadline, expect-len(rows))
		fetches.EachRecord(func(r *kgo.Record) {
			status := decide(len(rows), r)
			r.Ack(status)
			totals[status.String()]++
			rows = append(rows, shareDelivery{
				consumed: consumed{Client: "franz-go", ClientID: clientID, Group: group, Topic: r.Topic,
					Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp.UnixMilli(),
					Key: b64(r.Key), Value: b64(r.Value), Headers: headers(r.Headers)},
				DeliveryCount: r.DeliveryCount(), Acknowledged: status.String()})
		})
	}
	if len(rows) < expect {
		cl.Close()
		return nil, operation{}, errors.New(clientID + " timed out waiting for its records")
	}
	if err := cl.FlushAcks(ctx); err != nil {
		cl.Close()
		return nil, operation{}, err
	}
	cl.Close()
	mu.Lock()
	defer mu.Unlock()
	result := map[string]any{"client_id": clientID, "received": len(rows), "accepted": totals["accept"],
		"released": totals["release"], "rejected": totals["reject"], "commit": answers}
	return rows, operation{Client: "franz-go",
		Operation: "share consume group=" + group + " client.id=" + clientID + " (explicit acknowledgement)",
		Result:    result}, nil
}

// shareAcks: GROUP-releaser gets the `records` records of TOPIC, releases every
// third by arrival and accepts the rest; GROUP-rejecter gets the released ones
// again, rejects the even offsets and accepts the rest.
func shareAcks(bootstrap, group, topic string, records int) (shareManifest, error) {
	ctx := context.Background()
	out := shareManifest{Consumed: []shareDelivery{}}
	op, err := setEarliest(ctx, bootstrap, group)
	if err != nil {
		return out, err
	}
	out.Operations = append(out.Operations, op)
	rows, op, err := shareConsume(ctx, bootstrap, group, topic, group+"-releaser", records,
		func(i int, _ *kgo.Record) kgo.AckStatus {
			if i%3 == 0 {
				return kgo.AckRelease
			}
			return kgo.AckAccept
		})
	if err != nil {
		return out, err
	}
	out.Consumed, out.Operations = append(out.Consumed, rows...), append(out.Operations, op)
	released := op.Result.(map[string]any)["released"].(int)
	rows, op, err = shareConsume(ctx, bootstrap, group, topic, group+"-rejecter", released,
		func(_ int, r *kgo.Record) kgo.AckStatus {
			if r.Offset%2 == 0 {
				return kgo.AckReject
			}
			return kgo.AckAccept
		})
	if err != nil {
		return out, err
	}
	out.Consumed, out.Operations = append(out.Consumed, rows...), append(out.Operations, op)
	return out, nil
}
