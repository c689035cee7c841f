// The capture lab's Java client (org.apache.kafka:kafka-clients), compiled at
// lab time by tools/lab/java_client.py. Commands:
//
//   quota BOOTSTRAP CLIENT_ID producer_byte_rate=N consumer_byte_rate= ...
//       set (or, with an empty value, remove) client quotas via Admin.alterClientQuotas
//   workload BOOTSTRAP
//       produce one batch per codec, then consume with a classic group, a
//       KIP-848 consumer group and a share group; prints a JSON manifest of
//       what was sent, the offsets the callbacks reported, what was consumed
//       and what was committed (byte fields in base64).
//   longpoll BOOTSTRAP TOPIC CLIENT_ID MAX_WAIT_MS MILLIS
//       a consumer assigned partition 0 of TOPIC (no group) polls it for
//       MILLIS with fetch.max.wait.ms=MAX_WAIT_MS; prints one JSON operation
//   group848 BOOTSTRAP TOPIC GROUP MEMBERS STAGGER_MS STAY_MS
//       MEMBERS consumers (group.protocol=consumer, client ids GROUP-0, ...)
//       join GROUP one after the other, each STAGGER_MS after the one before
//       first polled, and poll until STAY_MS after the last did; prints one
//       JSON operation with each member's assignments
//   admin-loop BOOTSTRAP CLIENT_ID TOPIC MILLIS QUOTA_BOOTSTRAP key=value...
//       an Admin client sets TOPIC's retention.ms once, then the quotas of
//       its client id (as `quota` does, through QUOTA_BOOTSTRAP), then sets
//       retention.ms over and over for MILLIS; prints one JSON operation
//   share BOOTSTRAP GROUP TOPIC EXPECT MEMBERS
//       MEMBERS share consumers (threads) of share group GROUP read TOPIC
//       from the earliest offset until EXPECT records arrived between them;
//       prints a JSON manifest of what each consumed and acknowledged
//   share-acks BOOTSTRAP GROUP TOPIC EXPECT
//       explicit acknowledgement in share group GROUP: a first consumer
//       releases every third record it gets and accepts the rest, a second
//       one then gets what was released (delivered again) and rejects the
//       even offsets, accepting the rest; prints a JSON manifest of every
//       delivery (delivery count, how it was acknowledged)
//   share-timeout BOOTSTRAP GROUP TOPIC EXPECT
//       acquisition locks that expire in share group GROUP: a holder gets
//       EXPECT records and holds them without acknowledging while a taker
//       gets them again once their locks expired and accepts them; then the
//       holder accepts its (expired) deliveries; prints a JSON manifest of
//       every delivery and what the broker answered each commitSync
//   transactions BOOTSTRAP
//       a transactional producer commits (with offsets sent to the
//       transaction), aborts and commits; a second producer is fenced by a
//       third with its transactional id; then a read_committed consumer reads
//       the topic; prints a JSON manifest of every transaction as the
//       producers saw it and of what the consumer received

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class LabClient {
    static final String[] CODECS = {"none", "gzip", "snappy", "lz4", "zstd"};
    static final String TOPIC = "java-orders";
    static final String SHARE_TOPIC = "java-share";
    static final int PER_CODEC = 4;
    static final int SHARE_RECORDS = 5;

    public static void main(String[] args) throws Exception {
        if (args.length >= 3 && args[0].equals("quota")) {
            quota(args);
        } else if (args.length == 2 && args[0].equals("workload")) {
            System.out.println(workload(args[1]));
        } else if (args.length == 6 && args[0].equals("longpoll")) {
            System.out.println(longPoll(args[1], args[2], args[3], Integer.parseInt(args[4]),
                                        Long.parseLong(args[5])));
        } else if (args.length == 7 && args[0].equals("group848")) {
            System.out.println(group848(args[1], args[2], args[3], Integer.parseInt(args[4]),
                                        Long.parseLong(args[5]), Long.parseLong(args[6])));
        } else if (args.length >= 6 && args[0].equals("admin-loop")) {
            System.out.println(adminLoop(args[1], args[2], args[3], Long.parseLong(args[4]), args[5],
                                         Arrays.copyOfRange(args, 6, args.length)));
        } else if (args.length == 5 && args[0].equals("share-timeout")) {
            System.out.println(shareTimeout(args[1], args[2], args[3], Integer.parseInt(args[4])));
        } else if (args.length == 5 && args[0].equals("share-acks")) {
            System.out.println(shareAcks(args[1], args[2], args[3], Integer.parseInt(args[4])));
        } else if (args.length == 6 && args[0].equals("share")) {
            System.out.println(shareGroup(args[1], args[2], args[3], Integer.parseInt(args[4]),
                                          Integer.parseInt(args[5])));
        } else if (args.length == 2 && args[0].equals("transactions")) {
            System.out.println(Transactions.run(args[1]));
        } else {
            System.err.println("usage: LabClient quota BOOTSTRAP CLIENT_ID key=value... | workload BOOTSTRAP"
                               + " | longpoll BOOTSTRAP TOPIC CLIENT_ID MAX_WAIT_MS MILLIS"
                               + " | group848 BOOTSTRAP TOPIC GROUP MEMBERS STAGGER_MS STAY_MS"
                               + " | admin-loop BOOTSTRAP CLIENT_ID TOPIC MILLIS QUOTA_BOOTSTRAP key=value..."
                               + " | share BOOTSTRAP GROUP TOPIC EXPECT MEMBERS | transactions BOOTSTRAP");
            System.exit(2);
        }
    }

    // ------------------------------------------------------------ quotas --

    static void quota(String[] args) throws Exception {
        List<ClientQuotaAlteration.Op> ops = new ArrayList<>();
        for (int i = 3; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            ops.add(new ClientQuotaAlteration.Op(kv[0], kv[1].isEmpty() ? null : Double.valueOf(kv[1])));
        }
        ClientQuotaEntity entity = new ClientQuotaEntity(Map.of(ClientQuotaEntity.CLIENT_ID, args[2]));
        try (Admin admin = Admin.create(adminProps(args[1]))) {
            admin.alterClientQuotas(List.of(new ClientQuotaAlteration(entity, ops))).all().get();
        }
    }

    static Properties adminProps(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", "lab-java-admin");
        return p;
    }

    // ---------------------------------------------------------- workload --

    static String workload(String bootstrap) throws Exception {
        Json out = new Json();
        List<String> produced = new ArrayList<>();
        List<String> consumed = new ArrayList<>();
        List<String> operations = new ArrayList<>();
        try (Admin admin = Admin.create(adminProps(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(TOPIC, 2, (short) 1), new NewTopic(SHARE_TOPIC, 1, (short) 1)))
                .all().get();
            operations.add(op("create_topics " + TOPIC + "(2) " + SHARE_TOPIC + "(1)", Json.str("ok")));
            // a share group starts at the end of the log unless told otherwise
            ConfigResource group = new ConfigResource(ConfigResource.Type.GROUP, "lab-java-share");
            AlterConfigOp earliest = new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"),
                                                       AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(group, List.of(earliest))).all().get();
            operations.add(op("incremental_alter_configs group lab-java-share share.auto.offset.reset=earliest",
                              Json.str("ok")));
        }
        int total = 0;
        for (String codec : CODECS) {
            total += produce(bootstrap, TOPIC, codec, PER_CODEC, produced);
        }
        produce(bootstrap, SHARE_TOPIC, "lz4", SHARE_RECORDS, produced);
        operations.add(consume(bootstrap, "classic", "lab-java-classic", total, consumed));
        operations.add(consume(bootstrap, "consumer", "lab-java-consumer", total, consumed));
        operations.add(shareConsume(bootstrap, "lab-java-share", SHARE_RECORDS, consumed));
        return "{\"produced\": [" + String.join(",\n ", produced) + "],\n \"consumed\": ["
            + String.join(",\n ", consumed) + "],\n \"operations\": [" + String.join(",\n ", operations) + "]}";
    }

    static String op(String name, String resultJson) {
        return "{\"client\": \"java\", \"operation\": " + Json.str(name) + ", \"result\": " + resultJson + "}";
    }

    static byte[] keyOf(String tag, int i) {
        return (tag + "-k" + String.format("%03d", i)).getBytes(StandardCharsets.UTF_8);
    }

    static byte[] valueOf(String tag, int i) {
        byte[] text = (tag + " #" + i + ": from the Java client").getBytes(StandardCharsets.UTF_8);
        if (i % 4 != 3) {
            return text;
        }
        byte[] binary = new byte[text.length + 2];  // not UTF-8: \xff\xfe then the text
        binary[0] = (byte) 0xff;
        binary[1] = (byte) 0xfe;
        System.arraycopy(text, 0, binary, 2, text.length);
        return binary;
    }

    static int produce(String bootstrap, String topic, String codec, int count, List<String> produced)
            throws InterruptedException {
        String clientId = "lab-java-producer-" + codec;
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", clientId);
        p.put("acks", "all");
        p.put("compression.type", codec);
        p.put("linger.ms", "50");
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        String tag = "java-" + topic.substring(5) + "-" + codec;
        List<ProducerRecord<byte[], byte[]>> records = new ArrayList<>();
        List<Future<RecordMetadata>> futures = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < count; i++) {
                ProducerRecord<byte[], byte[]> rec = new ProducerRecord<>(topic, topic.equals(TOPIC) ? i % 2 : 0,
                                                                          keyOf(tag, i), valueOf(tag, i));
                rec.headers().add("seq", Integer.toString(i).getBytes(StandardCharsets.UTF_8));
                rec.headers().add("origin", "java".getBytes(StandardCharsets.UTF_8));
                records.add(rec);
                futures.add(producer.send(rec));
            }
            producer.flush();
        }
        for (int i = 0; i < count; i++) {
            ProducerRecord<byte[], byte[]> rec = records.get(i);
            Long offset = null;
            String error = null;
            int partition = rec.partition();
            try {
                RecordMetadata md = futures.get(i).get();
                offset = md.hasOffset() ? md.offset() : null;
                partition = md.partition();
            } catch (ExecutionException exc) {
                error = exc.getCause().toString();
            }
            produced.add("{\"client\": \"java\", \"client_id\": " + Json.str(clientId) + ", \"topic\": "
                + Json.str(topic) + ", \"partition\": " + partition + ", \"key\": " + Json.bytes(rec.key())
                + ", \"value\": " + Json.bytes(rec.value()) + ", \"headers\": " + Json.headers(rec.headers())
                + ", \"codec\": " + Json.str(codec) + ", \"magic\": 2, \"acks\": \"all\", \"api_version\": null"
                + ", \"delivered\": " + (error == null) + ", \"offset\": " + offset
                + ", \"error\": " + (error == null ? "null" : Json.str(error)) + "}");
        }
        return count;
    }

    static Properties consumerProps(String bootstrap, String clientId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", clientId);
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        return p;
    }

    static String consumedRow(String clientId, String group, ConsumerRecord<byte[], byte[]> r) {
        return "{\"client\": \"java\", \"client_id\": " + Json.str(clientId) + ", \"group\": " + Json.str(group)
            + ", \"topic\": " + Json.str(r.topic()) + ", \"partition\": " + r.partition() + ", \"offset\": "
            + r.offset() + ", \"timestamp\": " + r.timestamp() + ", \"key\": " + Json.bytes(r.key())
            + ", \"value\": " + Json.bytes(r.value()) + ", \"headers\": " + Json.headers(r.headers()) + "}";
    }

    /** A group consumer (classic or KIP-848 protocol): everything, then commitSync. */
    static String consume(String bootstrap, String protocol, String group, int expect, List<String> consumed) {
        String clientId = "lab-java-" + protocol + "-consumer";
        Properties p = consumerProps(bootstrap, clientId);
        p.put("group.id", group);
        p.put("group.protocol", protocol);
        p.put("auto.offset.reset", "earliest");
        p.put("enable.auto.commit", "false");
        if (protocol.equals("classic")) {
            p.put("session.timeout.ms", "6000");
            p.put("heartbeat.interval.ms", "1000");
        }
        int got = 0;
        Map<String, Long> committed = new TreeMap<>();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            consumer.subscribe(List.of(TOPIC));
            long deadline = System.currentTimeMillis() + 30_000;
            while (got < expect && System.currentTimeMillis() < deadline) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(500));
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    consumed.add(consumedRow(clientId, group, r));
                    got++;
                }
            }
            consumer.commitSync();
            Set<TopicPartition> parts = new HashSet<>(consumer.assignment());
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : consumer.committed(parts).entrySet()) {
                if (e.getValue() != null) {
                    committed.put(e.getKey().toString(), e.getValue().offset());
                }
            }
        }
        StringBuilder result = new StringBuilder("{\"received\": " + got + ", \"expected\": " + expect
                                                 + ", \"committed\": {");
        String sep = "";
        for (Map.Entry<String, Long> e : committed.entrySet()) {
            result.append(sep).append(Json.str(e.getKey())).append(": ").append(e.getValue());
            sep = ", ";
        }
        result.append("}}");
        return op("consume group=" + group + " group.protocol=" + protocol, result.toString());
    }

    /** A share-group consumer (KIP-932): records are acknowledged (implicitly) and committed. */
    static String shareConsume(String bootstrap, String group, int expect, List<String> consumed) {
        String clientId = "lab-java-share-consumer";
        Properties p = consumerProps(bootstrap, clientId);
        p.put("group.id", group);
        int got = 0;
        String commit = "null";
        try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(p)) {
            consumer.subscribe(List.of(SHARE_TOPIC));
            long deadline = System.currentTimeMillis() + 30_000;
            while (got < expect && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                    consumed.add(consumedRow(clientId, group, r));
                    got++;
                }
            }
            Map<?, ?> results = consumer.commitSync();
            commit = Json.str(results.size() + " partition(s) acknowledged");
        }
        return op("share consume group=" + group, "{\"received\": " + got + ", \"expected\": " + expect
                  + ", \"commit\": " + commit + "}");
    }

    // ------------------------------------------------------------- waits --

    /** A consumer without a group polling an empty partition: each Fetch waits out fetch.max.wait.ms. */
    static String longPoll(String bootstrap, String topic, String clientId, int maxWaitMs, long millis) {
        Properties p = consumerProps(bootstrap, clientId);
        p.put("fetch.max.wait.ms", Integer.toString(maxWaitMs));
        p.put("fetch.min.bytes", "1");
        p.put("enable.auto.commit", "false");
        int got = 0;
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            long end = System.currentTimeMillis() + millis;
            while (System.currentTimeMillis() < end) {
                got += consumer.poll(Duration.ofMillis(200)).count();
            }
        }
        return op("poll empty " + tp + " for " + millis + " ms",
                  "{\"client_id\": " + Json.str(clientId) + ", \"fetch.max.wait.ms\": " + maxWaitMs
                  + ", \"fetch.min.bytes\": 1, \"received\": " + got + "}");
    }

    /**
     * KIP-848 group members joining one after the other: each starts STAGGER_MS after the one before
     * has polled once (a JVM takes a while to build its first consumer), and all poll until STAY_MS
     * after the last has; each reports the assignments it was given.
     */
    static String group848(String bootstrap, String topic, String group, int members, long staggerMs, long stayMs)
            throws InterruptedException {
        AtomicLong end = new AtomicLong(Long.MAX_VALUE);
        List<CountDownLatch> polled = new ArrayList<>();
        for (int i = 0; i < members; i++) {
            polled.add(new CountDownLatch(1));
        }
        List<String> reports = new ArrayList<>();
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < members; i++) {
            final int index = i;
            Thread thread = new Thread(() -> {
                String clientId = group + "-" + index;
                List<String> assignments = new ArrayList<>();
                int got = 0;
                try {
                    if (index > 0) {
                        polled.get(index - 1).await();
                        Thread.sleep(staggerMs);
                    }
                    Properties p = consumerProps(bootstrap, clientId);
                    p.put("group.id", group);
                    p.put("group.protocol", "consumer");
                    p.put("auto.offset.reset", "earliest");
                    p.put("enable.auto.commit", "false");
                    try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
                        consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                            public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                            }

                            public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                                List<String> now = new ArrayList<>();
                                for (TopicPartition tp : consumer.assignment()) {
                                    now.add(Json.str(tp.toString()));
                                }
                                Collections.sort(now);
                                synchronized (assignments) {
                                    assignments.add("[" + String.join(", ", now) + "]");
                                }
                            }
                        });
                        got += consumer.poll(Duration.ofMillis(200)).count();
                        if (index == members - 1) {
                            end.set(System.currentTimeMillis() + stayMs);
                        }
                        polled.get(index).countDown();
                        while (System.currentTimeMillis() < end.get()) {
                            got += consumer.poll(Duration.ofMillis(200)).count();
                        }
                    }
                } catch (InterruptedException exc) {
                    Thread.currentThread().interrupt();
                } finally {
                    polled.get(index).countDown();  // (a member that failed does not hold up the next)
                    if (index == members - 1) {
                        end.compareAndSet(Long.MAX_VALUE, System.currentTimeMillis());
                    }
                }
                synchronized (reports) {
                    reports.add("{\"client_id\": " + Json.str(clientId) + ", \"index\": " + index
                                + ", \"received\": " + got + ", \"assignments\": ["
                                + String.join(", ", assignments) + "]}");
                }
            });
            threads.add(thread);
            thread.start();
        }
        for (Thread thread : threads) {
            thread.join();
        }
        Collections.sort(reports);
        return op("group " + group + " (group.protocol=consumer): " + members + " members, each joining " + staggerMs
                  + " ms after the one before polled", "{\"group\": " + Json.str(group)
                  + ", \"group.protocol\": \"consumer\", \"stagger_ms\": " + staggerMs + ", \"members\": ["
                  + String.join(", ", reports) + "]}");
    }

    /**
     * An Admin client setting a topic's retention.ms (to the same value) back to back with
     * IncrementalAlterConfigs v1 (a version tshark 4.0 decodes), each call waiting for its answer. After
     * one call (connections and metadata in place) the quota settings are applied to its client id
     * through QUOTA_BOOTSTRAP, so every request made under the quota is an IncrementalAlterConfigs.
     */
    static String adminLoop(String bootstrap, String clientId, String topic, long millis, String quotaBootstrap,
                            String[] settings) throws Exception {
        Properties p = adminProps(bootstrap);
        p.put("client.id", clientId);
        ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        Map<ConfigResource, Collection<AlterConfigOp>> retention = Map.of(resource, List.of(
            new AlterConfigOp(new ConfigEntry("retention.ms", "3600000"), AlterConfigOp.OpType.SET)));
        int calls = 0;
        try (Admin admin = Admin.create(p)) {
            admin.incrementalAlterConfigs(retention).all().get();
            String[] quotaArgs = new String[3 + settings.length];
            quotaArgs[0] = "quota";
            quotaArgs[1] = quotaBootstrap;
            quotaArgs[2] = clientId;
            System.arraycopy(settings, 0, quotaArgs, 3, settings.length);
            quota(quotaArgs);
            long end = System.currentTimeMillis() + millis;
            while (System.currentTimeMillis() < end) {
                admin.incrementalAlterConfigs(retention).all().get();
                calls++;
            }
        }
        return op("incremental_alter_configs topic " + topic + " retention.ms=3600000 back to back for " + millis
                  + " ms under " + String.join(" ", settings), "{\"client_id\": " + Json.str(clientId) + ", \"calls\": " + calls
                  + ", \"quota\": " + Json.str(String.join(" ", settings)) + "}");
    }

    // ------------------------------------------------------- share group --

    /** MEMBERS share consumers of one share group, each in a thread, until EXPECT records between them. */
    static String shareGroup(String bootstrap, String group, String topic, int expect, int members)
            throws Exception {
        List<String> operations = new ArrayList<>();
        try (Admin admin = Admin.create(adminProps(bootstrap))) {
            ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
            AlterConfigOp earliest = new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"),
                                                       AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(resource, List.of(earliest))).all().get();
            operations.add(op("incremental_alter_configs group " + group + " share.auto.offset.reset=earliest",
                              Json.str("ok")));
        }
        AtomicInteger total = new AtomicInteger();
        List<String> consumed = Collections.synchronizedList(new ArrayList<>());
        List<String> results = Collections.synchronizedList(new ArrayList<>());
        List<Thread> threads = new ArrayList<>();
        for (int m = 1; m <= members; m++) {
            String clientId = group + "-" + m;
            Thread thread = new Thread(() -> {
                Properties p = consumerProps(bootstrap, clientId);
                p.put("group.id", group);
                int got = 0;
                String commit = "null";
                try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(p)) {
                    consumer.subscribe(List.of(topic));
                    long deadline = System.currentTimeMillis() + 40_000;
                    while (total.get() < expect && System.currentTimeMillis() < deadline) {
                        for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                            consumed.add(consumedRow(clientId, group, r));
                            got++;
                            total.incrementAndGet();
                        }
                    }
                    Map<?, ?> acknowledged = consumer.commitSync();
                    commit = Json.str(acknowledged.size() + " partition(s) acknowledged");
                }
                results.add(op("share consume group=" + group + " client.id=" + clientId,
                               "{\"received\": " + got + ", \"commit\": " + commit + "}"));
            });
            threads.add(thread);
            thread.start();
        }
        for (Thread thread : threads) {
            thread.join();
        }
        operations.addAll(results);
        operations.add(op("share group " + group + " total",
                          "{\"received\": " + total.get() + ", \"expected\": " + expect + "}"));
        return "{\"produced\": [],\n \"consumed\": [" + String.join(",\n ", consumed) + "],\n \"operations\": ["
            + String.join(",\n ", operations) + "]}";
    }

    /** Explicit acknowledgements: see `share-acks` in the header. */
    static String shareAcks(String bootstrap, String group, String topic, int expect) throws Exception {
        List<String> operations = new ArrayList<>();
        try (Admin admin = Admin.create(adminProps(bootstrap))) {
            ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
            AlterConfigOp earliest = new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"),
                                                       AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(resource, List.of(earliest))).all().get();
            operations.add(op("incremental_alter_configs group " + group + " share.auto.offset.reset=earliest",
                              Json.str("ok")));
        }
        List<String> consumed = new ArrayList<>();
        int released = shareAckRound(bootstrap, group, topic, group + "-releaser", expect, consumed, operations);
        shareAckRound(bootstrap, group, topic, group + "-rejecter", released, consumed, operations);
        return "{\"produced\": [],\n \"consumed\": [" + String.join(",\n ", consumed) + "],\n \"operations\": ["
            + String.join(",\n ", operations) + "]}";
    }

    /** Expiring acquisition locks: see `share-timeout` in the header. */
    static String shareTimeout(String bootstrap, String group, String topic, int expect) throws Exception {
        List<String> operations = Collections.synchronizedList(new ArrayList<>());
        try (Admin admin = Admin.create(adminProps(bootstrap))) {
            ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
            AlterConfigOp earliest = new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"),
                                                       AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(resource, List.of(earliest))).all().get();
            operations.add(op("incremental_alter_configs group " + group + " share.auto.offset.reset=earliest",
                              Json.str("ok")));
        }
        List<String> consumed = Collections.synchronizedList(new ArrayList<>());
        String holderId = group + "-holder";
        Properties p = consumerProps(bootstrap, holderId);
        p.put("group.id", group);
        p.put("share.acknowledgement.mode", "explicit");
        try (KafkaShareConsumer<byte[], byte[]> holder = new KafkaShareConsumer<>(p)) {
            holder.subscribe(List.of(topic));
            List<ConsumerRecord<byte[], byte[]>> held = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 30_000;
            while (held.size() < expect && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : holder.poll(Duration.ofMillis(500))) {
                    held.add(r);
                }
            }
            // the taker polls while the holder sits on its records: their locks expire and they go to the taker
            Thread taker = new Thread(() -> shareAckRound(bootstrap, group, topic, group + "-taker", held.size(),
                                                          consumed, operations));
            taker.start();
            taker.join();
            for (ConsumerRecord<byte[], byte[]> r : held) {
                holder.acknowledge(r, AcknowledgeType.ACCEPT);
                String row = consumedRow(holderId, group, r);
                consumed.add(row.substring(0, row.length() - 1) + ", \"delivery_count\": "
                             + r.deliveryCount().map(String::valueOf).orElse("null")
                             + ", \"acknowledged\": \"accept\"}");
            }
            List<String> answers = new ArrayList<>();
            holder.commitSync().forEach((partition, failure) -> answers.add(
                Json.str(partition + "=" + failure.map(e -> e.getClass().getSimpleName()).orElse("ok"))));
            operations.add(op("share consume group=" + group + " client.id=" + holderId
                              + " (held its records past their lock, then accepted them)",
                              "{\"client_id\": " + Json.str(holderId) + ", \"received\": " + held.size()
                              + ", \"accepted\": " + held.size() + ", \"released\": 0, \"rejected\": 0"
                              + ", \"commit\": [" + String.join(", ", answers) + "]}"));
        }
        return "{\"produced\": [],\n \"consumed\": [" + String.join(",\n ", consumed) + "],\n \"operations\": ["
            + String.join(",\n ", operations) + "]}";
    }

    /** One consumer of `shareAcks`: polls until EXPECT records came (or 30 s), acknowledges each, commits. */
    static int shareAckRound(String bootstrap, String group, String topic, String clientId, int expect,
                             List<String> consumed, List<String> operations) {
        boolean releaser = clientId.endsWith("-releaser");
        Properties p = consumerProps(bootstrap, clientId);
        p.put("group.id", group);
        p.put("share.acknowledgement.mode", "explicit");
        int got = 0, accepted = 0, released = 0, rejected = 0;
        String commit;
        try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(p)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 30_000;
            while (got < expect && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                    AcknowledgeType type;
                    if (releaser) {
                        type = got % 3 == 0 ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT;
                    } else if (clientId.endsWith("-taker")) {
                        type = AcknowledgeType.ACCEPT;
                    } else {
                        type = r.offset() % 2 == 0 ? AcknowledgeType.REJECT : AcknowledgeType.ACCEPT;
                    }
                    consumer.acknowledge(r, type);
                    got++;
                    if (type == AcknowledgeType.ACCEPT) {
                        accepted++;
                    } else if (type == AcknowledgeType.RELEASE) {
                        released++;
                    } else {
                        rejected++;
                    }
                    String row = consumedRow(clientId, group, r);
                    consumed.add(row.substring(0, row.length() - 1) + ", \"delivery_count\": "
                                 + r.deliveryCount().map(String::valueOf).orElse("null")
                                 + ", \"acknowledged\": " + Json.str(type.toString().toLowerCase()) + "}");
                }
            }
            commit = Json.str(consumer.commitSync().size() + " partition(s) acknowledged");
        }
        operations.add(op("share consume group=" + group + " client.id=" + clientId + " (explicit acknowledgement)",
                          "{\"client_id\": " + Json.str(clientId) + ", \"received\": " + got + ", \"accepted\": "
                          + accepted + ", \"released\": " + released + ", \"rejected\": " + rejected
                          + ", \"commit\": " + commit + "}"));
        return released;
    }

    // ------------------------------------------------------ transactions --

    static final class Transactions {
        static final String TXN_TOPIC = "java-txn";
        static final String SOURCE_TOPIC = "java-txn-source";
        static final String GROUP = "lab-java-txn-group";
        final String bootstrap;
        final List<String> produced = new ArrayList<>();
        final List<String> operations = new ArrayList<>();

        Transactions(String bootstrap) {
            this.bootstrap = bootstrap;
        }

        static String run(String bootstrap) throws Exception {
            return new Transactions(bootstrap).workload();
        }

        KafkaProducer<byte[], byte[]> producer(String clientId, String transactionalId) {
            Properties p = new Properties();
            p.put("bootstrap.servers", bootstrap);
            p.put("client.id", clientId);
            p.put("transactional.id", transactionalId);
            p.put("acks", "all");
            p.put("linger.ms", "5");
            p.put("key.serializer", ByteArraySerializer.class.getName());
            p.put("value.serializer", ByteArraySerializer.class.getName());
            return new KafkaProducer<>(p);
        }

        /** COUNT records over both partitions in the open transaction; their rows once the outcome is known. */
        List<String[]> send(KafkaProducer<byte[], byte[]> producer, String clientId, String tag, int count)
                throws Exception {
            List<String[]> rows = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                ProducerRecord<byte[], byte[]> rec = new ProducerRecord<>(TXN_TOPIC, i % 2, keyOf(tag, i),
                                                                          valueOf(tag, i));
                rec.headers().add("seq", Integer.toString(i).getBytes(StandardCharsets.UTF_8));
                RecordMetadata md = producer.send(rec).get();  // one at a time: offsets in send order
                rows.add(new String[] {"{\"client\": \"java\", \"client_id\": " + Json.str(clientId)
                    + ", \"topic\": " + Json.str(TXN_TOPIC) + ", \"partition\": " + md.partition() + ", \"key\": "
                    + Json.bytes(rec.key()) + ", \"value\": " + Json.bytes(rec.value()) + ", \"headers\": "
                    + Json.headers(rec.headers()) + ", \"codec\": \"none\", \"magic\": 2, \"acks\": \"all\""
                    + ", \"api_version\": null, \"delivered\": true, \"offset\": " + md.offset()
                    + ", \"error\": null", TXN_TOPIC + "-" + md.partition()});
            }
            return rows;
        }

        void outcome(List<String[]> rows, String transaction) {
            for (String[] row : rows) {
                produced.add(row[0] + ", \"transaction\": " + Json.str(transaction) + "}");
            }
        }

        void transaction(String transactionalId, String producerName, List<String[]> rows,
                         Map<TopicPartition, OffsetAndMetadata> offsets, String result, String error) {
            Set<String> partitions = new java.util.TreeSet<>();
            for (String[] row : rows) {
                partitions.add(row[1]);
            }
            List<String> parts = new ArrayList<>();
            for (String part : partitions) {
                parts.add(Json.str(part));
            }
            Map<String, Long> sorted = new TreeMap<>();
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
                sorted.put(e.getKey().toString(), e.getValue().offset());
            }
            List<String> committed = new ArrayList<>();
            for (Map.Entry<String, Long> e : sorted.entrySet()) {
                committed.add(Json.str(e.getKey()) + ": " + e.getValue());
            }
            operations.add(op("transaction transactional.id=" + transactionalId + " by " + producerName,
                "{\"transactional_id\": " + Json.str(transactionalId) + ", \"producer\": " + Json.str(producerName)
                + ", \"partitions\": [" + String.join(", ", parts) + "], \"records\": " + rows.size()
                + ", \"offsets\": {" + String.join(", ", committed) + "}, \"group\": "
                + (offsets.isEmpty() ? "null" : Json.str(GROUP)) + ", \"result\": " + Json.str(result)
                + ", \"error\": " + (error == null ? "null" : Json.str(error)) + "}"));
        }

        String workload() throws Exception {
            try (Admin admin = Admin.create(adminProps(bootstrap))) {
                admin.createTopics(List.of(new NewTopic(TXN_TOPIC, 2, (short) 1),
                                           new NewTopic(SOURCE_TOPIC, 1, (short) 1))).all().get();
                operations.add(op("create_topics " + TXN_TOPIC + "(2) " + SOURCE_TOPIC + "(1)", Json.str("ok")));
            }
            org.apache.kafka.clients.consumer.ConsumerGroupMetadata group =
                new org.apache.kafka.clients.consumer.ConsumerGroupMetadata(GROUP);
            String id = "lab-java-txn";
            try (KafkaProducer<byte[], byte[]> producer = producer("lab-java-txn-producer", id)) {
                producer.initTransactions();
                // 1: commit, with the offsets of a (pretend) consumed input sent to the transaction
                producer.beginTransaction();
                List<String[]> rows = send(producer, "lab-java-txn-producer", "txn-commit-1", 4);
                Map<TopicPartition, OffsetAndMetadata> offsets = Map.of(new TopicPartition(SOURCE_TOPIC, 0),
                                                                        new OffsetAndMetadata(7));
                producer.sendOffsetsToTransaction(offsets, group);
                producer.commitTransaction();
                outcome(rows, "committed");
                transaction(id, "lab-java-txn-producer", rows, offsets, "commit", null);
                // 2: abort
                producer.beginTransaction();
                rows = send(producer, "lab-java-txn-producer", "txn-abort-2", 3);
                producer.abortTransaction();
                outcome(rows, "aborted");
                transaction(id, "lab-java-txn-producer", rows, Map.of(), "abort", null);
                // 3: commit, one partition
                producer.beginTransaction();
                rows = send(producer, "lab-java-txn-producer", "txn-commit-3", 1);
                producer.commitTransaction();
                outcome(rows, "committed");
                transaction(id, "lab-java-txn-producer", rows, Map.of(), "commit", null);
            }
            // a zombie: its open transaction is aborted when a new producer takes its transactional id
            String fencedId = "lab-java-txn-fenced";
            KafkaProducer<byte[], byte[]> zombie = producer("lab-java-txn-zombie", fencedId);
            zombie.initTransactions();
            zombie.beginTransaction();
            List<String[]> zombieRows = send(zombie, "lab-java-txn-zombie", "txn-zombie", 2);
            try (KafkaProducer<byte[], byte[]> successor = producer("lab-java-txn-successor", fencedId)) {
                successor.initTransactions();
                String error = null;
                try {
                    zombie.commitTransaction();
                } catch (org.apache.kafka.common.KafkaException exc) {
                    error = exc.getClass().getSimpleName();
                }
                outcome(zombieRows, "aborted");
                transaction(fencedId, "lab-java-txn-zombie", zombieRows, Map.of(), "fenced", error);
                try {
                    zombie.close(Duration.ofSeconds(5));
                } catch (org.apache.kafka.common.KafkaException exc) {
                    // a fenced producer may complain while closing
                }
                successor.beginTransaction();
                List<String[]> rows = send(successor, "lab-java-txn-successor", "txn-successor", 2);
                successor.commitTransaction();
                outcome(rows, "committed");
                transaction(fencedId, "lab-java-txn-successor", rows, Map.of(), "commit", null);
            }
            int expect = 0;
            for (String row : produced) {
                if (row.endsWith("\"committed\"}")) {
                    expect++;
                }
            }
            List<String> consumed = new ArrayList<>();
            String clientId = "lab-java-txn-reader";
            Properties p = consumerProps(bootstrap, clientId);
            p.put("group.id", "lab-java-txn-reader");
            p.put("isolation.level", "read_committed");
            p.put("auto.offset.reset", "earliest");
            p.put("enable.auto.commit", "false");
            int got = 0;
            try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
                consumer.subscribe(List.of(TXN_TOPIC));
                long deadline = System.currentTimeMillis() + 30_000;
                long quietUntil = Long.MAX_VALUE;
                while (System.currentTimeMillis() < Math.min(deadline, quietUntil)) {
                    for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(300))) {
                        consumed.add(consumedRow(clientId, "lab-java-txn-reader", r));
                        got++;
                    }
                    if (got >= expect && quietUntil == Long.MAX_VALUE) {
                        quietUntil = System.currentTimeMillis() + 1500;  // anything aborted would show by now
                    }
                }
                consumer.commitSync();
            }
            operations.add(op("consume group=lab-java-txn-reader isolation.level=read_committed",
                              "{\"received\": " + got + ", \"expected\": " + expect + "}"));
            return "{\"produced\": [" + String.join(",\n ", produced) + "],\n \"consumed\": ["
                + String.join(",\n ", consumed) + "],\n \"operations\": [" + String.join(",\n ", operations) + "]}";
        }
    }

    // -------------------------------------------------------------- json --

    static final class Json {
        static String str(String s) {
            StringBuilder b = new StringBuilder("\"");
            for (char c : s.toCharArray()) {
                switch (c) {
                    case '"': b.append("\\\""); break;
                    case '\\': b.append("\\\\"); break;
                    case '\n': b.append("\\n"); break;
                    default:
                        if (c < 0x20) {
                            b.append(String.format("\\u%04x", (int) c));
                        } else {
                            b.append(c);
                        }
                }
            }
            return b.append('"').toString();
        }

        static String bytes(byte[] data) {
            return data == null ? "null" : str(Base64.getEncoder().encodeToString(data));
        }

        static String headers(Iterable<Header> headers) {
            List<String> out = new ArrayList<>();
            for (Header h : headers) {
                out.add("[" + str(h.key()) + ", " + bytes(h.value()) + "]");
            }
            return "[" + String.join(", ", out) + "]";
        }
    }

    private LabClient() {
    }
}
