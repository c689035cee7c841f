"""Metadata answers and requests kept as frames (kdissect.conn.kept_metadata)
name the same topic ids as fully decoded ones: the (id, name) pairs, in
order, that `TopicNames` finds in the decoded message, in every Metadata
version, on every bundled capture and on damaged frames; and the forensic
tables and a Spark run's topic names made from them equal those made from
decoded messages (the full decoder is the oracle)."""

from __future__ import annotations

import random
import uuid

import pytest

from kdissect.conn.kept_metadata import MetadataRequestFrame, MetadataResponseFrame
from kdissect.conn.pipeline import Analysis
from kdissect.protocol.codec import decode_request, encode_request, encode_response
from kdissect.protocol.skim import skim_request
from kdissect.protocol.topics import ID_BEARING_APIS, _pairs
from tests.support.paths import REPO
from tests.support.pipeline import ports_of
from tests.support.skim import (capture_frames, decoded_topic_pairs, response_frames_read_as_decoded,
                                 topic_pairs_read_as_decoded)

CAPTURES = sorted((REPO / "captures").glob("*.pcap"))
METADATA = 3


def _decoded_pairs(frame: bytes, version: int) -> list:
    return decoded_topic_pairs(frame, METADATA, version)


def _check(frame: bytes, version: int) -> bool:
    return topic_pairs_read_as_decoded(frame, METADATA, version, MetadataResponseFrame)


def _damaged(rng: random.Random, frame: bytes) -> list[bytes]:
    """Copies with one bit flipped, cut short, one byte longer."""
    flipped = bytearray(frame)
    flipped[rng.randrange(len(frame))] ^= 1 << rng.randrange(8)
    return [bytes(flipped), frame[:rng.randrange(4, len(frame))], frame + b"\x00"]


def test_capture_frames_read_as_decoded() -> None:
    read, with_pairs, versions = response_frames_read_as_decoded(CAPTURES, METADATA, MetadataResponseFrame, _damaged)
    assert read > 200 and with_pairs > 50
    assert len(versions) >= 4  # without topic ids (v0-9) and with (v10+)


def _body(version: int) -> dict:
    def broker(node: int, rack: str | None) -> dict:
        return {"node_id": node, "host": f"broker-{node}.example", "port": 9092} | ({"rack": rack} if version >= 1 else {})

    def partition(index: int) -> dict:
        entry = {"error_code": 0, "partition_index": index, "leader_id": 1, "replica_nodes": [1, 2, 3],
                 "isr_nodes": [1, 2]}
        if version >= 7:
            entry["leader_epoch"] = 4
        if version >= 5:
            entry["offline_replicas"] = [3]
        return entry

    def topic(name: str | None, topic_id: uuid.UUID, partitions: int) -> dict:
        entry = {"error_code": 0, "name": name, "partitions": [partition(i) for i in range(partitions)]}
        if version >= 10:
            entry["topic_id"] = topic_id
        if version >= 1:
            entry["is_internal"] = False
        if version >= 8:
            entry["topic_authorized_operations"] = -2147483648
        return entry

    topics = [topic("orders", uuid.UUID("5b0c1d2e-3f40-4152-8364-758697a8b9ca"), 3),
              topic("no-id", uuid.UUID(int=0), 1), topic("", uuid.UUID(int=7), 2),
              topic("payments\u00e9", uuid.UUID(int=1 << 100), 0),
              topic("orders", uuid.UUID(int=9), 1)]
    if version >= 12:
        topics.append(topic(None, uuid.UUID(int=11), 1))
    body: dict = {"brokers": [broker(1, "rack-a"), broker(2, None)], "topics": topics}
    if version >= 1:
        body["controller_id"] = 1
    if version >= 2:
        body["cluster_id"] = "cluster-\u00ff" if version % 2 else None
    if version >= 3:
        body["throttle_time_ms"] = 0
    if version in (8, 9, 10):
        body["cluster_authorized_operations"] = -2147483648
    return body


@pytest.mark.parametrize("version", range(14))
def test_every_version_reads_as_decoded(version: int) -> None:
    """Built frames of each version: brokers with and without a rack,
    partitions with replica lists, a null topic id, an empty and a null
    name (v12+), a topic without partitions, a name given two ids."""
    frame = encode_response(METADATA, version, 7, _body(version))
    assert _check(frame, version)
    pairs = MetadataResponseFrame(frame, version).topic_pairs()
    assert len(pairs) == (3 if version >= 10 else 0)  # orders twice, payments...; nothing without an id or a name


def test_topic_names_pass_equal_either_way() -> None:
    """The Spark driver's pass for topic names (keep_apis=ID_BEARING_APIS)
    learns the same names from frames as from decoded answers, and the rows
    are an export's (the skim ran)."""
    from kdissect.filters.mentions import capture_topic_names
    from kdissect.protocol.topics import TopicNames

    capture = REPO / "captures" / "forensics_kafka.pcap"
    ports = ports_of(capture)
    decoded = TopicNames()
    for ex in Analysis([str(capture)], ports, keep_messages=True):
        decoded.learn_exchange(ex)
    assert decoded.names and capture_topic_names([str(capture)], ports, True) == decoded.names
    exported = [ex.to_row() for ex in Analysis([str(capture)], ports, keep_messages=False)]
    assert [ex.to_row() for ex in Analysis([str(capture)], ports, keep_messages=False,
                                           keep_apis=ID_BEARING_APIS)] == exported


def _check_request(frame: bytes) -> bool:
    """A request frame reads as the decoder reads it wherever pairing keeps
    it as a frame: the skim accepted it."""
    if skim_request(frame) is None:
        return False
    found: list = []
    _pairs(decode_request(frame).body, found)
    assert MetadataRequestFrame(frame).topic_pairs() == found
    return True


def test_capture_request_frames_read_as_decoded() -> None:
    rng = random.Random(31)
    read = 0
    versions = set()
    for capture in CAPTURES:
        for direction, data, _key, _version in capture_frames(capture, ports_of(capture)):
            if direction == "request" and len(data) >= 4 and int.from_bytes(data[:2], "big") == METADATA:
                versions.add(int.from_bytes(data[2:4], "big"))
                read += _check_request(data)
                for copy in _damaged(rng, data):
                    _check_request(copy)
    assert read > 200
    assert len(versions) >= 4


def _request_body(version: int, topics: list | None) -> dict:
    body: dict = {"topics": topics}
    if version >= 4:
        body["allow_auto_topic_creation"] = True
    if 8 <= version <= 10:
        body["include_cluster_authorized_operations"] = False
    if version >= 8:
        body["include_topic_authorized_operations"] = True
    return body


@pytest.mark.parametrize("version", range(14))
def test_every_request_version_reads_as_decoded(version: int) -> None:
    """Built requests of each version: topics with an id and a name, a null
    id, an empty and a null name (v10+), a name given two ids; a null topic
    list (v1+: every topic) and an empty one."""
    def topic(name: str | None, topic_id: uuid.UUID) -> dict:
        return {"name": name} | ({"topic_id": topic_id} if version >= 10 else {})

    named = [topic("orders", uuid.UUID("5b0c1d2e-3f40-4152-8364-758697a8b9ca")), topic("no-id", uuid.UUID(int=0)),
             topic("", uuid.UUID(int=7)), topic("payments\u00e9", uuid.UUID(int=1 << 100)),
             topic("orders", uuid.UUID(int=9))]
    if version >= 10:
        named.append(topic(None, uuid.UUID(int=11)))
    for topics in [named, []] + ([None] if version >= 1 else []):
        for client_id in ("consumer-\u00e9", None):
            frame = encode_request(METADATA, version, 7, client_id, _request_body(version, topics))
            assert _check_request(frame)
            pairs = MetadataRequestFrame(frame).topic_pairs()
            assert len(pairs) == (3 if version >= 10 and topics else 0)
