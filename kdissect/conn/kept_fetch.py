"""Fetch exchanges kept for the tables that read them, as their frames.

A pairer keeping the messages of some APIs (`Pairer(keep_apis=...)`: the
forensic tallies) keeps a Fetch request, and a Fetch answer that carries no
error code, as their frames, not decoded, where the skim accepted them (the
skim has checked them exactly as the full decoder would). What the tallies
read of them is read straight from the bytes here: of a request, the offset
it asks for in each partition (the consumer's position when the answer
brings no records); of an answer, each partition's index, error code, high
watermark, last stable and log start offsets, aborted transactions and
record set. A full decode built every field of every partition (a
consumer's request with its leader epochs, log start offsets and byte
limits cost about twenty times the skim). An answer carrying an error code
is decoded and kept whole (its per-partition errors are tabulated), as is
any message the skim turned down.

`FetchRequestFrame.asked()` and `FetchResponseFrame.topics()` give what
kdissect.forensics.core reads of the decoded messages
(tests/conn/test_kept_fetch.py compares them on every bundled capture and
on built frames of every version).
"""

from __future__ import annotations

from typing import Any, Final

from kdissect.conn.arrivals import int16_at, int32_at, int64_at, skip_tags_at
from kdissect.conn.kept_produce import length_at, request_body_at, topic_at
from kdissect.conn.kept_reading import response_body_version

_FETCH: Final = 1


class FetchRequestFrame:
    """A Fetch request the skim accepted, kept as its frame (header included)."""

    __slots__ = ("frame",)

    def __init__(self, frame: bytes) -> None:
        self.frame = frame

    def asked(self) -> dict[tuple[str | None, int], int]:
        """(topic label, partition) -> the offset asked for, in request order
        (a partition named twice: its last entry), labels as
        `kdissect.forensics.common.topic_label` gives them on the decoded request."""
        return read_fetch_offsets(self.frame)


def read_fetch_offsets(b: bytes) -> dict[tuple[str | None, int], int]:
    """`FetchRequestFrame.asked` of a request frame the skim accepted
    (anything else may raise)."""
    version, at = request_body_at(b, _FETCH)
    flexible = version >= 12
    # replica id (v0-14), max wait, min bytes, max bytes (v3+), isolation
    # level (v4+), session id and epoch (v7+); the v15+ replica state is a tag
    at += (4 if version <= 14 else 0) + 8 + (4 if version >= 3 else 0) + (1 if version >= 4 else 0) \
        + (8 if version >= 7 else 0)
    # after a partition's fetch offset: last fetched epoch (v12+), log start
    # offset (v5+), partition max bytes
    tail = (4 if version >= 12 else 0) + (8 if version >= 5 else 0) + 4
    topics, at = length_at(b, at, flexible, True)
    asked: dict[tuple[str | None, int], int] = {}
    for _ in range(max(topics, 0)):
        label, at = topic_at(b, at, version >= 13, flexible)
        count, at = length_at(b, at, flexible, True)
        for _ in range(max(count, 0)):
            partition = int32_at(b, at)
            at += 8 if version >= 9 else 4  # and the current leader epoch (v9+)
            asked[(label, partition)] = int64_at(b, at)
            at += 8 + tail
            if flexible:
                at = skip_tags_at(b, at)
        if flexible:
            at = skip_tags_at(b, at)
    return asked


class AbortedTransaction:
    """One entry of a partition's aborted transactions (read_committed answers)."""

    __slots__ = ("producer_id", "first_offset")

    def __init__(self, producer_id: int, first_offset: int) -> None:
        self.producer_id = producer_id
        self.first_offset = first_offset


class FetchPartition:
    """What the tallies read of one partition of a Fetch answer, under the
    decoded entry's field names (None for a field the version lacks, as
    `getattr(entry, name, None)` gives on a decoded one; `decoded_partition`
    makes one of a decoded entry, so the tallies read one typed form)."""

    __slots__ = ("partition_index", "error_code", "high_watermark", "last_stable_offset", "log_start_offset",
                 "aborted_transactions", "records")

    def __init__(self, partition_index: int, error_code: int, high_watermark: int | None, last_stable_offset: int | None,
                 log_start_offset: int | None, aborted_transactions: list[AbortedTransaction] | None,
                 records: bytes | None) -> None:
        self.partition_index = partition_index
        self.error_code = error_code
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.log_start_offset = log_start_offset
        self.aborted_transactions = aborted_transactions
        self.records = records


def decoded_partition(entry: Any) -> FetchPartition:
    """The FetchPartition of a decoded Fetch (or ShareFetch) answer's
    partition entry: each field as `getattr(entry, name, None)` gives it (an
    error code of None or a missing one as 0), as the frame's reader gives
    them (tests/conn/test_kept_fetch.py)."""
    raw = getattr(entry, "records", None)
    listed = getattr(entry, "aborted_transactions", None)
    aborted = None if listed is None else [AbortedTransaction(item.producer_id, item.first_offset)
                                           for item in listed]
    return FetchPartition(entry.partition_index, getattr(entry, "error_code", 0) or 0,
                          getattr(entry, "high_watermark", None), getattr(entry, "last_stable_offset", None),
                          getattr(entry, "log_start_offset", None), aborted,
                          raw if raw is None or type(raw) is bytes else bytes(raw))


class FetchResponseFrame:
    """A Fetch response the skim accepted without any error code, kept as
    its frame (header included) and its request's api version."""

    __slots__ = ("frame", "version")

    def __init__(self, frame: bytes, version: int) -> None:
        self.frame = frame
        self.version = version

    def topics(self) -> list[tuple[str | None, list[FetchPartition]]]:
        """(topic label, partitions) of every topic, in order (labels as
        `kdissect.forensics.common.topic_label` gives them on the decoded answer)."""
        version = response_body_version(_FETCH, self.version)
        return read_fetch_partitions(self.frame, version)


def read_fetch_partitions(b: bytes, version: int) -> list[tuple[str | None, list[FetchPartition]]]:
    """`FetchResponseFrame.topics` of a response frame of body `version`
    the skim accepted (anything else may raise)."""
    flexible = version >= 12
    at = skip_tags_at(b, 4) if flexible else 4  # correlation id, header tags
    # throttle time (v1+), error code and session id (v7+)
    at += (4 if version >= 1 else 0) + (6 if version >= 7 else 0)
    topics, at = length_at(b, at, flexible, True)
    found: list[tuple[str | None, list[FetchPartition]]] = []
    for _ in range(max(topics, 0)):
        label, at = topic_at(b, at, version >= 13, flexible)
        count, at = length_at(b, at, flexible, True)
        partitions: list[FetchPartition] = []
        for _ in range(max(count, 0)):
            index = int32_at(b, at)
            error = int16_at(b, at + 4)
            high_watermark = int64_at(b, at + 6)
            at += 14
            last_stable: int | None = None
            log_start: int | None = None
            aborted: list[AbortedTransaction] | None = None
            if version >= 4:
                last_stable = int64_at(b, at)
                at += 8
            if version >= 5:
                log_start = int64_at(b, at)
                at += 8
            if version >= 4:
                listed, at = length_at(b, at, flexible, True)
                if listed >= 0:
                    aborted = []
                    for _ in range(listed):
                        aborted.append(AbortedTransaction(int64_at(b, at), int64_at(b, at + 8)))
                        at += 16
                        if flexible:
                            at = skip_tags_at(b, at)
            if version >= 11:
                at += 4  # preferred read replica
            size, at = length_at(b, at, flexible, True)
            records = b[at:at + size] if size >= 0 else None
            at += max(size, 0)
            if flexible:
                at = skip_tags_at(b, at)  # diverging epoch, current leader, snapshot id
            partitions.append(FetchPartition(index, error, high_watermark, last_stable, log_start, aborted, records))
        if flexible:
            at = skip_tags_at(b, at)
        found.append((label, partitions))
    return found
