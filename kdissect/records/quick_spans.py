"""The forensic tallies' quick walk of a record set, compiled with mypyc.

`quick_spans(data, limit, produced)` reads the common case without building
Batch and Record objects: complete magic-2 data batches (a cut tail
skipped) whose CRC matches, whose codec inflates without a problem and
whose records parse exactly as declared. It gives one row per batch and the
offset after the last one the data covers; None for anything else (control
batches, older formats, damage), which the records decoder's walk answers,
problems included. `plain_figures` makes the rows the forensic tallies'
figures of a set (`SetFigures`, one `BatchSpan` a batch), which
kdissect.forensics.batches.set_figures gives, or the decoder's walk where
this one gives None (tests/forensics/test_batch_figures.py checks both walks
agree).

A row: (first, last, count, offsets or None when they run first..last
without holes, producer id, producer epoch, base sequence, transactional,
wire bytes, record bytes, first record's timestamp and newest timestamp or
None and None when one is negative, codec). The records are read without a
list or tuple a record: offsets are kept only for a batch with holes, and of
the timestamps only the two the tallies use (the lag history's).
Offsets are wire offsets, or with `produced` positions within the set (a
Produce request carries placeholders), as `kdissect records` numbers them.
"""

from __future__ import annotations

import zlib
from typing import Any, Final

from kdissect.records import codecs
from kdissect.records import crc as _crc32c
from kdissect.records.batch import (ATTR_CODEC, ATTR_CONTROL, ATTR_LOG_APPEND_TIME, ATTR_TRANSACTIONAL, CRC_START,
                                    HEADER_SIZE)
from kdissect.records.model import codec_name
from kdissect.records.unsnappy import inflate_snappy
from kdissect.records.wire import read_varint

SpanRow = tuple[int, int, int, list[int] | None, int, int, int, bool, int, int, int | None, int | None, str]

_HEADER_SIZE: Final = HEADER_SIZE
_CRC_START: Final = CRC_START
# (Final: the compiled walk reads them as C constants, not from the module's dict)
_ATTR_CODEC: Final = ATTR_CODEC
_ATTR_CONTROL: Final = ATTR_CONTROL
_ATTR_LOG_APPEND_TIME: Final = ATTR_LOG_APPEND_TIME
_ATTR_TRANSACTIONAL: Final = ATTR_TRANSACTIONAL
_SNAPPY: Final = codecs.SNAPPY
_GZIP: Final = codecs.GZIP
_LZ4: Final = codecs.LZ4
_OUTPUT_STEP: Final = 1 << 20  # output asked for per call (as codecs asks)
# every codec id's name (the id is three bits), as records.model.codec_name gives it
_CODEC_NAMES: Final = tuple(codec_name(codec_id) for codec_id in range(_ATTR_CODEC + 1))


class _Irregular(Exception):
    """A record set the quick walk leaves to the decoder."""


def quick_spans(data: bytes, limit: int, produced: bool) -> tuple[list[SpanRow], int | None] | None:
    """(rows, next offset) of a record set, or None: see the module docstring. Never raises."""
    try:
        return _walk(data, limit, produced)
    except Exception:  # _Irregular, or bytes a varint or struct read chokes on
        return None


def _int32(b: bytes, p: int) -> int:
    value = b[p] << 24 | b[p + 1] << 16 | b[p + 2] << 8 | b[p + 3]
    return value - (1 << 32) if value >= 1 << 31 else value


def _uint32(b: bytes, p: int) -> int:
    return b[p] << 24 | b[p + 1] << 16 | b[p + 2] << 8 | b[p + 3]


def _int16(b: bytes, p: int) -> int:
    value = b[p] << 8 | b[p + 1]
    return value - (1 << 16) if value >= 1 << 15 else value


def _int64(b: bytes, p: int) -> int:
    # (a shift and an or: mypyc's fast multiplication takes small factors only)
    return _int32(b, p) << 32 | _uint32(b, p + 4)


class _Walked:
    """What the walk found in one batch that its bytes from the attributes on
    (the CRC's range) decide, with the CRC and the limit it was walked with:
    everything in its row but the base offset's part. Offsets as deltas from
    the base offset: the first, the last, and all of them only when they have
    holes (None when they run first..last one by one)."""

    __slots__ = ("content", "crc", "limit", "count", "first_delta", "last_delta", "deltas", "record_bytes",
                 "first_stamp", "newest_stamp", "cost")

    def __init__(self, content: bytes, crc: int, limit: int, count: int, first_delta: int, last_delta: int,
                 deltas: list[int] | None, record_bytes: int, first_stamp: int | None,
                 newest_stamp: int | None) -> None:
        self.content = content
        self.crc = crc
        self.limit = limit
        self.count = count
        self.first_delta = first_delta
        self.last_delta = last_delta
        self.deltas = deltas
        self.record_bytes = record_bytes
        self.first_stamp = first_stamp
        self.newest_stamp = newest_stamp
        # what holding it costs, roughly (as when every stamp was held: the hold keeps the batches it kept)
        self.cost = len(content) + 40 * count + 400


class _RecentBatches:
    """The batches walked last, by CRC, up to RECENT_BATCH_BYTES.

    A batch fetched is the batch produced, byte for byte from its attributes
    on (the broker sets the base offset and the leader epoch, which lie
    before the CRC's range), and each consumer fetches it again: a batch whose
    CRC-covered bytes, CRC and limit equal one walked recently has that one's
    figures, without the CRC, the inflation and the record walk again (on
    record-heavy traffic they are most of the tallies' cost). Only batches the
    walk answered are held; past the budget, the oldest go until half of it
    is held."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.held = 0
        self.batches: dict[int, _Walked] = {}

    def find(self, crc: int, limit: int, content: bytes) -> _Walked | None:
        found = self.batches.get(crc)
        if found is None or found.limit != limit or found.content != content:
            return None
        return found

    def add(self, walked: _Walked) -> None:
        batches = self.batches
        replaced = batches.pop(walked.crc, None)
        if replaced is not None:
            self.held -= replaced.cost
        batches[walked.crc] = walked
        self.held += walked.cost
        if self.held > self.budget:
            self._keep_newest(self.budget // 2)

    def _keep_newest(self, budget: int) -> None:
        """Drop the oldest batches until at most `budget` is held: one pass now
        and then (popping the first key batch by batch scans the slots of the
        keys popped before it, thousands of instructions a batch)."""
        walks = list(self.batches.values())
        start = len(walks)
        held = 0
        while start > 0 and held + walks[start - 1].cost <= budget:
            start -= 1
            held += walks[start].cost
        self.batches = {walked.crc: walked for walked in walks[start:]}
        self.held = held

    def clear(self) -> None:
        self.batches.clear()
        self.held = 0


# the bytes of walked batches the quick walk holds for their second reading
# (a produced batch's fetch comes after the rest of the producer's connection
# in a Spark read task, which dissects connection after connection)
RECENT_BATCH_BYTES: Final = 16 << 20
_recent = _RecentBatches(RECENT_BATCH_BYTES)


def _walk(data: bytes, limit: int, produced: bool) -> tuple[list[SpanRow], int | None]:
    rows: list[SpanRow] = []
    next_offset: int | None = None
    position = 0
    pos = 0
    total = len(data)
    recent = _recent
    while pos < total:
        if total - pos < 17:
            break  # a cut tail (partial): skipped, as the decoder's walk skips it
        length = _int32(data, pos + 8)
        if length < 0:
            raise _Irregular
        end = pos + 12 + length
        if end > total:
            break  # a cut tail
        if data[pos + 16] != 2 or length < _HEADER_SIZE - 12:
            raise _Irregular
        # the batch header (records.batch.HEADER's fields), read in place
        # rather than through struct: the header fits (length checked above)
        base_offset = _int64(data, pos)
        crc = _uint32(data, pos + 17)
        attributes = _int16(data, pos + 21)
        last_delta = _int32(data, pos + 23)
        producer_id = _int64(data, pos + 43)
        producer_epoch = _int16(data, pos + 51)
        base_sequence = _int32(data, pos + 53)
        declared = _int32(data, pos + 57)
        if attributes & _ATTR_CONTROL or declared <= 0:
            raise _Irregular
        content = data[pos + _CRC_START:end]
        walked = recent.find(crc, limit, content)
        if walked is None:
            walked = _walk_batch(data, pos, end, content, crc, attributes, declared, base_offset, limit)
            recent.add(walked)
        count = walked.count
        if not produced:
            top = base_offset + max(last_delta, walked.last_delta)
            if next_offset is None or top + 1 > next_offset:
                next_offset = top + 1
        holes: list[int] | None = None
        if produced:
            first, last = position, position + count - 1
        else:
            first, last = base_offset + walked.first_delta, base_offset + walked.last_delta
            deltas = walked.deltas
            if deltas is not None:
                holes = [base_offset + delta for delta in deltas]
        position += count
        rows.append((first, last, count, holes, producer_id, producer_epoch, base_sequence,
                     bool(attributes & _ATTR_TRANSACTIONAL), 12 + length, walked.record_bytes,
                     walked.first_stamp, walked.newest_stamp, _CODEC_NAMES[attributes & _ATTR_CODEC]))
        pos = end
    return rows, next_offset


def _walk_batch(data: bytes, pos: int, end: int, content: bytes, crc: int, attributes: int, declared: int,
                base_offset: int, limit: int) -> _Walked:
    """The batch at `pos` walked: its CRC checked, its records inflated and read."""
    if _crc32c.crc32c(content) != crc:
        raise _Irregular
    codec_id = attributes & _ATTR_CODEC
    body = data[pos + _HEADER_SIZE:end]
    if codec_id == _SNAPPY:
        # most compressed batches: inflated without decompress's Inflated, on its path
        # (records.unsnappy); a SnappyStop, where decompress reports a problem, leaves
        # the set to the decoder's walk
        library = codecs.codec_library(_SNAPPY)
        if library is None:
            raise _Irregular
        body = inflate_snappy(library, body, limit)
    elif codec_id == _GZIP:
        body = _gunzip_whole(body, limit)
    elif codec_id == _LZ4:
        library = codecs.codec_library(_LZ4)
        if library is None:
            raise _Irregular
        body = _unlz4_whole(library, body, limit)
    elif codec_id:
        inflated = codecs.decompress(codec_id, body, limit, magic=2)
        if inflated.problems or inflated.over_limit:
            raise _Irregular
        body = inflated.data
    base_ts = _int64(data, pos + 27)
    max_ts = _int64(data, pos + 35)
    return _records(body, declared, base_ts, max_ts if attributes & _ATTR_LOG_APPEND_TIME else None,
                    content, crc, limit)


def _gunzip_whole(body: bytes, limit: int) -> bytes:
    """A body of one whole gzip (or zlib) member inflated in one call, as
    codecs.decompress inflates it piece by piece; _Irregular for anything
    else it would report or read on (cut, over the limit, data after the
    member: the decoder's walk answers those), as a zlib.error for damage."""
    inflater = zlib.decompressobj(wbits=47)  # gzip or zlib header, auto-detected (as codecs._gunzip)
    inflated = inflater.decompress(body, limit + 1)
    if not inflater.eof or inflater.unused_data or len(inflated) > limit:
        raise _Irregular
    return inflated


def _unlz4_whole(library: Any, body: bytes, limit: int) -> bytes:
    """A body of one whole LZ4 frame inflated without codecs.decompress's
    header repair and result object: the library checks the frame's header
    checksum, so a frame it takes has the checksum codecs finds right (its
    repair notes nothing; a Kafka pre-KIP-57 checksum or another mismatch,
    which codecs reports in a magic-2 batch, makes the library raise and the
    decoder's walk answer). _Irregular for a cut frame, the limit, or data
    after the frame."""
    inflater = library.LZ4FrameDecompressor()
    inflated: bytes = inflater.decompress(body, max_length=min(limit + 1, _OUTPUT_STEP))
    while not inflater.eof and len(inflated) <= limit:
        more = inflater.decompress(b"", max_length=min(limit - len(inflated) + 1, _OUTPUT_STEP))
        if not more:
            raise _Irregular  # the frame is cut: it needs more input than the body holds
        inflated += more
    if not inflater.eof or inflater.unused_data or len(inflated) > limit:
        raise _Irregular
    return inflated


def _varint(body: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint (one- and two-byte ones, most of them, read here;
    longer ones by records.wire.read_varint)."""
    byte = body[pos]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    second = body[pos + 1]
    if second < 0x80:
        raw = (byte & 0x7F) | second << 7
        return (raw >> 1) ^ -(raw & 1), pos + 2
    value: tuple[int, int] = read_varint(body, pos)
    return value


def _records(body: bytes, declared: int, base_ts: int, log_append_ts: int | None, content: bytes, crc: int,
             limit: int) -> _Walked:
    """The walk of exactly `declared` well-formed records filling `body` (else
    _Irregular), read as records.batch reads them: their offset deltas (the
    first, the last, all of them only when they have holes), the first
    record's timestamp and the newest (both None when one is negative)."""
    first_delta = last_delta = 0
    deltas: list[int] | None = None  # made at the first hole
    first_stamp = newest_stamp = 0
    negative = False
    pos = 0
    end = len(body)
    for index in range(declared):
        size, start = _varint(body, pos)
        stop = start + size
        if size < 6 or stop > end:
            raise _Irregular
        pos = start + 1  # after the record's attributes
        ts_delta, pos = _varint(body, pos)
        offset_delta, pos = _varint(body, pos)
        for _field in range(2):  # key, value
            length, pos = _varint(body, pos)
            if length > 0:
                pos += length
            elif length < -1:
                raise _Irregular
        headers, pos = _varint(body, pos)
        if headers:
            if headers < 0 or headers > stop - pos:
                raise _Irregular
            for _header in range(headers):
                length, pos = _varint(body, pos)
                if length < 0:  # a null header key
                    raise _Irregular
                pos += length
                length, pos = _varint(body, pos)
                if length > 0:
                    pos += length
                elif length < -1:
                    raise _Irregular
        if pos != stop:
            raise _Irregular
        stamp = base_ts + ts_delta if log_append_ts is None else log_append_ts
        if index == 0:
            first_delta = offset_delta
            first_stamp = newest_stamp = stamp
        else:
            if deltas is None and offset_delta != last_delta + 1:  # the first hole: every delta from here
                deltas = list(range(first_delta, last_delta + 1))
            if stamp > newest_stamp:
                newest_stamp = stamp
        if deltas is not None:
            deltas.append(offset_delta)
        last_delta = offset_delta
        if stamp < 0:
            negative = True
    if pos != end:
        raise _Irregular
    if negative:
        return _Walked(content, crc, limit, declared, first_delta, last_delta, deltas, end, None, None)
    return _Walked(content, crc, limit, declared, first_delta, last_delta, deltas, end, first_stamp, newest_stamp)


# -- the figures of a record set (kdissect.forensics.batches.set_figures) ------------------------------


class BatchSpan:
    """One data batch: its records' offsets (wire offsets for fetched data,
    positions within the request's record set for produced data) and the
    producer fields of its header."""

    __slots__ = ("first", "last", "count", "offsets", "producer_id", "producer_epoch", "base_sequence",
                 "transactional", "wire_bytes", "record_bytes", "first_stamp", "newest_stamp")

    # (the producer fields as the records decoder gives them, whatever their type)
    def __init__(self, first: int, last: int, count: int, offsets: Any, producer_id: Any,
                 producer_epoch: Any, base_sequence: Any, transactional: Any, wire_bytes: int,
                 record_bytes: int, first_stamp: int | None = None, newest_stamp: int | None = None) -> None:
        self.first = first
        self.last = last
        self.count = count
        self.offsets = offsets  # None when the offsets run first..last without holes
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.transactional = transactional
        self.wire_bytes = wire_bytes
        self.record_bytes = record_bytes
        # the first record's timestamp (ms) and the newest of the batch's; None when one is missing or negative
        self.first_stamp = first_stamp
        self.newest_stamp = newest_stamp


class SetFigures:
    """The figures of one (topic, partition) record set."""

    __slots__ = ("records", "control_records", "record_bytes", "batch_bytes", "batches", "codecs", "spans",
                 "next_offset", "problems")

    def __init__(self) -> None:
        self.records = 0  # data records (what `kdissect records` lists with control null)
        self.control_records = 0
        self.record_bytes = 0  # uncompressed records sections of the data batches
        self.batch_bytes = 0  # the data batches as they are on the wire
        self.batches = 0
        self.codecs: list[str] = []
        self.spans: list[BatchSpan] = []
        self.next_offset: int | None = None  # after the last offset the data covers (control batches too)
        self.problems = 0  # batches with problems


def plain_figures(data: bytes, limit: int, produced: bool) -> SetFigures | None:
    """The figures of a record set from the quick walk's rows, or None where
    `quick_spans` gives None (kdissect.forensics.batches.set_figures then
    walks the records decoder's batches)."""
    found = quick_spans(data, limit, produced)
    if found is None:
        return None
    rows, next_offset = found
    figures = SetFigures()
    figures.next_offset = next_offset
    spans = figures.spans
    codecs_seen = figures.codecs
    records = record_bytes = batch_bytes = 0
    for first, last, count, offsets, producer_id, producer_epoch, base_sequence, transactional, wire, inflated, \
            first_stamp, newest_stamp, codec in rows:
        records += count
        record_bytes += inflated
        batch_bytes += wire
        if codec not in codecs_seen:
            codecs_seen.append(codec)
        spans.append(BatchSpan(first, last, count, offsets, producer_id, producer_epoch, base_sequence,
                               transactional, wire, inflated, first_stamp, newest_stamp))
    figures.records, figures.record_bytes, figures.batch_bytes, figures.batches = \
        records, record_bytes, batch_bytes, len(rows)
    return figures
