"""What the forensic tables need from one partition's record data.

The records are decoded with the same `iter_batches` as `kdissect records`
(so a data record counted here is a row there, one for one); control batches
(transaction markers) are counted apart and partial batches (a Fetch
response cut at its byte limit) not at all, as there.
"""

from __future__ import annotations

from typing import Any

from kdissect.records.decode import iter_batches
# the figures' classes are compiled with the quick walk that makes most of them
from kdissect.records.quick_spans import BatchSpan, SetFigures, plain_figures


def set_figures(raw: bytes, limit: int, produced: bool) -> SetFigures:
    """Figures of a records field. `produced`: offsets are positions in the
    set (Produce requests carry placeholders), as `kdissect records` numbers
    them before adding the broker's base offset."""
    figures = plain_figures(raw, limit, produced)
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
        stamps = [record.timestamp for record in data]
        known = None not in stamps and min(stamps) >= 0  # type: ignore[type-var, operator]
        figures.spans.append(BatchSpan(first, last, len(data), None if contiguous else data_offsets,
                                       batch.producer_id, batch.producer_epoch, batch.base_sequence,
                                       batch.transactional, wire, inflated,
                                       stamps[0] if known else None, max(stamps) if known else None))  # type: ignore[type-var]
    return figures


# set_figures of the common case, compiled (kdissect.records.quick_spans.plain_figures)
_plain_figures = plain_figures


def span_offsets(span: BatchSpan) -> Any:
    """The offsets of a span's records (a range when they have no holes)."""
    return range(span.first, span.last + 1) if span.offsets is None else span.offsets
