"""The record table: one row per record, for `kdissect records` and notebooks.

Byte fields (key, value, header values; header keys that are not UTF-8) are
text when they are valid UTF-8 and `"base64:<data>"` otherwise, so every
format (JSONL, CSV, Parquet) holds them as strings.

Offsets: a fetched record's offset is on the wire. A produced record's is
not (the client sends placeholders): it is the partition's `base_offset` from
the ProduceResponse plus the record's position in the partition's record
set. When the response is missing (acks=0, not captured) or failed for that
partition, the offset is null and the row's problems say why.
"""

from __future__ import annotations

import base64
from typing import Any

import pyarrow as pa

from kdissect.protocol.apis import ApiKey
from kdissect.protocol.topics import TopicNames
from kdissect.records.access import entry_topic_label, record_sets
from kdissect.records.codecs import DEFAULT_LIMIT
from kdissect.records.decode import iter_batches
from kdissect.records.model import Batch, Record

# plain ints for the per-exchange checks: reading an enum member costs ~0.3 µs in Python 3.11
_PRODUCE = int(ApiKey.PRODUCE)
_FETCHES = frozenset((int(ApiKey.FETCH), int(ApiKey.SHARE_FETCH)))

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
# record bytes: UTF-8 text or "base64:<data>" (lossless), not Kafka strings
RECORD_BYTE_TEXT_COLUMNS = frozenset(("key", "value", "headers"))


def text_or_base64(data: bytes | str | None) -> str | None:
    if data is None or isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(data).decode("ascii")


def record_row(record: Record, batch: Batch, *, direction: str, capture: str | None, stream: int | None,
               correlation_id: int | None, topic: str | None, partition: int | None,
               offset: Any = "wire", offset_problem: str | None = None) -> dict[str, Any]:
    """One row; `offset` replaces the record's own (produced records), with
    `offset_problem` when it is not known."""
    crc_ok = batch.crc_ok
    if record.crc_ok is False:  # an inner message (magic 0/1) with its own bad CRC
        crc_ok = False
    problems = list(batch.problems)
    if offset_problem:
        problems.append(offset_problem)
    return {
        "direction": direction,
        "capture": capture,
        "stream": stream,
        "correlation_id": correlation_id,
        "topic": topic,
        "partition": partition,
        "offset": record.offset if offset == "wire" else offset,
        "timestamp": record.timestamp,
        "timestamp_type": batch.timestamp_type,
        "key": text_or_base64(record.key),
        "value": text_or_base64(record.value),
        "headers": [[text_or_base64(k), text_or_base64(v)] for k, v in record.headers],
        "magic": batch.magic,
        "codec": batch.codec,
        "crc_ok": crc_ok,
        "control": record.control,
        "problems": problems,
    }


def produce_results(ex: Any) -> dict[tuple[str | None, int | None], tuple[int | None, int]] | str:
    """(topic, partition) -> (base_offset, error_code) from a Produce
    exchange's decoded response, or why there is none."""
    if ex.response is None:
        if not ex.expects_response:
            return "acks=0: the broker does not say which offset it gave"
        return "no response in the capture: offset unknown"
    results: dict[tuple[str | None, int | None], tuple[int | None, int]] = {}
    for topic in getattr(ex.response.body, "responses", None) or ():
        label = entry_topic_label(topic, "name")
        for partition in getattr(topic, "partition_responses", None) or ():
            results[(label, getattr(partition, "index", None))] = (getattr(partition, "base_offset", None),
                                                                   getattr(partition, "error_code", 0) or 0)
    return results


def _produced_offset(results: dict | str, topic: str | None, partition: int | None,
                     position: int) -> tuple[int | None, str | None]:
    if isinstance(results, str):
        return None, results
    found = results.get((topic, partition))
    if found is None:
        return None, "the response does not name this partition: offset unknown"
    base, error = found
    if error:
        from kdissect.protocol.errors import error_name

        return None, f"produce failed ({error_name(error)}): no offset"
    if base is None or base < 0:
        return None, "the response gives no base offset"
    return base + position, None


class RecordTally:
    """What `exchange_record_rows` saw, including batches that gave no rows."""

    __slots__ = ("rows", "produce", "fetch", "batches", "partial", "troubled", "over_limit")

    def __init__(self) -> None:
        self.rows = self.produce = self.fetch = self.batches = 0
        self.partial = self.troubled = self.over_limit = 0

    def lines(self) -> list[str]:
        return [
            f"records: {self.rows} rows ({self.produce} produced, {self.fetch} fetched) from {self.batches} batches",
            f"records: {self.partial} partial batches at the end of record data (cut by the broker, not decoded)",
            f"records: {self.troubled} batches with problems ({self.over_limit} over the decompression limit)",
        ]


def exchange_record_rows(exchanges: Any, topics: frozenset[str] = frozenset(), max_uncompressed: int | None = None,
                tally: RecordTally | None = None, names: TopicNames | None = None):
    """Rows of the record table for Exchanges decoded with their messages kept
    (`keep_messages=True`). Topics known only by id are named by the messages
    seen before them that pair the id with a name (Metadata, CreateTopics,
    DescribeTopicPartitions ...: kdissect.protocol.topics), learned into
    `names` as the rows stream out."""
    limit = max_uncompressed or DEFAULT_LIMIT
    tally = tally if tally is not None else RecordTally()
    names = names if names is not None else TopicNames()
    for ex in exchanges:
        key = ex.api_key
        names.learn_exchange(ex)
        if key == _PRODUCE and ex.request is not None:
            direction, body, side = "produce", ex.request.body, "request"
        elif key in _FETCHES and ex.response is not None:
            direction, body, side = "fetch", ex.response.body, "response"
        else:
            continue
        results = produce_results(ex) if direction == "produce" else None
        for topic, partition, raw in record_sets(key, ex.api_version or 0, body, side):
            label = topic
            topic = names.name(topic) if topic else topic
            if topics and topic not in topics:
                continue
            position = 0  # of the record within the partition's record set
            for batch in iter_batches(raw, limit):
                tally.batches += 1
                tally.partial += batch.partial
                tally.troubled += bool(batch.problems)
                tally.over_limit += batch.over_limit
                for record in batch.records:
                    tally.rows += 1
                    if direction == "produce":
                        tally.produce += 1
                    else:
                        tally.fetch += 1
                    if results is None:
                        yield record_row(record, batch, direction=direction, capture=ex.capture, stream=ex.stream,
                                         correlation_id=ex.correlation_id, topic=topic, partition=partition)
                        continue
                    offset, problem = _produced_offset(results, label, partition, position)
                    position += 1
                    yield record_row(record, batch, direction=direction, capture=ex.capture, stream=ex.stream,
                                     correlation_id=ex.correlation_id, topic=topic, partition=partition,
                                     offset=offset, offset_problem=problem)
