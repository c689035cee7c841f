"""Golden tests on real frames: recorded fixtures (tests/fixtures/frames) and,
when present, every Kafka frame in the capture lab's captures/*.pcap*."""

from __future__ import annotations

import functools
import struct
from pathlib import Path

import pytest

from kdissect import DecodeError, decode_request, decode_response
from kdissect.protocol.codec import encode_message
from kdissect.protocol.headers import looks_like_request, peek_request_header
from tests.support.protocol import frame_fixtures
from tests.support.pcaps import tshark_output
from tests.support.protocol_record import server_ports, split_frames
from tests.support.paths import REPO

FRAMES = frame_fixtures()


def _decode(entry: dict):
    frame = bytes.fromhex(entry["hex"])
    if entry["direction"] == "request":
        return frame, decode_request(frame)
    return frame, decode_response(frame, entry["api_key"], entry["api_version"])


def test_fixtures_exist_from_both_clients() -> None:
    clients = {entry["client"] for entry in FRAMES}
    assert clients == {"kafka-python", "kafka-python-extended", "confluent-kafka"}
    kinds = {(e["api_key"], e["direction"]) for e in FRAMES}
    for needed in [(0, "request"), (0, "response"), (1, "request"), (1, "response"), (3, "request"),
                   (3, "response"), (18, "response"), (11, "request")]:
        assert needed in kinds


@pytest.mark.parametrize("entry", FRAMES, ids=lambda e: f"{e['client']}-{e['api_key']}v{e['api_version']}"
                         f"-{e['direction']}-{e['correlation_id']}")
def test_real_frame_decodes_fully_and_reencodes(entry: dict) -> None:
    frame, message = _decode(entry)  # raises DecodeError on left-over bytes
    assert message.header.correlation_id == entry["correlation_id"]  # tshark's value
    if entry["direction"] == "request":
        assert (message.header.api_key, message.header.api_version) == (entry["api_key"], entry["api_version"])
        assert peek_request_header(frame) == (entry["api_key"], entry["api_version"], entry["correlation_id"])
        assert looks_like_request(frame[:64], len(frame))
    assert message.assumed_version is None
    assert encode_message(message) == frame


def test_real_fetch_response_keeps_records_raw() -> None:
    fetches = [e for e in FRAMES if e["api_key"] == 1 and e["direction"] == "response"]
    raw = [p.records for e in fetches for t in _decode(e)[1].body.responses for p in t.partitions if p.records]
    assert raw and all(isinstance(r, bytes) for r in raw)
    assert any(b"value 3" in r for r in raw)  # kafka-python produced "value <n>" payloads, uncompressed


# ------------------------------------------------------------ capture lab files

def _capture_files() -> list[Path]:
    return sorted(p for p in (REPO / "captures").glob("*.pcap*") if p.is_file())


# The two tshark questions this module asks about a capture (which requests
# it labels, and the topic names in each PDU) come from one tshark run.
_PDU_FIELDS = ("tcp.srcport", "tcp.dstport", "kafka.api_key", "kafka.api_version", "kafka.correlation_id",
               "kafka.request_frame", "kafka.topic_name", "_ws.malformed", "_ws.expert.message")


@functools.lru_cache(maxsize=None)
def _tshark_pdu_rows(path: Path, ports: frozenset[int]) -> tuple[dict[str, str], ...]:
    """One row per packet tshark dissects as Kafka: each field's shown values
    joined with "," (as tshark aggregates them)."""
    args = []
    for port in sorted(ports):
        args += ["-d", f"tcp.port=={port},kafka"]
    args += ["-Y", "kafka", "-T", "fields", "-E", "separator=\t"]
    for name in _PDU_FIELDS:
        args += ["-e", name]
    rows = [line.split("\t") for line in tshark_output(path, args, check=False).splitlines()]
    assert all(len(row) == len(_PDU_FIELDS) for row in rows), "a tab inside a tshark field"
    return tuple(dict(zip(_PDU_FIELDS, row)) for row in rows)


@functools.lru_cache(maxsize=None)
def _tshark_requests(path: Path, ports: frozenset[int]) -> dict[tuple[str, int], tuple[int, int]]:
    """(connection, correlation id) -> (api key, version) of each request
    tshark labels (packets without a kafka.request_frame)."""
    table = {}
    for row in _tshark_pdu_rows(path, ports):
        cols = [row[name] for name in _PDU_FIELDS[:5]]
        if row["kafka.request_frame"] or not all(cols):
            continue
        for key, version, corr in zip(*(c.split(",") for c in cols[2:])):
            table[(f"{cols[0]}->{cols[1]}", int(corr))] = (int(key), int(version))
    return table


def _known_client_bug(frame: bytes) -> str | None:
    """Real frames that break the spec on the client's side (kept as DecodeError).

    librdkafka 2.16's broker-only Metadata v12 request (AdminClient
    describe_cluster; v13 against Apache Kafka 4) carries the topic-array count
    as a raw int32 0 instead of a compact varint, so the body is 3 bytes longer
    than v12/v13 allow (00000000 01 00 00 where 01 00 00 00 is expected).
    Brokers read the first byte as a null topic list and ignore the rest."""
    head = peek_request_header(frame)
    if head and head[:2] in ((3, 12), (3, 13)) and b"rdkafka" in frame[:64] \
            and frame.endswith(b"\x00\x00\x00\x00\x01\x00\x00"):
        return "librdkafka Metadata v12/v13 topic count written as int32"
    return None


def _known_broker_bug(api_key: int, api_version: int, frame: bytes) -> str | None:
    """Tansu 0.6.0 answers ListOffsets v0 without the OldStyleOffsets array
    (tshark 4.0 also reports these responses as malformed): one topic whose
    partitions carry only PartitionIndex and ErrorCode."""
    if (api_key, api_version) != (2, 0) or len(frame) < 14:
        return None
    topics, name_len = struct.unpack_from(">ih", frame, 4)
    pos = 10 + name_len
    if topics == 1 and len(frame) >= pos + 4:
        (partitions,) = struct.unpack_from(">i", frame, pos)
        if len(frame) == pos + 4 + 6 * partitions:
            return "Tansu ListOffsets v0 response without OldStyleOffsets"
    return None


def _raw_sasl_frames(frames: list[dict]) -> set[int]:
    """Indices of frames that are raw SASL tokens, not Kafka messages: in a
    client direction every frame after a SaslHandshake v0 request, in the
    broker direction every frame after that request's response (the lab's
    logins all fail, so the tokens run until the connection closes)."""
    by_conn: dict[str, list[int]] = {}
    for index, entry in enumerate(frames):
        by_conn.setdefault(entry["conn"], []).append(index)
    raw: set[int] = set()
    for conn, indices in by_conn.items():
        for n, index in enumerate(indices):
            head = peek_request_header(frames[index]["frame"])
            if head is None or head[:2] != (17, 0):
                continue
            raw.update(indices[n + 1:])
            src, dst = conn.split("->")
            back = by_conn.get(f"{dst}->{src}", [])
            for m, answer in enumerate(back):
                if int.from_bytes(frames[answer]["frame"][:4], "big", signed=True) == head[2]:
                    raw.update(back[m + 1:])
                    break
            break
    return raw


@pytest.mark.parametrize("path", _capture_files(), ids=lambda p: p.name)
def test_every_frame_in_lab_captures(path: Path) -> None:
    """Frames of the lab's capture files: every request tshark labels and
    its response decode with all bytes consumed and re-encode identically.
    tshark 4.0 also labels the raw SASL tokens that follow a SaslHandshake v0
    as Kafka requests; those are left out (and must exist where expected)."""
    frames = split_frames(path)
    requests = _tshark_requests(path, frozenset(server_ports(path)))
    raw_sasl = _raw_sasl_frames(frames)
    raw_keys = {(frames[i]["conn"], int.from_bytes(frames[i]["frame"][4:8], "big", signed=True))
                for i in raw_sasl if len(frames[i]["frame"]) >= 8}
    if path.name == "sasl.pcap":
        assert raw_sasl, "the SASL capture holds raw tokens after SaslHandshake v0"
    requests = {key: value for key, value in requests.items() if key not in raw_keys}
    versions = {}
    checked = 0
    seen_requests = set()
    for index, entry in enumerate(frames):
        if index in raw_sasl:
            continue
        frame = entry["frame"]
        head = peek_request_header(frame)
        if head and (entry["conn"], head[2]) in requests:
            assert requests[(entry["conn"], head[2])] == head[:2]
            src, dst = entry["conn"].split("->")
            versions[(f"{dst}->{src}", head[2])] = head[:2]
            seen_requests.add((entry["conn"], head[2]))
            checked += 1
            if _known_client_bug(frame):
                with pytest.raises(DecodeError, match="3 bytes left over"):
                    decode_request(frame)
                continue
            assert encode_message(decode_request(frame)) == frame
    for index, entry in enumerate(frames):
        if index in raw_sasl:
            continue
        frame = entry["frame"]
        if len(frame) >= 4:
            corr = int.from_bytes(frame[:4], "big", signed=True)
            if (entry["conn"], corr) in versions:
                key, version = versions[(entry["conn"], corr)]
                checked += 1
                if _known_broker_bug(key, version, frame):
                    with pytest.raises(DecodeError):
                        decode_response(frame, key, version)
                    continue
                assert encode_message(decode_response(frame, key, version)) == frame
    assert seen_requests == set(requests)  # every request tshark saw was framed and checked
    assert checked >= len(requests)


def test_decoded_messages_pickle() -> None:
    """Spark workers may ship decoded messages: they pickle and still re-encode."""
    import pickle

    from kdissect import DecodeError

    for entry in FRAMES:
        frame, message = _decode(entry)
        copy = pickle.loads(pickle.dumps(message))
        assert copy.body == message.body and encode_message(copy) == frame
    error = pickle.loads(pickle.dumps(DecodeError(7, ["topics", "[1]", "name"], "truncated")))
    assert (error.offset, error.path, str(error)) == (7, "topics[1].name", "truncated at offset 7 in topics[1].name")


def test_real_create_topics_matches_the_workload() -> None:
    """kafka-python created topic "golden" with 2 partitions, replication 1;
    Tansu's response echoes them, with a tagged field written explicitly."""
    basic = [e for e in FRAMES if e["client"] == "kafka-python" and e["api_key"] == 19]
    responses = [_decode(e)[1] for e in basic if e["direction"] == "response"]
    requests = [_decode(e)[1] for e in basic if e["direction"] == "request"]
    assert len(responses) == len(requests) == 1
    asked = requests[0].body.topics[0]
    assert (asked.name, asked.num_partitions, asked.replication_factor) == ("golden", 2, 1)
    topic = responses[0].body.topics[0]
    assert (topic.name, topic.error_code, topic.num_partitions, topic.replication_factor) == ("golden", 0, 2, 1)
    assert topic.topic_id.int != 0
    assert topic._tag_order == (0,) and topic.topic_config_error_code == 0


def test_real_offset_commit_and_fetch() -> None:
    """The extended workload committed offsets of partitions 0 and 1 for group
    golden-offsets after reading all 2000 bulk records (1000 per partition)."""
    frames = [e for e in FRAMES if e["client"] == "kafka-python-extended"]
    commit = [_decode(e)[1] for e in frames if e["api_key"] == 8 and e["direction"] == "request"]
    assert len(commit) == 1 and commit[0].body.group_id == "golden-offsets"
    offsets = {p.partition_index: p.committed_offset for t in commit[0].body.topics for p in t.partitions}
    assert offsets == {0: 1000, 1: 1000}
    fetched = [_decode(e)[1] for e in frames if e["api_key"] == 9 and e["direction"] == "response"]
    assert any(p.committed_offset == 1000 for r in fetched for g in r.body.groups for t in g.topics
               for p in t.partitions)
    produce = [_decode(e)[1] for e in frames if e["api_key"] == 0 and e["direction"] == "request"]
    assert produce and all(p.records for r in produce for t in r.body.topic_data for p in t.partition_data)


def _topic_names(obj, inside_topics: bool = False, out: set | None = None) -> set:
    """Topic names anywhere in a decoded body: string fields name/topic/topic_name
    of structs held by a field whose name or struct type mentions topics."""
    from kdissect.protocol.model import Struct

    out = set() if out is None else out
    for f in obj._schema:
        value = getattr(obj, f.attr)
        topical = "topic" in f.attr or "topic" in (f.struct_name or "").lower()
        if f.is_struct:
            for item in (value or ()) if f.is_array else ((value,) if value is not None else ()):
                if isinstance(item, Struct):
                    _topic_names(item, inside_topics or topical, out)
        elif f.element == "string" and value:
            if f.is_array and topical:
                out.update(value)
            elif not f.is_array and inside_topics and f.attr in ("name", "topic", "topic_name"):
                out.add(value)
    return out


@pytest.mark.parametrize("path", _capture_files(), ids=lambda p: p.name)
def test_topic_names_match_tshark(path: Path) -> None:
    """Bodies, not just headers: wherever tshark 4.0 dissects a PDU fully
    (mostly the older versions; it stops at e.g. Metadata v9, Produce v8) the
    topic names in each request and response equal the ones it reports. The
    0.8/0.9/0.10-era captures must give at least ten such comparisons."""
    expected = {}
    for row in _tshark_pdu_rows(path, frozenset(server_ports(path))):
        src, dst, corr, topics, malformed, expert = (row[name] for name in (
            "tcp.srcport", "tcp.dstport", "kafka.correlation_id", "kafka.topic_name", "_ws.malformed",
            "_ws.expert.message"))
        if malformed or "Unsupported" in expert or "Unknown" in expert or "missing" in expert or "," in corr:
            continue  # tshark could not dissect this PDU fully (or several PDUs share the packet)
        expected[(f"{src}->{dst}", int(corr))] = set(filter(None, topics.split(",")))
    requests = _tshark_requests(path, frozenset(server_ports(path)))
    versions = {}
    compared = 0
    frames = split_frames(path)
    for entry in frames:
        head = peek_request_header(entry["frame"])
        if head and (entry["conn"], head[2]) in requests:
            src, dst = entry["conn"].split("->")
            versions[(f"{dst}->{src}", head[2])] = head[:2]
            if (entry["conn"], head[2]) in expected:
                # tshark shows bytes that are not UTF-8 as U+FFFD
                names = {name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
                         for name in _topic_names(decode_request(entry["frame"]).body)}
                assert names == expected[(entry["conn"], head[2])]
                compared += 1
    for entry in frames:
        corr = int.from_bytes(entry["frame"][:4], "big", signed=True) if len(entry["frame"]) >= 4 else None
        key = (entry["conn"], corr)
        if key in versions and key in expected and not _known_broker_bug(*versions[key], entry["frame"]):
            body = decode_response(entry["frame"], *versions[key]).body
            assert _topic_names(body) == expected[key], versions[key]
            compared += 1
    if path.name.startswith("old_"):
        assert compared >= 10, compared
