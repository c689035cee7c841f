"""The lab's long polls that data ends (issue 28, section 4): a consumer
waits with a long `fetch_max_wait_ms` and a producer sends while it waits.

Three topics, one consumer and one producer each (kafka-python, separate
client ids and connections): `lp-create` (CreateTime), `lp-append`
(LogAppendTime, the broker stamps its append time) and `lp-ahead`
(CreateTime, the producer stamps its record an hour ahead: a clock no
tolerance accepts). The manifest holds, per topic, when the producer sent
and was answered (its own clock, ns) and what the consumer received (offset,
timestamp, timestamp type).

`cut_consumer_only` writes the same traffic without the producers'
connections (tshark finds their TCP streams by client id), as a capture
taken where only the consumer's traffic passes would hold it: after
recording, `python -c 'from pathlib import Path; from tools.lab.longpoll
import cut_consumer_only; cut_consumer_only(Path("captures/longpoll_data_kafka.pcap"),
Path("captures/derived/longpoll_data_consumer_only_kafka.pcap"))'`.
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from tools.lab.clients import Manifest, encode_bytes, kp_create_topics

WAIT_MS = 5000  # the consumers' fetch_max_wait_ms
SEND_AFTER_S = 1.5  # the producer sends this long after the consumer started waiting
AHEAD_MS = 3_600_000  # lp-ahead's producer clock runs an hour ahead
TOPICS = {"lp-create": "CreateTime", "lp-append": "LogAppendTime", "lp-ahead": "CreateTime"}
PRODUCER_PREFIX = "lab-lp-producer-"
CONSUMER_PREFIX = "lab-lp-consumer-"


def _produce_one(m: Manifest, bootstrap: str, topic: str, ahead_ms: int) -> None:
    from kafka import KafkaProducer

    client_id = PRODUCER_PREFIX + topic
    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id=client_id, acks=1, linger_ms=0, retries=0,
                             request_timeout_ms=4000, max_block_ms=8000)
    try:
        producer.partitions_for(topic)  # metadata first: the send below is the Produce
        stamp = time.time_ns() // 1_000_000 + ahead_ms if ahead_ms else None
        sent_ns = time.time_ns()
        meta = producer.send(topic, key=f"{topic}-k0".encode(), value=f"{topic}: the record that ends the wait".encode(),
                             partition=0, timestamp_ms=stamp).get(timeout=8)
        acked_ns = time.time_ns()
    finally:
        producer.close(timeout=5)
    m.produced(client="kafka-python", client_id=client_id, topic=topic, partition=0, key=f"{topic}-k0",
               value=f"{topic}: the record that ends the wait", headers=[], codec="none", magic=2, acks=1,
               api_version=None, delivered=True, offset=meta.offset, error=None, timestamp_ms=stamp,
               sent_ns=sent_ns, acked_ns=acked_ns, broker_timestamp_ms=meta.timestamp)


def _wait_and_receive(m: Manifest, bootstrap: str, topic: str, ahead_ms: int) -> None:
    from kafka import KafkaConsumer, TopicPartition

    client_id = CONSUMER_PREFIX + topic
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id=client_id, enable_auto_commit=False,
                             fetch_max_wait_ms=WAIT_MS, fetch_min_bytes=1, request_timeout_ms=WAIT_MS + 5000)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    consumer.poll(timeout_ms=200)  # connected, its Fetch waiting
    producer = threading.Timer(SEND_AFTER_S, _produce_one, (m, bootstrap, topic, ahead_ms))
    producer.start()
    got = []
    end = time.monotonic() + WAIT_MS / 1000 + 5
    try:
        while not got and time.monotonic() < end:
            for _tp, msgs in consumer.poll(timeout_ms=500).items():
                for msg in msgs:
                    got.append(msg)
                    m.consumed(client="kafka-python", client_id=client_id, group=None, topic=msg.topic,
                               partition=msg.partition, offset=msg.offset, timestamp=msg.timestamp,
                               timestamp_type=msg.timestamp_type, key=encode_bytes(msg.key),
                               value=encode_bytes(msg.value), headers=[], received_ns=time.time_ns())
    finally:
        producer.join()
        consumer.close()
    m.operation("kafka-python", f"fetch {topic}[0] waiting up to {WAIT_MS} ms, one record produced after "
                f"{SEND_AFTER_S} s", {"client_id": client_id, "fetch_max_wait_ms": WAIT_MS, "received": len(got),
                                      "timestamp_type": TOPICS[topic], "producer_ahead_ms": ahead_ms})


def wl_longpoll_data(m: Manifest, broker: Any) -> None:
    """Per topic: a consumer long-polls the empty partition, and a record
    produced SEND_AFTER_S into its wait ends it."""
    bootstrap = broker.bootstrap
    kp_create_topics(broker.internal_bootstrap, {topic: 1 for topic in TOPICS if topic != "lp-append"})
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=broker.internal_bootstrap, client_id="lab-setup")
    admin.create_topics([NewTopic("lp-append", 1, 1, topic_configs={"message.timestamp.type": "LogAppendTime"})])
    admin.close()
    for topic in TOPICS:
        _wait_and_receive(m, bootstrap, topic, AHEAD_MS if topic == "lp-ahead" else 0)
    m.note(f"each consumer ({CONSUMER_PREFIX}<topic>) waits up to {WAIT_MS} ms on an empty partition; "
           f"{PRODUCER_PREFIX}<topic> sends one record (acks=1) about {SEND_AFTER_S} s into the wait. lp-append "
           f"has message.timestamp.type=LogAppendTime; lp-ahead's record is stamped {AHEAD_MS} ms ahead. "
           "sent_ns/acked_ns/received_ns: the clients' clock (the capture's host). The _consumer_only capture "
           "is this one without the producers' TCP streams (tshark, by client id)")


def cut_consumer_only(pcap: Path, out: Path, port: int = 9092) -> list[int]:
    """Write `out`: `pcap` without the TCP streams of the producers (their
    client ids); the streams dropped."""
    listing = subprocess.run(
        ["tshark", "-r", str(pcap), "-d", f"tcp.port=={port},kafka", "-Y",
         f'kafka.client_id contains "{PRODUCER_PREFIX}"', "-T", "fields", "-e", "tcp.stream"],
        capture_output=True, text=True, check=True).stdout.split()
    streams = sorted({int(s) for s in listing})
    keep = " && ".join(f"tcp.stream != {stream}" for stream in streams) or "tcp"
    subprocess.run(["tshark", "-r", str(pcap), "-Y", keep, "-F", "pcap", "-w", str(out)], check=True,
                   capture_output=True)
    return streams
