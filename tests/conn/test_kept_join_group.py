"""JoinGroup requests and answers kept as frames (kdissect.conn.kept_join_group)
read the same as fully decoded ones: every field the group tally reads
(kdissect.forensics.groups), in every JoinGroup version, on every bundled
capture and on damaged frames (the full decoder is the oracle); and pairing
keeps as frames exactly the messages the skim accepts (an answer only
without an error code), with the rows of an export."""

from __future__ import annotations

import random

import pytest

from kdissect.conn.kept_join_group import JoinGroupRequestFrame, JoinGroupResponseFrame
from kdissect.conn.pipeline import Analysis
from kdissect.forensics import FORENSIC_APIS
from kdissect.protocol.codec import decode_request, decode_response, encode_request, encode_response
from kdissect.protocol.skim import skim_request, skim_response
from tests.support.paths import REPO
from tests.support.pipeline import ports_of
from tests.support.skim import capture_frames, damaged_copies

CAPTURES = sorted((REPO / "captures").glob("*.pcap"))
JOIN_GROUP = 11


def _request_fields(body: object) -> tuple:
    return body.group_id, body.member_id, body.protocol_type  # type: ignore[attr-defined]


def _answer_fields(body: object) -> tuple:
    return (body.error_code, body.generation_id, getattr(body, "protocol_type", None),  # type: ignore[attr-defined]
            body.protocol_name, body.leader, body.member_id,  # type: ignore[attr-defined]
            [member.member_id for member in body.members])  # type: ignore[attr-defined]


def _check_request(frame: bytes) -> bool:
    if skim_request(frame) is None:
        return False
    assert _request_fields(JoinGroupRequestFrame(frame).body) == _request_fields(decode_request(frame).body)
    return True


def _check_answer(frame: bytes, version: int) -> bool:
    figures = skim_response(frame, JOIN_GROUP, version)
    if figures is None or figures[2]:
        return False
    assert _answer_fields(JoinGroupResponseFrame(frame, version).body) == \
        _answer_fields(decode_response(frame, JOIN_GROUP, version).body)
    return True


def test_capture_frames_read_as_decoded() -> None:
    rng = random.Random(29)
    requests = answers = 0
    versions = set()
    for capture in CAPTURES:
        for direction, data, api_key, api_version in capture_frames(capture, ports_of(capture)):
            if direction == "request" and len(data) >= 4 and int.from_bytes(data[:2], "big") == JOIN_GROUP:
                versions.add(int.from_bytes(data[2:4], "big"))
                requests += _check_request(data)
                for copy in damaged_copies(rng, data):
                    _check_request(copy)
            elif direction == "response" and api_key == JOIN_GROUP and api_version is not None:
                answers += _check_answer(data, api_version)
                for copy in damaged_copies(rng, data):
                    _check_answer(copy, api_version)
    assert requests >= 20 and answers >= 10
    assert len(versions) >= 3


def _request_body(version: int, member_id: str, instance: str | None) -> dict:
    body: dict = {"group_id": "group-\u00e9", "session_timeout_ms": 45000, "member_id": member_id,
                  "protocol_type": "consumer",
                  "protocols": [{"name": "range", "metadata": b"\x00\x01meta"},
                                {"name": "cooperative-sticky", "metadata": b""}]}
    if version >= 1:
        body["rebalance_timeout_ms"] = 300000
    if version >= 5:
        body["group_instance_id"] = instance
    if version >= 8:
        body["reason"] = "rejoin \u00ff" if instance else None
    return body


def _answer_body(version: int, members: list) -> dict:
    body: dict = {"error_code": 0, "generation_id": 70000 if version % 2 else -1,
                  "protocol_name": "range", "leader": "member-1", "member_id": "member-2",
                  "members": [{"member_id": m, "metadata": b"\x00\x03" + bytes(200)}
                              | ({"group_instance_id": "static-1" if i % 2 else None} if version >= 5 else {})
                              for i, m in enumerate(members)]}
    if version >= 2:
        body["throttle_time_ms"] = 0
    if version >= 7:
        body["protocol_type"] = "consumer" if version % 2 else None
        body["protocol_name"] = None if version == 8 else "range"
    if version >= 9:
        body["skip_assignment"] = False
    return body


@pytest.mark.parametrize("version", range(10))
def test_every_version_reads_as_decoded(version: int) -> None:
    """Built frames of each version: a request with and without a member id
    and a static member's instance id; answers with members (metadata,
    instance ids) and without, a null protocol type and name (v7+)."""
    for member_id, instance in (("", None), ("member-\u00e9", "static-\u00e9")):
        for client_id in ("consumer-1", None):
            frame = encode_request(JOIN_GROUP, version, 7, client_id, _request_body(version, member_id, instance))
            assert _check_request(frame)
    for members in ([], ["member-1", "member-2", "m\u00e9"]):
        frame = encode_response(JOIN_GROUP, version, 7, _answer_body(version, members))
        assert _check_answer(frame, version)


def test_pairing_keeps_frames_with_the_rows_of_an_export() -> None:
    frames = 0
    for capture in CAPTURES:
        ports = ports_of(capture)
        kept = list(Analysis([str(capture)], ports, keep_apis=FORENSIC_APIS))
        joins = [ex for ex in kept if ex.api_key == JOIN_GROUP]
        for ex in joins:
            if type(ex.response) is JoinGroupResponseFrame:
                frames += 1
                assert not ex.error_codes
                assert type(ex.request) is JoinGroupRequestFrame
        if joins:
            exported = [ex.to_row() for ex in Analysis([str(capture)], ports)]
            assert [ex.to_row() for ex in kept] == exported
    assert frames >= 10
