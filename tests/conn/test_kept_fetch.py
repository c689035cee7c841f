"""Fetch exchanges kept as frames (kdissect.conn.kept_fetch) read the same
as fully decoded ones: the offset asked for in every partition of a
request, every partition's index, error code, offsets, aborted
transactions and record set of an answer, in every Fetch version, on every
bundled capture and on damaged frames; and the forensic tables made from
them equal those made from decoded messages (the full decoder is the oracle)."""

from __future__ import annotations

import random
import uuid
from types import SimpleNamespace

import pytest

from kdissect.conn.kept_fetch import FetchResponseFrame, decoded_partition, read_fetch_offsets
from kdissect.conn.pipeline import Analysis
from kdissect.forensics import FORENSIC_APIS
from kdissect.forensics.common import topic_label
from kdissect.protocol.codec import decode_request, decode_response, encode_request, encode_response
from kdissect.protocol.skim import skim_request, skim_response
from tests.support.paths import REPO
from tests.support.pipeline import ports_of
from tests.support.skim import capture_frames

CAPTURES = sorted((REPO / "captures").glob("*.pcap"))
FETCH = 1


def _decoded_asked(frame: bytes) -> dict:
    """What the tallies read of a decoded request (kdissect.forensics.core)."""
    asked = {}
    for topic in decode_request(frame).body.topics or ():
        label = topic_label(topic, "topic")
        for entry in topic.partitions or ():
            asked[(label, entry.partition)] = entry.fetch_offset
    return asked


def _check(frame: bytes) -> bool:
    """The frame reads as the decoder reads it wherever the skim accepts it (what pairing keeps)."""
    if skim_request(frame) is None:
        return False
    assert read_fetch_offsets(frame) == _decoded_asked(frame)
    return True


_READ = ("partition_index", "error_code", "high_watermark", "last_stable_offset", "log_start_offset")


def _entries(topics) -> list:
    """What the tallies read of an answer's (label, partitions): every field
    by `getattr(entry, name, None)`, aborted transactions as pairs, record
    sets as bytes."""
    return [(label, [tuple(getattr(entry, name, None) for name in _READ)
                     + (None if getattr(entry, "aborted_transactions", None) is None else
                        [(a.producer_id, a.first_offset) for a in entry.aborted_transactions],
                        None if entry.records is None else bytes(entry.records))
                     for entry in partitions]) for label, partitions in topics]


def _decoded_topics(frame: bytes, version: int) -> list:
    body = decode_response(frame, FETCH, version).body
    return _entries([(topic_label(topic, "topic"), topic.partitions or ()) for topic in body.responses or ()])


def _converted_topics(frame: bytes, version: int) -> list:
    """The decoded answer's entries as the tallies take them (decoded_partition)."""
    body = decode_response(frame, FETCH, version).body
    return _entries([(topic_label(topic, "topic"), [decoded_partition(entry) for entry in topic.partitions or ()])
                     for topic in body.responses or ()])


def _check_converted(frame: bytes, version: int) -> bool:
    """A decoded answer (kept whole: errors, or turned down by the skim)
    reads through decoded_partition as through getattr on its entries."""
    try:
        decoded = _decoded_topics(frame, version)
    except Exception:
        return False  # (not decodable: pairing keeps nothing to read)
    assert _converted_topics(frame, version) == decoded
    return True


def _check_response(frame: bytes, version: int) -> bool:
    """The answer reads as the decoder reads it wherever pairing keeps it as
    a frame: the skim accepted it and found no error code."""
    _check_converted(frame, version)
    figures = skim_response(frame, FETCH, version)
    if figures is None or figures[2]:
        return False
    assert _entries(FetchResponseFrame(frame, version).topics()) == _decoded_topics(frame, version)
    return True


def _damaged(rng: random.Random, frame: bytes) -> list[bytes]:
    """Copies with one bit flipped past the api key, cut short, one byte longer."""
    flipped = bytearray(frame)
    flipped[rng.randrange(2, len(frame))] ^= 1 << rng.randrange(8)
    return [bytes(flipped), frame[:rng.randrange(8, len(frame))], frame + b"\x00"]


def test_capture_frames_read_as_decoded() -> None:
    rng = random.Random(29)
    read = answers = with_records = 0
    versions = set()
    for capture in CAPTURES:
        for direction, data, api_key, api_version in capture_frames(capture, ports_of(capture)):
            if direction == "request" and data[:2] == b"\x00\x01":
                versions.add(int.from_bytes(data[2:4], "big"))
                read += _check(data)
                for copy in _damaged(rng, data):
                    _check(copy)
            elif direction == "response" and api_key == FETCH and api_version is not None:
                if _check_response(data, api_version):
                    answers += 1
                    with_records += any(entry[-1] for _, entries in _decoded_topics(data, api_version)
                                        for entry in entries)
                for copy in _damaged(rng, data):
                    _check_response(copy, api_version)
    assert read > 500 and answers > 500 and with_records > 100
    assert len(versions) >= 4  # plain and flexible, by name and by topic id


def _body(version: int, topic_id: uuid.UUID) -> dict:
    def partition(index: int, offset: int) -> dict:
        entry = {"partition": index, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
        if version >= 9:
            entry["current_leader_epoch"] = 7
        if version >= 12:
            entry["last_fetched_epoch"] = 6
        if version >= 5:
            entry["log_start_offset"] = -1
        if version >= 17:
            entry["replica_directory_id"] = uuid.UUID("00000000-0000-0000-0000-0000000000aa")
        return entry

    def topic(name: str, partitions: list) -> dict:
        return {"partitions": partitions} | ({"topic_id": topic_id} if version >= 13 else {"topic": name})

    body: dict = {"max_wait_ms": 500, "min_bytes": 1,
                  "topics": [topic("orders", [partition(0, 41), partition(3, 0), partition(3, 9)]),
                             topic("", [partition(2, 5)]), topic("payments\u00e9", []),
                             topic("big", [partition(1 << 30, (1 << 62) + 3), partition(-1, -1)])]}
    if version <= 14:
        body["replica_id"] = -1
    if version >= 3:
        body["max_bytes"] = 1 << 24
    if version >= 4:
        body["isolation_level"] = 1
    if version >= 7:
        body["session_id"], body["session_epoch"] = 12, 3
        body["forgotten_topics_data"] = [({"topic_id": topic_id} if version >= 13 else {"topic": "gone"})
                                         | {"partitions": [1, 2]}]
    if version >= 11:
        body["rack_id"] = "rack-a"
    if version >= 12:
        body["cluster_id"] = "cluster"
    return body


@pytest.mark.parametrize("version", range(19))
def test_every_version_reads_as_decoded(version: int) -> None:
    """Built frames of each version: several topics, a partition named
    twice (its last offset), an empty topic name, a topic without
    partitions, large and negative values, the forgotten topics and rack
    after the topics, tagged fields in the partitions (v17+)."""
    topic_id = uuid.UUID("5b0c1d2e-3f40-4152-8364-758697a8b9ca")
    request = encode_request(FETCH, version, 7, "client\u00ff", _body(version, topic_id))
    assert _check(request)
    asked = read_fetch_offsets(request)
    first = "orders" if version < 13 else str(topic_id)
    assert asked[(first, 3)] == 9 and asked[(first, 0)] == 41
    assert len(asked) == 5  # by id the topics are one, whose partition 2 the unnamed topic's entry gives


def _response_body(version: int, topic_id: uuid.UUID) -> dict:
    batch = bytes(range(61))  # (the reader hands the bytes on; what they hold is the records walk's matter)

    def partition(index: int, records: bytes | None, aborted: list | None) -> dict:
        entry = {"partition_index": index, "error_code": 0, "high_watermark": 1 << 40, "records": records}
        if version >= 4:
            entry["last_stable_offset"] = (1 << 40) - 3
            entry["aborted_transactions"] = None if aborted is None else [
                {"producer_id": pid, "first_offset": first} for pid, first in aborted]
        if version >= 5:
            entry["log_start_offset"] = 17
        if version >= 11:
            entry["preferred_read_replica"] = -1
        if version >= 12:
            entry["diverging_epoch"] = {"epoch": 3, "end_offset": 99}
        return entry

    def topic(name: str, partitions: list) -> dict:
        return {"partitions": partitions} | ({"topic_id": topic_id} if version >= 13 else {"topic": name})

    body: dict = {"responses": [topic("orders", [partition(0, batch, [(7, 40), (8, 41)]), partition(3, None, None),
                                                 partition(4, b"", [])]),
                                topic("", [partition(2, batch[:10], None)]), topic("payments\u00e9", [])]}
    if version >= 1:
        body["throttle_time_ms"] = 0
    if version >= 7:
        body["error_code"], body["session_id"] = 0, 12
    if version >= 16:
        body["node_endpoints"] = [{"node_id": 1, "host": "broker-1", "port": 9092, "rack": None}]
    return body


@pytest.mark.parametrize("version", range(19))
def test_every_answer_version_reads_as_decoded(version: int) -> None:
    """Built answers of each version: record sets null, empty and filled,
    aborted transactions null, empty and listed, an empty topic name, a
    topic without partitions, tagged fields in a partition (v12+) and at
    the end (v16+)."""
    topic_id = uuid.UUID("5b0c1d2e-3f40-4152-8364-758697a8b9ca")
    response = encode_response(FETCH, version, 7, _response_body(version, topic_id))
    assert _check_response(response, version)
    topics = FetchResponseFrame(response, version).topics()
    assert [len(partitions) for _, partitions in topics] == [3, 1, 0]
    assert _check_converted(response, version)
    # the frame's partitions and the decoded ones made typed: field by field the same
    converted = [decoded_partition(entry) for topic in decode_response(response, FETCH, version).body.responses
                 for entry in topic.partitions]
    framed = [entry for _, partitions in topics for entry in partitions]
    assert [_typed_values(entry) for entry in converted] == [_typed_values(entry) for entry in framed]


def _typed_values(entry) -> tuple:
    """Every field of a FetchPartition, the aborted transactions as pairs (None stays None)."""
    aborted = entry.aborted_transactions
    return tuple(getattr(entry, name) for name in _READ) + (
        None if aborted is None else [(a.producer_id, a.first_offset) for a in aborted], entry.records)


def test_decoded_partition_of_an_entry_lacking_fields() -> None:
    """A ShareFetch answer's entry has no offsets nor aborted list: those
    read as None, a missing error code as 0, a bytearray record set as bytes."""
    entry = decoded_partition(SimpleNamespace(partition_index=5, records=bytearray(b"\x01\x02")))
    assert (entry.partition_index, entry.error_code, entry.high_watermark, entry.last_stable_offset,
            entry.log_start_offset, entry.aborted_transactions) == (5, 0, None, None, None, None)
    assert type(entry.records) is bytes and entry.records == b"\x01\x02"
    listed = SimpleNamespace(partition_index=1, error_code=None, high_watermark=-1, last_stable_offset=10,
                             log_start_offset=2, aborted_transactions=[SimpleNamespace(producer_id=9, first_offset=4)],
                             records=None)
    entry = decoded_partition(listed)
    assert (entry.error_code, entry.high_watermark, entry.last_stable_offset, entry.log_start_offset) == (0, -1, 10, 2)
    assert [(a.producer_id, a.first_offset) for a in entry.aborted_transactions] == [(9, 4)]
    assert entry.records is None


def test_kept_fetch_requests_leave_the_rows_as_export_makes_them() -> None:
    """With the forensic APIs kept, a Fetch request is kept as its frame, its
    answer too unless it carries an error code (then decoded), and the
    exchange rows are an export's (the skim ran)."""
    capture = REPO / "captures" / "consume_group_kafka.pcap"
    exported = [ex.to_row() for ex in Analysis([str(capture)], ports_of(capture), keep_messages=False)]
    kept = list(Analysis([str(capture)], ports_of(capture), keep_messages=False, keep_apis=FORENSIC_APIS))
    assert [ex.to_row() for ex in kept] == exported
    kinds = {type(ex.request).__name__ for ex in kept if ex.api_key == FETCH and ex.status == "ok"}
    assert kinds == {"FetchRequestFrame"}
    answers = {f"{type(ex.response).__name__} errors={bool(ex.error_codes or ex.error_code)}"
               for ex in kept if ex.api_key == FETCH and ex.status == "ok"}
    assert "FetchResponseFrame errors=False" in answers
    assert answers <= {"FetchResponseFrame errors=False", "Response errors=True"}
