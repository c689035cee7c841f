"""OffsetCommit exchanges kept for the tables that read them, as their frames.

A pairer keeping the messages of some APIs (`Pairer(keep_apis=...)`: the
forensic tallies) keeps an OffsetCommit request, and an OffsetCommit answer
that carries no error code, as their frames, not decoded, where the skim
accepted them (the skim has checked them exactly as the full decoder
would). What the group tally (kdissect.forensics.groups) reads of a request
is read straight from the bytes here: the group id, the generation id (or
member epoch), the member id and each partition's topic, index and
committed offset. Of an answer without an error code it reads nothing but
that it came (a partition's error is all it looks for), so the frame is
kept only to say so. An answer carrying an error code is decoded and kept
whole, as is any message the skim turned down.

`OffsetCommitRequestFrame.commit()` gives what the group tally reads of the
decoded request (tests/conn/test_kept_offset_commit.py compares them on
every bundled capture, on damaged copies and on built frames of every
version).
"""

from __future__ import annotations

from struct import Struct

from kdissect.conn.arrivals import skip_tags_at
from kdissect.conn.kept_produce import length_at, request_body_at, topic_at

_OFFSET_COMMIT = 8
_INT32 = Struct(">i").unpack_from
_INT64 = Struct(">q").unpack_from
# (topic label, partition index, committed offset)
Committed = tuple[str | None, int, int]
# (group id, generation id or member epoch (-1 before v1), member id (None before v1), partitions in order)
Commit = tuple[str | None, int, str | None, list[Committed]]


class OffsetCommitRequestFrame:
    """An OffsetCommit request the skim accepted, kept as its frame (header included)."""

    __slots__ = ("frame",)

    def __init__(self, frame: bytes) -> None:
        self.frame = frame

    def commit(self) -> Commit:
        """(group id, generation id or member epoch, member id, [(topic
        label, partition, committed offset)]) in request order, labels as
        `kdissect.forensics.common.topic_label` gives them on the decoded request."""
        return read_offset_commit(self.frame)


class OffsetCommitResponseFrame:
    """An OffsetCommit response the skim accepted without any error code,
    kept as its frame (header included) and its request's api version."""

    __slots__ = ("frame", "version")

    def __init__(self, frame: bytes, version: int) -> None:
        self.frame = frame
        self.version = version


def _string_at(b: bytes, at: int, flexible: bool) -> tuple[str | None, int]:
    """A string at `at` (None for null) and the offset after it."""
    size, at = length_at(b, at, flexible, False)
    if size < 0:
        return None, at
    return b[at:at + size].decode("utf-8", "surrogateescape"), at + size


def read_offset_commit(b: bytes) -> Commit:
    """`OffsetCommitRequestFrame.commit` of a request frame the skim accepted
    (anything else may raise). The body by version: the group id; from v1
    the generation id and member id; from v7 the group instance id; in
    v2-4 the retention time; the topics, named by id from v10 (by name
    before), each with its partitions: index, committed offset, from v6 the
    leader epoch, in v1 only the commit time, the metadata. Flexible from v8."""
    version, at = request_body_at(b, _OFFSET_COMMIT)
    flexible = version >= 8
    group, at = _string_at(b, at, flexible)
    generation = -1
    member: str | None = None
    if version >= 1:
        generation = _INT32(b, at)[0]
        member, at = _string_at(b, at + 4, flexible)
    if version >= 7:
        size, at = length_at(b, at, flexible, False)  # group instance id (null: -1)
        at += max(size, 0)
    if 2 <= version <= 4:
        at += 8  # retention time
    # what follows a partition's committed offset: the leader epoch (v6+) or the commit time (v1)
    after_offset = 12 + (4 if version >= 6 else 8 if version == 1 else 0)
    committed: list[Committed] = []
    topics, at = length_at(b, at, flexible, True)
    for _ in range(max(topics, 0)):
        label, at = topic_at(b, at, version >= 10, flexible)
        count, at = length_at(b, at, flexible, True)
        for _ in range(max(count, 0)):
            committed.append((label, _INT32(b, at)[0], _INT64(b, at + 4)[0]))
            size, at = length_at(b, at + after_offset, flexible, False)  # metadata (null: -1)
            at += max(size, 0)
            if flexible:
                at = skip_tags_at(b, at)
        if flexible:
            at = skip_tags_at(b, at)
    return group, generation, member, committed
