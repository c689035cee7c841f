"""Produce exchanges kept as frames (kdissect.conn.kept_produce) read the
same as fully decoded ones: the transactional id and every partition's
record set of a request, every partition's base offset of an answer, in
every Produce version, on every bundled capture and on damaged frames; and
the forensic tables made from them equal those made from decoded messages
(the full decoder is the oracle)."""

from __future__ import annotations

import random
import uuid
from types import SimpleNamespace

import pytest

from kdissect.conn.kept_produce import (ProduceResponseFrame, produce_answers, produce_parts, response_bases,
                                        read_produce_request)
from kdissect.conn.pipeline import Analysis
from kdissect.forensics import FORENSIC_APIS
from kdissect.protocol.codec import decode_request, decode_response, encode_request, encode_response
from kdissect.protocol.skim import skim_request, skim_response
from kdissect.records.access import produce_results
from tests.support.paths import REPO
from tests.support.pipeline import ports_of
from tests.support.skim import capture_frames

CAPTURES = sorted((REPO / "captures").glob("*.pcap"))
PRODUCE = 0


def _decoded_parts(frame: bytes) -> tuple:
    parts = produce_parts(SimpleNamespace(request=decode_request(frame)))
    return parts[0], [(label, index, None if raw is None else bytes(raw)) for label, index, raw in parts[1]]


def _frame_parts(frame: bytes) -> tuple:
    parts = read_produce_request(frame)
    return parts[0], [(label, index, None if raw is None else bytes(raw)) for label, index, raw in parts[1]]


def _as_read(results: dict) -> dict:
    """What the tallies read of an answer's results: a base offset only when
    known (>= 0), and a partition absent when it has neither that nor an error."""
    read = {key: (base if base is not None and base >= 0 else None, error) for key, (base, error) in results.items()}
    return {key: value for key, value in read.items() if value != (None, 0)}


def _decoded_answers(frame: bytes, version: int) -> dict:
    return _as_read(produce_results(SimpleNamespace(response=decode_response(frame, PRODUCE, version),
                                                    expects_response=True)))


def _frame_answers(frame: bytes, version: int) -> dict:
    return _as_read(produce_answers(SimpleNamespace(response=ProduceResponseFrame(frame, version)), produce_results))


def _damaged(rng: random.Random, frame: bytes) -> list[bytes]:
    """Copies with one bit flipped past the header's first 8 bytes, cut short, one byte longer."""
    flipped = bytearray(frame)
    at = rng.randrange(8, len(frame)) if len(frame) > 8 else 0
    flipped[at] ^= 1 << rng.randrange(8)
    return [bytes(flipped), frame[:rng.randrange(8, len(frame))] if len(frame) > 8 else frame, frame + b"\x00"]


def _check_request(frame: bytes) -> bool:
    """The frame reads as the decoder reads it wherever the skim accepts it (what pairing keeps)."""
    if skim_request(frame) is None:
        return False
    assert _frame_parts(frame) == _decoded_parts(frame)
    return True


def _check_response(frame: bytes, version: int) -> bool:
    figures = skim_response(frame, PRODUCE, version)
    if figures is None or figures[2]:  # rejected, or carrying an error code (kept decoded)
        return False
    assert _frame_answers(frame, version) == _decoded_answers(frame, version)
    return True


def test_capture_frames_read_as_decoded() -> None:
    rng = random.Random(29)
    read = {"request": 0, "response": 0}
    versions = set()
    for capture in CAPTURES:
        for direction, data, api_key, api_version in capture_frames(capture, ports_of(capture)):
            if direction == "request" and data[:2] == b"\x00\x00":
                versions.add(int.from_bytes(data[2:4], "big"))
                read["request"] += _check_request(data)
                for copy in _damaged(rng, data):
                    _check_request(copy)
            elif direction == "response" and api_key == PRODUCE and api_version is not None:
                read["response"] += _check_response(data, api_version)
                for copy in _damaged(rng, data):
                    _check_response(copy, api_version)
    assert read["request"] > 1000 and read["response"] > 500
    assert len(versions) >= 4  # old (v0-v2), plain and flexible versions among the captures


def _request_body(version: int, topic_id: uuid.UUID) -> dict:
    def topic(name: str, partitions: list) -> dict:
        entry = {"partition_data": [{"index": index, "records": records} for index, records in partitions]}
        return entry | ({"topic_id": topic_id} if version >= 13 else {"name": name})

    body = {"acks": -1, "timeout_ms": 30000,
            "topic_data": [topic("orders", [(0, b"\x01" * 70), (3, None), (7, b"")]), topic("", [(2, b"\x02" * 9)]),
                           topic("payments\u00e9", [])]}
    return body | ({"transactional_id": "tx-1" if version % 2 else None} if version >= 3 else {})


@pytest.mark.parametrize("version", range(14))
def test_every_version_reads_as_decoded(version: int) -> None:
    """Built frames of each version: null, empty and filled record sets, an
    empty topic name, a topic without partitions, with and without a
    transactional id; the answer with unknown (-1) base offsets among them."""
    topic_id = uuid.UUID("5b0c1d2e-3f40-4152-8364-758697a8b9ca")
    request = encode_request(PRODUCE, version, 7, "client\u00ff", _request_body(version, topic_id))
    assert _check_request(request)
    tx, parts = _frame_parts(request)
    assert len(parts) == 4 and (tx == "tx-1") == (version >= 3 and version % 2 == 1)

    def answer(name: str, partitions: list) -> dict:
        entry = {"partition_responses": [{"index": index, "error_code": 0, "base_offset": base}
                                         for index, base in partitions]}
        return entry | ({"topic_id": topic_id} if version >= 13 else {"name": name})

    response = encode_response(PRODUCE, version, 7, {"responses": [answer("orders", [(0, 41), (3, -1), (7, 0)]),
                                                                   answer("", [(2, 5)])]} | ({"throttle_time_ms": 0} if version >= 1 else {}))
    assert _check_response(response, version)
    assert len(_frame_answers(response, version)) == 3  # -1 is no offset


@pytest.mark.parametrize("version", range(14))
def test_response_bases_looked_up_by_request_label(version: int) -> None:
    """`response_bases` as the tallies read it (kdissect.forensics.core:
    a request part's label, None as "", looked up in the frame's bases)
    gives each partition the base offset the decoded answer gives it: the
    empty topic name, an unknown (-1) base and a partition the answer leaves
    out included."""
    topic_id = uuid.UUID("5b0c1d2e-3f40-4152-8364-758697a8b9ca")
    request = encode_request(PRODUCE, version, 7, "client", _request_body(version, topic_id))

    def answer(name: str, partitions: list) -> dict:
        entry = {"partition_responses": [{"index": index, "error_code": 0, "base_offset": base}
                                         for index, base in partitions]}
        return entry | ({"topic_id": topic_id} if version >= 13 else {"name": name})

    # partition 7 of "orders" not answered
    response = encode_response(PRODUCE, version, 7, {"responses": [answer("orders", [(0, 41), (3, -1)]),
                                                                   answer("", [(2, 5)])]}
                               | ({"throttle_time_ms": 0} if version >= 1 else {}))
    decoded = _decoded_answers(response, version)
    bases = response_bases(ProduceResponseFrame(response, version))
    _, parts = _frame_parts(request)
    looked_up = [bases.get((label if label is not None else "", index)) for label, index, _ in parts]
    assert looked_up == [decoded.get((label, index), (None, 0))[0] for label, index, _ in parts]
    # the values by hand: orders 0 at 41, orders 3 unknown, orders 7 unanswered, "" 2 at 5
    assert looked_up == [41, None, None, 5]


def test_what_keep_apis_keeps_of_produce_and_api_versions() -> None:
    """With the forensic APIs kept: a Produce's request as its frame, its
    answer as its frame unless it carries an error code (then decoded); an
    ApiVersions' request as its frame (kdissect.conn.kept_api_versions) and
    its answer not kept; both as the rows
    of an export (the skims ran)."""
    capture = REPO / "captures" / "forensics_kafka.pcap"
    kinds: dict[str, set[str]] = {"produce_request": set(), "produce_response": set(), "versions": set()}
    exported = [ex.to_row() for ex in Analysis([str(capture)], ports_of(capture), keep_messages=False)]
    kept = list(Analysis([str(capture)], ports_of(capture), keep_messages=False, keep_apis=FORENSIC_APIS))
    assert [ex.to_row() for ex in kept] == exported
    for ex in kept:
        if ex.api_key == PRODUCE and ex.status == "ok":
            kinds["produce_request"].add(type(ex.request).__name__)
            if ex.response is not None:
                errors = bool(ex.error_codes or ex.error_code)
                kinds["produce_response"].add(f"{type(ex.response).__name__} errors={errors}")
        elif ex.api_key == 18 and ex.status == "ok":
            kinds["versions"].add(f"{type(ex.request).__name__} {ex.response is None}")
    assert kinds["produce_request"] == {"ProduceRequestFrame"}
    assert "ProduceResponseFrame errors=False" in kinds["produce_response"]
    assert all(kind in ("ProduceResponseFrame errors=False", "Response errors=True")
               for kind in kinds["produce_response"])
    assert kinds["versions"] == {"ApiVersionsRequestFrame True"}
