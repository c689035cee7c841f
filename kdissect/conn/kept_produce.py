"""Produce exchanges kept for the tables that read them, as their frames.

A pairer keeping the messages of some APIs (`Pairer(keep_apis=...)`: the
forensic tallies) keeps a Produce's messages as frames, not decoded: the
skim has checked them exactly as the full decoder would, and what the
tallies read of them (the transactional id, each partition's record set,
each partition's base offset) is read straight from the bytes here, at a
fraction of a full decode's cost. A Produce answer carrying an error code
is decoded and kept whole (its per-partition errors are wanted too), as is
any message the skim turned down.

`produce_parts(ex)` and `produce_answers(ex)` give the same values from
either form (tests/conn/test_kept_produce.py compares them on every
bundled capture).
"""

from __future__ import annotations

from struct import Struct
from typing import Any, Final

from kdissect.conn.arrivals import read_produce_bases
from kdissect.protocol.headers import request_layout
from kdissect.protocol.primitives import read_uvarint
from kdissect.protocol.schema import resolve_version
from kdissect.protocol.topics import topic_label

_INT16 = Struct(">h").unpack_from
_INT32 = Struct(">i").unpack_from
# a Produce answer's api version -> the body version it is read as
_BODY_VERSIONS: Final[dict[int, int]] = {}
# (label, partition index, raw record set or None)
Part = tuple[Any, Any, Any]


class ProduceRequestFrame:
    """A Produce request the skim accepted, kept as its frame (header included)."""

    __slots__ = ("frame",)

    def __init__(self, frame: bytes) -> None:
        self.frame = frame

    def parts(self) -> tuple[str | None, list[Part]]:
        """(transactional id, [(topic label, partition, record set or None)])
        of every partition entry, in order (labels as
        `kdissect.forensics.common.topic_label` gives them on the decoded request)."""
        return read_produce_request(self.frame)


class ProduceResponseFrame:
    """A Produce response the skim accepted without any error code, kept as
    its frame (header included) and its request's api version."""

    __slots__ = ("frame", "version")

    def __init__(self, frame: bytes, version: int) -> None:
        self.frame = frame
        self.version = version


def _uvarint(b: bytes, at: int) -> tuple[int, int]:
    byte = b[at]
    if byte < 0x80:
        return byte, at + 1
    return read_uvarint(b, at)


def _skip_tags(b: bytes, at: int) -> int:
    if b[at] == 0:
        return at + 1
    count, at = read_uvarint(b, at)
    for _ in range(count):
        _tag, at = read_uvarint(b, at)
        size, at = read_uvarint(b, at)
        at += size
    return at


def read_produce_request(b: bytes) -> tuple[str | None, list[Part]]:
    """`ProduceRequestFrame.parts` of a request frame the skim accepted
    (anything else may raise)."""
    header_version, version, _assumed = request_layout(0, _INT16(b, 2)[0])
    at = 10 + max(_INT16(b, 8)[0], 0)  # api key, version, correlation id, client id
    if header_version >= 2:
        at = _skip_tags(b, at)
    flexible = version >= 9
    transactional_id = None
    if version >= 3:
        if flexible:
            size, at = _uvarint(b, at)
            size -= 1
        else:
            size = _INT16(b, at)[0]
            at += 2
        if size >= 0:
            transactional_id = str(b[at:at + size], "utf-8", "surrogateescape")
            at += size
    at += 6  # acks, timeout
    if flexible:
        topics, at = _uvarint(b, at)
        topics -= 1
    else:
        topics = _INT32(b, at)[0]
        at += 4
    parts: list[Part] = []
    for _ in range(max(topics, 0)):
        if version >= 13:
            label = topic_label(None, b[at:at + 16])
            at += 16
        else:
            if flexible:
                size, at = _uvarint(b, at)
                size -= 1
            else:
                size = _INT16(b, at)[0]
                at += 2
            name = str(b[at:at + size], "utf-8", "surrogateescape") if size > 0 else None
            at += max(size, 0)
            label = name or None
        if flexible:
            count, at = _uvarint(b, at)
            count -= 1
        else:
            count = _INT32(b, at)[0]
            at += 4
        for _ in range(max(count, 0)):
            index = _INT32(b, at)[0]
            at += 4
            if flexible:
                size, at = _uvarint(b, at)
                size -= 1
            else:
                size = _INT32(b, at)[0]
                at += 4
            raw = None
            if size >= 0:
                raw = b[at:at + size]
                at += size
            if flexible:
                at = _skip_tags(b, at)
            parts.append((label, index, raw))
        if flexible:
            at = _skip_tags(b, at)
    return transactional_id, parts


def produce_parts(ex: Any) -> tuple[str | None, list[Part]]:
    """(transactional id, parts) of a Produce exchange's kept request, in
    either form (a decoded request, or a ProduceRequestFrame)."""
    request = ex.request
    if type(request) is ProduceRequestFrame:
        return request.parts()
    body = request.body
    parts: list[Part] = []
    for topic in getattr(body, "topic_data", None) or ():
        name = getattr(topic, "name", None)
        if not name:
            topic_id = getattr(topic, "topic_id", None)
            name = None if topic_id is None else str(topic_id)
        for entry in getattr(topic, "partition_data", None) or ():
            parts.append((name, entry.index, getattr(entry, "records", None)))
    return getattr(body, "transactional_id", None), parts


def produce_answers(ex: Any, decoded_results: Any) -> Any:
    """(topic, partition) -> (base offset, error code) of a Produce
    exchange's answer, or why there is none, whatever form it was kept in;
    `decoded_results`: the reader of a decoded answer
    (kdissect.records.access.produce_results)."""
    response = ex.response
    if type(response) is not ProduceResponseFrame:
        return decoded_results(ex)
    version = _BODY_VERSIONS.get(response.version)
    if version is None:
        version = _BODY_VERSIONS[response.version] = resolve_version(0, response.version, "response")[0]
    bases = read_produce_bases(response.frame, version)
    if bases is None:  # (the skim read it: not expected)
        raise ValueError("a kept Produce answer does not read")
    # no error code anywhere in it: every partition answered without error;
    # one whose base offset is unknown (-1) is left out, which the tallies
    # read alike (no offset, no error); an empty name is no label (as on the
    # decoded answer)
    return {(label or None, partition): (base, 0) for (label, partition), base in bases.items()}
