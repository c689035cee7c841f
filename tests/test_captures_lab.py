"""The capture lab: committed captures, their manifests, and a live broker run.

Expected values come from tshark and from the clients' own manifests, never
from kdissect.
"""

from __future__ import annotations

import base64
import collections
import functools
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.lab import free_port, tansu_broker, tcpdump

REPO = Path(__file__).resolve().parent.parent
CAPTURES = REPO / "captures"


def _load_recipe():
    spec = importlib.util.spec_from_file_location("capture_lab_recipe", CAPTURES / "lab.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


# kafka-python 3.0 loads its schemas with deprecated importlib.resources calls.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

lab = _load_recipe()
WORKLOADS = {wl.name: wl for wl in lab.WORKLOADS}
NAMES = sorted(WORKLOADS)

PRODUCE, FETCH, METADATA, OFFSET_COMMIT, JOIN_GROUP, CREATE_TOPICS, DESCRIBE_CONFIGS, DELETE_TOPICS = (
    0, 1, 3, 8, 11, 19, 32, 20)


@functools.lru_cache(maxsize=None)
def pdus(name: str) -> tuple:
    if shutil.which("tshark") is None:
        pytest.fail("tshark is not installed: run tools/setup.sh")
    return tuple(lab.tshark_pdus(CAPTURES / f"{name}.pcap", WORKLOADS[name].port))


@functools.lru_cache(maxsize=None)
def manifest(name: str) -> dict:
    return json.loads((CAPTURES / f"{name}.manifest.json").read_text())


def tshark_fields(pcap: Path, port: int, display_filter: str, *fields: str) -> list[list[str]]:
    cmd = ["tshark", "-r", str(pcap), "-d", f"tcp.port=={port},kafka", "-Y", display_filter, "-T", "fields",
           "-E", "occurrence=a", "-E", "aggregator=;"]
    for field in fields:
        cmd += ["-e", field]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return [line.split("\t") for line in out.splitlines()]


def decode_manifest_bytes(text: str | None) -> bytes | None:
    if text is None:
        return None
    if text.startswith("base64:"):
        return base64.b64decode(text[len("base64:"):])
    return text.encode("utf-8")


# ------------------------------------------------------ committed captures --

def test_every_workload_has_a_capture_and_manifest_and_they_stay_small():
    total = 0
    for name in NAMES:
        pcap = CAPTURES / f"{name}.pcap"
        assert pcap.is_file(), f"{pcap.name} missing: python3 captures/lab.py record --only {name}"
        assert (CAPTURES / f"{name}.manifest.json").is_file()
        total += pcap.stat().st_size
    assert total < 6 * 1024 * 1024
    readme = (CAPTURES / "README.md").read_text()
    for name in NAMES:
        assert f"`{name}.pcap`" in readme, f"README has no provenance for {name}.pcap"


@pytest.mark.parametrize("name", NAMES)
def test_tshark_sees_paired_kafka_traffic(name):
    rows = pdus(name)
    requests = [r for r in rows if r[4]]
    responses = [r for r in rows if not r[4]]
    assert requests and responses
    # Every response answers a request of the capture (same correlation id),
    # except that tshark reads raw SASL tokens as PDUs: their "correlation id"
    # is the start of a SCRAM server message ("r=..." or "e=...").
    unmatched = {r[3] for r in responses} - {r[3] for r in requests}
    prefixes = {(corr & 0xFFFFFFFF).to_bytes(4, "big")[:2] for corr in unmatched}
    assert prefixes <= ({b"r=", b"e=", b"v="} if name == "sasl" else set()), unmatched


@pytest.mark.parametrize("name", NAMES)
def test_manifest_describes_its_capture(name):
    data = manifest(name)
    assert data["capture"] == f"{name}.pcap"
    assert data["port"] == WORKLOADS[name].port
    assert data["broker"].startswith("tansu ")
    assert data["recorded_utc"].endswith("Z")
    for row in data["produced"]:
        assert row["codec"] in ("none", "gzip", "snappy", "lz4", "zstd")
        assert row["magic"] in (0, 1, 2)
        assert isinstance(row["headers"], list)
        if row["magic"] < 2:
            assert row["headers"] == [], "message sets have no headers"
    requested = {(r[1], r[2]) for r in pdus(name) if r[4]}
    if data["produced"]:
        assert any(key == PRODUCE for key, _ in requested)


def test_expected_apis_and_versions_are_captured():
    def requested(name):
        return {(r[1], r[2]) for r in pdus(name) if r[4]}

    assert (PRODUCE, 0) in requested("old_v0_8_2")
    assert (PRODUCE, 1) in requested("old_v0_9")
    assert (PRODUCE, 2) in requested("old_v0_10_1")
    assert (METADATA, 0) in requested("old_v0_8_2")
    assert (FETCH, 0) in requested("old_v0_8_2")
    assert (FETCH, 1) in requested("old_v0_9")
    assert (JOIN_GROUP, 0) in requested("old_v0_9")
    admin = {key for key, _ in requested("admin")}
    assert {CREATE_TOPICS, METADATA, DESCRIBE_CONFIGS} <= admin
    group = {key for key, _ in requested("consume_group")}
    assert {FETCH, JOIN_GROUP, OFFSET_COMMIT} <= group
    assert DELETE_TOPICS in {key for key, _ in requested("unknown_topic")}


@pytest.mark.parametrize("name", [n for n in NAMES if n.startswith("old_")])
def test_old_generation_capture_holds_only_its_own_clients(name):
    """A client left retrying by one workload must not leak into the next."""
    label = name.removeprefix("old_")
    rows = tshark_fields(CAPTURES / f"{name}.pcap", 9092, "kafka.api_version", "kafka.client_id")
    client_ids = {cid for row in rows for cid in row[0].split(";")}
    generation_ids = {cid for cid in client_ids if "-v0_" in cid}
    assert generation_ids and all(f"-{label}" in cid for cid in generation_ids), generation_ids
    assert client_ids - generation_ids <= {"lab-setup", "lab-librdkafka"}


def test_old_generations_write_the_message_format_tshark_reports():
    for name, magic in (("old_v0_8_2", "0"), ("old_v0_9", "0"), ("old_v0_10_1", "1")):
        rows = tshark_fields(CAPTURES / f"{name}.pcap", 9092, "kafka.api_key == 0 && kafka.api_version <= 2",
                             "kafka.message_magic",
                             "kafka.message_codec")
        # The first message of each Produce (the wrapper when compressed); tshark
        # 4.0 cannot decompress snappy and misreads what follows, so inner
        # messages are not compared here.
        magics = {row[0].split(";")[0] for row in rows}
        codecs = {row[1].split(";")[0] for row in rows}
        assert magics == {magic}, (name, magics)
        # none, gzip, snappy, lz4 (tshark codec numbers 0..3)
        assert {"0", "1", "2", "3"} <= codecs, (name, codecs)
        old_rows = [r for r in manifest(name)["produced"] if r["api_version"] is not None]
        assert {r["codec"] for r in old_rows} == {"none", "gzip", "snappy", "lz4"}
        assert {r["magic"] for r in old_rows} == {int(magic)}
        assert len(rows) == len({(r["codec"], r["acks"]) for r in old_rows}) == 5


def test_uncompressed_values_are_on_the_wire_verbatim():
    """Independent check of manifests against capture bytes: every record the
    clients sent without compression appears byte for byte in the capture."""
    checked = 0
    for name in NAMES:
        raw = (CAPTURES / f"{name}.pcap").read_bytes()
        for row in manifest(name)["produced"]:
            value = decode_manifest_bytes(row["value"])
            # Large values straddle TCP segments, so they are not contiguous in the file.
            if row["codec"] != "none" or len(value) > 2000:
                continue
            assert value in raw, (name, row["value"])
            checked += 1
    assert checked > 600


def test_every_codec_and_acks_setting_is_produced():
    for acks in (0, 1):
        rows = manifest(f"produce_acks{acks}")["produced"]
        for client in ("kafka-python", "confluent-kafka"):
            assert {r["codec"] for r in rows if r["client"] == client} == set(lab.CODECS)
        assert {r["acks"] for r in rows} == {acks}
        required = tshark_fields(CAPTURES / f"produce_acks{acks}.pcap", 9092, "kafka.api_key == 0 && kafka.required_acks",
                                 "kafka.required_acks")
        assert required and {row[0] for row in required} == {str(acks)}


@pytest.mark.parametrize("name", NAMES)
def test_produced_keys_and_values_are_distinct(name):
    rows = manifest(name)["produced"]
    values = [r["value"] for r in rows]
    keys = [r["key"] for r in rows if r["key"] is not None]
    assert len(set(values)) == len(values)
    assert len(set(keys)) == len(keys)


def test_delivered_offsets_are_distinct_per_partition():
    for name in NAMES:
        seen = collections.Counter(
            (r["topic"], r["partition"], r["offset"]) for r in manifest(name)["produced"] if r["offset"] is not None)
        assert all(n == 1 for n in seen.values()), name


CONSUMING = ("consume_group", "port_19092", "ipv6", "large_records", "old_v0_8_2", "old_v0_9", "old_v0_10_1")


@pytest.mark.parametrize("name", CONSUMING)
def test_consumers_received_exactly_what_was_produced(name):
    data = manifest(name)
    by_consumer = collections.defaultdict(collections.Counter)
    for r in data["consumed"]:
        by_consumer[(r["client_id"], r["group"])][(r["topic"], r["key"], r["value"], json.dumps(r["headers"]))] += 1
    assert by_consumer, name
    for consumer, received in by_consumer.items():
        topics = {topic for topic, *_ in received}
        produced = collections.Counter(
            (r["topic"], r["key"], r["value"], json.dumps(r["headers"]))
            for r in data["produced"] if r["delivered"] and r["topic"] in topics)
        assert received == produced, (name, consumer)
    if name.startswith("old_"):
        # Fetched in the old generation without a group: Fetch v0/v1/v3.
        assert any(r["group"] is None for r in data["consumed"])
    # Consumed offsets match what the producer was told.
    offsets = {(r["topic"], r["partition"], r["offset"]): r["value"] for r in data["produced"] if r["offset"] is not None}
    for r in data["consumed"]:
        if (r["topic"], r["partition"], r["offset"]) in offsets:
            assert offsets[(r["topic"], r["partition"], r["offset"])] == r["value"]


def test_transactions_manifest_and_capture_agree():
    data = manifest("transactions")
    outcomes = collections.Counter(r["transaction"] for r in data["produced"])
    assert outcomes == {"committed": 6, "aborted": 3}
    committed = {r["value"] for r in data["produced"] if r["transaction"] == "committed"}
    everything = {r["value"] for r in data["produced"]}
    by_group = collections.defaultdict(set)
    for r in data["consumed"]:
        by_group[r["group"]].add(r["value"])
    assert by_group["lab-group-read_uncommitted"] == everything
    assert committed <= by_group["lab-group-read_committed"] <= everything
    # Offsets skip a slot after each finished transaction: the control batch.
    offsets = [r["offset"] for r in data["produced"]]
    assert offsets == sorted(offsets)
    assert offsets[-1] - offsets[0] + 1 - len(offsets) >= 2
    requested = {r[1] for r in pdus("transactions") if r[4]}
    assert {22, 24, 26} <= requested  # InitProducerId, AddPartitionsToTxn, EndTxn


def test_pipelined_capture_has_many_requests_in_flight():
    rows = tshark_fields(CAPTURES / "produce_pipelined.pcap", 9092, "kafka", "tcp.stream", "tcp.srcport",
                         "kafka.correlation_id")
    outstanding: collections.Counter = collections.Counter()
    deepest = 0
    for stream, src_port, corrs in rows:
        n = len([c for c in corrs.split(";") if c])
        outstanding[stream] += -n if src_port == "9092" else n
        deepest = max(deepest, outstanding[stream])
    assert deepest >= 4


def test_non_standard_port_is_not_kafka_to_tshark_without_a_hint():
    pcap = CAPTURES / "port_19092.pcap"
    out = subprocess.run(["tshark", "-r", str(pcap), "-Y", "kafka"], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""
    assert len(pdus("port_19092")) > 20


def test_sasl_capture_has_both_handshake_generations_and_raw_tokens():
    requested = {(r[1], r[2]) for r in pdus("sasl") if r[4]}
    assert (17, 0) in requested and (17, 1) in requested  # SaslHandshake v0 and v1
    assert any(key == 36 for key, _ in requested)  # SaslAuthenticate
    # After SaslHandshake v0 the client's next bytes are a bare SCRAM
    # client-first message behind a 4-byte size: no Kafka request header.
    rows = tshark_fields(CAPTURES / "sasl.pcap", 9092, "tcp.len > 0 && tcp.dstport == 9092",
                         "tcp.stream", "tcp.payload")
    by_stream = collections.defaultdict(list)
    for stream, payload in rows:
        by_stream[stream].append(bytes.fromhex(payload.replace(":", "")))
    raw_tokens = 0
    for payloads in by_stream.values():
        for first, second in zip(payloads, payloads[1:]):
            handshake_v0 = first[4:8] == b"\x00\x11\x00\x00"
            if handshake_v0 and second[4:7] == b"n,,":
                assert int.from_bytes(second[:4], "big") == len(second) - 4
                raw_tokens += 1
    assert raw_tokens >= 1


def test_large_records_span_several_segments():
    rows = tshark_fields(CAPTURES / "large_records.pcap", 9092, "kafka && tcp.segment.count", "kafka.correlation_id",
                         "tcp.segment.count", "tcp.srcport")
    directions = {row[2] == "9092" for row in rows if int(row[1]) >= 3}
    assert directions == {True, False}  # a Produce request and a Fetch response


def test_ipv6_capture_is_ipv6_only():
    rows = tshark_fields(CAPTURES / "ipv6.pcap", 9092, "tcp", "ipv6.src", "ip.src")
    assert rows and all(row[0] == "::1" and row[1] == "" for row in rows)


def test_manifest_bytes_encoding_round_trips():
    assert lab.encode_bytes(b"plain") == "plain"
    assert lab.encode_bytes(b"\xff\x00") == "base64:/wA="
    assert decode_manifest_bytes(lab.encode_bytes(b"\xff\x00")) == b"\xff\x00"
    assert lab.encode_bytes(None) is None
    # The payload generator really exercises both forms.
    rows = manifest("produce_acks1")["produced"]
    assert any(r["value"].startswith("base64:") for r in rows)
    assert any(r["key"] is None for r in rows)


# -------------------------------------------------------------- live lab --

@pytest.mark.broker
def test_live_broker_produce_and_fetch_over_loopback(tmp_path):
    """Tansu + kafka-python + tcpdump: the lab still records what it should."""
    if os.geteuid() != 0:
        pytest.fail("tcpdump needs root (CI runs as root)")
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    pcap = tmp_path / "live.pcap"
    port = free_port()
    values = [f"live-{i}".encode() for i in range(3)]
    with tansu_broker(port) as broker:
        lab.kp_create_topics(broker.bootstrap, {"live": 1})
        with tcpdump(pcap, port):
            producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=1, linger_ms=20,
                                     compression_type="gzip")
            futures = [producer.send("live", key=b"k%d" % i, value=v, partition=0, headers=[("h", b"%d" % i)])
                       for i, v in enumerate(values)]
            producer.flush(10)
            offsets = [f.get(timeout=10).offset for f in futures]
            producer.close(timeout=5)
            consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                                     enable_auto_commit=False, consumer_timeout_ms=8000)
            consumer.assign([TopicPartition("live", 0)])
            received = []
            for message in consumer:
                received.append((message.offset, message.key, message.value, message.headers))
                if len(received) == len(values):
                    break
            consumer.close()
    assert offsets == [0, 1, 2]
    assert received == [(i, b"k%d" % i, v, [("h", b"%d" % i)]) for i, v in enumerate(values)]
    rows = lab.tshark_pdus(pcap, port)
    requested = {r[1] for r in rows if r[4]}
    assert {PRODUCE, FETCH, METADATA} <= requested
    responses = {r[3] for r in rows if not r[4]}
    produce_corrs = {r[3] for r in rows if r[4] and r[1] == PRODUCE}
    assert produce_corrs and produce_corrs <= responses


def test_tcpdump_drop_counts_are_read_from_its_summary():
    from tests.support.lab import _dropped_packets

    summary = "120 packets captured\n130 packets received by filter\n7 packets dropped by kernel\n"
    assert _dropped_packets(summary) == 7
    assert _dropped_packets("5 packets captured\n0 packets dropped by kernel\n") == 0
