"""Capture lab, part 1: the manifest, deterministic payloads, and thin
wrappers around kafka-python and confluent-kafka that send or receive records
and write down, from the clients' own APIs, what happened."""

from __future__ import annotations

import base64
import json
import logging
import random
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterator

from tools.lab.net import wait_until_drained

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

    def record_helper_output(self, result: dict[str, Any]) -> None:
        """What a lab helper in another language (the Java and Go clients)
        printed as JSON: its produced and consumed records (byte fields in
        base64, stored in the manifest's form) and its operations."""
        def text(value: str | None) -> str | None:
            return None if value is None else encode_bytes(base64.b64decode(value))

        for kind, add in (("produced", self.produced), ("consumed", self.consumed)):
            for row in result.get(kind, []):
                row.update(key=text(row["key"]), value=text(row["value"]),
                           headers=[[k, text(v)] for k, v in row["headers"]])
                add(**row)
        for op in result["operations"]:
            self.operation(op["client"], op["operation"], op["result"])

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
    extra: dict[str, Any] | None = None,
) -> None:
    """Send `records` with one kafka-python producer (normally one batch);
    `extra` holds more KafkaProducer settings (e.g. security)."""
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
    conf.update(extra or {})
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
    drain: bool = False,
) -> None:
    """Send `records` with one confluent-kafka (librdkafka) producer. With
    `drain`, keep the producer open after the flush until the connection's
    queues are empty (acks=0 "delivers" what is still in the socket buffer)."""
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
    if drain and not wait_until_drained(int(bootstrap.rsplit(":", 1)[1])):
        m.note("the connection still had bytes queued 60 s after the flush")
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


def ck_transactions(
    m: Manifest,
    bootstrap: str,
    topic: str,
    transactions: list[tuple[str, list[Payload]]],
    *,
    client_id: str,
    transactional_id: str,
    codec: str,
    linger_ms: int,
    lock: AbstractContextManager[Any] | None = None,
    note_transactional_id: bool = False,
    pause: float = 0.0,
) -> None:
    """Send each `(outcome, records)` of `transactions` to partition 0 in one
    transaction of a transactional confluent-kafka producer, committed or
    aborted as the outcome says ("committed" or "aborted"), and write the
    records down with it (under `lock` where other threads share the
    manifest; naming the transactional id in each row with
    `note_transactional_id`); `pause` seconds after each transaction."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "transactional.id": transactional_id,
                         "acks": "all", "linger.ms": linger_ms, "compression.codec": codec,
                         "log.connection.close": False})
    producer.init_transactions(15)
    for outcome, batch in transactions:
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
        with lock if lock is not None else nullcontext():
            for i, rec in enumerate(batch):
                err, msg = reports.get(i, ("not reported", None))
                named = {"transactional_id": transactional_id} if note_transactional_id else {}
                m.produced(client="confluent-kafka", client_id=client_id, topic=topic, partition=0,
                           key=encode_bytes(rec.key), value=encode_bytes(rec.value),
                           headers=encode_headers(rec.headers), codec=codec, magic=2, acks="all", api_version=None,
                           delivered=err is None,
                           offset=msg.offset() if msg is not None and msg.offset() >= 0 else None,
                           error=None if err is None else str(err), transaction=outcome, **named)
        if pause:
            time.sleep(pause)


def _kp_polled(consumer: Any, expect: int, deadline: float) -> Iterator[Any]:
    """The records a kafka-python consumer polls until `expect` of them or the
    monotonic `deadline` (the last poll's records all, even past `expect`)."""
    got = 0
    while got < expect and time.monotonic() < deadline:
        for _tp, msgs in consumer.poll(timeout_ms=500).items():
            for msg in msgs:
                got += 1
                yield msg


def _kp_record_consumed(m: Manifest, client_id: str, group: str | None, msg: Any) -> None:
    m.consumed(
        client="kafka-python", client_id=client_id, group=group, topic=msg.topic,
        partition=msg.partition, offset=msg.offset, timestamp=msg.timestamp,
        key=encode_bytes(msg.key), value=encode_bytes(msg.value),
        headers=encode_headers(getattr(msg, "headers", None)),
    )


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
    extra: dict[str, Any] | None = None,
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
    conf.update(extra or {})
    consumer = KafkaConsumer(*topics, **conf)
    got = 0
    deadline = time.monotonic() + timeout
    try:  # close even on failure: a live consumer would reconnect to the next workload's broker
        for msg in _kp_polled(consumer, expect, deadline):
            got += 1
            _kp_record_consumed(m, client_id, group, msg)
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
        for msg in _kp_polled(consumer, expect, deadline):
            got += 1
            _kp_record_consumed(m, client_id, None, msg)
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


def kp_create_topics(bootstrap: str, topics: dict[str, int], **extra: Any) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="lab-setup", **extra)
    admin.create_topics([NewTopic(t, n, 1) for t, n in topics.items()])
    admin.close()


