"""`kdissect records CAPTURE... [--port P] [--topic T] [-o FILE]`: one row per record.

Rows come from the record data of Produce requests (direction "produce") and
Fetch / ShareFetch responses (direction "fetch"); columns are
`kdissect.records.table.RECORD_COLUMNS`. Topics that the wire names only by id
(Produce v13+, Fetch v13+, ShareFetch) are named from Metadata responses seen
earlier in the capture, else given as the id.
"""

from __future__ import annotations

from typing import Any


from kdissect.commands.runtime import print_accounting, run_analysis, say
from kdissect.shared.options import OUTPUT_HELP, CaptureInputs, click_command, flag, integer, option


class RecordsOptions(CaptureInputs):
    """Write one row per produced or fetched record."""

    topics: tuple[str, ...] = option("-t", "--topic", multiple=True,
                                     help="Only records of this topic (repeatable).")
    output: str | None = option("-o", "--output", help=OUTPUT_HELP)
    max_uncompressed_mib: int = option(
        "--max-uncompressed-mib", kind=integer(1, 4096), default=64, show_default=True,
        help="Stop decompressing a batch beyond this many MiB (the batch is flagged).")
    quiet: bool = flag("-q", "--quiet", help="Do not print the summaries on stderr.")


def _open_record_writer(path: str | None) -> Any:
    """The `export` writers (same formats, extensions and errors) over the
    records table; `timestamp` as every written time is: epoch seconds in
    JSONL and CSV (exact, to the millisecond Kafka gives), a UTC timestamp in
    Parquet."""
    import pyarrow as pa

    from kdissect.shared.output import Table, open_writer
    from kdissect.records.table import (RECORD_BYTE_TEXT_COLUMNS, RECORD_COLUMN_NAMES, RECORD_LIST_COLUMNS,
                                        RECORD_SCHEMA)

    def schema(ts_unit: str = "ms") -> Any:
        index = RECORD_SCHEMA.get_field_index("timestamp")
        return RECORD_SCHEMA.set(index, pa.field("timestamp", pa.timestamp(ts_unit, tz="UTC")))

    table = Table(RECORD_COLUMN_NAMES, RECORD_LIST_COLUMNS, schema, frozenset(("timestamp",)),
                  byte_text_columns=RECORD_BYTE_TEXT_COLUMNS)
    return open_writer(path, table=table, ts_unit="ms")


def _written(row: dict[str, Any]) -> dict[str, Any]:
    """A record row as the writers take times: int nanoseconds. Kafka's
    milliseconds since the epoch; -1 (Kafka's "no timestamp") becomes null."""
    millis = row["timestamp"]
    row["timestamp"] = millis * 1_000_000 if millis is not None and millis >= 0 else None
    return row


def records(options: RecordsOptions) -> None:
    """Write one row per produced or fetched record."""
    analysis = run_analysis(options, keep_messages=True, quiet=options.quiet, output=options.output)
    from kdissect.records.table import RecordTally, exchange_record_rows

    from kdissect.protocol.topics import TopicNames

    tally = RecordTally()
    names = TopicNames()
    if hasattr(analysis, "on_hidden"):  # a selection: topic names still come from every exchange
        analysis.on_hidden.append(names.learn_exchange)
    max_bytes = options.max_uncompressed_mib * 1024 * 1024
    with _open_record_writer(options.output) as writer:
        for row in exchange_record_rows(analysis, frozenset(options.topics), max_bytes, tally, names):
            writer.write(_written(row))
    if not options.quiet:
        for line in tally.lines():
            say(f"kdissect: {line}")
        print_accounting(analysis)


command = click_command("records", RecordsOptions, records)
