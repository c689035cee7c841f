"""Protocol quirks, headers, consumer protocol, redaction and summaries, on
hand-built bytes (laid out here from the protocol rules, not by the encoder)
and on the recorded real frames."""

from __future__ import annotations

import json
import struct

import pytest

from kdissect import DecodeError, decode_request, decode_response
from kdissect.protocol.codec import encode_message, encode_request, encode_response, new_body
from kdissect.protocol.consumer import encode_embedded
from kdissect.protocol.headers import api_name, looks_like_request, peek_request_header
from kdissect.protocol.model import ConsumerProtocolData
from kdissect.protocol.render import render_tree, to_jsonable
from kdissect.protocol.summary import partition_errors, summarize_response
from tests.support.protocol import frame_fixtures

FRAMES = frame_fixtures()


def i8(v): return struct.pack(">b", v)
def i16(v): return struct.pack(">h", v)
def i32(v): return struct.pack(">i", v)
def i64(v): return struct.pack(">q", v)
def s16(text): return i16(len(text)) + text.encode()
def cstr(text): return bytes([len(text) + 1]) + text.encode()  # short compact string


def _real(api_key: int, direction: str, **match) -> list:
    out = []
    for entry in FRAMES:
        if entry["api_key"] == api_key and entry["direction"] == direction:
            frame = bytes.fromhex(entry["hex"])
            message = decode_request(frame) if direction == "request" else \
                decode_response(frame, entry["api_key"], entry["api_version"])
            if all(getattr(message.header, k, None) == v for k, v in match.items()):
                out.append(message)
    return out


# ----------------------------------------------------------------- quirks

def test_api_versions_unsupported_version_is_read_as_v0() -> None:
    # A broker answering ApiVersions v3 with error 35 sends header v0 + a v0 body.
    body_v0 = i16(35) + i32(2) + i16(0) + i16(0) + i16(9) + i16(18) + i16(0) + i16(3)
    frame = i32(77) + body_v0
    response = decode_response(frame, 18, 3)
    assert response.header.correlation_id == 77
    assert response.body_version == 0 and response.assumed_version
    assert response.body.error_code == 35
    assert [(k.api_key, k.min_version, k.max_version) for k in response.body.api_keys] == [(0, 0, 9), (18, 0, 3)]
    assert encode_message(response) == frame
    assert summarize_response(18, 3, response.body).error_code == 35


def test_api_versions_v3_response_uses_header_v0() -> None:
    # flexible body, but no header tagged-field byte after the correlation id
    body = i16(0) + bytes([2]) + i16(18) + i16(0) + i16(3) + b"\x00" + i32(0) + b"\x00"
    response = decode_response(i32(5) + body, 18, 3)
    assert response.header.tagged_fields == [] and response.header.header_version == 0
    assert response.body.api_keys[0].max_version == 3
    real = _real(18, "response")
    assert real and all(r.body.error_code == 0 and r.body.api_keys for r in real)


def test_controlled_shutdown_v0_request_has_no_client_id() -> None:
    frame = i16(7) + i16(0) + i32(12) + i32(3)  # header v0, then BrokerId
    request = decode_request(frame)
    assert request.header.client_id is None and request.body.broker_id == 3
    assert encode_message(request) == frame
    # v1 has a client id
    frame1 = i16(7) + i16(1) + i32(12) + s16("ctl") + i32(3)
    assert decode_request(frame1).header.client_id == "ctl"


def test_request_header_v2_client_id_is_not_compact() -> None:
    # Metadata v12: header v2 = int16 client id + tag section; body flexible.
    frame = i16(3) + i16(12) + i32(1) + s16("abc") + b"\x00" + b"\x01" + b"\x00" + b"\x00" + b"\x00"
    request = decode_request(frame)
    assert request.header.client_id == "abc" and request.body.topics == []
    assert request.body.allow_auto_topic_creation is False


def test_version_defined_only_for_the_request_uses_nearest_lower_response(monkeypatch) -> None:
    # Kafka 4.4.0 defines both halves of StreamsGroupHeartbeat at v0-v1; the
    # older trunk file had request v1 with response v0 only. Recreate that gap.
    from kdissect.protocol import codec, schema

    real = schema.defined_versions
    monkeypatch.setattr(schema, "defined_versions",
                        lambda key, direction: [0] if (key, direction) == (88, "response") else real(key, direction))
    # a response plan cached by an earlier test would skip the patched table,
    # and the one made under the patch must not outlive it
    codec._response_plan.cache_clear()
    try:
        v0 = encode_response(88, 0, 4, new_body(88, 0, "response", error_code=15, heartbeat_interval_ms=500))
        response = decode_response(v0, 88, 1)
    finally:
        codec._response_plan.cache_clear()
    assert response.body_version == 0
    assert "v1" in response.assumed_version and "v0" in response.assumed_version
    assert response.body.error_code == 15 and encode_message(response) == v0


def test_version_defined_only_for_the_response_uses_nearest_lower_request() -> None:
    # AddRaftVoter: request v0-v1, response v0-v2.
    v1 = encode_request(80, 1, 9, "voter", new_body(80, 1, "request", cluster_id="c", voter_id=2))
    frame = v1[:2] + i16(2) + v1[4:]
    request = decode_request(frame)
    assert request.header.api_version == 2 and request.body_version == 1
    assert request.assumed_version and request.body.voter_id == 2
    assert encode_message(request) == frame


def test_sasl_handshake_v0_starts_raw_sasl() -> None:
    v0 = decode_request(i16(17) + i16(0) + i32(1) + s16("c") + s16("PLAIN"))
    v1 = decode_request(i16(17) + i16(1) + i32(1) + s16("c") + s16("PLAIN"))
    assert v0.body.mechanism == "PLAIN"
    assert v0.starts_raw_sasl and not v1.starts_raw_sasl


def test_produce_acks_zero_expects_no_response() -> None:
    quiet = _real(0, "request", client_id="kdissect-acks0")
    assert quiet and all(r.body.acks == 0 and not r.expects_response for r in quiet)
    loud = _real(0, "request", client_id="kdissect-producer")
    assert loud and all(r.body.acks == 1 and r.expects_response for r in loud)
    assert all(r.expects_response for r in _real(3, "request"))


def test_unknown_tagged_fields_are_kept_in_order() -> None:
    # Heartbeat v4 request (flexible) with unknown tags 9 then 4 in the body
    # and tag 3 in the header.
    header = i16(12) + i16(4) + i32(8) + s16("c") + b"\x01" + b"\x03\x02hi"
    body = cstr("g") + i32(5) + cstr("m") + b"\x00" + b"\x02" + b"\x09\x01\xaa" + b"\x04\x00"
    frame = header + body
    request = decode_request(frame)
    assert request.header.tagged_fields == [(3, b"hi")]
    assert request.body.unknown_tagged_fields == [(9, b"\xaa"), (4, b"")]
    assert request.body.group_id == "g" and request.body.generation_id == 5
    assert encode_message(request) == frame
    assert "tag 9" in render_tree(request)


def test_known_tagged_field_decodes_by_name() -> None:
    # Fetch v12 response partition with tag 1 = CurrentLeader (leader 7, epoch 3)
    partition = i32(0) + i16(6) + i64(10) + i64(-1) + i64(0) + b"\x00" + i32(-1) + b"\x00"
    tags = b"\x01" + b"\x01" + b"\x09" + i32(7) + i32(3) + b"\x00"
    body = i32(0) + i16(0) + i32(0) + b"\x02" + cstr("t") + b"\x02" + partition + tags + b"\x00" + b"\x00"
    frame = i32(1) + b"\x00" + body
    response = decode_response(frame, 1, 12)
    p = response.body.responses[0].partitions[0]
    assert p.error_code == 6 and p.current_leader.leader_id == 7 and p.current_leader.leader_epoch == 3
    assert p.diverging_epoch is None and p.records is None
    assert encode_message(response) == frame
    assert partition_errors(1, 12, response.body) == [("t", 0, 6)]


def test_trailing_bytes_are_a_decode_error() -> None:
    entry = next(e for e in FRAMES if e["api_key"] == 3 and e["direction"] == "request")
    frame = bytes.fromhex(entry["hex"])
    with pytest.raises(DecodeError) as info:
        decode_request(frame + b"\x00")
    assert info.value.offset == len(frame) and "left over" in str(info.value)


def test_non_canonical_encodings_are_rejected() -> None:
    ok = i16(12) + i16(4) + i32(8) + s16("c") + b"\x00" + cstr("g") + i32(5) + cstr("m") + b"\x00" + b"\x00"
    decode_request(ok)
    overlong = ok.replace(cstr("g"), b"\x82\x00g")  # varint 2 written in two bytes
    with pytest.raises(DecodeError):
        decode_request(overlong)
    bad_bool = i16(3) + i16(4) + i32(1) + s16("c") + i32(-1) + b"\x02"
    with pytest.raises(DecodeError) as info:
        decode_request(bad_bool)
    assert info.value.path == "allow_auto_topic_creation"


# ------------------------------------------------------- consumer protocol

def test_join_group_subscriptions_are_decoded_from_real_frames() -> None:
    joins = _real(11, "request")
    assert {j.header.client_id for j in joins} == {"kdissect-consumer", "kdissect-confluent-consumer"}
    for join in joins:
        assert join.body.protocol_type == "consumer"
        for protocol in join.body.protocols:
            assert isinstance(protocol.metadata, ConsumerProtocolData)
            assert protocol.metadata.kind == "subscription"
            assert protocol.metadata.data.topics == ["golden"]  # what the workload subscribed
    sync = _real(14, "request")
    assignment = sync[0].body.assignments[0].assignment
    assert assignment.kind == "assignment"
    assert [(t.topic, t.partitions) for t in assignment.data.assigned_partitions] == [("golden", [0, 1])]


def test_non_consumer_or_unparsable_metadata_stays_bytes() -> None:
    def join(protocol_type: str, metadata: bytes) -> bytes:
        body = s16("g") + i32(1000) + s16("") + s16(protocol_type) + i32(1) + s16("p") + i32(len(metadata)) + metadata
        return i16(11) + i16(0) + i32(1) + s16("c") + body

    subscription = i16(0) + i32(1) + s16("t") + i32(0)
    assert isinstance(decode_request(join("consumer", subscription)).body.protocols[0].metadata, ConsumerProtocolData)
    assert decode_request(join("connect", subscription)).body.protocols[0].metadata == subscription
    garbage = b"\x00\x00\xff\xff\xff"
    frame = join("consumer", garbage)
    request = decode_request(frame)
    assert request.body.protocols[0].metadata == garbage
    assert encode_message(request) == frame


# --------------------------------------------------------------- redaction

def test_sasl_and_scram_secrets_are_redacted_by_default() -> None:
    token = b"\x00alice\x00hunter2"
    frame = i16(36) + i16(1) + i32(4) + s16("c") + i32(len(token)) + token
    request = decode_request(frame)
    assert request.body.auth_bytes == token  # the object keeps the bytes
    for text in (json.dumps(to_jsonable(request)), render_tree(request)):
        assert "hunter2" not in text and token.hex() not in text and "redacted" in text
    assert token.hex() in json.dumps(to_jsonable(request, show_secrets=True))
    assert "hunter2" in render_tree(request, show_secrets=True)

    scram = new_body(51, 0, "request", upsertions=[{"name": "bob", "mechanism": 1, "iterations": 4096,
                                                     "salt": b"SALTSALT", "salted_password": b"PWPWPWPW"}])
    rendered = render_tree(decode_request(encode_request(51, 0, 1, "c", scram)))
    assert "SALTSALT" not in rendered and "PWPWPWPW" not in rendered and "iterations: 4096" in rendered
    token_resp = new_body(38, 2, "response", hmac=b"MACMACMAC", token_id="tid")
    text = json.dumps(to_jsonable(decode_response(encode_response(38, 2, 1, token_resp), 38, 2)))
    assert "MACMACMAC".encode().hex() not in text and "tid" in text
    renew = new_body(39, 1, "request", hmac=b"HMACBYTES")
    assert "HMACBYTES" not in render_tree(decode_request(encode_request(39, 1, 1, "c", renew)))


# --------------------------------------------------------------- summaries

def test_summary_of_real_responses() -> None:
    produce = _real(0, "response")
    assert produce
    for response in produce:
        summary = summarize_response(0, response.api_version, response.body)
        assert summary.throttle_time_ms == 0 and summary.error_code is None and summary.error_codes == ()
    metadata = _real(3, "response")[0]
    assert summarize_response(3, 12, metadata.body).error_code is None
    api_versions = _real(18, "response")[0]
    summary = summarize_response(18, api_versions.api_version, api_versions.body)
    assert summary.error_code == 0 and summary.error_codes == ()
    v0 = decode_response(i32(1) + i16(0) + i32(0), 18, 0)
    assert summarize_response(18, 0, v0.body).throttle_time_ms is None


def test_summary_finds_nested_error_codes() -> None:
    body = new_body(3, 1, "response", topics=[
        {"name": "a", "error_code": 0, "partitions": [{"partition_index": 0, "error_code": 9},
                                                         {"partition_index": 1, "error_code": 0}]},
        {"name": "b", "error_code": 3, "partitions": [{"partition_index": 4, "error_code": 5}]},
    ])
    summary = summarize_response(3, 1, body)
    assert summary.throttle_time_ms is None and summary.error_code is None
    assert summary.error_codes == (3, 5, 9)
    assert partition_errors(3, 1, body) == [("a", 0, 9), ("b", 4, 5)]
    rendered = render_tree(decode_response(encode_response(3, 1, 1, body), 3, 1))
    assert "error_code: 9 (REPLICA_NOT_AVAILABLE)" in rendered


def test_partition_errors_of_produce_responses() -> None:
    # Produce response v3 laid out by hand from the spec: the partition field is "Index".
    partition = lambda index, code: i32(index) + i16(code) + i64(-1) + i64(-1)
    frame = (i32(7)  # correlation id (response header v0)
             + i32(1) + s16("orders") + i32(2) + partition(0, 0) + partition(2, 59)
             + i32(0))  # throttle_time_ms
    body = decode_response(frame, 0, 3).body
    assert partition_errors(0, 3, body) == [("orders", 2, 59)]
    assert summarize_response(0, 3, body).error_codes == (59,)


# ------------------------------------------------------- header helpers

def test_header_helpers() -> None:
    assert api_name(0) == "Produce" and api_name(18) == "ApiVersions" and api_name(1234) == "Unknown1234"
    assert peek_request_header(b"\x00\x03\x00") is None
    assert peek_request_header(i16(3) + i16(12) + i32(-5)) == (3, 12, -5)
    good = i16(3) + i16(12) + i32(1) + s16("abc")
    assert looks_like_request(good, 40)
    assert not looks_like_request(good, 11)  # client id longer than the frame
    assert not looks_like_request(i16(300) + i16(0) + i32(1) + s16("abc"), 40)  # unknown key
    assert not looks_like_request(i16(3) + i16(40) + i32(1) + s16("abc"), 40)  # version out of range
    binary = i16(3) + i16(1) + i32(1) + i16(3) + b"\x01\x02\x03"
    assert not looks_like_request(binary, 40)  # not text
    # when hunting, a client id with control bytes is a candidate (its frame must then decode)
    assert looks_like_request(binary, 40, text_client_id=False)
    assert not looks_like_request(binary, 12, text_client_id=False)  # client id longer than the frame
    assert not looks_like_request(i16(300) + i16(0) + i32(1) + s16("abc"), 40, text_client_id=False)
    assert not looks_like_request(b"\xff" * 20, 100)
    assert looks_like_request(i16(7) + i16(0) + i32(1), 12)  # ControlledShutdown v0


# ---------------------------------------------------------------- varints

@pytest.mark.parametrize("value, raw", [(0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"),
                                        (300, b"\xac\x02"), (2**32 - 1, b"\xff\xff\xff\xff\x0f")])
def test_unsigned_varint(value: int, raw: bytes) -> None:
    from kdissect.protocol.primitives import read_uvarint, write_uvarint

    assert write_uvarint(value) == raw
    assert read_uvarint(raw + b"\xee", 0) == (value, len(raw))


@pytest.mark.parametrize("value, raw", [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-64, b"\x7f"),
                                        (64, b"\x80\x01"), (-(2**31), b"\xff\xff\xff\xff\x0f")])
def test_zigzag_varint(value: int, raw: bytes) -> None:
    from kdissect.protocol.primitives import read_varint, read_varlong, write_varint, write_varlong

    assert write_varint(value) == raw and read_varint(raw, 0) == (value, len(raw))
    assert write_varlong(value) == raw and read_varlong(raw, 0) == (value, len(raw))


def test_varlong_extremes_and_overlong() -> None:
    from kdissect.protocol.primitives import read_uvarint, read_varlong, write_varlong

    for value in (2**63 - 1, -(2**63)):
        raw = write_varlong(value)
        assert len(raw) == 10 and read_varlong(raw, 0) == (value, 10)
    with pytest.raises(ValueError):
        read_uvarint(b"\x80\x00", 0)  # non-minimal
    with pytest.raises(ValueError):
        read_uvarint(b"\xff\xff\xff\xff\xff\x01", 0)  # longer than 5 bytes


def test_consumer_protocol_built_from_values() -> None:
    from kdissect.protocol.consumer import new_embedded

    subscription = new_embedded("subscription", 1, topics=["a", "b"],
                                owned_partitions=[{"topic": "a", "partitions": [0, 2]}])
    raw = encode_embedded(subscription)
    # int16 version, [topics], user_data (null -> -1), owned partitions
    assert raw[:2] == i16(1) and raw[2:6] == i32(2) and s16("a") in raw
    body = new_body(11, 5, "request", group_id="g", protocol_type="consumer",
                    protocols=[{"name": "range", "metadata": subscription}])
    frame = encode_request(11, 5, 1, "c", body)
    metadata = decode_request(frame).body.protocols[0].metadata
    assert metadata.version == 1 and metadata.data.topics == ["a", "b"]
    assert metadata.data.owned_partitions[0].partitions == [0, 2] and metadata.raw == raw


def test_api_versions_newer_than_the_spec() -> None:
    """Clients open with their newest ApiVersions; a newer-than-spec version
    decodes with the newest known layout (assumed), and the broker's v0 error
    answer still decodes."""
    newest = max(v for v in range(0, 10) if _defined(18, v))
    # ClientSoftwareName, ClientSoftwareVersion, ClusterId (null), NodeId, tags
    body = cstr("kcat") + cstr("1.0") + b"\x00" + i32(-1) + b"\x00"
    frame = i16(18) + i16(newest + 1) + i32(1) + s16("c") + b"\x00" + body
    assert looks_like_request(frame, len(frame))
    request = decode_request(frame)
    assert request.body_version == newest and request.assumed_version
    assert request.body.client_software_name == "kcat" and encode_message(request) == frame
    answer = i32(1) + i16(35) + i32(1) + i16(18) + i16(0) + i16(newest)
    response = decode_response(answer, 18, newest + 1)
    assert response.body_version == 0 and response.body.error_code == 35
    far = i16(18) + i16(newest + 20) + i32(1) + s16("c")
    assert not looks_like_request(far, len(far) + 8)
    with pytest.raises(DecodeError):
        decode_request(far + b"\x00" + body)


def _defined(key: int, version: int) -> bool:
    from kdissect.protocol.schema import defined_versions

    return version in defined_versions(key, "request")


def test_describe_groups_members_decode_the_consumer_protocol() -> None:
    subscription = i16(0) + i32(1) + s16("orders") + i32(-1)
    assignment = i16(0) + i32(1) + s16("orders") + i32(2) + i32(0) + i32(1) + i32(-1)
    member = s16("m-1") + s16("client") + s16("/10.0.0.1") + i32(len(subscription)) + subscription \
        + i32(len(assignment)) + assignment

    def group(protocol_type: str) -> bytes:
        return i16(0) + s16("g") + s16("Stable") + s16(protocol_type) + s16("range") + i32(1) + member

    frame = i32(9) + i32(2) + group("consumer") + group("connect")
    response = decode_response(frame, 15, 0)
    consumer, connect = response.body.groups
    meta = consumer.members[0].member_metadata
    assert meta.kind == "subscription" and meta.data.topics == ["orders"] and meta.data.user_data is None
    owned = consumer.members[0].member_assignment.data.assigned_partitions
    assert [(t.topic, t.partitions) for t in owned] == [("orders", [0, 1])]
    assert connect.members[0].member_metadata == subscription  # not "consumer": raw bytes
    assert encode_message(response) == frame
    assert "consumer_protocol: assignment v0" in render_tree(response)


def test_response_header_v1_tags_are_kept() -> None:
    # Heartbeat v4 response: header v1 with one tag, body ThrottleTimeMs, ErrorCode, tags
    frame = i32(3) + b"\x01\x05\x01\x07" + i32(10) + i16(27) + b"\x00"
    response = decode_response(frame, 12, 4)
    assert response.header.tagged_fields == [(5, b"\x07")]
    assert response.body.throttle_time_ms == 10 and response.body.error_code == 27
    summary = summarize_response(12, 4, response.body)
    assert (summary.throttle_time_ms, summary.error_code, summary.error_codes) == (10, 27, (27,))
    assert encode_message(response) == frame


def test_response_figures_are_the_summary_as_a_tuple() -> None:
    from kdissect.protocol.summary import response_figures

    body = new_body(3, 1, "response", topics=[
        {"name": "a", "error_code": 0, "partitions": [{"partition_index": 0, "error_code": 9}]},
        {"name": "b", "error_code": 3, "partitions": [{"partition_index": 4, "error_code": 9}]},
    ])
    assert response_figures(3, 1, body) == (None, None, [3, 9])
    for api_key in (0, 3, 18):
        for response in _real(api_key, "response"):
            summary = summarize_response(api_key, response.api_version, response.body)
            figures = response_figures(api_key, response.api_version, response.body)
            assert figures == (summary.throttle_time_ms, summary.error_code, list(summary.error_codes))
