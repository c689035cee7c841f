"""Text view of the record data in a Produce request / Fetch response (for `show -v`).

`render_records(message, api_key, api_version)` returns indented lines: one per
batch (header fields, CRC verdict, problems) and one per record (offset,
timestamp, key, value, headers), long values shortened.
"""

from __future__ import annotations

from typing import Any

from kdissect.records.access import iter_batches_of
from kdissect.records.codecs import DEFAULT_LIMIT
from kdissect.records.model import Batch, Record
from kdissect.text_escape import escape_text, quoted

_SHOWN = 60  # characters of a key/value shown before "..."


def _short(data: bytes | str | None) -> str:
    if data is None:
        return "null"
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is None or not text.isprintable():
            shown = data[: _SHOWN // 2].hex()
            return f"<{len(data)} bytes> {shown}" + ("..." if len(data) > _SHOWN // 2 else "")
        data = text
    return quoted(data[:_SHOWN]) + ("..." if len(data) > _SHOWN else "")


def batch_line(batch: Batch) -> str:
    if batch.partial:
        return f"partial batch at byte {batch.position} (cut off at the end of the data)"
    parts = [f"batch offset {batch.base_offset}", f"magic {batch.magic}", batch.codec]
    parts.append("crc ok" if batch.crc_ok else "CRC MISMATCH" if batch.crc_ok is False else "crc ?")
    parts.append(f"{len(batch.records)} records")
    if batch.magic == 2:
        parts.append(f"producer {batch.producer_id} epoch {batch.producer_epoch} seq {batch.base_sequence}")
    if batch.transactional:
        parts.append("transactional")
    if batch.control:
        parts.append("control")
    if batch.timestamp_type == "log_append_time":
        parts.append("log-append-time")
    line = ", ".join(parts)
    if batch.problems:
        line += "; problems: " + "; ".join(batch.problems)
    return line


def record_line(record: Record) -> str:
    if record.control:
        return f"offset {record.offset}: control {record.control} (coordinator epoch {record.coordinator_epoch})"
    line = f"offset {record.offset} ts {record.timestamp}: key {_short(record.key)} value {_short(record.value)}"
    if record.headers:
        line += " headers " + ", ".join(f"{_short(k)}={_short(v)}" for k, v in record.headers)
    return line


def render_records(message: Any, api_key: int | None = None, api_version: int | None = None, *,
                   max_uncompressed: int = DEFAULT_LIMIT, indent: str = "  ") -> list[str]:
    """Lines describing every batch and record of a decoded message (or Exchange); never raises."""
    lines: list[str] = []
    current = None
    try:
        for topic, partition, batch in iter_batches_of(message, api_key, api_version,
                                                       max_uncompressed=max_uncompressed):
            if (topic, partition) != current:
                current = (topic, partition)
                lines.append(f"records {escape_text(str(topic))} partition {partition}:")
            lines.append(indent + batch_line(batch))
            lines.extend(indent * 2 + record_line(record) for record in batch.records)
    except Exception as problem:  # a view must not break the command showing it
        lines.append(f"(records not rendered: {type(problem).__name__}: {problem})")
    return lines
