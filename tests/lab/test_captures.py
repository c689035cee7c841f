"""The capture lab: committed captures, their manifests, and a live broker run.

Expected values come from tshark and from the clients' own manifests, never
from kdissect. Captures against Tansu and against Apache Kafka (4.x, and 3.9
for the old generations) share the generic checks; checks of a broker's own
behaviour name the captures they apply to.
"""

from __future__ import annotations

import base64
import collections
import functools
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.pcaps import tshark_follow, tshark_output
from tools.lab import recipe as lab
from tools.lab.clients import CODECS, encode_bytes, kp_create_topics
from tools.lab.net import free_port
from tools.lab.tansu import tansu_broker
from tools.lab.tcpdump import dropped_packets, tcpdump
from tools.lab.workloads import FLOOD_RECORDS, WORKLOADS as ALL_WORKLOADS
from tests.support.paths import REPO

CAPTURES = REPO / "captures"

# kafka-python 3.0 loads its schemas with deprecated importlib.resources calls.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

WORKLOADS = {wl.name: wl for wl in ALL_WORKLOADS}
NAMES = sorted(WORKLOADS)
TANSU = sorted(n for n in NAMES if WORKLOADS[n].broker == "tansu")
KAFKA = sorted(n for n in NAMES if WORKLOADS[n].broker != "tansu")

PRODUCE, FETCH, METADATA, OFFSET_COMMIT, JOIN_GROUP, CREATE_TOPICS, DESCRIBE_CONFIGS, DELETE_TOPICS = (
    0, 1, 3, 8, 11, 19, 32, 20)
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
CONSUMER_GROUP_HEARTBEAT, SHARE_GROUP_HEARTBEAT, SHARE_FETCH, SHARE_ACKNOWLEDGE = 68, 76, 78, 79


def path_of(name: str, suffix: str = ".pcap") -> Path:
    return CAPTURES / WORKLOADS[name].directory / f"{name}{suffix}"


@functools.lru_cache(maxsize=None)
def pdus(name: str) -> tuple:
    if shutil.which("tshark") is None:
        pytest.fail("tshark is not installed: run tools/setup.sh")
    return tuple(lab.tshark_pdus(path_of(name), WORKLOADS[name].port))


@functools.lru_cache(maxsize=None)
def manifest(name: str) -> dict:
    return json.loads(path_of(name, ".manifest.json").read_text())


def tshark_fields(pcap: Path, port: int, display_filter: str, *fields: str) -> list[list[str]]:
    args = ["-d", f"tcp.port=={port},kafka", "-Y", display_filter, "-T", "fields",
            "-E", "occurrence=a", "-E", "aggregator=;"]
    for field in fields:
        args += ["-e", field]
    out = tshark_output(pcap, args)
    return [line.split("\t") for line in out.splitlines()]


def decode_manifest_bytes(text: str | None) -> bytes | None:
    if text is None:
        return None
    if text.startswith("base64:"):
        return base64.b64decode(text[len("base64:"):])
    return text.encode("utf-8")


def deepest_in_flight(name: str) -> int:
    """Most requests of one connection awaiting their response at once,
    counted from tshark's PDUs (requests up, responses down)."""
    port = str(WORKLOADS[name].port)
    rows = tshark_fields(path_of(name), WORKLOADS[name].port, "kafka", "tcp.stream", "tcp.srcport",
                         "kafka.correlation_id")
    outstanding: collections.Counter = collections.Counter()
    deepest = 0
    for stream, src_port, corrs in rows:
        n = len([c for c in corrs.split(";") if c])
        outstanding[stream] += -n if src_port == port else n
        deepest = max(deepest, outstanding[stream])
    return deepest


# ------------------------------------------------------ committed captures --

def test_every_workload_has_a_capture_and_manifest_and_they_stay_small():
    total = 0
    for name in NAMES:
        pcap = path_of(name)
        assert pcap.is_file(), f"{pcap.name} missing: python3 -m tools.lab record --only {name}"
        assert path_of(name, ".manifest.json").is_file()
        assert pcap.stat().st_size < 2 * 1024 * 1024, pcap.name
        assert path_of(name, ".manifest.json").stat().st_size < 2 * 1024 * 1024, pcap.name
        total += pcap.stat().st_size
    assert total < 8 * 1024 * 1024
    readme = (CAPTURES / "README.md").read_text()
    for name in NAMES:
        shown = f"{WORKLOADS[name].directory}/{name}.pcap" if WORKLOADS[name].directory else f"{name}.pcap"
        assert f"`{shown}`" in readme, f"README has no provenance for {shown}"


def test_readme_api_table_is_what_tshark_reads_now():
    # the table of APIs per capture in captures/README.md, counted by tshark
    # and named from Kafka's spec, is what the recipe computes from the
    # committed captures today (no api shown by number where the spec names it)
    readme = (CAPTURES / "README.md").read_text()
    table = lab.api_table(CAPTURES)
    assert table in readme, "captures/README.md is stale: python3 -m tools.lab readme"
    assert "| Produce(0) v" in table


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
    assert prefixes <= ({b"r=", b"e=", b"v="} if name.startswith("sasl") else set()), unmatched


@pytest.mark.parametrize("name", NAMES)
def test_manifest_describes_its_capture(name):
    data = manifest(name)
    assert data["capture"] == f"{name}.pcap"
    assert data["port"] == WORKLOADS[name].port
    expected_broker = {"tansu": "tansu 0.6", "kafka4": "apache-kafka 4.", "kafka3": "apache-kafka 3.9"}
    assert data["broker"].startswith(expected_broker[WORKLOADS[name].broker]), data["broker"]
    assert data["command"] == f"python3 -m tools.lab record --only {name}"
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


def _requested(name):
    return {(r[1], r[2]) for r in pdus(name) if r[4]}


@pytest.mark.parametrize("suffix", ["", "_kafka3"])
def test_expected_apis_and_versions_are_captured(suffix):
    assert (PRODUCE, 0) in _requested("old_v0_8_2" + suffix)
    assert (PRODUCE, 1) in _requested("old_v0_9" + suffix)
    assert (PRODUCE, 2) in _requested("old_v0_10_1" + suffix)
    assert (METADATA, 0) in _requested("old_v0_8_2" + suffix)
    assert (FETCH, 0) in _requested("old_v0_8_2" + suffix)
    assert (FETCH, 1) in _requested("old_v0_9" + suffix)
    assert (JOIN_GROUP, 0) in _requested("old_v0_9" + suffix)
    if suffix:
        return
    for end in ("", "_kafka"):
        admin = {key for key, _ in _requested("admin" + end)}
        assert {CREATE_TOPICS, METADATA, DESCRIBE_CONFIGS} <= admin
        group = {key for key, _ in _requested("consume_group" + end)}
        assert {FETCH, JOIN_GROUP, OFFSET_COMMIT} <= group
        assert DELETE_TOPICS in {key for key, _ in _requested("unknown_topic" + end)}


@pytest.mark.parametrize("name", [n for n in NAMES if n.startswith("old_")])
def test_old_generation_capture_holds_only_its_own_clients(name):
    """A client left retrying by one workload must not leak into the next."""
    label = name.removeprefix("old_").removesuffix("_kafka3")
    rows = tshark_fields(path_of(name), 9092, "kafka.api_version", "kafka.client_id")
    client_ids = {cid for row in rows for cid in row[0].split(";")}
    generation_ids = {cid for cid in client_ids if "-v0_" in cid}
    assert generation_ids and all(f"-{label}" in cid for cid in generation_ids), generation_ids
    assert client_ids - generation_ids <= {"lab-setup", "lab-librdkafka"}


@pytest.mark.parametrize("suffix", ["", "_kafka3"])
def test_old_generations_write_the_message_format_tshark_reports(suffix):
    for name, magic in (("old_v0_8_2", "0"), ("old_v0_9", "0"), ("old_v0_10_1", "1")):
        name += suffix
        rows = tshark_fields(path_of(name), 9092, "kafka.api_key == 0 && kafka.api_version <= 2",
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


def test_kafka_3_9_accepts_and_down_converts_the_old_generations():
    """Apache Kafka 3.9 stores the magic 0/1 message sets Tansu rejects, and
    the old clients' Fetch v0/v1/v3 and groups work (manifest: the clients'
    own reports)."""
    for label in ("v0_8_2", "v0_9", "v0_10_1"):
        data = manifest(f"old_{label}_kafka3")
        assert all(r["delivered"] for r in data["produced"]), label
        offsets = [r["offset"] for r in data["produced"] if r["acks"] == 1 and r["api_version"] is not None]
        assert offsets == list(range(len(offsets))), label
        groups = {r["group"] for r in data["consumed"]}
        assert groups == {None, f"lab-group-{label}"}, label


@functools.lru_cache(maxsize=None)
def client_stream_bytes(name: str) -> bytes:
    """Everything the clients sent, per connection as tshark reassembles it
    (tshark's `follow,tcp,raw`), connections joined by a separator."""
    streams = sorted({int(row[0]) for row in tshark_fields(path_of(name), WORKLOADS[name].port, "tcp", "tcp.stream")})
    followed = tshark_follow(path_of(name), streams)
    port = WORKLOADS[name].port
    sent = [forward if node0[1] != port else backward for node0, forward, backward in followed.values()]
    return b"\n--\n".join(sent)


def test_uncompressed_values_are_on_the_wire_verbatim():
    """Independent check of manifests against capture bytes: every record the
    clients sent without compression appears byte for byte in the capture
    (in the file; where a value straddles two TCP segments, in the stream
    tshark reassembles)."""
    checked = 0
    for name in NAMES:
        raw = path_of(name).read_bytes()
        for row in manifest(name)["produced"]:
            value = decode_manifest_bytes(row["value"])
            if row["codec"] != "none":
                continue
            assert value in raw or value in client_stream_bytes(name), (name, row["value"])
            checked += 1
    assert checked > 6000


@pytest.mark.parametrize("suffix", ["", "_kafka"])
def test_every_codec_and_acks_setting_is_produced(suffix):
    for acks in (0, 1):
        name = f"produce_acks{acks}{suffix}"
        rows = manifest(name)["produced"]
        for client in ("kafka-python", "confluent-kafka"):
            assert {r["codec"] for r in rows if r["client"] == client} == set(CODECS)
        assert {r["acks"] for r in rows} == {acks}
        required = tshark_fields(path_of(name), 9092, "kafka.api_key == 0 && kafka.required_acks",
                                 "kafka.required_acks")
        assert required and {row[0] for row in required} == {str(acks)}


def test_java_client_produced_every_codec():
    for name in ("java_clients_kafka", "java_clients_4_4_kafka"):
        rows = manifest(name)["produced"]
        assert {r["codec"] for r in rows if r["topic"] == "java-orders"} == set(CODECS)
        assert all(r["delivered"] and r["offset"] is not None for r in rows), name


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


CONSUMING = ("consume_group", "port_19092", "ipv6", "large_records", "old_v0_8_2", "old_v0_9", "old_v0_10_1",
             "consume_group_kafka", "port_19092_kafka", "ipv6_kafka", "large_records_kafka", "old_v0_8_2_kafka3",
             "old_v0_9_kafka3", "old_v0_10_1_kafka3", "java_clients_kafka", "java_clients_4_4_kafka", "quota_kafka")


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


@pytest.mark.parametrize("name", ["transactions", "transactions_kafka"])
def test_transactions_manifest_and_capture_agree(name):
    data = manifest(name)
    outcomes = collections.Counter(r["transaction"] for r in data["produced"])
    assert outcomes == {"committed": 6, "aborted": 3}
    committed = {r["value"] for r in data["produced"] if r["transaction"] == "committed"}
    everything = {r["value"] for r in data["produced"]}
    by_group = collections.defaultdict(set)
    for r in data["consumed"]:
        by_group[r["group"]].add(r["value"])
    assert by_group["lab-group-read_uncommitted"] == everything
    if WORKLOADS[name].broker == "tansu":
        # Tansu 0.6.0 hands the aborted records to read_committed consumers too
        assert committed <= by_group["lab-group-read_committed"] <= everything
    else:
        assert by_group["lab-group-read_committed"] == committed
    # Offsets skip a slot after each finished transaction: the control batch.
    offsets = [r["offset"] for r in data["produced"]]
    assert offsets == sorted(offsets)
    assert offsets[-1] - offsets[0] + 1 - len(offsets) >= 2
    requested = {r[1] for r in pdus(name) if r[4]}
    assert {22, 24, 26} <= requested  # InitProducerId, AddPartitionsToTxn, EndTxn


@pytest.mark.parametrize("name", ["produce_pipelined", "produce_pipelined_kafka"])
def test_pipelined_capture_has_many_requests_in_flight(name):
    assert deepest_in_flight(name) >= 4


def produce_and_responses(name: str) -> tuple[set, set, set]:
    """Per tshark: (stream, correlation id) of each Produce request, of every
    response, and the required_acks values of the Produce requests."""
    port = WORKLOADS[name].port
    rows = tshark_fields(path_of(name), port, "kafka", "tcp.stream", "tcp.dstport", "kafka.api_key",
                         "kafka.correlation_id", "kafka.required_acks")
    produce, responses, acks = set(), set(), set()
    for stream, dst_port, keys, corrs, required in rows:
        corr_list = [int(c) for c in corrs.split(";") if c]
        if int(dst_port) == port:
            produce |= {(stream, c) for k, c in zip(keys.split(";"), corr_list) if k == str(PRODUCE)}
            acks |= {a for a in required.split(";") if a}
        else:
            responses |= {(stream, c) for c in corr_list}
    return produce, responses, acks


def test_acks0_flood_tansu_answers_hundreds_in_flight():
    """Tansu answers acks=0: every one of the flood's Produce requests gets a
    response, and hundreds of them wait for it at once."""
    sent = manifest("acks0_flood_tansu")["produced"]
    assert len(sent) == FLOOD_RECORDS and all(r["acks"] == 0 and r["delivered"] for r in sent)
    produce, responses, acks = produce_and_responses("acks0_flood_tansu")
    assert len(produce) == FLOOD_RECORDS  # one request per record (batch.num.messages=1)
    assert acks == {"0"}
    assert produce <= responses
    assert deepest_in_flight("acks0_flood_tansu") >= 200


def test_acks0_flood_kafka_answers_none():
    """Apache Kafka never answers acks=0 Produce requests."""
    assert len(manifest("acks0_flood_kafka")["produced"]) == FLOOD_RECORDS
    produce, responses, acks = produce_and_responses("acks0_flood_kafka")
    assert len(produce) == FLOOD_RECORDS and acks == {"0"}
    assert not produce & responses
    assert deepest_in_flight("acks0_flood_kafka") >= FLOOD_RECORDS


@pytest.mark.parametrize("name", ["port_19092", "port_19092_kafka"])
def test_non_standard_port_is_not_kafka_to_tshark_without_a_hint(name):
    pcap = path_of(name)
    out = subprocess.run(["tshark", "-r", str(pcap), "-Y", "kafka"], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""
    assert len(pdus(name)) > 20


def _raw_scram_tokens(name: str) -> int:
    """After a SaslHandshake v0 the client's next bytes are a bare SCRAM
    client-first message behind a 4-byte size: no Kafka request header."""
    rows = tshark_fields(path_of(name), 9092, "tcp.len > 0 && tcp.dstport == 9092", "tcp.stream", "tcp.payload")
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
    return raw_tokens


@pytest.mark.parametrize("name", ["sasl", "sasl_kafka"])
def test_sasl_capture_has_both_handshake_generations_and_raw_tokens(name):
    requested = _requested(name)
    assert (SASL_HANDSHAKE, 0) in requested and (SASL_HANDSHAKE, 1) in requested
    assert any(key == SASL_AUTHENTICATE for key, _ in requested)
    assert _raw_scram_tokens(name) >= 1


def test_sasl_kafka_logins_succeed_and_a_wrong_password_fails():
    # SaslAuthenticate responses (tshark): successes (0) and the wrong password (58 SASL_AUTHENTICATION_FAILED)
    rows = tshark_fields(path_of("sasl_kafka"), 9092, "kafka.api_key == 36 && tcp.srcport == 9092", "kafka.error")
    codes = collections.Counter(row[0] for row in rows)
    assert codes["0"] >= 4 and codes["58"] >= 1, codes
    data = manifest("sasl_kafka")
    assert len(data["produced"]) == 6 and all(r["delivered"] for r in data["produced"])
    logins = {op["operation"]: op["result"] for op in data["operations"]}
    assert all(str(result).startswith("ok") for op, result in logins.items() if "(0, 10, 1)" in op), logins


@pytest.mark.parametrize("name", ["large_records", "large_records_kafka"])
def test_large_records_span_several_segments(name):
    rows = tshark_fields(path_of(name), 9092, "kafka && tcp.segment.count", "kafka.correlation_id",
                         "tcp.segment.count", "tcp.srcport")
    directions = {row[2] == "9092" for row in rows if int(row[1]) >= 3}
    assert directions == {True, False}  # a Produce request and a Fetch response


@pytest.mark.parametrize("name", ["ipv6", "ipv6_kafka"])
def test_ipv6_capture_is_ipv6_only(name):
    rows = tshark_fields(path_of(name), 9092, "tcp", "ipv6.src", "ip.src")
    assert rows and all(row[0] == "::1" and row[1] == "" for row in rows)


def test_java_clients_use_the_new_group_protocols():
    """KIP-848 consumer group and KIP-932 share group on the wire; the Java
    client's own commits cover everything it consumed."""
    for name in ("java_clients_kafka", "java_clients_4_4_kafka"):
        keys = {key for key, _ in _requested(name)}
        assert {CONSUMER_GROUP_HEARTBEAT, SHARE_GROUP_HEARTBEAT, SHARE_FETCH, SHARE_ACKNOWLEDGE} <= keys, name
        ops = {op["operation"]: op["result"] for op in manifest(name)["operations"]}
        for protocol in ("classic", "consumer"):
            result = ops[f"consume group=lab-java-{protocol} group.protocol={protocol}"]
            assert result["received"] == result["expected"] == 20
            assert result["committed"] == {"java-orders-0": 10, "java-orders-1": 10}
        assert ops["share consume group=lab-java-share"]["received"] == 5


def test_quota_capture_is_throttled():
    """The broker throttles the two client ids with quotas: tshark reads
    throttle times > 0 in their Produce v7 and Fetch v11 responses."""
    rows = tshark_fields(path_of("quota_kafka"), 9092, "kafka && tcp.srcport == 9092 && kafka.throttle_time > 0",
                         "kafka.api_key")
    throttled = collections.Counter(row[0] for row in rows)
    assert throttled[str(PRODUCE)] >= 1 and throttled[str(FETCH)] >= 1, throttled


API_VERSIONS_V5 = ["go_clients_kafka", "java_clients_4_4_kafka", "java_transactions_kafka",
                   "share_acks_franz_go_kafka", "share_acks_kafka", "share_timeout_kafka"]  # franz-go, Java 4.4


def test_only_the_clients_speaking_api_versions_v5_send_oversized_requests():
    """The recipe notes ApiVersions requests longer than their fields:
    ApiVersions v5 (KIP-1242, fields tshark 4.0 does not know), which
    kafka-clients 4.4.0 and franz-go send; no other client."""
    noted = [n for n in NAMES if any(note.startswith("ApiVersions requests longer") for note in manifest(n)["notes"])]
    assert noted == API_VERSIONS_V5
    assert lab.oversized_api_versions_requests(path_of("java_clients_4_4_kafka"), 9092)[0] == (4, 5, 5)


def test_manifest_bytes_encoding_round_trips():
    assert encode_bytes(b"plain") == "plain"
    assert encode_bytes(b"\xff\x00") == "base64:/wA="
    assert decode_manifest_bytes(encode_bytes(b"\xff\x00")) == b"\xff\x00"
    assert encode_bytes(None) is None
    # The payload generator really exercises both forms.
    rows = manifest("produce_acks1")["produced"]
    assert any(r["value"].startswith("base64:") for r in rows)
    assert any(r["key"] is None for r in rows)


@pytest.mark.parametrize("name", API_VERSIONS_V5)
def test_api_versions_v5_cluster_and_node_ids_decode(name):
    """ApiVersions v5 (KIP-1242: ClusterId, NodeId), from kafka-clients 4.4.0
    and franz-go. The manifest notes, per frame, how many bytes each request
    holds beyond the v3/v4 fields tshark 4.0 reads: a null cluster id and the
    node id take 1 + 4, a cluster id 1 + its length + 4, and the id is the one
    the broker's Metadata responses name (tshark)."""
    from kdissect.conn.pipeline import analyze

    capture = path_of(name)
    extra = {int(frame): int(size) for frame, size in re.findall(
        r"frame (\d+) v5 \(\+(\d+) bytes\)",
        next(n for n in manifest(name)["notes"] if n.startswith("ApiVersions requests longer")))}
    cluster_ids = {row[0] for row in tshark_fields(capture, 9092, "kafka.api_key == 3 && tcp.srcport == 9092",
                                                   "kafka.cluster_id")}
    assert len(cluster_ids) == 1
    exchanges, accounting = analyze([capture], (9092,), keep_messages=True)  # (keep_apis keeps frames)
    seen = {}
    for ex in exchanges:
        assert not ex.problems or ex.problem_codes == ["no-response"], (ex.request_frame, ex.problems)
        if ex.api_key == 18 and ex.api_version >= 5:  # (share_acks_kafka also holds kafka-python's v4)
            body = ex.request.body
            seen[ex.request_frame] = 1 + 4 + (len(body.cluster_id) if body.cluster_id is not None else 0)
            if body.cluster_id is not None:
                assert body.cluster_id in cluster_ids and body.node_id >= 0
            else:
                assert body.node_id == -1
    assert seen == extra and any(size > 5 for size in seen.values())
    assert accounting.inexact == accounting.malformed == 0 and accounting.balance() == []


def test_kafka_4_4_share_fetch_v2_decodes():
    """ShareFetch/ShareAcknowledge v2 (IsRenewAck) of kafka-clients 4.4.0:
    the records fetched and the offsets acknowledged are those the share
    consumer reports having received."""
    from kdissect.conn.pipeline import analyze

    exchanges, accounting = analyze([path_of("java_clients_4_4_kafka")], (9092,), keep_apis=(78, 79))
    exchanges = list(exchanges)
    assert all(ex.status == "ok" and not ex.problems for ex in exchanges), \
        [(ex.request_frame, ex.problems) for ex in exchanges if ex.problems]
    share = [ex for ex in exchanges if ex.api_key == 78]
    assert [ex.api_version for ex in share] == [2] and share[0].request.body.is_renew_ack is False
    result = next(op["result"] for op in manifest("java_clients_4_4_kafka")["operations"]
                  if op["operation"] == "share consume group=lab-java-share")
    assert sum(ex.records or 0 for ex in share) == result["received"] == 5
    acknowledged = [batch for ex in exchanges if ex.api_key == 79
                    for topic in ex.request.body.topics for part in topic.partitions
                    for batch in part.acknowledgement_batches]
    assert sum(b.last_offset - b.first_offset + 1 for b in acknowledged) == result["received"]
    assert accounting.balance() == []


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
        kp_create_topics(broker.bootstrap, {"live": 1})
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
    summary = "120 packets captured\n130 packets received by filter\n7 packets dropped by kernel\n"
    assert dropped_packets(summary) == 7
    assert dropped_packets("5 packets captured\n0 packets dropped by kernel\n") == 0


def test_kdissect_pairs_every_answer_of_the_tansu_acks0_flood():
    """Tansu answers each acks=0 Produce (tshark: every request's correlation
    id has a response on its connection); each answer belongs to its request."""
    from kdissect.conn.pipeline import analyze

    exchanges, accounting = analyze([path_of("acks0_flood_tansu")], (9092,))
    produce = [ex for ex in exchanges if ex.api_key == PRODUCE]
    assert sum(ex.response_frame is not None for ex in produce) == FLOOD_RECORDS
    assert accounting.orphan_responses == 0 and accounting.acks0_answered == FLOOD_RECORDS
    # (tshark's own pairing of each answer with its request: tests/conn/test_vs_tshark.py)


def test_kdissect_holds_the_unanswered_acks0_flood_of_apache_kafka():
    """Apache Kafka answers none: every request is one `ok` row without a
    response and no response is invented."""
    from kdissect.conn.pipeline import analyze

    exchanges, accounting = analyze([path_of("acks0_flood_kafka")], (9092,))
    produce = [ex for ex in exchanges if ex.api_key == PRODUCE]
    assert len(produce) == FLOOD_RECORDS
    assert all(ex.status == "ok" and ex.response_frame is None and not ex.expects_response for ex in produce)
    assert accounting.orphan_responses == 0 and accounting.acks0_answered == 0
