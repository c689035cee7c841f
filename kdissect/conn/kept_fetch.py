"""Fetch requests kept for the tables that read them, as their frames.

A pairer keeping the messages of some APIs (`Pairer(keep_apis=...)`: the
forensic tallies) keeps a Fetch request as its frame, not decoded, where
the skim accepted it (the skim has checked it exactly as the full decoder
would). The tallies read one thing of a Fetch request: the offset it asks
for in each partition (the consumer's position when the answer brings no
records), read straight from the bytes here; a full decode of a consumer's
request, every partition's leader epoch, log start offset and byte limit
included, cost about twenty times the skim. A request the skim turned down
is decoded and kept whole, as before.

`FetchRequestFrame.asked()` gives what kdissect.forensics.core reads of a
decoded request (tests/conn/test_kept_fetch.py compares them on every
bundled capture and on built frames of every version).
"""

from __future__ import annotations

from struct import Struct

from kdissect.conn.arrivals import skip_tags_at
from kdissect.conn.kept_produce import length_at
from kdissect.protocol.headers import request_layout
from kdissect.protocol.topics import topic_label

_FETCH = 1
_INT16 = Struct(">h").unpack_from
_INT32 = Struct(">i").unpack_from
_INT64 = Struct(">q").unpack_from


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
    header_version, version, _assumed = request_layout(_FETCH, _INT16(b, 2)[0])
    at = 10 + max(_INT16(b, 8)[0], 0)  # api key, version, correlation id, client id
    if header_version >= 2:
        at = skip_tags_at(b, at)
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
        label: str | None
        if version >= 13:
            label = topic_label(None, b[at:at + 16])
            at += 16
        else:
            size, at = length_at(b, at, flexible, False)
            name = str(b[at:at + size], "utf-8", "surrogateescape") if size > 0 else None
            at += max(size, 0)
            label = name or None
        count, at = length_at(b, at, flexible, True)
        for _ in range(max(count, 0)):
            partition = _INT32(b, at)[0]
            at += 8 if version >= 9 else 4  # and the current leader epoch (v9+)
            asked[(label, partition)] = _INT64(b, at)[0]
            at += 8 + tail
            if flexible:
                at = skip_tags_at(b, at)
        if flexible:
            at = skip_tags_at(b, at)
    return asked
