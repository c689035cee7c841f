"""Capture lab: a consumer group that falls behind (`group_lag_kafka`), for
the group_lag tables' lag in records and in time, checked against tshark.

Against Apache Kafka 4.4, with kafka-python pinned to api_version 2.5 (so
Fetch, ListOffsets and OffsetCommit are versions tshark 4.0 decodes, and
record batches carry CreateTime timestamps): one producer writes `lag-events`
(two partitions) for about seven seconds, a record every 50 ms; one slow
group member (`lag-slow`, small fetches: a few records each) polls at most
four records, sleeps 0.4 s and commits after each poll, and stops before it has caught up, so the group
ends behind on both partitions.

The manifest holds what the producer was given (offsets, `produced`), what
the consumer returned (with the records' timestamps, `consumed`), and in
`groups` each commit (`commits`: partition -> position) and what
`committed()` returned at the end.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from tools.lab.clients import Manifest, encode_bytes, encode_headers, kp_create_topics, payloads

TOPIC = "lag-events"
PARTITIONS = 2
RECORDS = 140
GAP_S = 0.05
API_VERSION = (2, 5, 0)
CONSUMER_S = 6.0  # the slow member's time in the group


def _produce(m: Manifest, lock: threading.Lock, bootstrap: str) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id="lag-producer", acks=1, linger_ms=10,
                             api_version=API_VERSION, retries=0, request_timeout_ms=8000)
    records = payloads("lag-events", RECORDS, with_headers=False)
    futures = []
    for i, rec in enumerate(records):
        futures.append(producer.send(TOPIC, key=rec.key, value=rec.value, partition=i % PARTITIONS))
        time.sleep(GAP_S)
    producer.flush(timeout=10)
    with lock:
        for i, (rec, fut) in enumerate(zip(records, futures)):
            offset, error, stamp = None, None, None
            try:
                meta = fut.get(timeout=1)
                offset, stamp = meta.offset, meta.timestamp
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
            m.produced(client="kafka-python", client_id="lag-producer", topic=TOPIC, partition=i % PARTITIONS,
                       key=encode_bytes(rec.key), value=encode_bytes(rec.value), headers=encode_headers(rec.headers),
                       codec="none", magic=2, acks=1, api_version=list(API_VERSION), delivered=error is None,
                       offset=offset, timestamp=stamp, error=error)
    producer.close(timeout=5)


def _slow_member(m: Manifest, lock: threading.Lock, bootstrap: str, entry: dict[str, Any]) -> None:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id="lag-slow-1", group_id="lag-slow",
                             api_version=API_VERSION, auto_offset_reset="earliest", enable_auto_commit=False,
                             max_poll_records=4, session_timeout_ms=6000, heartbeat_interval_ms=1000,
                             request_timeout_ms=8000, fetch_max_wait_ms=200, max_partition_fetch_bytes=300)
    consumer.subscribe([TOPIC])
    deadline = time.monotonic() + CONSUMER_S
    try:
        while time.monotonic() < deadline:
            polled = consumer.poll(timeout_ms=300, max_records=4)
            for _tp, msgs in polled.items():
                for msg in msgs:
                    with lock:
                        m.consumed(client="kafka-python", client_id="lag-slow-1", group="lag-slow",
                                   topic=msg.topic, partition=msg.partition, offset=msg.offset,
                                   timestamp=msg.timestamp, key=encode_bytes(msg.key),
                                   value=encode_bytes(msg.value), headers=[])
            if polled:
                consumer.commit()
                entry["commits"].append({f"{tp.topic}-{tp.partition}": consumer.position(tp)
                                         for tp in consumer.assignment()})
                time.sleep(0.4)
        for tp in consumer.assignment():
            entry["committed"][f"{tp.topic}-{tp.partition}"] = consumer.committed(tp)
        consumer.pause(*consumer.assignment())  # no fetch in flight at close
        consumer.poll(timeout_ms=300)
    finally:
        consumer.close()


def wl_group_lag(m: Manifest, broker: Any) -> None:
    bootstrap = broker.bootstrap
    lock = threading.Lock()
    kp_create_topics(bootstrap, {TOPIC: PARTITIONS})
    m.operation("kafka-python", f"create_topics {TOPIC}({PARTITIONS})", "ok")
    entry: dict[str, Any] = {"client_id": "lag-slow-1", "commits": [], "committed": {}}
    producer = threading.Thread(target=_produce, args=(m, lock, bootstrap))
    producer.start()
    time.sleep(0.5)
    _slow_member(m, lock, bootstrap, entry)
    producer.join()
    m.data["groups"] = [{"group": "lag-slow", "protocol": "classic", "members": [entry]}]
    m.note("the slow member reads at most 4 records per poll, commits, sleeps 0.4 s; it stops after 6 s, "
           "behind the producer (140 records, one every 50 ms over two partitions)")
