"""Capture lab, part 2: one function per capture (the workload the clients
run against a fresh broker) and the WORKLOADS table the recipe records."""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from tools.lab.kafka_versions import JAVA_CLIENT_VERSION, VERSIONS
from tools.lab.net import send_frame
from tools.lab.clients import (
    CODECS,
    OLD_CODECS,
    STANDARD_PORT,
    Manifest,
    Payload,
    WORDS,
    ck_consume,
    ck_produce,
    ck_transactions,
    encode_bytes,
    encode_headers,
    kp_consume,
    kp_create_topics,
    kp_fetch_from_start,
    kp_produce,
    payloads,
)


# --------------------------------------------------------------- workloads --

def wl_admin(m: Manifest, broker: Any) -> None:
    bootstrap = broker.bootstrap
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic as CkNewTopic
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource as KpConfigResource, ConfigResourceType, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="lab-kafka-python-admin")
    res = admin.create_topics([NewTopic("admin-alpha", 3, 1), NewTopic("admin-bravo", 1, 1,
                                                                       topic_configs={"retention.ms": "3600000"})])
    m.operation("kafka-python", "create_topics admin-alpha(3) admin-bravo(1)", _jsonable(res))
    m.operation("kafka-python", "list_topics", sorted(admin.list_topics()))
    m.operation("kafka-python", "describe_topics", _jsonable(admin.describe_topics(["admin-alpha", "admin-bravo"])))
    m.operation("kafka-python", "describe_configs topic admin-bravo",
                _jsonable(admin.describe_configs([KpConfigResource(ConfigResourceType.TOPIC, "admin-bravo")])))
    m.operation("kafka-python", "describe_cluster", _jsonable(admin.describe_cluster()))
    admin.close()

    ck = AdminClient({"bootstrap.servers": bootstrap, "client.id": "lab-librdkafka-admin"})
    futs = ck.create_topics([CkNewTopic("admin-charlie", num_partitions=2, replication_factor=1)],
                            operation_timeout=5, request_timeout=10)
    for topic, fut in futs.items():
        try:
            fut.result(10)
            m.operation("confluent-kafka", f"create_topics {topic}(2)", "ok")
        except Exception as exc:
            m.operation("confluent-kafka", f"create_topics {topic}(2)", f"error: {exc}")
    md = ck.list_topics(timeout=10)
    m.operation("confluent-kafka", "list_topics",
                {t: len(md.topics[t].partitions) for t in sorted(md.topics)})
    futs = ck.describe_configs([ConfigResource("topic", "admin-charlie")], request_timeout=10)
    for res_, fut in futs.items():
        try:
            configs = fut.result(10)
            m.operation("confluent-kafka", "describe_configs topic admin-charlie",
                        {k: v.value for k, v in sorted(configs.items())})
        except Exception as exc:
            m.operation("confluent-kafka", "describe_configs topic admin-charlie", f"error: {exc}")


def _jsonable(obj: Any) -> Any:
    return json.loads(json.dumps(obj, default=lambda o: getattr(o, "__dict__", repr(o))))


def wl_produce(acks: int) -> Callable[[Manifest, Any], None]:
    def run(m: Manifest, broker: Any) -> None:
        bootstrap = broker.bootstrap
        topic = f"produce-acks{acks}"
        kp_create_topics(bootstrap, {topic: 2})
        for codec in CODECS:
            kp_produce(m, bootstrap, topic, payloads(f"kp-{codec}-a{acks}", 6, with_headers=True),
                       codec=codec, acks=acks, partition=0)
            ck_produce(m, bootstrap, topic, payloads(f"ck-{codec}-a{acks}", 6, with_headers=True),
                       codec=codec, acks=acks, partition=1)
    return run


def wl_pipelined(m: Manifest, broker: Any) -> None:
    bootstrap = broker.bootstrap
    topic = "pipelined"
    kp_create_topics(bootstrap, {topic: 3})
    ck_produce(
        m, bootstrap, topic, payloads("pipe", 600, with_headers=False, seed=7), codec="none", acks=1,
        partition=None, partition_of=lambda i: i % 3,
        extra={"linger.ms": 0, "batch.num.messages": 4, "max.in.flight.requests.per.connection": 16,
               "queue.buffering.max.ms": 0},
    )
    m.note("librdkafka with batch.num.messages=4, linger.ms=0, max.in.flight=16: many Produce requests in flight")


def wl_consume_group(m: Manifest, broker: Any) -> None:
    bootstrap = broker.bootstrap
    kp_create_topics(bootstrap, {"orders": 2, "events": 1})
    ck_produce(m, bootstrap, "orders", payloads("orders", 10, with_headers=True), codec="lz4", acks=1,
               partition=None, partition_of=lambda i: i % 2)
    kp_produce(m, bootstrap, "events", payloads("events", 8, with_headers=True), codec="gzip", acks=1)
    kp_produce(m, bootstrap, "events", payloads("events-zstd", 5, with_headers=True), codec="zstd", acks=1)
    total = len(m.data["produced"])
    kp_consume(m, bootstrap, ["orders", "events"], "lab-group-kp", total)
    ck_consume(m, bootstrap, ["orders", "events"], "lab-group-ck", total)


def wl_unknown_topic(m: Manifest, broker: Any) -> None:
    bootstrap = broker.bootstrap
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource as KpConfigResource, ConfigResourceType

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="lab-unknown-topic")
    m.operation("kafka-python", "describe_topics missing-topic (metadata, auto-create off)",
                _jsonable(admin.describe_topics(["missing-topic"])))
    for name, call in (
        ("describe_configs topic missing-topic",
         lambda: admin.describe_configs([KpConfigResource(ConfigResourceType.TOPIC, "missing-topic")])),
        ("delete_topics missing-topic", lambda: admin.delete_topics(["missing-topic"])),
    ):
        try:
            m.operation("kafka-python", name, _jsonable(call()))
        except Exception as exc:
            m.operation("kafka-python", name, f"error: {type(exc).__name__}: {exc}")
    admin.close()
    raw_produce_missing(m, bootstrap)


def raw_produce_missing(m: Manifest, bootstrap: str) -> None:
    """A Produce v3 for a topic that does not exist, sent on a plain socket
    so no client can create the topic first (clients ask for metadata)."""
    import socket
    import struct

    from kafka.record.memory_records import MemoryRecordsBuilder

    rec = payloads("missing", 1, with_headers=True)[0]
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    builder.append(timestamp=1_700_000_000_000, key=rec.key, value=rec.value, headers=rec.headers)
    builder.close()
    batch = builder.buffer()

    def string(s: str) -> bytes:
        b = s.encode()
        return struct.pack(">h", len(b)) + b

    correlation_id = 4242
    body = (struct.pack(">h", -1) + struct.pack(">hi", 1, 5000)  # no transactional id, acks=1
            + struct.pack(">i", 1) + string("missing-topic")
            + struct.pack(">i", 1) + struct.pack(">i", 0) + struct.pack(">i", len(batch)) + bytes(batch))
    header = struct.pack(">hhi", 0, 3, correlation_id) + string("lab-raw-produce")
    frame = header + body
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        response = send_frame(sock, frame)
    # Produce v3 response: correlation id, [topics: name, [partition, error_code, base_offset, ...]]
    n_topics = struct.unpack_from(">i", response, 4)[0]
    name_len = struct.unpack_from(">h", response, 8)[0]
    pos = 10 + name_len + 4
    partition, error_code, base_offset = struct.unpack_from(">ihq", response, pos)
    m.produced(client="raw-socket", client_id="lab-raw-produce", topic="missing-topic", partition=0,
               key=encode_bytes(rec.key), value=encode_bytes(rec.value), headers=encode_headers(rec.headers),
               codec="none", magic=2, acks=1, api_version=[3], delivered=error_code == 0,
               offset=base_offset if error_code == 0 else None,
               error=None if error_code == 0 else f"error_code {error_code}")
    m.operation("raw-socket", "Produce v3 missing-topic partition 0 acks=1 correlation_id=4242",
                {"topics": n_topics, "partition": partition, "error_code": error_code, "base_offset": base_offset})
    if error_code == 0:
        m.note("Tansu accepts a Produce to a topic it does not know (error_code 0): only the "
               "Metadata and DeleteTopics responses here carry UNKNOWN_TOPIC_OR_PARTITION (DescribeConfigs returns no error)")



def wl_old(api_version: tuple[int, ...]) -> Callable[[Manifest, Any], None]:
    def run(m: Manifest, broker: Any) -> None:
        bootstrap = broker.bootstrap
        label = "v" + "_".join(map(str, api_version))
        topic = f"old-{label}"
        kp_create_topics(bootstrap, {topic: 1})
        for codec in OLD_CODECS:
            kp_produce(m, bootstrap, topic, payloads(f"{label}-{codec}", 4, with_headers=False),
                       codec=codec, acks=1, api_version=api_version,
                       client_id=f"lab-kafka-python-{label}")
        kp_produce(m, bootstrap, topic, payloads(f"{label}-gzip-acks0", 3, with_headers=False),
                   codec="gzip", acks=0, api_version=api_version, client_id=f"lab-kafka-python-{label}")
        # Tansu stores nothing from message sets, so the old consumer fetches
        # magic 2 batches written by librdkafka: old Fetch/group API versions.
        feed = f"old-{label}-fetch"
        kp_create_topics(bootstrap, {feed: 1})
        ck_produce(m, bootstrap, feed, payloads(f"{label}-feed", 4, with_headers=False), codec="gzip", acks=1)
        kp_fetch_from_start(m, bootstrap, feed, 0, 4, api_version=api_version,
                            client_id=f"lab-kafka-python-{label}-fetcher")
        try:
            kp_consume(m, bootstrap, [feed], f"lab-group-{label}", 4, api_version=api_version, timeout=20,
                       client_id=f"lab-kafka-python-{label}-consumer")
        except Exception as exc:
            m.operation("kafka-python", f"consume group=lab-group-{label}", f"error: {type(exc).__name__}: {exc}")
        if broker.name.startswith("tansu") and any(not r["delivered"] for r in m.data["produced"]):
            m.note("Tansu 0.6.0 parses every Produce payload as a v2 record batch: message sets "
                   "(magic 0/1) are rejected (uncompressed: the broker closes the connection; "
                   "compressed: an error response). The requests are in the capture intact.")
    return run


def wl_other_port(m: Manifest, broker: Any) -> None:
    bootstrap = broker.bootstrap
    kp_create_topics(bootstrap, {"odd-port": 1})
    ck_produce(m, bootstrap, "odd-port", payloads("odd-zstd", 6, with_headers=True), codec="zstd", acks="all")
    kp_produce(m, bootstrap, "odd-port", payloads("odd-snappy", 5, with_headers=True), codec="snappy", acks=1)
    kp_consume(m, bootstrap, ["odd-port"], "lab-group-odd", len(m.data["produced"]))


def wl_transactions(m: Manifest, broker: Any) -> None:
    """A committed and an aborted transaction, then read_committed and
    read_uncommitted consumers: transactional APIs and control batches."""
    bootstrap = broker.bootstrap
    topic = "txn"
    kp_create_topics(bootstrap, {topic: 1})
    ck_transactions(m, bootstrap, topic, [("committed", payloads("txn-commit", 4, with_headers=True)),
                                          ("aborted", payloads("txn-abort", 3, with_headers=True)),
                                          ("committed", payloads("txn-commit2", 2, with_headers=True))],
                    client_id="lab-librdkafka-txn", transactional_id="lab-txn-1", codec="snappy", linger_ms=20)
    m.operation("confluent-kafka", "transactions", "commit, abort, commit (transactional.id lab-txn-1)")
    total = len(m.data["produced"])
    # Read until everything or a quiet timeout: whether read_committed skips
    # the aborted records is the broker's business, recorded as it happened.
    for isolation, timeout in (("read_committed", 12.0), ("read_uncommitted", 25.0)):
        ck_consume(m, bootstrap, [topic], f"lab-group-{isolation}", total, timeout=timeout,
                   client_id=f"lab-librdkafka-{isolation}", extra={"isolation.level": isolation})
    aborted = {r["value"] for r in m.data["produced"] if r["transaction"] == "aborted"}
    if any(r["value"] in aborted for r in m.data["consumed"] if r["group"] == "lab-group-read_committed"):
        m.note("Tansu 0.6.0 delivers the aborted records to the read_committed consumer too")


def wl_ipv6(m: Manifest, broker: Any) -> None:
    """Over ::1. Tansu advertises the host as "[::1]", which kafka-python cannot
    resolve, so only librdkafka runs here."""
    bootstrap = broker.bootstrap
    from confluent_kafka.admin import AdminClient, NewTopic as CkNewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "lab-librdkafka-admin"})
    for topic, fut in admin.create_topics([CkNewTopic("six", num_partitions=2, replication_factor=1)],
                                          request_timeout=10).items():
        fut.result(10)
        m.operation("confluent-kafka", f"create_topics {topic}(2)", "ok")
    ck_produce(m, bootstrap, "six", payloads("six-lz4", 6, with_headers=True), codec="lz4", acks=1,
               partition=None, partition_of=lambda i: i % 2)
    ck_produce(m, bootstrap, "six", payloads("six-gzip", 4, with_headers=True), codec="gzip", acks=1,
               partition=0)
    ck_consume(m, bootstrap, ["six"], "lab-group-six", len(m.data["produced"]))


def big_payloads(tag: str, count: int, size: int) -> list[Payload]:
    """Seeded text values of about `size` bytes: frames bigger than one
    loopback TCP segment (MSS ~64 KiB), so PDUs span several segments."""
    rng = random.Random(tag)
    out = []
    for i in range(count):
        words, length = [f"{tag} #{i}:"], 0
        while length < size:
            word = rng.choice(WORDS) + str(rng.randrange(1000))
            words.append(word)
            length += len(word) + 1
        out.append(Payload(f"{tag}-k{i:03d}".encode(), " ".join(words).encode(), [("seq", str(i).encode())]))
    return out


def wl_large(m: Manifest, broker: Any) -> None:
    bootstrap = broker.bootstrap
    kp_create_topics(bootstrap, {"large": 1})
    ck_produce(m, bootstrap, "large", big_payloads("large", 4, 70_000), codec="none", acks=1,
               extra={"linger.ms": 100, "batch.size": 1_000_000})
    kp_consume(m, bootstrap, ["large"], "lab-group-large", len(m.data["produced"]))


SASL_USER, SASL_PASSWORD = "alice", "alice-secret"


def _kp_sasl_login(bootstrap: str, api_version: tuple[int, ...] | None, mechanism: str, user: str = SASL_USER,
                   password: str = SASL_PASSWORD, probe: str = "send") -> str:
    """Log in with kafka-python; then send one record (probe="send", for a
    broker where the login fails) or only fetch metadata ("metadata")."""
    from kafka import KafkaProducer

    conf: dict[str, Any] = dict(
        bootstrap_servers=bootstrap, client_id="lab-kafka-python-sasl", security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=password,
        max_block_ms=1500, request_timeout_ms=2000, reconnect_backoff_ms=2000, reconnect_backoff_max_ms=2000,
    )
    if api_version is not None:
        conf["api_version"] = api_version
    try:
        producer = KafkaProducer(**conf)
        if probe == "metadata":
            return f"ok: partitions of sasl {sorted(producer.partitions_for('sasl'))}"
        producer.send("sasl", b"never", partition=0).get(timeout=2)
        return "ok"
    except Exception as exc:
        return f"error: {type(exc).__name__}: {str(exc)[:200]}"


def _ck_sasl_login(bootstrap: str, mechanism: str, user: str = SASL_USER, password: str = SASL_PASSWORD) -> str:
    from confluent_kafka import Producer

    errors: list[str] = []
    producer = Producer({
        "bootstrap.servers": bootstrap, "client.id": "lab-librdkafka-sasl", "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
        "reconnect.backoff.ms": 2000, "reconnect.backoff.max.ms": 2000, "log_level": 0,
        "error_cb": lambda err: errors.append(str(err)),
    })
    producer.poll(1.5)
    return errors[0] if errors else "no error reported"


def _bounded(seconds: float, fn: Callable[..., str], *args: Any) -> str:
    """Run fn in a child process killed after `seconds`: failing clients
    otherwise keep reconnecting in background threads."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=lambda: queue.put(fn(*args)), daemon=True)
    proc.start()
    proc.join(seconds)
    if proc.is_alive():
        proc.kill()
        proc.join()
    return queue.get(timeout=1) if not queue.empty() else f"no result within {seconds:.0f}s (client killed)"


def wl_sasl(m: Manifest, broker: Any) -> None:
    """SASL against a broker that requires authentication but knows no user.

    Tansu's `user create` must itself authenticate, so an in-memory broker
    can never hold a user: every login fails, which still puts the real
    handshakes on the wire: SaslHandshake v0 followed by raw (unframed) SCRAM
    tokens from kafka-python in the 0.10 generation, SaslHandshake v1 +
    SaslAuthenticate from kafka-python 3 and librdkafka, and a mechanism the
    broker does not offer (PLAIN). Each client runs in a child process that
    is killed after a few seconds, so each makes one or two attempts."""
    bootstrap = broker.bootstrap
    attempts = (
        ((0, 10, 1), "SCRAM-SHA-256"),  # SaslHandshake v0, then raw tokens
        ((0, 10, 1), "PLAIN"),
        (None, "SCRAM-SHA-512"),  # SaslHandshake v1 + SaslAuthenticate
        (None, "PLAIN"),
    )
    for api_version, mechanism in attempts:
        label = f"api_version={api_version or 'auto'} {mechanism}"
        m.operation("kafka-python", f"login {label}", _bounded(3, _kp_sasl_login, bootstrap, api_version, mechanism))
    m.operation("confluent-kafka", "login SCRAM-SHA-256", _bounded(3, _ck_sasl_login, bootstrap, "SCRAM-SHA-256"))
    m.note(f"credentials: user {SASL_USER!r}, password {SASL_PASSWORD!r}, unknown to the broker; the "
           "SCRAM messages in the capture (nonces, proofs) are what a dissector should redact")
    m.note("Tansu offers SCRAM-SHA-256/512 only: on a PLAIN SaslHandshake (v0 or v1) it closes the "
           "connection without a response; SCRAM logins end with server-final 'e=unknown-user'")


def wl_acks0_flood(m: Manifest, broker: Any) -> None:
    """Thousands of one-record Produce requests with acks=0 on one connection:
    a broker that answers acks=0 (Tansu) has hundreds of them in flight."""
    bootstrap = broker.bootstrap
    topic = "flood"
    kp_create_topics(bootstrap, {topic: 1})
    ck_produce(
        m, bootstrap, topic, payloads("flood", FLOOD_RECORDS, with_headers=False, seed=11), codec="none", acks=0,
        partition=0, client_id="lab-librdkafka-flood", drain=True,
        extra={"linger.ms": 0, "queue.buffering.max.ms": 0, "batch.num.messages": 1,
               "max.in.flight.requests.per.connection": 1_000_000, "queue.buffering.max.messages": 100_000},
    )
    m.note(f"librdkafka acks=0, linger.ms=0, batch.num.messages=1, max.in.flight=1000000: {FLOOD_RECORDS} "
           "Produce requests of one record each on one connection, sent without waiting for anything")


FLOOD_RECORDS = 2400


def wl_java_clients(client_version: str) -> Callable[[Manifest, Any], None]:
    """The Java client (kafka-clients CLIENT_VERSION): a producer per codec,
    then a classic group, a KIP-848 consumer group and a share group consume."""
    def run(m: Manifest, broker: Any) -> None:
        from tools.lab.java_client import run_java_helper

        result = json.loads(run_java_helper(["workload", broker.bootstrap], version=client_version))
        m.data["clients"]["kafka-clients (java)"] = client_version
        m.record_helper_output(result)
    return run


def wl_go_client(m: Manifest, broker: Any) -> None:
    """The Go client (franz-go, tools/lab/go): creates its topic, a producer
    per codec, then a consumer group reads everything and commits."""
    from tools.lab.go_client import franz_go_version, run_go_client

    result = json.loads(run_go_client(["workload", broker.bootstrap]))
    m.data["clients"]["franz-go"] = franz_go_version()
    m.record_helper_output(result)


def wl_java_transactions(m: Manifest, broker: Any) -> None:
    """The Java client's transactions (kafka-clients 4.4.0): commit with
    offsets sent to the transaction, abort, commit; a zombie producer fenced
    by a successor with its transactional id; a read_committed consumer."""
    from tools.lab.java_client import run_java_helper

    result = json.loads(run_java_helper(["transactions", broker.bootstrap], version=KAFKA4))
    m.data["clients"]["kafka-clients (java)"] = KAFKA4
    m.record_helper_output(result)


KAFKA4 = VERSIONS["4"]

QUOTA_BYTES_PER_SECOND = 4096
# Byte rates are measured over quota.window.num samples of quota.window.size.seconds
# (11 x 1 s by default, too long for a few KB to exceed a quota): two 1 s samples.
QUOTA_WINDOW = {"quota.window.num": 2, "quota.window.size.seconds": 1}


def wl_quota(m: Manifest, broker: Any) -> None:
    """Client quotas: a producer and a consumer whose client ids have a byte
    rate quota, so the broker throttles them (throttle_time_ms > 0)."""
    bootstrap = broker.bootstrap
    topic = "throttled"
    kp_create_topics(bootstrap, {topic: 1})
    producer_id, consumer_id = "lab-throttled-producer", "lab-throttled-consumer"
    broker.set_client_quota(producer_id, producer_byte_rate=QUOTA_BYTES_PER_SECOND)
    broker.set_client_quota(consumer_id, consumer_byte_rate=QUOTA_BYTES_PER_SECOND)
    m.operation("java", f"alter_client_quotas client-id={producer_id} producer_byte_rate={QUOTA_BYTES_PER_SECOND}", "ok")
    m.operation("java", f"alter_client_quotas client-id={consumer_id} consumer_byte_rate={QUOTA_BYTES_PER_SECOND}", "ok")
    # Two of the three producers and the fetcher use versions tshark 4.0 decodes
    # (Produce v7, Fetch v11 with api_version 2.3), so it can read the throttle times too.
    for batch, api_version in enumerate((None, (2, 3), (2, 3))):
        kp_produce(m, bootstrap, topic, big_payloads(f"quota-{batch}", 6, 1500), codec="none", acks=1,
                   client_id=producer_id, api_version=api_version)
    kp_fetch_from_start(m, bootstrap, topic, 0, len(m.data["produced"]), timeout=30, client_id=consumer_id,
                        api_version=(2, 3))
    m.note(f"quotas set through the broker's internal listener (not in the capture): {producer_id} may produce "
           f"and {consumer_id} may fetch {QUOTA_BYTES_PER_SECOND} bytes/s, measured over two 1 s windows "
           "(quota.window.num=2, quota.window.size.seconds=1), so their responses carry throttle times")


def wl_partition_errors(m: Manifest, broker: Any) -> None:
    """Per-partition errors in answers of APIs the forensic tables do not read
    (DeleteRecords, ElectLeaders), from kafka-python's admin client: what
    `kdissect stats` and the Spark job's partition_errors table must still
    find. The manifest keeps each call's result or the error it raised."""
    from kafka import KafkaAdminClient
    from kafka.structs import TopicPartition

    bootstrap = broker.bootstrap
    topic = "trimmed"
    kp_create_topics(bootstrap, {topic: 1})
    kp_produce(m, bootstrap, topic, payloads("trimmed", 3, with_headers=False), codec="none", acks=1)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="lab-partition-errors")

    def by_partition(result: dict) -> dict:  # {TopicPartition: ...} as JSON keys
        return {f"{tp.topic}-{tp.partition}": value for tp, value in result.items()}

    for name, call in (
        (f"delete_records {topic}-0 before offset 2 (within the log)",
         lambda: by_partition(admin.delete_records({TopicPartition(topic, 0): 2}))),
        (f"delete_records {topic}-0 before offset 100 (past the high watermark)",
         lambda: by_partition(admin.delete_records({TopicPartition(topic, 0): 100}))),
        (f"elect_leaders preferred {topic}-0 (one replica: nothing to elect)",
         lambda: admin.elect_leaders(0, {topic: [0]}, raise_errors=False)),
    ):
        try:
            m.operation("kafka-python", name, _jsonable(call()))
        except Exception as exc:
            m.operation("kafka-python", name, f"error: {type(exc).__name__}: {exc}")
    admin.close()


def wl_sasl_kafka(m: Manifest, broker: Any) -> None:
    """SASL_PLAINTEXT on Apache Kafka with a real user: SaslHandshake v0 +
    raw tokens (kafka-python 0.10.1), SaslHandshake v1 + SaslAuthenticate
    (kafka-python 3, librdkafka), PLAIN and SCRAM, and one wrong password."""
    bootstrap = broker.bootstrap
    user, password = next(iter(broker.users.items()))
    kp_create_topics(broker.internal_bootstrap, {"sasl": 1})
    for mechanism in ("SCRAM-SHA-256", "PLAIN"):
        m.operation("kafka-python", f"login api_version=(0, 10, 1) {mechanism}",
                    _bounded(4, _kp_sasl_login, bootstrap, (0, 10, 1), mechanism, user, password, "metadata"))
    for mechanism, tag in (("SCRAM-SHA-512", "sasl-kp-scram512"), ("PLAIN", "sasl-kp-plain")):
        kp_produce(m, bootstrap, "sasl", payloads(tag, 2, with_headers=True), codec="none", acks=1,
                   client_id="lab-kafka-python-sasl", extra=broker.kafka_python_config("SASL_PLAINTEXT", mechanism))
    conf = broker.librdkafka_config("SASL_PLAINTEXT", "SCRAM-SHA-256")
    conf.pop("bootstrap.servers")
    ck_produce(m, bootstrap, "sasl", payloads("sasl-ck-scram256", 2, with_headers=True), codec="none", acks=1,
               client_id="lab-librdkafka-sasl", extra=conf)
    m.operation("confluent-kafka", "login SCRAM-SHA-512 with a wrong password",
                _bounded(3, _ck_sasl_login, bootstrap, "SCRAM-SHA-512", user, password + "-wrong"))
    m.note(f"credentials: user {user!r}, password {password!r} (SCRAM-SHA-256/512 and PLAIN); the last librdkafka "
           "login uses a wrong password. Tokens, nonces and proofs in the capture are what a dissector should redact")



LONG_POLL_MS = 1000  # kafka-python's fetch_max_wait_ms in the waits workload
LIBRDKAFKA_WAIT_MS = 800  # librdkafka's fetch.wait.max.ms
EARLY_WAIT_MS = 4000  # a fetch that data answers early


def _kp_idle_consumer(m: Manifest, bootstrap: str, topic: str, seconds: float, client_id: str,
                      wait_ms: int) -> None:
    """A kafka-python consumer polling an empty partition: every Fetch waits
    out its max wait (a long poll)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id=client_id, enable_auto_commit=False,
                             fetch_max_wait_ms=wait_ms, fetch_min_bytes=1, request_timeout_ms=wait_ms + 5000)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            consumer.poll(timeout_ms=200)
    finally:
        consumer.close()
    m.operation("kafka-python", f"poll empty {topic}[0] for {seconds} s",
                {"client_id": client_id, "fetch_max_wait_ms": wait_ms, "fetch_min_bytes": 1})


def _ck_idle_consumer(m: Manifest, bootstrap: str, topic: str, seconds: float, client_id: str) -> None:
    """The same with librdkafka (fetch.wait.max.ms)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": "lab-unused",
                         "enable.auto.commit": False, "fetch.wait.max.ms": LIBRDKAFKA_WAIT_MS,
                         "log.connection.close": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            consumer.poll(0.2)
    finally:
        consumer.close()
    m.operation("confluent-kafka", f"poll empty {topic}[0] for {seconds} s",
                {"client_id": client_id, "fetch.wait.max.ms": LIBRDKAFKA_WAIT_MS})


def _answered_early(m: Manifest, bootstrap: str, topic: str) -> None:
    """A consumer waits with a long max wait; a record produced 1.5 s into its
    wait ends it early (the answer carries the record)."""
    import threading

    from kafka import KafkaConsumer, TopicPartition

    client_id = "lab-early-kp"
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id=client_id, enable_auto_commit=False,
                             fetch_max_wait_ms=EARLY_WAIT_MS, fetch_min_bytes=1, request_timeout_ms=EARLY_WAIT_MS + 5000)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    consumer.poll(timeout_ms=100)  # connected and fetching
    producer = threading.Timer(1.5, lambda: kp_produce(m, bootstrap, topic, payloads("early", 1, with_headers=False),
                                                        codec="none", acks=1, client_id="lab-early-producer"))
    producer.start()
    got = 0
    end = time.monotonic() + 8
    try:
        while not got and time.monotonic() < end:
            for _tp, msgs in consumer.poll(timeout_ms=500).items():
                for msg in msgs:
                    got += 1
                    m.consumed(client="kafka-python", client_id=client_id, group=None, topic=msg.topic,
                               partition=msg.partition, offset=msg.offset, timestamp=msg.timestamp,
                               key=encode_bytes(msg.key), value=encode_bytes(msg.value),
                               headers=encode_headers(getattr(msg, "headers", None)))
    finally:
        producer.join()
        consumer.close()
    m.operation("kafka-python", f"fetch {topic}[0] waiting up to {EARLY_WAIT_MS} ms, data produced after 1.5 s",
                {"client_id": client_id, "received": got})


def _staggered_group(m: Manifest, bootstrap: str, topic: str, group: str, members: int, stagger: float,
                     extra: dict[str, Any] | None = None, client: str = "kafka-python") -> None:
    """`members` consumers join one group `stagger` seconds apart and stay a
    while: each join makes the group rebalance, and the members already in
    wait at the join barrier for the rest."""
    import threading

    def member(index: int) -> None:
        time.sleep(index * stagger)
        if client == "kafka-python":
            kp_consume(m, bootstrap, [topic], group, 10**6, timeout=members * stagger + 4,
                       client_id=f"{group}-{index}", extra=extra)
        else:
            ck_consume(m, bootstrap, [topic], group, 10**6, timeout=members * stagger + 4,
                       client_id=f"{group}-{index}", extra=extra)

    threads = [threading.Thread(target=member, args=(i,)) for i in range(members)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    m.operation(client, f"group {group}: {members} members joining {stagger} s apart", {"members": members})


def _rude_producer(m: Manifest, bootstrap: str, topic: str, client_id: str, sends: int) -> None:
    """A raw-socket client that ignores KIP-219: it sends Produce v7 requests
    one after the other, as soon as each answer comes, throttled or not (a
    well-behaved client waits out throttle_time_ms). Built with struct; the
    record batch by kafka-python's builder."""
    import socket
    import struct

    from kafka.record.memory_records import MemoryRecordsBuilder

    host, port = bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host.strip("[]"), int(port)), timeout=30)
    answers = []
    try:
        for cid in range(1, sends + 1):
            value = (f"rude #{cid} " + "x" * 3000).encode()
            builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
            builder.append(timestamp=None, key=None, value=value, headers=[])
            builder.close()
            batch = bytes(builder.buffer())
            body = struct.pack(">hhi", -1, 1, 5000)  # transactional id null, acks 1, timeout
            body += struct.pack(">i", 1) + struct.pack(">h", len(topic)) + topic.encode()
            body += struct.pack(">i", 1) + struct.pack(">ii", 0, len(batch)) + batch
            header = struct.pack(">hhih", 0, 7, cid, len(client_id)) + client_id.encode()
            frame = header + body
            response = send_frame(sock, frame)
            answers.append(struct.unpack_from(">i", response, len(response) - 4)[0])  # throttle_time_ms, last
    finally:
        sock.close()
    m.operation("raw socket", f"Produce v7 x{sends} to {topic}, ignoring throttle_time_ms",
                {"client_id": client_id, "throttle_time_ms": answers})


def wl_waits(m: Manifest, broker: Any) -> None:
    """Waits the protocol asks for: long polls (kafka-python and librdkafka on
    an empty partition), a fetch answered early by data, classic groups whose
    members join seconds apart (join barrier), a KIP-848 group, and a client
    sending while the broker has muted it for a quota (KIP-219)."""
    bootstrap = broker.bootstrap
    kp_create_topics(broker.internal_bootstrap, {"idle": 1, "late": 1, "grouped": 3, "muted": 1})
    _kp_idle_consumer(m, bootstrap, "idle", 3.5, "lab-longpoll-kp", LONG_POLL_MS)
    _ck_idle_consumer(m, bootstrap, "idle", 3.0, "lab-longpoll-ck")
    _answered_early(m, bootstrap, "late")
    _staggered_group(m, bootstrap, "grouped", "lab-barrier", 3, 1.5)
    rude = "lab-rude-producer"
    broker.set_client_quota(rude, producer_byte_rate=QUOTA_BYTES_PER_SECOND)
    m.operation("java", f"alter_client_quotas client-id={rude} producer_byte_rate={QUOTA_BYTES_PER_SECOND}", "ok")
    _rude_producer(m, bootstrap, "muted", rude, 6)
    m.note(f"long polls: fetch_max_wait_ms={LONG_POLL_MS} (kafka-python), fetch.wait.max.ms={LIBRDKAFKA_WAIT_MS} "
           f"(librdkafka) on an empty partition; lab-early-kp waits up to {EARLY_WAIT_MS} ms and a record produced "
           "1.5 s later answers it; lab-barrier: 3 kafka-python members joining 1.5 s apart; "
           f"{rude} sends Produce v7 back to back with a {QUOTA_BYTES_PER_SECOND} B/s quota")


def wl_throttle_old(m: Manifest, broker: Any) -> None:
    """Quotas against versions before KIP-219 (Kafka 3.9 still serves them):
    the broker holds each throttled response for its throttle time."""
    bootstrap = broker.bootstrap
    topic = "throttled-old"
    kp_create_topics(broker.internal_bootstrap, {topic: 1})
    producer_id, consumer_id = "lab-old-throttled-producer", "lab-old-throttled-consumer"
    broker.set_client_quota(producer_id, producer_byte_rate=QUOTA_BYTES_PER_SECOND)
    broker.set_client_quota(consumer_id, consumer_byte_rate=QUOTA_BYTES_PER_SECOND)
    m.operation("java", f"alter_client_quotas client-id={producer_id} producer_byte_rate={QUOTA_BYTES_PER_SECOND}", "ok")
    m.operation("java", f"alter_client_quotas client-id={consumer_id} consumer_byte_rate={QUOTA_BYTES_PER_SECOND}", "ok")
    for batch in range(3):
        values = [Payload(p.key, p.value, []) for p in big_payloads(f"old-quota-{batch}", 6, 1500)]  # magic 1: no headers
        kp_produce(m, bootstrap, topic, values, codec="none", acks=1, client_id=producer_id, api_version=(0, 10, 1))
    kp_fetch_from_start(m, bootstrap, topic, 0, len(m.data["produced"]), timeout=30, client_id=consumer_id,
                        api_version=(0, 10, 1))
    m.note("kafka-python api_version=(0, 10, 1): Produce v2 and Fetch v3, before KIP-219's cut-overs (Produce v6, "
           "Fetch v8): the broker holds a throttled response for throttle_time_ms before sending it")


JAVA_LONG_POLL_MS = 700  # the Java consumer's fetch.max.wait.ms in waits_more_kafka
REQUEST_PERCENTAGE = 1  # request quota of the throttled Java Admin client: 1% of one thread's time
# KIP-848 heartbeats every second (the broker's defaults: 5 s, at least 5 s), so a short capture has many
WAITS_MORE_CONFIG = {**QUOTA_WINDOW, "group.consumer.heartbeat.interval.ms": 1000,
                     "group.consumer.min.heartbeat.interval.ms": 1000}


def _java_operation(m: Manifest, args: list[str]) -> None:
    """Run one LabClient command that prints a JSON operation; log it."""
    from tools.lab.java_client import run_java_helper

    op = json.loads(run_java_helper(args, version=JAVA_CLIENT_VERSION))
    m.data["clients"]["kafka-clients (java)"] = JAVA_CLIENT_VERSION
    m.operation(op["client"], op["operation"], op["result"])


def wl_waits_more(m: Manifest, broker: Any) -> None:
    """More waits with the Java client (kafka-clients JAVA_CLIENT_VERSION): a
    long-polling consumer on an empty partition, a KIP-848 group whose three
    members join 1.5 s apart (ConsumerGroupHeartbeat, no join barrier), and
    an Admin client over a request quota, which answers at once and mutes
    (KIP-219): the client waits out each throttle time before sending again."""
    bootstrap = broker.bootstrap
    kp_create_topics(broker.internal_bootstrap, {"idle-java": 1, "grouped848": 3})
    _java_operation(m, ["longpoll", bootstrap, "idle-java", "lab-longpoll-java", str(JAVA_LONG_POLL_MS), "4000"])
    _java_operation(m, ["group848", bootstrap, "grouped848", "lab-848", "3", "1500", "3000"])
    admin_id = "lab-throttled-java-admin"
    # the quota is set by the client's own JVM after its first call (through the internal
    # listener), so the Metadata requests of its start (newer than tshark 4.0 reads) are not throttled
    _java_operation(m, ["admin-loop", bootstrap, admin_id, "grouped848", "4000", broker.internal_bootstrap,
                        f"request_percentage={REQUEST_PERCENTAGE}"])
    m.note(f"lab-longpoll-java: Java consumer, fetch.max.wait.ms={JAVA_LONG_POLL_MS} on an empty partition; "
           "lab-848: 3 Java consumers with group.protocol=consumer (KIP-848), each joining 1.5 s after the one "
           "before first polled, the broker asking for a heartbeat every 1000 ms; "
           f"{admin_id}: Java Admin setting a topic's retention.ms back to back (IncrementalAlterConfigs v1); "
           f"after its first call its client id gets a request quota of {REQUEST_PERCENTAGE}% (set through the "
           "internal listener, not in the capture), measured over two 1 s windows")


@dataclass(frozen=True)
class Workload:
    """One capture: the clients' work (`run(manifest, broker)`) and the
    broker it runs against: "tansu" (with `broker_args`), or "kafka4" /
    "kafka3" (Apache Kafka 4.x / 3.9, with `kafka_options` for
    `tools.lab.apache_kafka.kafka_broker`)."""

    name: str
    port: int
    description: str
    run: Callable[[Manifest, Any], None]
    host: str = "127.0.0.1"
    broker_args: tuple[str, ...] = ()
    broker: str = "tansu"
    kafka_options: dict[str, Any] = field(default_factory=dict)
    directory: str = ""  # below captures/: "known_gaps" for captures kdissect does not yet read right


def on_kafka(workload: Workload, generation: str = "4", **changes: Any) -> Workload:
    """The same workload against Apache Kafka (name suffix _kafka, or _kafka3 for 3.9)."""
    suffix = "_kafka" if generation == "4" else f"_kafka{generation}"
    return replace(workload, name=workload.name + suffix, broker=f"kafka{generation}", broker_args=(), **changes)


WORKLOADS = [
    Workload("admin", STANDARD_PORT,
             "Admin: CreateTopics, Metadata, DescribeConfigs, DescribeCluster via kafka-python "
             "KafkaAdminClient and confluent-kafka AdminClient", wl_admin),
    Workload("produce_acks1", STANDARD_PORT,
             "Produce acks=1, one batch per codec (none, gzip, snappy, lz4, zstd) from kafka-python "
             "(partition 0) and librdkafka (partition 1), record headers", wl_produce(1)),
    Workload("produce_acks0", STANDARD_PORT,
             "Produce acks=0 (no responses), one batch per codec from kafka-python and librdkafka",
             wl_produce(0)),
    Workload("produce_pipelined", STANDARD_PORT,
             "600 small records over 3 partitions from librdkafka, tiny batches, up to 16 requests in flight",
             wl_pipelined),
    Workload("consume_group", STANDARD_PORT,
             "Produce (lz4, gzip, zstd) then consume with consumer groups and offset commits, "
             "kafka-python group lab-group-kp then librdkafka group lab-group-ck", wl_consume_group),
    Workload("unknown_topic", STANDARD_PORT,
             "Metadata for a missing topic with auto-create off, and a raw Produce v3 to it",
             wl_unknown_topic),
    Workload("old_v0_8_2", STANDARD_PORT,
             "kafka-python api_version=(0,8,2): v0 requests, magic 0 message sets, none/gzip/snappy/lz4, acks 1 and 0",
             wl_old((0, 8, 2))),
    Workload("old_v0_9", STANDARD_PORT,
             "kafka-python api_version=(0,9): magic 0 message sets, none/gzip/snappy/lz4, acks 1 and 0",
             wl_old((0, 9))),
    Workload("old_v0_10_1", STANDARD_PORT,
             "kafka-python api_version=(0,10,1): magic 1 message sets, none/gzip/snappy/lz4, acks 1 and 0",
             wl_old((0, 10, 1))),
    Workload("transactions", STANDARD_PORT,
             "librdkafka transactional producer (snappy): commit 4, abort 3, commit 2 records; then "
             "read_committed and read_uncommitted group consumers", wl_transactions),
    Workload("ipv6", STANDARD_PORT,
             "IPv6 loopback [::1]: librdkafka produce (lz4, gzip) and group consume with commit",
             wl_ipv6, host="::1"),
    Workload("large_records", STANDARD_PORT,
             "4 records of ~70 KB (uncompressed text) in one librdkafka Produce, fetched by a kafka-python "
             "group consumer: request and response frames span several TCP segments", wl_large),
    Workload("sasl", STANDARD_PORT,
             "SASL on a broker with --authentication and no users: SaslHandshake v0 + raw SCRAM tokens "
             "(kafka-python 0.10.1), SaslHandshake v1 + SaslAuthenticate (kafka-python 3, librdkafka), "
             "PLAIN refused; every login fails", wl_sasl, broker_args=("--authentication",)),
    Workload("port_19092", 19092,
             "Non-standard port 19092: librdkafka zstd acks=all, kafka-python snappy, group consume",
             wl_other_port),
    Workload("acks0_flood_tansu", STANDARD_PORT,
             f"acks=0 flood: librdkafka sends {FLOOD_RECORDS} one-record Produce requests on one connection "
             "without waiting; Tansu answers every one", wl_acks0_flood),
]

_TANSU = {wl.name: wl for wl in WORKLOADS}
_ON_KAFKA4 = ("admin", "produce_acks1", "produce_acks0", "produce_pipelined", "consume_group", "unknown_topic",
              "transactions", "ipv6", "large_records", "port_19092")
WORKLOADS += [on_kafka(_TANSU[name]) for name in _ON_KAFKA4]
WORKLOADS += [on_kafka(_TANSU[name], "3") for name in ("old_v0_8_2", "old_v0_9", "old_v0_10_1")]
WORKLOADS += [
    Workload("acks0_flood_kafka", STANDARD_PORT,
             f"acks=0 flood: librdkafka sends {FLOOD_RECORDS} one-record Produce requests on one connection "
             "without waiting; Apache Kafka answers none of them", wl_acks0_flood, broker="kafka4"),
    Workload("sasl_kafka", STANDARD_PORT,
             "SASL_PLAINTEXT with a real user: SaslHandshake v0 + raw SCRAM/PLAIN tokens (kafka-python 0.10.1), "
             "SaslHandshake v1 + SaslAuthenticate with SCRAM-SHA-512 and PLAIN (kafka-python 3) and SCRAM-SHA-256 "
             "(librdkafka) followed by produce, and a failed login (wrong password)", wl_sasl_kafka,
             broker="kafka4", kafka_options={"listeners": ("SASL_PLAINTEXT",)}),
    Workload("java_clients_kafka", STANDARD_PORT,
             f"Java kafka-clients {JAVA_CLIENT_VERSION}: a producer per codec (acks=all, idempotent), then a classic "
             "group, a KIP-848 consumer group (ConsumerGroupHeartbeat) and a share group (ShareGroupHeartbeat, "
             "ShareFetch, ShareAcknowledge) consume with commits", wl_java_clients(JAVA_CLIENT_VERSION),
             broker="kafka4"),
    Workload("java_clients_4_4_kafka", STANDARD_PORT,
             f"The same with Java kafka-clients {KAFKA4}, which speaks ApiVersions v5 and ShareFetch v2",
             wl_java_clients(KAFKA4), broker="kafka4"),
    Workload("java_transactions_kafka", STANDARD_PORT,
             "Java kafka-clients transactions: a producer commits (with offsets sent to the transaction), aborts "
             "and commits; a zombie producer is fenced by a successor with its transactional id; a read_committed "
             "consumer reads the topic", wl_java_transactions, broker="kafka4"),
    Workload("go_clients_kafka", STANDARD_PORT,
             "The Go client franz-go: CreateTopics, a producer per codec (none, gzip, snappy, lz4, zstd; acks=all, "
             "record headers) over two partitions, then a consumer group reads everything and commits",
             wl_go_client, broker="kafka4"),
    Workload("partition_errors_kafka", STANDARD_PORT,
             "Per-partition errors outside the forensic APIs: kafka-python's admin client deletes records within "
             "and past the high watermark (DeleteRecords, OFFSET_OUT_OF_RANGE) and asks a one-replica partition "
             "for a preferred leader election (ElectLeaders)", wl_partition_errors, broker="kafka4"),
    Workload("quota_kafka", STANDARD_PORT,
             f"Client quotas ({QUOTA_BYTES_PER_SECOND} B/s produce and fetch for two client ids): kafka-python "
             "produce and fetch answered with throttle_time_ms > 0", wl_quota, broker="kafka4",
             kafka_options={"config": QUOTA_WINDOW}),
    Workload("waits_kafka", STANDARD_PORT,
             "Waits the protocol asks for: long polls (kafka-python, librdkafka), a fetch answered early by data, "
             "a classic group of 3 members joining 1.5 s apart, and a raw client sending while "
             "muted for a quota", wl_waits, broker="kafka4", kafka_options={"config": QUOTA_WINDOW}),
    Workload("throttle_old_kafka3", STANDARD_PORT,
             "Client quotas against kafka-python api_version=(0,10,1) (Produce v2, Fetch v3): the broker holds "
             "throttled responses", wl_throttle_old, broker="kafka3", kafka_options={"config": QUOTA_WINDOW}),
    Workload("waits_more_kafka", STANDARD_PORT,
             f"More waits with Java kafka-clients {JAVA_CLIENT_VERSION}: a consumer long-polling an empty partition "
             f"(fetch.max.wait.ms {JAVA_LONG_POLL_MS}), a KIP-848 group of 3 members joining 1.5 s apart, and an Admin "
             f"client over a {REQUEST_PERCENTAGE}% request quota that waits out each throttle time", wl_waits_more,
             broker="kafka4", kafka_options={"config": WAITS_MORE_CONFIG}),
]



def _forensics_workloads() -> list[Workload]:
    from tools.lab.forensics import wl_forensics

    return [Workload("forensics_kafka", STANDARD_PORT,
                     "Forensics: idempotent, transactional and plain producers; classic group of three librdkafka "
                     "members (one leaves and rejoins three times), KIP-848 group of two (one leaves), a late kafka-python "
                     "group with small fetches, a read_committed reader and a Java share group of two", wl_forensics, broker="kafka4")]


WORKLOADS += _forensics_workloads()


def _group_lag_workloads() -> list[Workload]:
    from tools.lab.group_lag import wl_group_lag

    return [Workload("group_lag_kafka", STANDARD_PORT,
                     "A consumer group that falls behind: kafka-python (api_version 2.5, versions tshark decodes) "
                     "produces lag-events for 7 s while a slow member reads 4 records per poll, commits and stops "
                     "behind", wl_group_lag, broker="kafka4")]


WORKLOADS += _group_lag_workloads()


def _longpoll_workloads() -> list[Workload]:
    from tools.lab.longpoll import wl_longpoll_data

    return [Workload("longpoll_data_kafka", STANDARD_PORT,
                     "Long polls that data ends: kafka-python consumers wait up to 5 s on empty partitions (CreateTime, "
                     "LogAppendTime, and a producer clock an hour ahead) and a producer sends 1.5 s into each wait",
                     wl_longpoll_data, broker="kafka4")]


WORKLOADS += _longpoll_workloads()


def _share_workloads() -> list[Workload]:
    from tools.lab.sharegroups import LOCK_CONFIG, wl_share_acks, wl_share_acks_franz_go, wl_share_timeout

    return [Workload("share_acks_kafka", STANDARD_PORT,
                     f"A share group with explicit acknowledgements (Java kafka-clients {KAFKA4}): one consumer "
                     "releases every third record and accepts the rest, another gets the released ones again and "
                     "rejects the even offsets", wl_share_acks, broker="kafka4"),
            Workload("share_timeout_kafka", STANDARD_PORT,
                     f"Share group acquisition locks that expire (Java kafka-clients {KAFKA4}, 2 s locks): a consumer "
                     "holds its records unacknowledged, another gets them again and accepts them, then the first "
                     "accepts its expired deliveries", wl_share_timeout, broker="kafka4",
                     kafka_options={"config": LOCK_CONFIG}),
            Workload("share_acks_franz_go_kafka", STANDARD_PORT,
                     "A share group with explicit acknowledgements (franz-go's share consumer): one consumer "
                     "releases every third record and accepts the rest, another gets the released ones again and "
                     "rejects the even offsets", wl_share_acks_franz_go, broker="kafka4")]


WORKLOADS += _share_workloads()


def _hostile_workloads() -> list[Workload]:
    from tools.lab.hostile import wl_hostile

    return [Workload("hostile_strings_kafka", STANDARD_PORT,
                     "Hostile strings: kafka-python producers whose client ids, record keys, values and header "
                     "values carry terminal escapes, bidi controls, NUL, CR/LF, CSV formulas and HTML; a consumer "
                     "group with a hostile id; raw Metadata v1 requests with client ids and topics that are not "
                     "valid UTF-8", wl_hostile, broker="kafka4")]


WORKLOADS += _hostile_workloads()
