"""Capture lab: the forensics workload (`forensics_kafka`), for the topic,
group and client tables (kdissect.forensics).

Against Apache Kafka 4.4, everything at once for about twenty seconds:

- producers: librdkafka idempotent (`fx-idempotent`, acks=all, one record
  every 40 ms over three partitions of `fx-orders`), librdkafka transactional
  (`fx-transactional`: commit, abort, commit on `fx-txn`), kafka-python plain
  (`fx-plain`, uncompressed, `fx-events`) and a librdkafka feeder for the share
  group (`fx-share-feeder`, uncompressed, `fx-share`);
- consumer groups on `fx-orders` while it is written: `fx-classic`, three
  librdkafka members (classic protocol, eager range assignment) of which the
  third leaves after a few seconds and comes back three times, leaving
  again each time (a rebalance storm, a member that leaves and rejoins); `fx-848`, two
  librdkafka members with `group.protocol=consumer` (KIP-848, Fetch v13+
  with topic ids) of which the second leaves;
- after the producers: `fx-late`, two kafka-python members on `fx-events`
  with a small fetch size (several fetches, lag that falls); `fx-txn-readers`,
  one read_committed librdkafka consumer on `fx-txn`; `fx-share`, a share
  group of two Java consumers (KIP-932) on `fx-share`.

The manifest holds, from the clients' own APIs: what each producer sent and
the offsets its delivery reports gave (`produced`), what each consumer
returned (`consumed`), and in `groups`, per group and client: the member id
the client reported (librdkafka `memberid()`), every assignment and
revocation its rebalance callbacks received (in order, with the time), the
offsets it committed and what `committed()` returned at the end.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from tools.lab.clients import Manifest, ck_transactions, encode_bytes, encode_headers, kp_create_topics, payloads
from tools.lab.kafka_versions import JAVA_CLIENT_VERSION

TOPICS = {"fx-orders": 3, "fx-events": 2, "fx-txn": 1, "fx-share": 1}
ORDERS = 150  # records of the idempotent producer
EVENTS = 48
SHARE_RECORDS = 20
LEAVE_AFTER_S = 4.0  # when the third classic member leaves (the second KIP-848 member: 2 s later)
LATE_MIN_S = 4.0  # the late group's members stay at least this long (both get partitions)


class _GroupLog:
    """What the members of one consumer group reported, thread-safe."""

    def __init__(self, group: str, protocol: str) -> None:
        self.group = group
        self.protocol = protocol
        self.lock = threading.Lock()
        self.members: dict[str, dict[str, Any]] = {}
        self.consumed = 0
        self.started = time.time()

    def member(self, client_id: str) -> dict[str, Any]:
        with self.lock:
            return self.members.setdefault(client_id, {"client_id": client_id, "member_ids": [], "events": [],
                                                       "commits": [], "committed": {}, "left": None})

    def event(self, client_id: str, kind: str, partitions: list[tuple[str, int]], member_id: str | None) -> None:
        entry = self.member(client_id)
        with self.lock:
            if member_id and member_id not in entry["member_ids"]:
                entry["member_ids"].append(member_id)
            entry["events"].append({"kind": kind, "time": time.time(), "member_id": member_id,
                                    "partitions": sorted(f"{t}-{p}" for t, p in partitions)})

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "protocol": self.protocol,
                "members": [self.members[k] for k in sorted(self.members)]}


def _record_consumed(m: Manifest, lock: threading.Lock, client: str, client_id: str, group: str, msg: Any,
                     kafka_python: bool = False) -> None:
    if kafka_python:
        row = dict(topic=msg.topic, partition=msg.partition, offset=msg.offset, timestamp=msg.timestamp,
                   key=encode_bytes(msg.key), value=encode_bytes(msg.value),
                   headers=encode_headers(getattr(msg, "headers", None)))
    else:
        row = dict(topic=msg.topic(), partition=msg.partition(), offset=msg.offset(), timestamp=msg.timestamp()[1],
                   key=encode_bytes(msg.key()), value=encode_bytes(msg.value()), headers=encode_headers(msg.headers()))
    with lock:
        m.consumed(client=client, client_id=client_id, group=group, **row)


def _ck_member(m: Manifest, lock: threading.Lock, bootstrap: str, log: _GroupLog, client_id: str, topics: list[str],
               expect: int, stop: threading.Event, leave_at: float | None, extra: dict[str, Any]) -> None:
    """One librdkafka group member: poll, commit what it consumed, leave at
    `leave_at` (seconds) or when the group has `expect` records and `stop` is set."""
    from confluent_kafka import Consumer

    conf = {"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": log.group,
            "auto.offset.reset": "earliest", "enable.auto.commit": False, "log.connection.close": False,
            "fetch.wait.max.ms": 300}
    conf.update(extra)
    consumer = Consumer(conf)

    def on_assign(c: Any, partitions: list) -> None:
        log.event(client_id, "assign", [(p.topic, p.partition) for p in partitions], c.memberid())
        if log.protocol == "consumer":
            c.incremental_assign(partitions)

    def on_revoke(c: Any, partitions: list) -> None:
        log.event(client_id, "revoke", [(p.topic, p.partition) for p in partitions], c.memberid())
        if log.protocol == "consumer":
            c.incremental_unassign(partitions)

    consumer.subscribe(topics, on_assign=on_assign, on_revoke=on_revoke)
    started = time.monotonic()
    deadline = started + 45
    try:
        while time.monotonic() < deadline:
            if leave_at is not None and time.monotonic() - started >= leave_at:
                break
            if stop.is_set() and log.consumed >= expect:
                break
            msg = consumer.poll(0.3)
            if msg is None:
                continue
            if msg.error():
                m.note(f"librdkafka consumer {client_id} error: {msg.error()}")
                continue
            _record_consumed(m, lock, "confluent-kafka", client_id, log.group, msg)
            with log.lock:
                log.consumed += 1
            committed = consumer.commit(message=msg, asynchronous=False)
            entry = log.member(client_id)
            with log.lock:
                entry["commits"].extend({"topic": tp.topic, "partition": tp.partition, "offset": tp.offset,
                                         "error": None if tp.error is None else str(tp.error)}
                                        for tp in committed or ())
        entry = log.member(client_id)
        assignment = consumer.assignment()
        if assignment:
            for tp in consumer.committed(assignment, timeout=10):
                with log.lock:
                    entry["committed"][f"{tp.topic}-{tp.partition}"] = tp.offset
        with log.lock:
            entry["left"] = (entry["left"] or []) + [time.time()]
        # no fetch in flight when the consumer closes its sockets (a reset
        # would cut the broker's answer short): pause, let answers come in
        if assignment:
            consumer.pause(assignment)
        quiet_until = time.monotonic() + 0.8
        while time.monotonic() < quiet_until:
            consumer.poll(0.1)
    finally:
        consumer.close()


def _flapping_member(m: Manifest, lock: threading.Lock, bootstrap: str, log: _GroupLog, client_id: str,
                     topics: list[str], stop: threading.Event, conf: dict[str, Any]) -> None:
    """A member that leaves and comes back (a new consumer, same client id): a
    rebalance each time, in quick succession."""
    for pause, stay in ((0.0, LEAVE_AFTER_S), (0.5, 2.0), (0.5, 2.0), (0.5, 2.0)):
        time.sleep(pause)
        _ck_member(m, lock, bootstrap, log, client_id, topics, ORDERS, stop, stay, conf)


def _kp_member(m: Manifest, lock: threading.Lock, bootstrap: str, log: _GroupLog, client_id: str, topics: list[str],
               expect: int) -> None:
    """One kafka-python group member with a small fetch size, until the group has `expect` records."""
    from kafka import ConsumerRebalanceListener, KafkaConsumer

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id=client_id, group_id=log.group,
                             auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=6000,
                             heartbeat_interval_ms=1000, max_poll_interval_ms=6000, request_timeout_ms=8000,
                             max_partition_fetch_bytes=600, fetch_max_wait_ms=200)

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: Any) -> None:
            log.event(client_id, "revoke", [(tp.topic, tp.partition) for tp in revoked], None)

        def on_partitions_assigned(self, assigned: Any) -> None:
            log.event(client_id, "assign", [(tp.topic, tp.partition) for tp in assigned], None)

    consumer.subscribe(topics, listener=Listener())
    started = time.monotonic()
    deadline = started + 40
    entry = log.member(client_id)
    try:
        while time.monotonic() < deadline and (log.consumed < expect or time.monotonic() - started < LATE_MIN_S):
            polled = consumer.poll(timeout_ms=300)
            for _tp, msgs in polled.items():
                for msg in msgs:
                    _record_consumed(m, lock, "kafka-python", client_id, log.group, msg, kafka_python=True)
                    with log.lock:
                        log.consumed += 1
            if polled:
                time.sleep(0.25)  # a slow consumer: the lag falls fetch by fetch
            if consumer.assignment():
                consumer.commit()
                with log.lock:
                    entry["commits"].append({tp.topic + "-" + str(tp.partition): consumer.position(tp)
                                             for tp in consumer.assignment()})
        for tp in consumer.assignment():
            offset = consumer.committed(tp)
            with log.lock:
                entry["committed"][f"{tp.topic}-{tp.partition}"] = offset
        with log.lock:
            entry["left"] = (entry["left"] or []) + [time.time()]
        consumer.pause(*consumer.assignment())  # no fetch in flight at close
        consumer.poll(timeout_ms=500)
    finally:
        consumer.close()


def _ck_producer(m: Manifest, lock: threading.Lock, bootstrap: str, client_id: str, topic: str, records: list,
                 partitions: int, codec: str, gap_s: float, extra: dict[str, Any]) -> None:
    from confluent_kafka import Producer

    conf = {"bootstrap.servers": bootstrap, "client.id": client_id, "acks": "all", "compression.codec": codec,
            "linger.ms": 5, "log.connection.close": False}
    conf.update(extra)
    producer = Producer(conf)
    reports: dict[int, tuple[Any, Any]] = {}
    for i, rec in enumerate(records):
        producer.produce(topic, key=rec.key, value=rec.value, headers=rec.headers or None, partition=i % partitions,
                         on_delivery=lambda err, msg, i=i: reports.__setitem__(i, (err, msg)))
        producer.poll(gap_s)
    producer.flush(20)
    with lock:
        for i, rec in enumerate(records):
            err, msg = reports.get(i, ("not reported", None))
            m.produced(client="confluent-kafka", client_id=client_id, topic=topic,
                       partition=msg.partition() if msg is not None else i % partitions,
                       key=encode_bytes(rec.key), value=encode_bytes(rec.value), headers=encode_headers(rec.headers),
                       codec=codec, magic=2, acks="all", api_version=None, delivered=err is None,
                       offset=msg.offset() if msg is not None and msg.offset() >= 0 else None,
                       error=None if err is None else str(err), idempotent=bool(extra.get("enable.idempotence")))


def _kp_producer(m: Manifest, lock: threading.Lock, bootstrap: str, client_id: str, topic: str, records: list,
                 partitions: int, gap_s: float) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id=client_id, acks=1, compression_type=None,
                             linger_ms=20, enable_idempotence=False, retries=0, request_timeout_ms=8000)
    futures = []
    for i, rec in enumerate(records):
        futures.append(producer.send(topic, key=rec.key, value=rec.value, headers=rec.headers,
                                     partition=i % partitions))
        time.sleep(gap_s)
    producer.flush(timeout=10)
    with lock:
        for i, (rec, fut) in enumerate(zip(records, futures)):
            offset, error = None, None
            try:
                offset = fut.get(timeout=1).offset
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
            m.produced(client="kafka-python", client_id=client_id, topic=topic, partition=i % partitions,
                       key=encode_bytes(rec.key), value=encode_bytes(rec.value), headers=encode_headers(rec.headers),
                       codec="none", magic=2, acks=1, api_version=None, delivered=error is None, offset=offset,
                       error=error)
    producer.close(timeout=5)


def _transactions(m: Manifest, lock: threading.Lock, bootstrap: str) -> None:
    ck_transactions(m, bootstrap, "fx-txn", [("committed", payloads("fx-txn-a", 5, with_headers=True)),
                                             ("aborted", payloads("fx-txn-b", 3, with_headers=True)),
                                             ("committed", payloads("fx-txn-c", 4, with_headers=True))],
                    client_id="fx-transactional", transactional_id="fx-txn-1", codec="lz4", linger_ms=10,
                    lock=lock, note_transactional_id=True, pause=0.5)


def _share_group(m: Manifest, bootstrap: str) -> None:
    import json

    from tools.lab.java_client import run_java_helper

    result = json.loads(run_java_helper(["share", bootstrap, "fx-share", "fx-share", str(SHARE_RECORDS), "2"],
                                        version=JAVA_CLIENT_VERSION))
    m.data["clients"]["kafka-clients (java)"] = JAVA_CLIENT_VERSION
    m.record_helper_output(result)


def wl_forensics(m: Manifest, broker: Any) -> None:
    bootstrap = broker.bootstrap
    lock = threading.Lock()
    kp_create_topics(bootstrap, TOPICS)
    m.operation("kafka-python", "create_topics " + " ".join(f"{t}({n})" for t, n in TOPICS.items()), "ok")
    classic = _GroupLog("fx-classic", "classic")
    kip848 = _GroupLog("fx-848", "consumer")
    stop = threading.Event()
    classic_conf = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000, "max.poll.interval.ms": 10000,
                    "partition.assignment.strategy": "range"}
    members = [threading.Thread(target=_ck_member, args=(m, lock, bootstrap, classic, f"fx-classic-{i}",
                                                         ["fx-orders"], ORDERS, stop, None, classic_conf))
               for i in (1, 2)]
    members.append(threading.Thread(target=_flapping_member, args=(m, lock, bootstrap, classic, "fx-classic-3",
                                                                   ["fx-orders"], stop, classic_conf)))
    members += [threading.Thread(target=_ck_member, args=(m, lock, bootstrap, kip848, f"fx-848-{i}", ["fx-orders"],
                                                          ORDERS, stop, LEAVE_AFTER_S + 2 if i == 2 else None,
                                                          {"group.protocol": "consumer"}))
                for i in (1, 2)]
    for thread in members:
        thread.start()
        time.sleep(0.3)
    time.sleep(2.0)  # let the groups form before the data flows
    producers = [
        threading.Thread(target=_ck_producer, args=(m, lock, bootstrap, "fx-idempotent", "fx-orders",
                                                    payloads("fx-orders", ORDERS, with_headers=True), 3, "snappy",
                                                    0.06, {"enable.idempotence": True})),
        threading.Thread(target=_kp_producer, args=(m, lock, bootstrap, "fx-plain", "fx-events",
                                                    payloads("fx-events", EVENTS, with_headers=False), 2, 0.1)),
        threading.Thread(target=_transactions, args=(m, lock, bootstrap)),
        threading.Thread(target=_ck_producer, args=(m, lock, bootstrap, "fx-share-feeder", "fx-share",
                                                    payloads("fx-share", SHARE_RECORDS, with_headers=False), 1,
                                                    "none", 0.05, {"enable.idempotence": False})),
    ]
    for thread in producers:
        thread.start()
    for thread in producers:
        thread.join()
    stop.set()
    for thread in members:
        thread.join()
    late = _GroupLog("fx-late", "classic")
    readers = _GroupLog("fx-txn-readers", "classic")
    after = [threading.Thread(target=_kp_member, args=(m, lock, bootstrap, late, f"fx-late-{i}", ["fx-events"], EVENTS))
             for i in (1, 2)]
    stop_readers = threading.Event()
    stop_readers.set()
    committed_txn = sum(1 for r in m.data["produced"] if r.get("transaction") == "committed")
    after.append(threading.Thread(target=_ck_member, args=(m, lock, bootstrap, readers, "fx-txn-reader", ["fx-txn"],
                                                           committed_txn, stop_readers, None,
                                                           {"isolation.level": "read_committed",
                                                            "session.timeout.ms": 6000,
                                                            "heartbeat.interval.ms": 1000})))
    for thread in after:
        thread.start()
        time.sleep(0.3)
    _share_group(m, bootstrap)
    for thread in after:
        thread.join()
    m.data["groups"] = [log.to_json() for log in (classic, kip848, late, readers)]
    for log in (classic, kip848, late, readers):
        m.operation("confluent-kafka" if log.group != "fx-late" else "kafka-python", f"consume group={log.group}",
                    {"received": log.consumed})
    m.note(f"fx-classic-3 leaves fx-classic {LEAVE_AFTER_S:.0f} s after it starts, comes back 0.5 s later as a new "
           "consumer with the same client id and leaves 2 s later, three times (a session is skipped when the "
           "group is done); fx-848-2 leaves fx-848 "
           f"{LEAVE_AFTER_S + 2:.0f} s after it starts; librdkafka commits after every record (commit(message), "
           "synchronous), kafka-python after every poll (it sleeps 0.25 s after each poll that returned records)")
