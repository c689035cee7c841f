#!/usr/bin/env python3
"""The capture lab: re-records the Kafka captures in this directory.

Every workload runs real clients (kafka-python, confluent-kafka/librdkafka)
against a fresh in-memory Tansu broker on loopback while tcpdump records
`tcp port PORT` into `captures/<name>.pcap`. Each workload also writes
`captures/<name>.manifest.json`: what the clients produced and what the
consumers received, taken from the clients' own APIs (never from the capture),
so tests can check a decoder against an independent source.

    python3 captures/lab.py record [--only NAME ...]   # re-record (root: tcpdump)
    python3 captures/lab.py list                       # workload names and ports
    python3 captures/lab.py table                      # APIs per capture, via tshark
    python3 captures/lab.py readme                     # refresh the tables in README.md
    python3 captures/lab.py bulk OUT.pcap [--mb 60]    # benchmark capture, big batches
    python3 captures/lab.py chatty OUT.pcap [--exchanges 30000]

record/bulk/chatty re-run themselves in a private network namespace when
`unshare --net` works, so nobody else's loopback traffic reaches a capture.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
import logging
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.support.lab import (  # noqa: E402
    NETNS_ENV,
    bring_loopback_up,
    run_in_private_network,
    tansu_broker,
    tansu_version,
    tcpdump,
)

STANDARD_PORT = 9092
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
OLD_CODECS = ("none", "gzip", "snappy", "lz4")  # zstd needs produce v7 / magic 2

log = logging.getLogger("lab")


# ---------------------------------------------------------------- manifest --

def encode_bytes(data: bytes | str | None) -> str | None:
    """Manifest form of a byte field: UTF-8 text when valid, else base64:..."""
    if data is None:
        return None
    if isinstance(data, str):
        return data
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(bytes(data)).decode("ascii")


def encode_headers(headers: Any) -> list[list[str | None]]:
    return [[encode_bytes(k), encode_bytes(v)] for k, v in (headers or [])]


def client_versions() -> dict[str, str]:
    import confluent_kafka

    return {
        "kafka-python": metadata.version("kafka-python"),
        "confluent-kafka": metadata.version("confluent-kafka"),
        "librdkafka": confluent_kafka.libversion()[0],
    }


class Manifest:
    """What one workload did, from the clients' point of view."""

    def __init__(self, name: str, port: int, description: str) -> None:
        self.data: dict[str, Any] = {
            "capture": f"{name}.pcap",
            "port": port,
            "description": description,
            "recorded_utc": None,
            "broker": None,
            "clients": {},
            "produced": [],
            "consumed": [],
            "operations": [],
            "notes": [],
        }

    def produced(self, **row: Any) -> None:
        self.data["produced"].append(row)

    def consumed(self, **row: Any) -> None:
        self.data["consumed"].append(row)

    def operation(self, client: str, name: str, result: Any) -> None:
        self.data["operations"].append({"client": client, "operation": name, "result": result})

    def note(self, text: str) -> None:
        if text not in self.data["notes"]:
            self.data["notes"].append(text)

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.data, indent=1, sort_keys=False) + "\n")


# ---------------------------------------------------------------- payloads --

@dataclass(frozen=True)
class Payload:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]


WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet")


def payloads(tag: str, count: int, *, with_headers: bool, seed: int | None = None) -> list[Payload]:
    """Deterministic, distinct records: text values (compressible), every
    fifth value binary (not UTF-8), one null key per batch when count > 3."""
    rng = random.Random(seed if seed is not None else tag)
    out = []
    for i in range(count):
        key = None if (count > 3 and i == 1) else f"{tag}-k{i:03d}".encode()
        if i % 5 == 4:
            value = b"\xff\xfe" + f"{tag}-{i}".encode() + rng.randbytes(6)
        else:
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))
            value = f"{tag} #{i}: {words}".encode()
        headers = []
        if with_headers:
            headers = [("seq", str(i).encode()), ("origin", tag.encode())]
            if i % 3 == 0:
                headers.append(("bin", bytes([0x80, i % 256, 0xFF])))
        out.append(Payload(key, value, headers))
    return out


# ----------------------------------------------------------------- clients --

def kp_produce(
    m: Manifest,
    bootstrap: str,
    topic: str,
    records: list[Payload],
    *,
    codec: str,
    acks: int | str,
    api_version: tuple[int, ...] | None = None,
    partition: int = 0,
    client_id: str = "lab-kafka-python",
) -> None:
    """Send `records` with one kafka-python producer (normally one batch)."""
    from kafka import KafkaProducer

    conf: dict[str, Any] = dict(
        bootstrap_servers=bootstrap,
        client_id=client_id,
        acks=acks,
        compression_type=None if codec == "none" else codec,
        linger_ms=100,
        retries=0,
        request_timeout_ms=4000,
        max_block_ms=8000,
    )
    if api_version is not None:
        conf["api_version"] = api_version
        conf["enable_idempotence"] = False
    producer = KafkaProducer(**conf)
    futures = []
    for rec in records:
        kwargs: dict[str, Any] = dict(key=rec.key, value=rec.value, partition=partition)
        if rec.headers:
            kwargs["headers"] = rec.headers
        futures.append(producer.send(topic, **kwargs))
    try:
        producer.flush(timeout=10)
    except Exception as exc:  # the broker may reject old formats; keep going
        log.info("flush: %s", exc)
    magic = kp_magic(api_version)
    for rec, fut in zip(records, futures):
        offset, error = None, None
        try:
            meta = fut.get(timeout=1)
            # With acks=0 the broker reports nothing: kafka-python then makes
            # offsets up (relative ones), so they are not recorded.
            offset = meta.offset if acks != 0 and meta.offset is not None and meta.offset >= 0 else None
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        m.produced(
            client="kafka-python", client_id=client_id, topic=topic, partition=partition,
            key=encode_bytes(rec.key), value=encode_bytes(rec.value), headers=encode_headers(rec.headers),
            codec=codec, magic=magic, acks=acks,
            api_version=list(api_version) if api_version else None,
            delivered=error is None, offset=offset, error=error,
        )
    try:
        producer.close(timeout=5)
    except Exception as exc:
        log.info("close: %s", exc)


def kp_magic(api_version: tuple[int, ...] | None) -> int:
    """Message format kafka-python writes for a forced api_version."""
    if api_version is None or api_version >= (0, 11):
        return 2
    return 1 if api_version >= (0, 10) else 0


def ck_produce(
    m: Manifest,
    bootstrap: str,
    topic: str,
    records: list[Payload],
    *,
    codec: str,
    acks: int | str,
    partition: int | None = 0,
    client_id: str = "lab-librdkafka",
    extra: dict[str, Any] | None = None,
    partition_of: Callable[[int], int] | None = None,
) -> None:
    """Send `records` with one confluent-kafka (librdkafka) producer."""
    from confluent_kafka import Producer

    conf = {
        "bootstrap.servers": bootstrap,
        "client.id": client_id,
        "acks": str(acks),
        "compression.codec": codec,
        "linger.ms": 50,
        "enable.idempotence": False,
        "message.send.max.retries": 0,
        "socket.timeout.ms": 5000,
        "message.timeout.ms": 10000,
        "log.connection.close": False,
    }
    conf.update(extra or {})
    producer = Producer(conf)
    reports: dict[int, tuple[Any, Any]] = {}
    for i, rec in enumerate(records):
        part = partition_of(i) if partition_of else partition

        def on_delivery(err: Any, msg: Any, i: int = i) -> None:
            reports[i] = (err, msg)

        kwargs: dict[str, Any] = dict(key=rec.key, value=rec.value, on_delivery=on_delivery)
        if part is not None:
            kwargs["partition"] = part
        if rec.headers:
            kwargs["headers"] = rec.headers
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    left = producer.flush(20)
    for i, rec in enumerate(records):
        err, msg = reports.get(i, ("not reported", None))
        offset = msg.offset() if msg is not None else None
        m.produced(
            client="confluent-kafka", client_id=client_id, topic=topic,
            partition=msg.partition() if msg is not None else (partition_of(i) if partition_of else partition),
            key=encode_bytes(rec.key), value=encode_bytes(rec.value), headers=encode_headers(rec.headers),
            codec=codec, magic=2, acks=acks, api_version=None,
            delivered=err is None,
            offset=offset if acks != 0 and offset is not None and offset >= 0 else None,
            error=None if err is None else str(err),
        )
    if left:
        log.warning("librdkafka left %d messages undelivered", left)


def kp_consume(
    m: Manifest,
    bootstrap: str,
    topics: list[str],
    group: str,
    expect: int,
    *,
    api_version: tuple[int, ...] | None = None,
    timeout: float = 30.0,
    client_id: str = "lab-kafka-python-consumer",
) -> int:
    """Consume with a group until `expect` records arrive, commit, leave."""
    from kafka import KafkaConsumer

    conf: dict[str, Any] = dict(
        bootstrap_servers=bootstrap,
        client_id=client_id,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
        max_poll_interval_ms=3000,  # also the rebalance timeout: Tansu waits it out
        request_timeout_ms=8000,
    )
    if api_version is not None:
        conf["api_version"] = api_version
        if api_version < (0, 10, 1):  # JoinGroup v0 has one timeout for both
            conf["max_poll_interval_ms"] = conf["session_timeout_ms"]
    consumer = KafkaConsumer(*topics, **conf)
    got = 0
    deadline = time.monotonic() + timeout
    try:  # close even on failure: a live consumer would reconnect to the next workload's broker
        while got < expect and time.monotonic() < deadline:
            for _tp, msgs in consumer.poll(timeout_ms=500).items():
                for msg in msgs:
                    got += 1
                    m.consumed(
                        client="kafka-python", client_id=client_id, group=group, topic=msg.topic,
                        partition=msg.partition, offset=msg.offset, timestamp=msg.timestamp,
                        key=encode_bytes(msg.key), value=encode_bytes(msg.value),
                        headers=encode_headers(getattr(msg, "headers", None)),
                    )
        if got:
            consumer.commit()
        m.operation("kafka-python", f"consume group={group}", {"received": got, "expected": expect})
    finally:
        consumer.close()
    return got


def kp_fetch_from_start(
    m: Manifest,
    bootstrap: str,
    topic: str,
    partition: int,
    expect: int,
    *,
    api_version: tuple[int, ...] | None = None,
    timeout: float = 10.0,
    client_id: str = "lab-kafka-python-fetcher",
) -> int:
    """Fetch from offset 0 without a group or ListOffsets (assign + seek)."""
    from kafka import KafkaConsumer, TopicPartition

    conf: dict[str, Any] = dict(bootstrap_servers=bootstrap, client_id=client_id, enable_auto_commit=False,
                                request_timeout_ms=8000)
    if api_version is not None:
        conf["api_version"] = api_version
    consumer = KafkaConsumer(**conf)
    tp = TopicPartition(topic, partition)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    got = 0
    deadline = time.monotonic() + timeout
    try:
        while got < expect and time.monotonic() < deadline:
            for _tp, msgs in consumer.poll(timeout_ms=500).items():
                for msg in msgs:
                    got += 1
                    m.consumed(
                        client="kafka-python", client_id=client_id, group=None, topic=msg.topic,
                        partition=msg.partition, offset=msg.offset, timestamp=msg.timestamp,
                        key=encode_bytes(msg.key), value=encode_bytes(msg.value),
                        headers=encode_headers(getattr(msg, "headers", None)),
                    )
        m.operation("kafka-python", f"fetch {topic}[{partition}] from offset 0 (no group)",
                    {"received": got, "expected": expect})
    except Exception as exc:
        m.operation("kafka-python", f"fetch {topic}[{partition}] from offset 0 (no group)",
                    f"error: {type(exc).__name__}: {exc}")
    finally:
        consumer.close()
    return got


def ck_consume(
    m: Manifest,
    bootstrap: str,
    topics: list[str],
    group: str,
    expect: int,
    *,
    timeout: float = 40.0,
    client_id: str = "lab-librdkafka-consumer",
    extra: dict[str, Any] | None = None,
) -> int:
    from confluent_kafka import Consumer

    consumer = Consumer({
        **(extra or {}),
        "bootstrap.servers": bootstrap,
        "client.id": client_id,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 1000,
        "max.poll.interval.ms": 6000,
        "log.connection.close": False,
    })
    consumer.subscribe(topics)
    got = 0
    deadline = time.monotonic() + timeout
    try:
        while got < expect and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                m.note(f"librdkafka consumer error: {msg.error()}")
                continue
            got += 1
            m.consumed(
                client="confluent-kafka", client_id=client_id, group=group, topic=msg.topic(),
                partition=msg.partition(), offset=msg.offset(), timestamp=msg.timestamp()[1],
                key=encode_bytes(msg.key()), value=encode_bytes(msg.value()),
                headers=encode_headers(msg.headers()),
            )
        if got:
            consumer.commit(asynchronous=False)
        m.operation("confluent-kafka", f"consume group={group}", {"received": got, "expected": expect})
    finally:
        consumer.close()
    return got


def kp_create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="lab-setup")
    admin.create_topics([NewTopic(t, n, 1) for t, n in topics.items()])
    admin.close()


# --------------------------------------------------------------- workloads --

def wl_admin(m: Manifest, bootstrap: str) -> None:
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


def wl_produce(acks: int) -> Callable[[Manifest, str], None]:
    def run(m: Manifest, bootstrap: str) -> None:
        topic = f"produce-acks{acks}"
        kp_create_topics(bootstrap, {topic: 2})
        for codec in CODECS:
            kp_produce(m, bootstrap, topic, payloads(f"kp-{codec}-a{acks}", 6, with_headers=True),
                       codec=codec, acks=acks, partition=0)
            ck_produce(m, bootstrap, topic, payloads(f"ck-{codec}-a{acks}", 6, with_headers=True),
                       codec=codec, acks=acks, partition=1)
    return run


def wl_pipelined(m: Manifest, bootstrap: str) -> None:
    topic = "pipelined"
    kp_create_topics(bootstrap, {topic: 3})
    ck_produce(
        m, bootstrap, topic, payloads("pipe", 600, with_headers=False, seed=7), codec="none", acks=1,
        partition=None, partition_of=lambda i: i % 3,
        extra={"linger.ms": 0, "batch.num.messages": 4, "max.in.flight.requests.per.connection": 16,
               "queue.buffering.max.ms": 0},
    )
    m.note("librdkafka with batch.num.messages=4, linger.ms=0, max.in.flight=16: many Produce requests in flight")


def wl_consume_group(m: Manifest, bootstrap: str) -> None:
    kp_create_topics(bootstrap, {"orders": 2, "events": 1})
    ck_produce(m, bootstrap, "orders", payloads("orders", 10, with_headers=True), codec="lz4", acks=1,
               partition=None, partition_of=lambda i: i % 2)
    kp_produce(m, bootstrap, "events", payloads("events", 8, with_headers=True), codec="gzip", acks=1)
    kp_produce(m, bootstrap, "events", payloads("events-zstd", 5, with_headers=True), codec="zstd", acks=1)
    total = len(m.data["produced"])
    kp_consume(m, bootstrap, ["orders", "events"], "lab-group-kp", total)
    ck_consume(m, bootstrap, ["orders", "events"], "lab-group-ck", total)


def wl_unknown_topic(m: Manifest, bootstrap: str) -> None:
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
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", _recv_exact(sock, 4))[0]
        response = _recv_exact(sock, size)
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


def _recv_exact(sock: Any, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return buf


def wl_old(api_version: tuple[int, ...]) -> Callable[[Manifest, str], None]:
    def run(m: Manifest, bootstrap: str) -> None:
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
        if any(not r["delivered"] for r in m.data["produced"]):
            m.note("Tansu 0.6.0 parses every Produce payload as a v2 record batch: message sets "
                   "(magic 0/1) are rejected (uncompressed: the broker closes the connection; "
                   "compressed: an error response). The requests are in the capture intact.")
    return run


def wl_other_port(m: Manifest, bootstrap: str) -> None:
    kp_create_topics(bootstrap, {"odd-port": 1})
    ck_produce(m, bootstrap, "odd-port", payloads("odd-zstd", 6, with_headers=True), codec="zstd", acks="all")
    kp_produce(m, bootstrap, "odd-port", payloads("odd-snappy", 5, with_headers=True), codec="snappy", acks=1)
    kp_consume(m, bootstrap, ["odd-port"], "lab-group-odd", len(m.data["produced"]))


def wl_transactions(m: Manifest, bootstrap: str) -> None:
    """A committed and an aborted transaction, then read_committed and
    read_uncommitted consumers: transactional APIs and control batches."""
    from confluent_kafka import Producer

    topic = "txn"
    kp_create_topics(bootstrap, {topic: 1})
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "lab-librdkafka-txn",
                         "transactional.id": "lab-txn-1", "acks": "all", "linger.ms": 20,
                         "compression.codec": "snappy", "log.connection.close": False})
    producer.init_transactions(15)
    for outcome, batch in (("committed", payloads("txn-commit", 4, with_headers=True)),
                           ("aborted", payloads("txn-abort", 3, with_headers=True)),
                           ("committed", payloads("txn-commit2", 2, with_headers=True))):
        producer.begin_transaction()
        reports: dict[int, Any] = {}
        for i, rec in enumerate(batch):
            producer.produce(topic, key=rec.key, value=rec.value, headers=rec.headers, partition=0,
                             on_delivery=lambda err, msg, i=i: reports.__setitem__(i, (err, msg)))
        producer.flush(15)
        if outcome == "committed":
            producer.commit_transaction(15)
        else:
            producer.abort_transaction(15)
        for i, rec in enumerate(batch):
            err, msg = reports.get(i, ("not reported", None))
            m.produced(client="confluent-kafka", client_id="lab-librdkafka-txn", topic=topic, partition=0,
                       key=encode_bytes(rec.key), value=encode_bytes(rec.value),
                       headers=encode_headers(rec.headers), codec="snappy", magic=2, acks="all",
                       api_version=None, delivered=err is None,
                       offset=msg.offset() if msg is not None and msg.offset() >= 0 else None,
                       error=None if err is None else str(err), transaction=outcome)
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


def wl_ipv6(m: Manifest, bootstrap: str) -> None:
    """Over ::1. Tansu advertises the host as "[::1]", which kafka-python cannot
    resolve, so only librdkafka runs here."""
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


def wl_large(m: Manifest, bootstrap: str) -> None:
    kp_create_topics(bootstrap, {"large": 1})
    ck_produce(m, bootstrap, "large", big_payloads("large", 4, 70_000), codec="none", acks=1,
               extra={"linger.ms": 100, "batch.size": 1_000_000})
    kp_consume(m, bootstrap, ["large"], "lab-group-large", len(m.data["produced"]))


SASL_USER, SASL_PASSWORD = "alice", "alice-secret"


def _kp_sasl_login(bootstrap: str, api_version: tuple[int, ...] | None, mechanism: str) -> str:
    from kafka import KafkaProducer

    conf: dict[str, Any] = dict(
        bootstrap_servers=bootstrap, client_id="lab-kafka-python-sasl", security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism, sasl_plain_username=SASL_USER, sasl_plain_password=SASL_PASSWORD,
        max_block_ms=1500, request_timeout_ms=2000, reconnect_backoff_ms=2000, reconnect_backoff_max_ms=2000,
    )
    if api_version is not None:
        conf["api_version"] = api_version
    try:
        producer = KafkaProducer(**conf)
        producer.send("sasl", b"never", partition=0).get(timeout=2)
        return "ok"
    except Exception as exc:
        return f"error: {type(exc).__name__}: {str(exc)[:200]}"


def _ck_sasl_login(bootstrap: str, mechanism: str) -> str:
    from confluent_kafka import Producer

    errors: list[str] = []
    producer = Producer({
        "bootstrap.servers": bootstrap, "client.id": "lab-librdkafka-sasl", "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism, "sasl.username": SASL_USER, "sasl.password": SASL_PASSWORD,
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


def wl_sasl(m: Manifest, bootstrap: str) -> None:
    """SASL against a broker that requires authentication but knows no user.

    Tansu's `user create` must itself authenticate, so an in-memory broker
    can never hold a user: every login fails, which still puts the real
    handshakes on the wire: SaslHandshake v0 followed by raw (unframed) SCRAM
    tokens from kafka-python in the 0.10 generation, SaslHandshake v1 +
    SaslAuthenticate from kafka-python 3 and librdkafka, and a mechanism the
    broker does not offer (PLAIN). Each client runs in a child process that
    is killed after a few seconds, so each makes one or two attempts."""
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


@dataclass(frozen=True)
class Workload:
    name: str
    port: int
    description: str
    run: Callable[[Manifest, str], None]
    host: str = "127.0.0.1"
    broker_args: tuple[str, ...] = ()


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
]


def record(workload: Workload, out_dir: Path) -> Path:
    pcap = out_dir / f"{workload.name}.pcap"
    manifest = Manifest(workload.name, workload.port, workload.description)
    manifest.data["recorded_utc"] = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    manifest.data["broker"] = tansu_version()
    manifest.data["clients"] = client_versions()
    manifest.data["command"] = f"python3 captures/lab.py record --only {workload.name}"
    started = time.monotonic()
    manifest.data["broker_address"] = workload.host
    manifest.data["broker_args"] = list(workload.broker_args)
    with tansu_broker(workload.port, host=workload.host, extra_args=workload.broker_args) as broker:
        with tcpdump(pcap, workload.port):
            workload.run(manifest, broker.bootstrap)
    manifest.write(out_dir / f"{workload.name}.manifest.json")
    log.info("%s: %d bytes, %d produced, %d consumed, %.1fs", pcap.name, pcap.stat().st_size,
             len(manifest.data["produced"]), len(manifest.data["consumed"]), time.monotonic() - started)
    return pcap


# -------------------------------------------------------------- benchmarks --

def bench_bulk(out: Path, megabytes: int, port: int) -> None:
    """Large produce batches then fetches of them: about `megabytes` on the wire."""
    topic = "bulk"
    half = megabytes * (1 << 20) // 2
    value_size = 64 * 1024
    count = max(1, half // value_size)
    rng = random.Random(2024)
    with tansu_broker(port) as broker:
        kp_create_topics(broker.bootstrap, {topic: 2})
        with tcpdump(out, port):
            from confluent_kafka import Consumer, Producer

            producer = Producer({
                "bootstrap.servers": broker.bootstrap, "client.id": "bench-bulk", "acks": "1",
                "linger.ms": 20, "batch.size": 1_000_000, "message.max.bytes": 2_000_000,
                "enable.idempotence": False, "log.connection.close": False,
            })
            for i in range(count):
                while True:
                    try:
                        producer.produce(topic, key=b"bulk-%06d" % i, value=rng.randbytes(value_size),
                                         partition=i % 2)
                        break
                    except BufferError:
                        producer.poll(0.05)
                producer.poll(0)
            producer.flush(60)
            consumer = Consumer({
                "bootstrap.servers": broker.bootstrap, "client.id": "bench-bulk-consumer",
                "group.id": "bench-bulk", "auto.offset.reset": "earliest", "enable.auto.commit": False,
                "fetch.max.bytes": 8_000_000, "max.partition.fetch.bytes": 4_000_000,
                "session.timeout.ms": 6000, "max.poll.interval.ms": 6000,
            })
            consumer.subscribe([topic])
            got, deadline = 0, time.monotonic() + 120
            while got < count and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and not msg.error():
                    got += 1
            consumer.commit(asynchronous=False)
            consumer.close()
    print(f"{out}: {out.stat().st_size} bytes, {count} records of {value_size} B produced, {got} fetched")


def bench_chatty(out: Path, exchanges: int, port: int) -> None:
    """Many small pipelined Produce requests: one record each, many in flight."""
    topic = "chatty"
    with tansu_broker(port) as broker:
        kp_create_topics(broker.bootstrap, {topic: 1})
        with tcpdump(out, port):
            from confluent_kafka import Producer

            producer = Producer({
                "bootstrap.servers": broker.bootstrap, "client.id": "bench-chatty", "acks": "1",
                "linger.ms": 0, "batch.num.messages": 1, "max.in.flight.requests.per.connection": 8,
                "enable.idempotence": False, "queue.buffering.max.messages": 1_000_000,
                "log.connection.close": False,
            })
            for i in range(exchanges):
                while True:
                    try:
                        producer.produce(topic, key=b"c%07d" % i, value=b"tick %d" % i, partition=0)
                        break
                    except BufferError:
                        producer.poll(0.05)
                producer.poll(0)
            producer.flush(120)
    print(f"{out}: {out.stat().st_size} bytes, {exchanges} records produced one per request")


# ------------------------------------------------------------- tshark table --

def tshark_pdus(pcap: Path, port: int) -> list[tuple[int, int | None, int | None, int, bool]]:
    """(frame, api_key, api_version, correlation_id, is_request) per Kafka PDU, per tshark.

    tshark leaves api_version empty on responses (and api_key when it could not
    pair them); a frame holds PDUs of one direction only, so a frame with
    versions holds requests and one without holds responses."""
    cmd = ["tshark", "-r", str(pcap), "-d", f"tcp.port=={port},kafka", "-Y", "kafka",
           "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=;",
           "-e", "frame.number", "-e", "kafka.api_key", "-e", "kafka.api_version",
           "-e", "kafka.correlation_id"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rows: list[tuple[int, int | None, int | None, int, bool]] = []
    for line in out.splitlines():
        frame, keys, versions, corrs = (line.split("\t") + [""] * 4)[:4]
        corr_l = [int(c) for c in corrs.split(";") if c]
        if versions:
            for key, version, corr in zip(keys.split(";"), versions.split(";"), corr_l):
                rows.append((int(frame), int(key), int(version), corr, True))
        else:
            keys_l = [int(k) for k in keys.split(";") if k]
            for i, corr in enumerate(corr_l):
                key = keys_l[i] if len(keys_l) == len(corr_l) else None
                rows.append((int(frame), key, None, corr, False))
    return rows


def api_table(out_dir: Path) -> str:
    from collections import Counter


    names = _api_names()
    lines = ["| capture | port | APIs (version: requests) | requests | responses |", "| --- | --- | --- | --- | --- |"]
    for wl in WORKLOADS:
        pcap = out_dir / f"{wl.name}.pcap"
        if not pcap.exists():
            continue
        rows = tshark_pdus(pcap, wl.port)
        reqs = Counter((k, v) for _, k, v, _, is_req in rows if is_req)
        resps = sum(1 for *_, is_req in rows if not is_req)
        apis = ", ".join(f"{names.get(k, 'api')}({k}) v{v}: {n}" for (k, v), n in sorted(reqs.items()))
        lines.append(f"| `{pcap.name}` | {wl.port} | {apis} | {sum(reqs.values())} | {resps} |")
    return "\n".join(lines)


def provenance_table(out_dir: Path) -> str:
    lines = ["| capture | broker address | recorded (UTC) | broker | clients | workload | produced | consumed |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for wl in WORKLOADS:
        path = out_dir / f"{wl.name}.manifest.json"
        if not path.exists():
            continue
        data = json.loads(path.read_text())
        used = sorted({r["client"] for r in data["produced"] + data["consumed"]}
                      | {o["client"] for o in data["operations"]})
        versions = data["clients"]
        names = []
        for client in used:
            if client == "confluent-kafka":
                names.append(f"confluent-kafka {versions['confluent-kafka']} (librdkafka {versions['librdkafka']})")
            elif client in versions:
                names.append(f"{client} {versions[client]}")
            else:
                names.append(client)
        address = f"[{wl.host}]:{wl.port}" if ":" in wl.host else f"{wl.host}:{wl.port}"
        lines.append(f"| `{wl.name}.pcap` | {address} | {data['recorded_utc']} | {data['broker']} | "
                     f"{'; '.join(names)} | {wl.description} | {len(data['produced'])} | {len(data['consumed'])} |")
    return "\n".join(lines)


TABLES_BEGIN = "<!-- lab:tables begin (python3 captures/lab.py readme) -->"
TABLES_END = "<!-- lab:tables end -->"


def update_readme(out_dir: Path) -> None:
    """Rewrite the generated tables between the markers in README.md."""
    readme = out_dir / "README.md"
    text = readme.read_text()
    start, end = text.index(TABLES_BEGIN) + len(TABLES_BEGIN), text.index(TABLES_END)
    body = ("\n\n### Provenance\n\n" + provenance_table(out_dir)
            + "\n\n### Kafka APIs per capture (computed with tshark 4.0: `Name(key) vVERSION: requests`)\n\n"
            + api_table(out_dir) + "\n\n")
    readme.write_text(text[:start] + body + text[end:])


def _api_names() -> dict[int, str]:
    spec = REPO.parent / "shared" / "kafka-spec"
    names: dict[int, str] = {}
    for path in spec.glob("*/*Request.json"):
        try:
            text = "\n".join(l for l in path.read_text().splitlines() if not l.strip().startswith("//"))
            data = json.loads(text)
            names[int(data["apiKey"])] = data["name"].removesuffix("Request")
        except (ValueError, KeyError):
            continue
    return names


# --------------------------------------------------------------------- cli --

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_rec = sub.add_parser("record", help="re-record the committed captures and manifests")
    p_rec.add_argument("--only", nargs="+", metavar="NAME", help="only these workloads")
    p_rec.add_argument("--out", type=Path, default=HERE, help="output directory (default: captures/)")
    sub.add_parser("list", help="workload names, ports, descriptions")
    sub.add_parser("readme", help="regenerate the tables in captures/README.md (needs tshark)")
    p_tab = sub.add_parser("table", help="markdown table of APIs per capture, computed with tshark")
    p_tab.add_argument("--out", type=Path, default=HERE)
    p_bulk = sub.add_parser("bulk", help="benchmark capture: large produce batches and fetches")
    p_bulk.add_argument("output", type=Path)
    p_bulk.add_argument("--mb", type=int, default=60)
    p_bulk.add_argument("--port", type=int, default=STANDARD_PORT)
    p_chat = sub.add_parser("chatty", help="benchmark capture: many small pipelined produce exchanges")
    p_chat.add_argument("output", type=Path)
    p_chat.add_argument("--exchanges", type=int, default=30000)
    p_chat.add_argument("--port", type=int, default=STANDARD_PORT)
    for p in (p_rec, p_bulk, p_chat):
        p.add_argument("--shared-network", action="store_true",
                       help="do not isolate in a private network namespace (default: isolate when possible)")
    args = parser.parse_args(argv)
    if args.cmd in ("record", "bulk", "chatty") and not args.shared_network:
        # Own loopback: nobody else's broker on 9092 can leak into a capture.
        status = run_in_private_network([str(Path(__file__).resolve()), *(sys.argv[1:] if argv is None else argv)])
        if status is not None:
            return status
        if os.environ.get(NETNS_ENV) == "1":
            bring_loopback_up()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for noisy in ("kafka", "confluent_kafka"):
        logging.getLogger(noisy).setLevel(logging.CRITICAL)

    if args.cmd == "list":
        for wl in WORKLOADS:
            print(f"{wl.name:20} {wl.host:>9} port {wl.port:5}  {wl.description}")
    elif args.cmd == "record":
        wanted = set(args.only or [wl.name for wl in WORKLOADS])
        unknown = wanted - {wl.name for wl in WORKLOADS}
        if unknown:
            parser.error(f"unknown workload(s): {', '.join(sorted(unknown))}")
        chosen = [wl for wl in WORKLOADS if wl.name in wanted]
        if len(chosen) == 1:
            record(chosen[0], args.out)
        else:
            # One process per workload: a client that failed and kept retrying
            # in a background thread cannot reach the next workload's broker.
            for wl in chosen:
                cmd = [sys.executable, str(Path(__file__).resolve()), "record", "--only", wl.name,
                       "--out", str(args.out), "--shared-network"]
                if subprocess.run(cmd).returncode != 0:
                    log.error("%s failed", wl.name)
                    return 1
    elif args.cmd == "readme":
        update_readme(HERE)
    elif args.cmd == "table":
        print(api_table(args.out))
    elif args.cmd == "bulk":
        bench_bulk(args.output, args.mb, args.port)
    elif args.cmd == "chatty":
        bench_chatty(args.output, args.exchanges, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
