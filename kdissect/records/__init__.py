"""Record payloads: message sets (magic 0/1), record batches (magic 2), CRCs, codecs.

Public API (see docs/architecture.md):

- `record_sets(api_key, api_version, body, direction)` -> (topic, partition, raw bytes)
- `batch_counts(raw)` -> (records, record_bytes, codecs), from headers only
- `decode_records(raw, max_uncompressed=64 MiB)` -> DecodedRecords (iterate batches)
- `iter_batches(raw)` lazily; `iter_records(request_or_response_or_exchange)` for notebooks
- `exchange_columns(api_key, api_version, request_body, response_body)` -> row fields
- `render_records(message, api_key, api_version)` -> text lines (for `show -v`)
- `kdissect.records.table`: the record table (`exchange_record_rows`, RECORD_SCHEMA)

Decoding never raises for any input bytes; problems are text on each batch.
"""

from kdissect import native as _native

_native.extend(__path__, __name__)  # this package's compiled modules, when in use

from kdissect.records.access import (
    TopicRecord,
    exchange_columns,
    iter_batches_of,
    iter_records,
    record_sets,
)
from kdissect.records.codecs import DEFAULT_LIMIT, available_codecs
from kdissect.records.counts import batch_checks, batch_counts
from kdissect.records.decode import decode_records, iter_batches
from kdissect.records.model import Batch, DecodedRecords, Record
from kdissect.records.render import render_records

__all__ = [
    "DEFAULT_LIMIT",
    "Batch",
    "DecodedRecords",
    "Record",
    "TopicRecord",
    "available_codecs",
    "batch_checks",
    "batch_counts",
    "decode_records",
    "exchange_columns",
    "iter_batches",
    "iter_batches_of",
    "iter_records",
    "record_sets",
    "render_records",
]
