"""What the forensic tables need from one partition's record data.

The records are decoded with the same `iter_batches` as `kdissect records`
(so a data record counted here is a row there, one for one); control batches
(transaction markers) are counted apart and partial batches (a Fetch
response cut at its byte limit) not at all, as there.
"""

from __future__ import annotations

from typing import Any

from kdissect.records.decode import iter_batches
from kdissect.records.quick_spans import quick_spans


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


def _plain_figures(raw: bytes, limit: int, produced: bool) -> SetFigures | None:
    """set_figures of the common case without building Batch and Record
    objects (kdissect.records.quick_spans, compiled): complete magic-2 data
    batches (a cut tail skipped) whose CRC matches, whose codec inflates
    without a problem and whose records parse exactly as declared. Anything
    else (control batches, older formats, damage) gives None: the decoder's
    walk gives the figures, problems included. Both give the same figures
    where this one answers."""
    found = quick_spans(raw, limit, produced)
    if found is None:
        return None
    rows, next_offset = found
    figures = SetFigures()
    figures.next_offset = next_offset
    spans = figures.spans
    codecs_seen = figures.codecs
    records = record_bytes = batch_bytes = 0
    for first, last, count, offsets, producer_id, producer_epoch, base_sequence, transactional, wire, inflated, \
            stamps, codec in rows:
        records += count
        record_bytes += inflated
        batch_bytes += wire
        if codec not in codecs_seen:
            codecs_seen.append(codec)
        spans.append(BatchSpan(first, last, count, offsets, producer_id, producer_epoch, base_sequence,
                               transactional, wire, inflated, stamps))
    figures.records, figures.record_bytes, figures.batch_bytes, figures.batches = \
        records, record_bytes, batch_bytes, len(rows)
    return figures


def span_offsets(span: BatchSpan) -> Any:
    """The offsets of a span's records (a range when they have no holes)."""
    return range(span.first, span.last + 1) if span.offsets is None else span.offsets
