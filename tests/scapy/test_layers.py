"""kdissect.scapy: building, dissecting and Scapy behaviour of the Kafka layers.

Independent expectations: the core codec (a separate implementation sharing
only the tables), tshark's Kafka dissector (header labels of the fixture
frames), and the exact bytes real clients sent (fixture frames).
"""

from __future__ import annotations

import io
import json
import struct
import uuid
from contextlib import redirect_stdout

import pytest
from scapy.all import IP, TCP, Ether, Padding, Raw, ls, wrpcap
from scapy.sendrecv import sniff
from scapy.sessions import TCPSession

import kdissect
from kdissect.conn.pipeline import analyze
from kdissect.protocol.schema import api_keys, api_versions, defined_versions, get_schema
from kdissect.scapy import (
    GENERATED,
    ApiVersionsRequest,
    FetchRequest,
    KafkaBody,
    KafkaRequest,
    KafkaResponse,
    KafkaStruct,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    ProduceRequest,
    bind_kafka,
    dissect_response,
)
from kdissect.scapy.fields import UVarIntField, VarIntField, VarLongField
from scapy.packet import Packet
from tests.support.scapy import FIXTURES, core_plain, scapy_plain, uncache


def _fixture_rows() -> list[dict]:
    rows = []
    for path in sorted(FIXTURES.glob("*.jsonl")):
        rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows


FIXTURE_ROWS = _fixture_rows()


def _framed(frame: bytes) -> bytes:
    return struct.pack(">i", len(frame)) + frame


# ------------------------------------------------------------ the example

def test_issue_example_equals_core_encoding():
    packet = KafkaRequest(api_version=6, correlation_id=3, client_id="x") / \
        MetadataRequest(topics=[MetadataRequestTopic(name="t")], allow_auto_topic_creation=0)
    built = bytes(packet)
    core = kdissect.encode_request(3, 6, 3, "x", {"topics": [{"name": "t"}], "allow_auto_topic_creation": False})
    assert built == struct.pack(">i", len(core)) + core
    # and by hand from the protocol guide: size, key 3, v6, corr 3, "x",
    # int32 array of one int16-length string "t", bool false
    assert built == bytes.fromhex("00000013" "0003" "0006" "00000003" "0001" "78"
                                  "00000001" "0001" "74" "00")


@pytest.mark.parametrize("version", [9, 12])
def test_metadata_request_equals_real_client_bytes(version):
    """kafka-python's Metadata v12 and librdkafka's v12 frames, rebuilt from values."""
    real = [r for r in FIXTURE_ROWS if r["direction"] == "request" and r["api_key"] == 3]
    assert real, "no Metadata request in the fixture frames"
    checked = 0
    for row in real:
        frame = bytes.fromhex(row["hex"])
        core = kdissect.decode_request(frame)
        if core.header.api_version != 12:
            continue
        body = core.body
        topics = None if body.topics is None else [
            MetadataRequestTopic(topic_id=t.topic_id, name=t.name) for t in body.topics]
        packet = KafkaRequest(api_version=12, correlation_id=row["correlation_id"],
                              client_id=core.header.client_id) / MetadataRequest(
            topics=topics,
            allow_auto_topic_creation=body.allow_auto_topic_creation,
            include_topic_authorized_operations=body.include_topic_authorized_operations)
        assert bytes(packet) == _framed(frame)
        checked += 1
    assert checked >= 2
    # the same request as v9 differs only where the spec says it does (no topic ids)
    packet = KafkaRequest(api_version=version, correlation_id=1, client_id="c") / MetadataRequest(
        topics=[MetadataRequestTopic(name="t")], allow_auto_topic_creation=1)
    core = kdissect.encode_request(3, version, 1, "c", {"topics": [{"name": "t"}]})
    assert bytes(packet) == _framed(core)


# ------------------------------------------------------- real frames, all

@pytest.mark.parametrize("row", FIXTURE_ROWS, ids=lambda r: f"{r['client']}-{r['direction']}-{r['api_key']}v{r['api_version']}-c{r['correlation_id']}")
def test_fixture_frame_dissects_like_core_and_rebuilds(row):
    frame = bytes.fromhex(row["hex"])
    if row["direction"] == "request":
        packet = KafkaRequest(_framed(frame))
        core = kdissect.decode_request(frame)
        assert (packet.api_key, packet.api_version, packet.correlation_id) == \
            (row["api_key"], row["api_version"], row["correlation_id"])  # tshark's labels
        assert packet.client_id == core.header.client_id
    else:
        packet = dissect_response(_framed(frame), row["api_key"], row["api_version"])
        core = kdissect.decode_response(frame, row["api_key"], row["api_version"])
        assert packet.correlation_id == row["correlation_id"]
    assert packet.length == len(frame)
    body = packet.payload
    assert isinstance(body, KafkaBody), packet.summary()
    assert type(body).__name__ == core.body._message.split()[0]
    assert Raw not in packet
    assert scapy_plain(body) == core_plain(core.body)
    uncache(packet)
    assert bytes(packet) == _framed(frame)  # every field re-encoded


# ------------------------------------------------------- Scapy behaviour

def test_scapy_user_surface():
    packet = KafkaRequest(api_version=6, correlation_id=3, client_id="x") / \
        MetadataRequest(topics=[MetadataRequestTopic(name="t")], allow_auto_topic_creation=0)
    # api_key filled from the body class, length computed on build
    assert packet.api_key == 3
    assert packet.length is None
    again = KafkaRequest(bytes(packet))
    assert again.length == 19 and again.api_key == 3
    assert again[MetadataRequest].topics[0].name == "t"
    assert again[MetadataRequestTopic].name == "t"
    assert again.allow_auto_topic_creation is False
    # fields of other versions are absent, not defaulted
    assert again[MetadataRequestTopic].topic_id is None
    assert again.include_topic_authorized_operations is None
    text = io.StringIO()
    with redirect_stdout(text):
        again.show()
        packet.show2()
        ls(MetadataRequest)
        ls(MetadataRequestTopic)
        ls(again)
    out = text.getvalue()
    assert "MetadataRequestTopic" in out and "allow_auto_topic_creation" in out
    assert "3 (Metadata)" in out
    assert "topic_id" in out  # ls() of the class lists every version's fields
    assert again.show(dump=True).count("topic_id") == 0  # v6 has none
    assert again.summary().startswith("KafkaRequest / Kafka MetadataRequest v6 corr=3")
    # newest version when none is given
    newest = api_versions(3).request[1]
    built = KafkaRequest(bytes(KafkaRequest(correlation_id=1) / MetadataRequest()))
    assert built.api_version == newest
    # every API and direction has a body class named after the spec
    for key in api_keys():
        for direction in ("request", "response"):
            if defined_versions(key, direction):
                name = get_schema(key, defined_versions(key, direction)[-1], direction).name
                assert issubclass(GENERATED[name], KafkaBody)


def test_flexible_tagged_and_nullable_fields():
    # ApiVersions v3 request: flexible, header v2, compact strings
    packet = KafkaRequest(api_version=3, correlation_id=7, client_id="c") / \
        ApiVersionsRequest(client_software_name="kd", client_software_version="1")
    core = kdissect.encode_request(18, 3, 7, "c", {"client_software_name": "kd", "client_software_version": "1"})
    assert bytes(packet) == _framed(core)
    # a tagged field set to a non-default value goes into the tag section
    for version in (12, 15):
        fetch = KafkaRequest(api_version=version, correlation_id=1, client_id="c") / FetchRequest(cluster_id="abc")
        core = kdissect.encode_request(1, version, 1, "c", {"cluster_id": "abc"})
        assert bytes(fetch) == _framed(core)
        back = KafkaRequest(bytes(fetch))
        assert back.cluster_id == "abc"
    # null string and null array
    meta = KafkaRequest(api_version=12, correlation_id=1, client_id=None) / MetadataRequest(topics=None)
    core = kdissect.encode_request(3, 12, 1, None, {"topics": None})
    assert bytes(meta) == _framed(core)
    back = KafkaRequest(bytes(meta))
    assert back.client_id is None and back.topics is None
    # unknown tags survive dissection and rebuilding
    frame = bytes(KafkaRequest(api_version=12, correlation_id=1, client_id="c") /
                  MetadataRequest(topics=[], unknown_tagged_fields=[(99, b"\x01\x02")]))
    back = KafkaRequest(frame)
    assert back.unknown_tagged_fields == [(99, b"\x01\x02")]
    assert kdissect.decode_request(frame[4:]).body.unknown_tagged_fields == [(99, b"\x01\x02")]
    uncache(back)
    assert bytes(back) == frame


def test_response_building_and_show2():
    body = MetadataResponse(brokers=[], cluster_id="cid", controller_id=1, topics=[])
    packet = KafkaResponse(correlation_id=5, api_version=12) / body
    built = bytes(packet)
    core = kdissect.decode_response(built[4:], 3, 12)
    assert core.body.cluster_id == "cid" and core.header.correlation_id == 5
    # the built frame's pairing is remembered: re-dissection decodes the body
    again = KafkaResponse(built)
    assert again.api_key == 3 and again.api_version == 12
    assert again[MetadataResponse].cluster_id == "cid"
    text = io.StringIO()
    with redirect_stdout(text):
        packet.show2()
    assert "cid" in text.getvalue()
    # without a pairing the body stays raw instead of being guessed
    unknown = KafkaResponse(_framed(struct.pack(">i", 77) + b"\x00\x01\x02"))
    assert unknown.api_key is None and Raw in unknown


def test_api_versions_unsupported_version_is_v0_body():
    """Brokers answer an ApiVersions version they do not support with a v0 body."""
    body_v0 = kdissect.encode_response(18, 0, 9, {"error_code": 35, "api_keys": [
        {"api_key": 18, "min_version": 0, "max_version": 3}]})
    packet = dissect_response(_framed(body_v0), 18, 4)
    assert packet.error_code == 35
    assert packet.api_keys[0].max_version == 3
    assert kdissect.decode_response(body_v0, 18, 4).body.api_keys[0].max_version == 3


def test_malformed_body_is_raw_not_a_crash():
    good = bytes(KafkaRequest(api_version=6, correlation_id=3, client_id="x") /
                 MetadataRequest(topics=[MetadataRequestTopic(name="t")], allow_auto_topic_creation=0))
    cut = good[:-3]
    packet = KafkaRequest(struct.pack(">i", len(cut) - 4) + cut[4:])
    assert packet.api_key == 3 and Raw in packet
    extra = good + b"\x00"
    packet = KafkaRequest(struct.pack(">i", len(extra) - 4) + extra[4:])
    assert Raw in packet  # left-over bytes: not silently accepted


def test_varint_fields():
    class Varints(Packet):
        fields_desc = [UVarIntField("u", 0), VarIntField("s", 0), VarLongField("l", 0)]

    raw = bytes(Varints(u=300, s=-2, l=-(1 << 40)))
    assert raw[:2] == b"\xac\x02" and raw[2:3] == b"\x03"
    back = Varints(raw)
    assert (back.u, back.s, back.l) == (300, -2, -(1 << 40))


# -------------------------------------------------------- TCP reassembly

def test_tcp_session_many_frames_per_segment_and_one_frame_over_many(tmp_path):
    """Real fixture frames re-segmented: three requests in one segment, a
    response cut into 1..7-byte segments; TCPSession gives every frame, paired."""
    rows = [r for r in FIXTURE_ROWS if r["client"] == "kafka-python"]
    conn = rows[0]["conn"] if rows[0]["direction"] == "request" else None
    requests = [r for r in rows if r["conn"] == conn][:3]
    client_port, broker_port = (int(p) for p in conn.split("->"))
    replies = [r for r in rows if r["conn"] == f"{broker_port}->{client_port}"][:3]
    assert len(requests) >= 2 and replies
    port = 39092
    c2s = b"".join(_framed(bytes.fromhex(r["hex"])) for r in requests)
    s2c = b"".join(_framed(bytes.fromhex(r["hex"])) for r in replies)
    base = Ether() / IP(src="10.0.0.1", dst="10.0.0.2")
    packets = [base / TCP(sport=50000, dport=port, flags="PA", seq=1000) / Raw(c2s)]
    seq, sizes, offset = 5000, [1, 3, 7, 2, 5], 0
    while offset < len(s2c):
        n = sizes[len(packets) % len(sizes)]
        packets.append(Ether() / IP(src="10.0.0.2", dst="10.0.0.1") /
                       TCP(sport=port, dport=50000, flags="PA", seq=seq + offset) / Raw(s2c[offset:offset + n]))
        offset += n
    path = tmp_path / "resegmented.pcap"
    wrpcap(str(path), packets)
    bind_kafka(port)
    got = []
    for packet in sniff(offline=str(path), session=TCPSession, quiet=True):
        layer = packet
        while layer:
            if isinstance(layer, (KafkaRequest, KafkaResponse)):
                got.append((type(layer).__name__, layer.correlation_id, layer.kafka_api_key(),
                            layer.kafka_api_version(), isinstance(layer.payload, KafkaBody)))
            layer = layer.payload
    expected = [("KafkaRequest", r["correlation_id"], r["api_key"], r["api_version"], True) for r in requests]
    expected += [("KafkaResponse", r["correlation_id"], r["api_key"], r["api_version"], True) for r in replies]
    assert got == expected
    # the core reads the same file the same way
    exchanges, _accounting = analyze([str(path)], [port])
    core = sorted((e.correlation_id, e.api_key, e.api_version) for e in exchanges if e.request_frame is not None)
    assert core == sorted((r["correlation_id"], r["api_key"], r["api_version"]) for r in requests)


def test_struct_copies_follow_their_message():
    """Copies made by '/' keep the header's version for nested structs."""
    topic = MetadataRequestTopic(name="t")
    body = MetadataRequest(topics=[topic])
    packet = KafkaRequest(api_version=12, correlation_id=1, client_id="c") / body
    nested = packet[MetadataRequestTopic]
    assert nested.kafka_version() == 12
    assert topic.kafka_version() == api_versions(3).request[1]  # standalone: newest
    assert isinstance(nested, KafkaStruct) and nested.topic_id == uuid.UUID(int=0)
    assert ProduceRequest not in packet


def _stream_pcap(path, port, turns):
    """A pcap of one TCP connection: `turns` is [(from_client, payload bytes)]."""
    seqs = {True: 1000, False: 9000}
    packets = []
    for from_client, payload in turns:
        ip = IP(src="10.0.0.1", dst="10.0.0.2") if from_client else IP(src="10.0.0.2", dst="10.0.0.1")
        tcp = TCP(sport=50001, dport=port, seq=seqs[True], flags="PA") if from_client else \
            TCP(sport=port, dport=50001, seq=seqs[False], flags="PA")
        packets.append(Ether() / ip / tcp / Raw(payload))
        seqs[from_client] += len(payload)
    wrpcap(str(path), packets)


def _kafka_frames(path):
    out = []
    for packet in sniff(offline=str(path), session=TCPSession, quiet=True):
        layer = packet[TCP].payload if TCP in packet else None
        while layer:
            if not isinstance(layer, Padding):
                out.append(layer)
            layer = layer.payload
    return out


def test_raw_sasl_tokens_after_handshake_v0(tmp_path):
    """After a successful SaslHandshake v0 the tokens are size-prefixed but
    headerless; the session shows them as KafkaSaslToken until the client
    speaks Kafka again (the same rule as the core's pairing)."""
    from kdissect.scapy import KafkaSaslToken, SaslHandshakeRequest, SaslHandshakeResponse

    port = 39093
    bind_kafka(port)
    turns = [
        (True, bytes(KafkaRequest(api_version=0, correlation_id=1, client_id="c") /
                     SaslHandshakeRequest(mechanism="PLAIN"))),
        (False, bytes(KafkaResponse(correlation_id=1, api_version=0) /
                      SaslHandshakeResponse(error_code=0, mechanisms=["PLAIN"]))),
        (True, bytes(KafkaSaslToken(token=b"\x00user\x00secret"))),
        (False, bytes(KafkaSaslToken(token=b""))),
        (True, bytes(KafkaRequest(api_version=1, correlation_id=2, client_id="c") / MetadataRequest(topics=[]))),
        (False, bytes(KafkaResponse(correlation_id=2, api_version=1) /
                      MetadataResponse(brokers=[], controller_id=1, topics=[]))),
    ]
    path = tmp_path / "sasl.pcap"
    _stream_pcap(path, port, turns)
    layers = [type(layer).__name__ for layer in _kafka_frames(path)]
    assert layers == ["KafkaRequest", "SaslHandshakeRequest", "KafkaResponse", "SaslHandshakeResponse",
                      "KafkaSaslToken", "KafkaSaslToken",
                      "KafkaRequest", "MetadataRequest", "KafkaResponse", "MetadataResponse"]
    exchanges, accounting = analyze([str(path)], [port])
    assert [(e.api_key, e.status) for e in exchanges] == [(17, "ok"), (3, "ok")]
    assert accounting.raw_sasl_frames == 2


def test_bad_frame_does_not_lose_the_stream(tmp_path):
    port = 39094
    bind_kafka(port)
    good = bytes(KafkaRequest(api_version=1, correlation_id=2, client_id="c") / MetadataRequest(topics=[]))
    bad = struct.pack(">ihhih", 12, 3, 1, 1, 0x7000) + b"ab"  # client id longer than the frame
    path = tmp_path / "bad.pcap"
    _stream_pcap(path, port, [(True, bad + good)])
    frames = _kafka_frames(path)
    assert type(frames[0]) is Raw and frames[0].load == bad
    assert isinstance(frames[1], KafkaRequest) and frames[1].correlation_id == 2
    assert isinstance(frames[2], MetadataRequest)


def test_header_versions_follow_the_spec_rules():
    from kdissect.scapy import ApiVersionsResponse, ControlledShutdownRequest

    # ControlledShutdown v0: request header v0, no client id
    packet = KafkaRequest(api_version=0, correlation_id=4, client_id="ignored") / ControlledShutdownRequest(broker_id=7)
    core = kdissect.encode_request(7, 0, 4, None, {"broker_id": 7})
    assert bytes(packet) == _framed(core)
    assert bytes(packet) == bytes.fromhex("0000000c" "0007" "0000" "00000004" "00000007")
    # ApiVersions v3 is flexible but its response header stays v0 (no tag section)
    response = KafkaResponse(correlation_id=9, api_version=3) / ApiVersionsResponse(error_code=0, api_keys=[])
    assert "\n  tagged_fields" not in response.show(dump=True)
    frame = bytes(response)
    assert frame[4:8] == struct.pack(">i", 9) and frame[8:10] == b"\x00\x00"  # error code right after corr
    assert kdissect.decode_response(frame[4:], 18, 3).header.correlation_id == 9
    # a flexible Metadata response has response header v1
    meta = bytes(KafkaResponse(correlation_id=9, api_version=12) / MetadataResponse())
    assert meta[8:9] == b"\x00"  # empty header tag section, then throttle_time_ms
    assert kdissect.decode_response(meta[4:], 3, 12).body.throttle_time_ms == 0


def test_response_answers_its_request():
    request = KafkaRequest(api_version=6, correlation_id=11, client_id="c") / MetadataRequest()
    response = dissect_response(bytes(KafkaResponse(correlation_id=11, api_version=6) / MetadataResponse()), 3, 6)
    assert response.answers(request) and request.hashret() == response.hashret()
    assert not response.answers(KafkaRequest(api_version=6, correlation_id=12) / MetadataRequest())


def test_secrets_are_redacted_in_show_but_kept_in_values():
    from kdissect.scapy import KafkaSaslToken, SaslAuthenticateRequest, show_secrets

    packet = KafkaRequest(api_version=2, correlation_id=1, client_id="c") / \
        SaslAuthenticateRequest(auth_bytes=b"\x00user\x00hunter2")
    assert packet.auth_bytes == b"\x00user\x00hunter2"
    assert bytes(packet)[-15:-1] == b"\x0e\x00user\x00hunter2"  # compact length 13+1, the bytes, then the tag section
    text = packet.show(dump=True)
    assert "hunter2" not in text and "<redacted 13 bytes>" in text
    assert "hunter2" not in repr(KafkaSaslToken(token=b"\x00user\x00hunter2"))
    show_secrets(True)
    try:
        assert "hunter2" in packet.show(dump=True)
    finally:
        show_secrets(False)


def test_header_longer_than_its_frame_is_not_read_across_frames(tmp_path):
    port = 39095
    bind_kafka(port)
    good = bytes(KafkaRequest(api_version=1, correlation_id=5, client_id="c") / MetadataRequest(topics=[]))
    short = struct.pack(">ihh", 4, 3, 1)  # size 4: api key and version only
    path = tmp_path / "short.pcap"
    _stream_pcap(path, port, [(True, short + good)])
    frames = _kafka_frames(path)
    assert type(frames[0]) is Raw and frames[0].load == short
    assert isinstance(frames[1], KafkaRequest) and frames[1].correlation_id == 5
    # the core (the capture joins the stream mid-way: no handshake) skips the
    # same 8 bytes before the first frame it finds, and finds the same request
    exchanges, accounting = analyze([str(path)], [port])
    assert [e.correlation_id for e in exchanges] == [5]
    assert accounting.mid_stream_bytes == len(short) and accounting.skipped_bytes == 0
