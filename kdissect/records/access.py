"""Find the `records` fields inside decoded Produce / Fetch / ShareFetch bodies.

Spec paths (field names in snake_case, as the protocol decoder exposes them):

- Produce request (key 0): topic_data[].name (v0-12) or .topic_id (v13+),
  .partition_data[].index, .records
- Fetch response (key 1): responses[].topic (v0-12) or .topic_id (v13+),
  .partitions[].partition_index, .records
- ShareFetch response (key 78): responses[].topic_id, .partitions[].partition_index, .records

Topics known only by id are given as the id's text form.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

from kdissect.protocol.apis import ApiKey
from kdissect.protocol.topics import topic_label
from kdissect.records.codecs import DEFAULT_LIMIT
from kdissect.records.counts import batch_checks, batch_counts, batch_figures
from kdissect.records.decode import iter_batches
from kdissect.records.model import Batch, Record

# plain ints for the per-exchange checks: reading an enum member costs ~0.3 µs in Python 3.11
_PRODUCE = int(ApiKey.PRODUCE)
_FETCHES = frozenset((int(ApiKey.FETCH), int(ApiKey.SHARE_FETCH)))  # responses carrying records
_REQUEST_DIRECTIONS = ("request", "produce")
_RESPONSE_DIRECTIONS = ("response", "fetch")


def _get(obj: Any, name: str, default: Any = None) -> Any:
    """Field access that works on attribute-style and mapping-style decoded bodies."""
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(name, default)
    value = getattr(obj, name, default)
    if value is default:
        try:
            return obj[name]
        except Exception:
            return default
    return value


def entry_topic_label(topic_entry: Any, name_field: str) -> str | None:
    """The label (protocol.topics.topic_label) of a decoded topic entry."""
    name = _get(topic_entry, name_field)
    return name if name else topic_label(None, _get(topic_entry, "topic_id"))


def record_sets(api_key: int, api_version: int, body: Any, direction: str) -> Iterator[tuple[str | None, int | None, bytes]]:
    """Yield (topic, partition, raw records bytes) for every non-empty records field."""
    if body is None:
        return
    if api_key == _PRODUCE and direction in _REQUEST_DIRECTIONS:
        topics, name_field, parts_field, index_field = "topic_data", "name", "partition_data", "index"
    elif api_key in _FETCHES and direction in _RESPONSE_DIRECTIONS:
        topics, name_field, parts_field, index_field = "responses", "topic", "partitions", "partition_index"
    else:
        return
    for topic_entry in _get(body, topics) or ():
        topic = entry_topic_label(topic_entry, name_field)
        for partition_entry in _get(topic_entry, parts_field) or ():
            raw = _get(partition_entry, "records")
            if raw:
                yield topic, _get(partition_entry, index_field), bytes(raw)


def _struct_record_sets(api_key: int, body: Any) -> list[tuple[str | None, int | None, bytes]]:
    """record_sets() of a decoded Struct body (Produce request or Fetch/ShareFetch
    response), reading attributes directly."""
    if api_key == _PRODUCE:
        topics, name_field, parts_field, index_field = "topic_data", "name", "partition_data", "index"
    else:
        topics, name_field, parts_field, index_field = "responses", "topic", "partitions", "partition_index"
    found = []
    for topic_entry in getattr(body, topics, None) or ():
        topic = None
        for partition_entry in getattr(topic_entry, parts_field, None) or ():
            raw = getattr(partition_entry, "records", None)
            if raw:
                if topic is None:
                    topic = entry_topic_label(topic_entry, name_field)
                found.append((topic, getattr(partition_entry, index_field, None), bytes(raw)))
    return found


def exchange_columns(api_key: int | None, api_version: int | None, request_body: Any,
                     response_body: Any, max_uncompressed: int = DEFAULT_LIMIT) -> dict[str, Any]:
    """Exchange-row figures for Produce (request) and Fetch/ShareFetch (response).

    Returns {} for other APIs, else {"records", "record_bytes", "codecs",
    "record_problems"}; the last is a list of problem texts (CRC mismatches,
    batches declaring more than the decompression limit) for the row's problems.
    Never raises.
    """
    if api_key == _PRODUCE:
        body = request_body
    elif api_key in _FETCHES:
        body = response_body
    else:
        return {}
    figures = record_figures(api_key, api_version, body, max_uncompressed)
    if figures is None:
        return {}
    records, record_bytes, names, problems = figures
    return {"records": records, "record_bytes": record_bytes, "codecs": names, "record_problems": problems}


def record_figures(api_key: int, api_version: int | None, body: Any, max_uncompressed: int = DEFAULT_LIMIT
                   ) -> tuple[int | None, int | None, list[str], list[str]] | None:
    """(records, record_bytes, codecs, problems) of the records in a Produce
    request body or a Fetch/ShareFetch response body (the values of
    `exchange_columns`); None for other APIs or no body. Never raises."""
    if body is None:
        return None
    if api_key == _PRODUCE:
        direction = "request"
    elif api_key in _FETCHES:
        direction = "response"
    else:
        return None
    if getattr(type(body), "_fields", None) is not None:  # a decoded Struct
        try:
            sets: Any = _struct_record_sets(api_key, body)
        except Exception as problem:  # an unexpected body shape must not break the row
            return 0, 0, [], [f"records not counted ({type(problem).__name__})"]
    else:
        sets = record_sets(api_key, api_version or 0, body, direction)
    return set_figures(sets, max_uncompressed)


def set_figures(sets: Any, max_uncompressed: int = DEFAULT_LIMIT
                ) -> tuple[int | None, int | None, list[str], list[str]]:
    """(records, record_bytes, codecs, problems) summed over record sets
    `(topic, partition, raw)` (raw: bytes-like, as batch_figures takes it), as
    `record_figures` gives them for a body holding those sets. Never raises."""
    records: int | None = 0
    record_bytes: int | None = 0
    names: list[str] = []
    problems: list[str] = []
    try:
        if type(sets) is list and len(sets) == 1:  # the common case, without the sums
            topic, partition, raw = sets[0]
            records, record_bytes, names, found = batch_figures(raw, max_uncompressed)
            if found:
                problems = [f"{topic}-{partition}: {text}" for text in found]
            return records, record_bytes, names, problems
        for topic, partition, raw in sets:
            count, size, codecs, found = batch_figures(raw, max_uncompressed)
            records = None if records is None or count is None else records + count
            record_bytes = None if record_bytes is None or size is None else record_bytes + size
            if codecs != names:
                names.extend(name for name in codecs if name not in names)
            if found:
                problems.extend(f"{topic}-{partition}: {text}" for text in found)
    except Exception as problem:  # an unexpected body shape must not break the row
        problems.append(f"records not counted ({type(problem).__name__})")
    return records, record_bytes, names, problems


class TopicRecord(NamedTuple):
    """One record with where it came from (for notebooks and the records command)."""

    topic: str | None
    partition: int | None
    batch: Batch
    record: Record


def _message_kind(message: Any, api_key: int | None, api_version: int | None) -> tuple[int | None, int | None, str, Any]:
    header = _get(message, "header")
    body = _get(message, "body", message)
    key = api_key if api_key is not None else _get(message, "api_key", _get(header, "api_key"))
    version = api_version if api_version is not None else _get(message, "api_version", _get(header, "api_version"))
    is_request = header is not None and _get(header, "client_id", "absent") != "absent"
    return key, version, "request" if is_request else "response", body


def iter_batches_of(message: Any, api_key: int | None = None, api_version: int | None = None, *,
                    max_uncompressed: int = DEFAULT_LIMIT) -> Iterator[tuple[str | None, int | None, Batch]]:
    """(topic, partition, batch) for a decoded Produce request or Fetch/ShareFetch response.

    Pass `api_key` (and `api_version`) for responses, which do not carry them.
    An `Exchange` (with `.request` / `.response`) is accepted too.
    """
    if _get(message, "request") is not None or _get(message, "response") is not None:
        key = _get(message, "api_key")
        if key == _PRODUCE:
            yield from iter_batches_of(_get(message, "request"), key, _get(message, "api_version"),
                                       max_uncompressed=max_uncompressed)
        elif key in _FETCHES:
            yield from iter_batches_of(_get(message, "response"), key, _get(message, "api_version"),
                                       max_uncompressed=max_uncompressed)
        return
    key, version, direction, body = _message_kind(message, api_key, api_version)
    if key is None:
        return
    if key == _PRODUCE:
        direction = "request"
    elif key in _FETCHES and api_key is not None:
        direction = "response"
    for topic, partition, raw in record_sets(key, version or 0, body, direction):
        for batch in iter_batches(raw, max_uncompressed):
            yield topic, partition, batch


def iter_records(message: Any, api_key: int | None = None, api_version: int | None = None, *,
                 max_uncompressed: int = DEFAULT_LIMIT) -> Iterator[TopicRecord]:
    """Every record of a decoded Produce request, Fetch/ShareFetch response or Exchange."""
    for topic, partition, batch in iter_batches_of(message, api_key, api_version, max_uncompressed=max_uncompressed):
        for record in batch.records:
            yield TopicRecord(topic, partition, batch, record)
