"""The record table: one row per record, for `kdissect records` and notebooks.

Byte fields (key, value, header values; header keys that are not UTF-8) are
text when they are valid UTF-8 and `"base64:<data>"` otherwise, so every
format (JSONL, CSV, Parquet) holds them as strings.
"""

from __future__ import annotations

import base64
from typing import Any

import pyarrow as pa

from kdissect.records.model import Batch, Record

RECORD_COLUMNS: list[tuple[str, pa.DataType]] = [
    ("direction", pa.string()),  # "produce" or "fetch"
    ("capture", pa.string()),
    ("stream", pa.int64()),
    ("correlation_id", pa.int32()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", pa.int64()),  # milliseconds since the epoch; null for magic 0
    ("timestamp_type", pa.string()),  # "create_time" / "log_append_time"; null for magic 0
    ("key", pa.string()),
    ("value", pa.string()),
    ("headers", pa.list_(pa.list_(pa.string()))),  # [[key, value], ...]
    ("magic", pa.int8()),
    ("codec", pa.string()),
    ("crc_ok", pa.bool_()),
    ("control", pa.string()),  # "commit" / "abort" for control records, else null
    ("problems", pa.list_(pa.string())),  # problems of the record's batch
]
RECORD_COLUMN_NAMES = [name for name, _ in RECORD_COLUMNS]
RECORD_LIST_COLUMNS = frozenset(name for name, kind in RECORD_COLUMNS if pa.types.is_list(kind))
RECORD_SCHEMA = pa.schema(RECORD_COLUMNS)


def text_or_base64(data: bytes | str | None) -> str | None:
    if data is None or isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(data).decode("ascii")


def record_row(record: Record, batch: Batch, *, direction: str, capture: str | None, stream: int | None,
               correlation_id: int | None, topic: str | None, partition: int | None) -> dict[str, Any]:
    crc_ok = batch.crc_ok
    if record.crc_ok is False:  # an inner message (magic 0/1) with its own bad CRC
        crc_ok = False
    return {
        "direction": direction,
        "capture": capture,
        "stream": stream,
        "correlation_id": correlation_id,
        "topic": topic,
        "partition": partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "timestamp_type": batch.timestamp_type,
        "key": text_or_base64(record.key),
        "value": text_or_base64(record.value),
        "headers": [[text_or_base64(k), text_or_base64(v)] for k, v in record.headers],
        "magic": batch.magic,
        "codec": batch.codec,
        "crc_ok": crc_ok,
        "control": record.control,
        "problems": list(batch.problems),
    }
