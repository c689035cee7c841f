"""Apache Kafka, the reference broker, started by the lab (tools/lab/apache_kafka.py).

A live run: Kafka 4.x on a free loopback port, kafka-python producing and
consuming while tcpdump records; kdissect's exchanges are checked against
tshark's Kafka PDUs and its records against the clients' own manifest. The
broker options (TLS, SASL users, quotas) are checked from the clients' side.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter

import pytest

from kdissect.conn.pipeline import analyze
from kdissect.records.table import RecordTally, exchange_record_rows
from tests.support.tshark import compare_with_tshark, kafka_pdus
from tools.lab.apache_kafka import kafka_broker, metadata_brokers
from tools.lab.clients import Manifest, kp_consume, kp_create_topics, kp_produce, payloads
from tools.lab.net import LabError
from tools.lab.tcpdump import tcpdump

pytestmark = [pytest.mark.broker, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

TIMES: dict[str, float] = {}


@pytest.fixture(scope="module")
def kafka4():
    started = time.monotonic()
    with kafka_broker("4") as broker:
        TIMES["start (with first-time downloads)"] = time.monotonic() - started
        TIMES["JVM start to ready"] = broker.startup_seconds
        yield broker
    print("\nApache Kafka lab timings: " + ", ".join(f"{k} {v:.1f}s" for k, v in TIMES.items()))


def test_kafka_is_ready_when_started(kafka4):
    assert kafka4.name.startswith("apache-kafka 4.")
    assert metadata_brokers(kafka4.port) == 1  # the client listener answers Metadata too
    assert kafka4.startup_seconds < 60


def test_live_kafka_capture_matches_tshark_and_the_manifest(kafka4, tmp_path, tshark):
    if os.geteuid() != 0:
        pytest.fail("tcpdump needs root (CI runs as root)")
    started = time.monotonic()
    bootstrap = kafka4.bootstrap
    kp_create_topics(kafka4.internal_bootstrap, {"live": 2})  # outside the capture
    manifest = Manifest("live", kafka4.port, "live test")
    pcap = tmp_path / "live.pcap"
    with tcpdump(pcap, kafka4.port):
        for partition, codec in enumerate(("gzip", "lz4")):
            kp_produce(manifest, bootstrap, "live", payloads(f"live-{codec}", 5, with_headers=True),
                       codec=codec, acks=1, partition=partition)
        kp_produce(manifest, bootstrap, "live", payloads("live-acks0", 3, with_headers=True),
                   codec="none", acks=0, partition=0)
        kp_consume(manifest, bootstrap, ["live"], "live-group", 13, timeout=30)
    TIMES["live capture"] = time.monotonic() - started
    data = manifest.data
    assert len(data["produced"]) == 13 and all(r["delivered"] for r in data["produced"])
    assert len(data["consumed"]) == 13, data["operations"]

    exchanges, accounting = analyze([pcap], (kafka4.port,), keep_messages=True)
    exchanges = list(exchanges)
    counts = compare_with_tshark(tshark, pcap, (kafka4.port,), exchanges, accounting.raw_sasl_frames)
    assert counts["requests"] > 10 and counts["bodies_compared"] >= 3, counts
    assert accounting.gap_bytes == 0 and accounting.truncated_frames == 0
    # Kafka does not answer acks=0: tshark sees no response to that Produce
    pdus = kafka_pdus(tshark, pcap, (kafka4.port,))
    responses = {(p.dst, p.src, p.correlation_id) for p in pdus if not p.is_request}
    produce = [(p.src, p.dst, p.correlation_id) for p in pdus if p.is_request and p.api_key == 0]
    assert len(produce) == 3 and sum(key not in responses for key in produce) == 1

    tally = RecordTally()
    rows = list(exchange_record_rows(exchanges, tally=tally))
    assert tally.troubled == 0, tally.lines()
    key = lambda r: (r["topic"], r["partition"], r["key"], r["value"], json.dumps(r["headers"]))  # noqa: E731
    produced_on_wire = Counter(key(r) for r in rows if r["direction"] == "produce")
    assert produced_on_wire == Counter(key(r) for r in data["produced"])
    fetched = {(r["topic"], r["partition"], r["offset"]): key(r) for r in rows if r["direction"] == "fetch"}
    for r in data["consumed"]:
        assert fetched[(r["topic"], r["partition"], r["offset"])] == key(r)


def test_tls_sasl_users_and_quotas(tmp_path):
    """SASL_SSL with SCRAM and PLAIN users made at format time, a wrong
    password refused, and a producer quota that throttles (client metrics)."""
    from confluent_kafka import Producer
    from kafka import KafkaProducer

    started = time.monotonic()
    with kafka_broker("4", listeners=("SASL_SSL", "PLAINTEXT"), users={"bob": "bob-pw"},
                      config={"quota.window.num": 2, "quota.window.size.seconds": 1}) as broker:
        TIMES["SASL_SSL broker start"] = broker.startup_seconds
        kp_create_topics(broker.internal_bootstrap, {"secure": 1})
        for mechanism in ("SCRAM-SHA-512", "PLAIN"):
            producer = KafkaProducer(**broker.kafka_python_config("SASL_SSL", mechanism), max_block_ms=10000)
            assert producer.send("secure", b"over tls").get(timeout=10).offset >= 0
            producer.close()
        errors: list[str] = []
        refused = Producer({**broker.librdkafka_config("SASL_SSL", "SCRAM-SHA-256"), "sasl.password": "wrong",
                            "log_level": 0, "error_cb": lambda err: errors.append(str(err))})
        deadline = time.monotonic() + 10
        while not errors and time.monotonic() < deadline:
            refused.poll(0.2)
        assert any("Authentication failed" in e for e in errors), errors
        del refused
        assert "bob-pw" not in broker.log()

        broker.set_client_quota("slow", producer_byte_rate=4096)
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap_for("PLAINTEXT"), client_id="slow",
                                 linger_ms=0)
        producer.send("secure", b"z" * 20000).get(timeout=30)  # 20 kB in a 4 kB/s, 2 s window
        throttle = max(value for group in producer.metrics().values() for name, value in group.items()
                       if name == "throttle-time-max")
        producer.close()
        assert throttle > 0
    TIMES["SASL_SSL + quota test"] = time.monotonic() - started


def test_bad_options_fail_in_one_line():
    with pytest.raises(LabError, match="unknown listener"):
        with kafka_broker("4", listeners=("SSL", "TLS")):
            pass
    with pytest.raises(LabError, match="letters, digits"):
        with kafka_broker("4", listeners=("SASL_PLAINTEXT",), users={"eve": "a,b"}):
            pass
