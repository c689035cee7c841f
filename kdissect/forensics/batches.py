"""What the forensic tables need from one partition's record data.

The records are decoded with the same `iter_batches` as `kdissect records`
(so a data record counted here is a row there, one for one); control batches
(transaction markers) are counted apart and partial batches (a Fetch
response cut at its byte limit) not at all, as there.
"""

from __future__ import annotations

import struct
from typing import Any

from kdissect.records import codecs
from kdissect.records import crc as _crc32c
from kdissect.records.batch import (ATTR_CODEC, ATTR_CONTROL, ATTR_LOG_APPEND_TIME, ATTR_TRANSACTIONAL, CRC_START,
                                    HEADER, HEADER_SIZE)
from kdissect.records.decode import iter_batches
from kdissect.records.model import codec_name
from kdissect.records.wire import read_varint


class BatchSpan:
    """One data batch: its records' offsets (wire offsets for fetched data,
    positions within the request's record set for produced data) and the
    producer fields of its header."""

    __slots__ = ("first", "last", "count", "offsets", "producer_id", "producer_epoch", "base_sequence",
                 "transactional", "wire_bytes", "record_bytes", "stamps")

    def __init__(self, first: int, last: int, count: int, offsets: list[int] | None, producer_id: int | None,
                 producer_epoch: int | None, base_sequence: int | None, transactional: bool, wire_bytes: int,
                 record_bytes: int, stamps: tuple[int, ...] | None = None) -> None:
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
        self.stamps = stamps  # the records' timestamps (ms), in offset order; None when one is missing


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


def set_figures(raw: bytes, limit: int, produced: bool) -> SetFigures:
    """Figures of a records field. `produced`: offsets are positions in the
    set (Produce requests carry placeholders), as `kdissect records` numbers
    them before adding the broker's base offset."""
    figures = _plain_figures(raw, limit, produced)
    return figures if figures is not None else _decoded_figures(raw, limit, produced)


def _decoded_figures(raw: bytes, limit: int, produced: bool) -> SetFigures:
    """set_figures through the records decoder (every case, problems included)."""
    figures = SetFigures()
    position = 0
    for batch in iter_batches(raw, limit):
        if batch.partial:
            continue
        records = batch.records
        count = len(records)
        if batch.problems:
            figures.problems += 1
        if not produced:
            end = batch.base_offset + batch.last_offset_delta if batch.last_offset_delta is not None else None
            top: int | None
            if records:
                top = records[-1].offset if end is None else max(end, records[-1].offset)
            else:
                top = end
            if top is not None and (figures.next_offset is None or top + 1 > figures.next_offset):
                figures.next_offset = top + 1
        data = [record for record in records if record.control is None]
        figures.control_records += count - len(data)
        if batch.control or not data:
            position += count
            continue
        data_offsets: Any
        if produced and len(data) == count:  # no control record among them: positions without holes
            data_offsets = range(position, position + count)
        elif produced:
            data_offsets = [position + i for i, record in enumerate(records) if record.control is None]
        else:
            data_offsets = [record.offset for record in data]
        position += count
        first, last = data_offsets[0], data_offsets[-1]
        # strictly increasing, from first to last without a hole: exactly first..last
        contiguous = last - first + 1 == len(data_offsets) and (
            type(data_offsets) is range or data_offsets == list(range(first, last + 1)))
        wire = 12 + batch.length
        inflated = batch.uncompressed_bytes or 0
        figures.records += len(data)
        figures.record_bytes += inflated
        figures.batch_bytes += wire
        figures.batches += 1
        if batch.codec not in figures.codecs:
            figures.codecs.append(batch.codec)
        stamps = tuple([record.timestamp for record in data])
        figures.spans.append(BatchSpan(first, last, len(data), None if contiguous else data_offsets,
                                       batch.producer_id, batch.producer_epoch, batch.base_sequence,
                                       batch.transactional, wire, inflated,
                                       None if None in stamps or min(stamps) < 0 else stamps))  # type: ignore[arg-type, type-var, operator]
    return figures


_ENTRY_SIZE = struct.Struct(">i")


class _Irregular(Exception):
    """A record set the quick walk leaves to the decoder."""


def _plain_figures(raw: bytes, limit: int, produced: bool) -> SetFigures | None:
    """set_figures of the common case without building Batch and Record
    objects: complete magic-2 data batches (a cut tail skipped) whose CRC
    matches, whose codec inflates without a problem and whose records parse
    exactly as declared. Anything else (control batches, older formats,
    damage) gives None: the decoder's walk gives the figures, problems
    included. Both give the same figures where this one answers."""
    try:
        return _plain_walk(raw, limit, produced)
    except Exception:  # _Irregular, or bytes a varint or struct read chokes on
        return None


def _plain_walk(data: bytes, limit: int, produced: bool) -> SetFigures:
    figures = SetFigures()
    position = 0
    pos = 0
    total = len(data)
    while pos < total:
        if total - pos < 17:
            break  # a cut tail (partial): skipped, as the decoder's walk skips it
        length = _ENTRY_SIZE.unpack_from(data, pos + 8)[0]
        if length < 0:
            raise _Irregular
        end = pos + 12 + length
        if end > total:
            break  # a cut tail
        if data[pos + 16] != 2 or length < HEADER_SIZE - 12:
            raise _Irregular
        (base_offset, _length, _epoch, _magic, crc, attributes, last_delta, base_ts, max_ts, producer_id,
         producer_epoch, base_sequence, declared) = HEADER.unpack_from(data, pos)
        if attributes & ATTR_CONTROL or declared <= 0:
            raise _Irregular
        if _crc32c.crc32c(data[pos + CRC_START:end]) != crc:
            raise _Irregular
        codec_id = attributes & ATTR_CODEC
        body = data[pos + HEADER_SIZE:end]
        if codec_id:
            inflated = codecs.decompress(codec_id, body, limit, magic=2)
            if inflated.problems or inflated.over_limit:
                raise _Irregular
            body = inflated.data
        offsets, stamps = _record_offsets(body, declared, base_offset, base_ts,
                                          max_ts if attributes & ATTR_LOG_APPEND_TIME else None)
        count = len(offsets)
        if not produced:
            top = max(base_offset + last_delta, offsets[-1])
            if figures.next_offset is None or top + 1 > figures.next_offset:
                figures.next_offset = top + 1
        data_offsets: Any = range(position, position + count) if produced else offsets
        position += count
        first, last = data_offsets[0], data_offsets[-1]
        contiguous = last - first + 1 == count and (produced or data_offsets == list(range(first, last + 1)))
        wire = 12 + length
        inflated_bytes = len(body)
        figures.records += count
        figures.record_bytes += inflated_bytes
        figures.batch_bytes += wire
        figures.batches += 1
        codec = codec_name(codec_id)
        if codec not in figures.codecs:
            figures.codecs.append(codec)
        figures.spans.append(BatchSpan(first, last, count, None if contiguous else data_offsets,
                                       producer_id, producer_epoch, base_sequence,
                                       bool(attributes & ATTR_TRANSACTIONAL), wire, inflated_bytes,
                                       None if min(stamps) < 0 else tuple(stamps)))
        pos = end
    return figures


def _record_offsets(body: bytes, declared: int, base_offset: int, base_ts: int,
                    log_append_ts: int | None) -> tuple[list[int], list[int]]:
    """The offsets and timestamps of exactly `declared` well-formed records
    filling `body` (else _Irregular), read as records.batch reads them."""
    offsets: list[int] = []
    stamps: list[int] = []
    pos = 0
    end = len(body)
    for _ in range(declared):
        # one-byte varints (most of them) read inline, as records.batch does
        size = body[pos]
        if size < 0x80:
            size, start = (size >> 1) ^ -(size & 1), pos + 1
        else:
            size, start = read_varint(body, pos)
        stop = start + size
        if size < 6 or stop > end:
            raise _Irregular
        pos = start + 1  # after the record's attributes
        ts_delta = body[pos]
        if ts_delta < 0x80:
            ts_delta, pos = (ts_delta >> 1) ^ -(ts_delta & 1), pos + 1
        else:
            ts_delta, pos = read_varint(body, pos)
        offset_delta = body[pos]
        if offset_delta < 0x80:
            offset_delta, pos = (offset_delta >> 1) ^ -(offset_delta & 1), pos + 1
        else:
            offset_delta, pos = read_varint(body, pos)
        for _field in range(2):  # key, value
            length = body[pos]
            if length < 0x80:
                length, pos = (length >> 1) ^ -(length & 1), pos + 1
            else:
                length, pos = read_varint(body, pos)
            if length > 0:
                pos += length
            elif length < -1:
                raise _Irregular
        headers = body[pos]
        if headers < 0x80:
            headers, pos = (headers >> 1) ^ -(headers & 1), pos + 1
        else:
            headers, pos = read_varint(body, pos)
        if headers:
            if headers < 0 or headers > stop - pos:
                raise _Irregular
            for _header in range(headers):
                length, pos = read_varint(body, pos)
                if length < 0:  # a null header key
                    raise _Irregular
                pos += length
                length, pos = read_varint(body, pos)
                if length > 0:
                    pos += length
                elif length < -1:
                    raise _Irregular
        if pos != stop:
            raise _Irregular
        offsets.append(base_offset + offset_delta)
        stamps.append(base_ts + ts_delta if log_append_ts is None else log_append_ts)
    if pos != end:
        raise _Irregular
    return offsets, stamps


def span_offsets(span: BatchSpan) -> Any:
    """The offsets of a span's records (a range when they have no holes)."""
    return range(span.first, span.last + 1) if span.offsets is None else span.offsets
