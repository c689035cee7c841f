"""OffsetCommit requests kept as frames (kdissect.conn.kept_offset_commit)
read the same as fully decoded ones: the group id, the generation id (or
member epoch), the member id and every partition's topic label, index and
committed offset, in order, in every OffsetCommit version, on every bundled
capture and on damaged frames (the full decoder is the oracle); and pairing
keeps as frames exactly the messages the skim accepts (an answer only
without an error code)."""

from __future__ import annotations

import random
import uuid

import pytest

from kdissect.conn.kept_offset_commit import OffsetCommitRequestFrame, OffsetCommitResponseFrame
from kdissect.conn.pipeline import Analysis
from kdissect.forensics import FORENSIC_APIS
from kdissect.forensics.common import topic_label
from kdissect.protocol.codec import decode_request, encode_request
from kdissect.protocol.skim import skim_request, skim_response
from tests.support.paths import REPO
from tests.support.pipeline import ports_of
from tests.support.skim import capture_frames, damaged_copies

CAPTURES = sorted((REPO / "captures").glob("*.pcap"))
OFFSET_COMMIT = 8


def _decoded_commit(frame: bytes) -> tuple:
    """What the group tally reads of a decoded request (kdissect.forensics.groups)."""
    body = decode_request(frame).body
    generation = getattr(body, "generation_id_or_member_epoch", None)
    committed = [(topic_label(topic, "name"), partition.partition_index, partition.committed_offset)
                 for topic in body.topics or () for partition in topic.partitions or ()]
    return body.group_id, -1 if generation is None else generation, getattr(body, "member_id", None), committed


def _check(frame: bytes) -> bool:
    """The frame reads as the decoder reads it wherever the skim accepts it (what pairing keeps)."""
    if skim_request(frame) is None:
        return False
    assert OffsetCommitRequestFrame(frame).commit() == _decoded_commit(frame)
    return True


def _is_commit(data: bytes) -> bool:
    return len(data) >= 4 and int.from_bytes(data[:2], "big") == OFFSET_COMMIT


def test_capture_frames_read_as_decoded() -> None:
    rng = random.Random(29)
    read = 0
    versions = set()
    for capture in CAPTURES:
        for direction, data, _key, _version in capture_frames(capture, ports_of(capture)):
            if direction == "request" and _is_commit(data):
                versions.add(int.from_bytes(data[2:4], "big"))
                read += _check(data)
                for copy in damaged_copies(rng, data):
                    _check(copy)
    assert read > 100
    assert len(versions) >= 3


def _body(version: int, topics: list) -> dict:
    body: dict = {"group_id": "group-\u00e9", "topics": topics}
    if version >= 1:
        body |= {"generation_id_or_member_epoch": 7, "member_id": "consumer-1-\u00ff"}
    if version >= 7:
        body["group_instance_id"] = "instance-a" if version % 2 else None
    if 2 <= version <= 4:
        body["retention_time_ms"] = 86_400_000
    return body


def _topics(version: int) -> list:
    def partition(index: int, offset: int, metadata: str | None) -> dict:
        entry = {"partition_index": index, "committed_offset": offset, "committed_metadata": metadata}
        if version == 1:
            entry["commit_timestamp"] = 1_700_000_000_000
        if version >= 6:
            entry["committed_leader_epoch"] = 3
        return entry

    def topic(name: str, topic_id: uuid.UUID, partitions: list) -> dict:
        return {"partitions": partitions} | ({"topic_id": topic_id} if version >= 10 else {"name": name})

    return [topic("orders", uuid.UUID("5b0c1d2e-3f40-4152-8364-758697a8b9ca"),
                  [partition(0, 42, "meta"), partition(2, -1, None), partition(1, 1 << 40, "")]),
            topic("", uuid.UUID(int=0), [partition(0, 0, None)]),
            topic("payments\u00e9", uuid.UUID(int=1 << 100), []),
            topic("orders", uuid.UUID(int=9), [partition(5, 6, "x" * 300)])]


@pytest.mark.parametrize("version", range(11))
def test_every_version_reads_as_decoded(version: int) -> None:
    """Built requests of each version: several partitions with null, empty
    and long metadata, an empty and a repeated topic, a null topic id (v10),
    no topics at all; with and without a client id."""
    for topics in (_topics(version), []):
        for client_id in ("consumer-\u00e9", None):
            frame = encode_request(OFFSET_COMMIT, version, 7, client_id, _body(version, topics))
            assert _check(frame)
            group, generation, member, committed = OffsetCommitRequestFrame(frame).commit()
            assert (group, generation) == ("group-\u00e9", 7 if version >= 1 else -1)
            assert len(committed) == (5 if topics else 0)


def test_pairing_keeps_skimmed_commits_as_frames() -> None:
    """With the forensic APIs kept, an OffsetCommit request the skim accepts
    is its frame, an answer its frame exactly where the skim finds no error code."""
    capture = REPO / "captures" / "consume_group_kafka.pcap"
    framed = answered = 0
    for ex in Analysis([str(capture)], ports_of(capture), keep_messages=False, keep_apis=FORENSIC_APIS):
        if ex.api_key != OFFSET_COMMIT or ex.request is None:
            continue
        frame = getattr(ex.request, "frame", None)
        assert (type(ex.request) is OffsetCommitRequestFrame) == (frame is not None and skim_request(frame) is not None)
        framed += type(ex.request) is OffsetCommitRequestFrame
        if type(ex.response) is OffsetCommitResponseFrame:
            figures = skim_response(ex.response.frame, OFFSET_COMMIT, ex.api_version)
            assert figures is not None and not figures[2]
            answered += 1
    assert framed > 0 and answered > 0
