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

from typing import Any, Final

from kdissect.conn.arrivals import int16_at, int32_at, read_produce_bases, skip_tags_at, uvarint_at
from kdissect.conn.kept_reading import response_body_version
from kdissect.protocol.headers import request_layout
from kdissect.protocol.topics import topic_label

# (api key << 16 | api version) of a kept request -> (header version, body
# version), from protocol.headers.request_layout (a Python call; the kept
# frames' readers run once per exchange)
_REQUEST_LAYOUTS: Final[dict[int, tuple[int, int]]] = {}
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


def length_at(b: bytes, at: int, flexible: bool, wide: bool) -> tuple[int, int]:
    """A length or count at `at` (-1 for null) and the offset after it:
    compact (a varint of n + 1) in flexible versions, else INT32 if `wide`,
    INT16 if not."""
    if flexible:
        size, at = uvarint_at(b, at)
        return size - 1, at
    if wide:
        return int32_at(b, at), at + 4
    return int16_at(b, at), at + 2


def topic_at(b: bytes, at: int, by_id: bool, flexible: bool) -> tuple[str | None, int]:
    """A topic's label at `at` (its id from 16 bytes where the version names
    topics `by_id`, else its name; as `protocol.topics.topic_label` gives it)
    and the offset after it."""
    if by_id:
        return topic_label(None, b[at:at + 16]), at + 16
    size, at = length_at(b, at, flexible, False)
    name = b[at:at + size].decode("utf-8", "surrogateescape") if size > 0 else None
    return name or None, at + max(size, 0)


def request_body_at(b: bytes, api_key: int) -> tuple[int, int]:
    """(body version, offset of the body) of a kept request frame of
    `api_key` the skim accepted: past the header's api key, version,
    correlation id, client id and, from header v2 on, its tagged fields."""
    api_version = int16_at(b, 2)
    key = api_key << 16 | (api_version & 0xFFFF)
    layout = _REQUEST_LAYOUTS.get(key)
    if layout is None:
        header_version, version, _assumed = request_layout(api_key, api_version)
        layout = _REQUEST_LAYOUTS[key] = (header_version, version)
    header_version, version = layout
    at = 10 + max(int16_at(b, 8), 0)
    if header_version >= 2:
        at = skip_tags_at(b, at)
    return version, at


def read_produce_request(b: bytes) -> tuple[str | None, list[Part]]:
    """`ProduceRequestFrame.parts` of a request frame the skim accepted
    (anything else may raise)."""
    version, at = request_body_at(b, 0)
    flexible = version >= 9
    transactional_id = None
    if version >= 3:
        size, at = length_at(b, at, flexible, False)
        if size >= 0:
            transactional_id = b[at:at + size].decode("utf-8", "surrogateescape")
            at += size
    at += 6  # acks, timeout
    topics, at = length_at(b, at, flexible, True)
    parts: list[Part] = []
    for _ in range(max(topics, 0)):
        label, at = topic_at(b, at, version >= 13, flexible)
        count, at = length_at(b, at, flexible, True)
        for _ in range(max(count, 0)):
            index = int32_at(b, at)
            at += 4
            size, at = length_at(b, at, flexible, True)
            raw = None
            if size >= 0:
                raw = b[at:at + size]
                at += size
            if flexible:
                at = skip_tags_at(b, at)
            parts.append((label, index, raw))
        if flexible:
            at = skip_tags_at(b, at)
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
    # no error code anywhere in it: every partition answered without error;
    # one whose base offset is unknown (-1) is left out, which the tallies
    # read alike (no offset, no error); an empty name is no label (as on the
    # decoded answer)
    return {(label or None, partition): (base, 0) for (label, partition), base in response_bases(response).items()}


def response_bases(response: ProduceResponseFrame) -> dict[tuple[Any, Any], int]:
    """(topic label as the frame names it -- "" for an empty name --,
    partition) -> base offset of a kept answer (no error code anywhere in
    it); a partition whose base offset is unknown (-1) is left out.
    `produce_answers` without building its dict again (the tallies look
    their partitions up here, an empty name as "")."""
    version = response_body_version(0, response.version)
    bases = read_produce_bases(response.frame, version)
    if bases is None:  # (the skim read it: not expected)
        raise ValueError("a kept Produce answer does not read")
    return bases
