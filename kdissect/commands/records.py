"""`kdissect records CAPTURE... [--port P] [--topic T] [-o FILE]`: one row per record.

Rows come from the record data of Produce requests (direction "produce") and
Fetch / ShareFetch responses (direction "fetch"); columns are
`kdissect.records.table.RECORD_COLUMNS`. Topics that the wire names only by id
(Produce v13+, Fetch v13+, ShareFetch) are named from Metadata responses seen
earlier in the capture, else given as the id.
"""

from __future__ import annotations

import csv
import json
from typing import IO, Any

import click

from kdissect.commands.export import capture_options, print_accounting, run_analysis
from kdissect.failures import InputError

class _CsvRecordWriter:
    """Nulls are empty cells; list columns are JSON text (as `export` writes them)."""

    def __init__(self, stream: IO[str]) -> None:
        from kdissect.records.table import RECORD_COLUMN_NAMES, RECORD_LIST_COLUMNS

        self._stream = stream
        self._writer = csv.writer(stream, lineterminator="\n")
        self._writer.writerow(RECORD_COLUMN_NAMES)
        self._lists = [i for i, name in enumerate(RECORD_COLUMN_NAMES) if name in RECORD_LIST_COLUMNS]

    def write(self, row: dict[str, Any]) -> None:
        values = list(row.values())
        for i in self._lists:
            if values[i] is not None:
                values[i] = json.dumps(values[i], ensure_ascii=False, separators=(",", ":"))
        self._writer.writerow(values)

    def close(self) -> None:
        self._stream.flush()


class _ParquetRecordWriter:
    def __init__(self, path: str, batch_rows: int = 65536) -> None:
        import pyarrow.parquet as pq

        from kdissect.records.table import RECORD_SCHEMA

        self._schema = RECORD_SCHEMA
        self._writer = pq.ParquetWriter(path, RECORD_SCHEMA)
        self._rows: list[dict[str, Any]] = []
        self._batch_rows = batch_rows

    def write(self, row: dict[str, Any]) -> None:
        self._rows.append(row)
        if len(self._rows) >= self._batch_rows:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if self._rows:
            self._writer.write_table(pa.Table.from_pylist(self._rows, schema=self._schema))
            self._rows = []

    def close(self) -> None:
        self._flush()
        self._writer.close()


class _Output:
    def __init__(self, path: str | None) -> None:
        from kdissect.output import JsonlWriter, format_for

        kind = format_for(path)  # same extensions and errors as `export`
        self._handle: IO[str] | None = None
        if path is None or path == "-":
            self._writer: Any = JsonlWriter(click.get_text_stream("stdout"))
            return
        try:
            if kind == "parquet":
                self._writer = _ParquetRecordWriter(path)
                return
            self._handle = open(path, "w", encoding="utf-8", newline="" if kind == "csv" else None)
        except OSError as problem:
            raise InputError(f"cannot write {path}: {problem.strerror or problem}") from None
        self._writer = _CsvRecordWriter(self._handle) if kind == "csv" else JsonlWriter(self._handle)

    def write(self, row: dict[str, Any]) -> None:
        self._writer.write(row)

    def close(self) -> None:
        self._writer.close()
        if self._handle is not None:
            self._handle.close()


@click.command("records")
@capture_options
@click.option("--topic", "-t", "topics", multiple=True, help="Only records of this topic (repeatable).")
@click.option("-o", "--output", "output", type=str, default=None,
              help="Output file; format from the extension (.jsonl, .csv, .parquet). Default: JSONL on stdout.")
@click.option("--max-uncompressed-mib", type=click.IntRange(1, 4096), default=64, show_default=True,
              help="Stop decompressing a batch beyond this many MiB (the batch is flagged).")
@click.option("--quiet", "-q", is_flag=True, help="Do not print the summaries on stderr.")
def command(captures: tuple[str, ...], ports: tuple[int, ...], no_detect: bool, topics: tuple[str, ...],
            output: str | None, max_uncompressed_mib: int, quiet: bool) -> None:
    """Write one row per produced or fetched record."""
    analysis = run_analysis(captures, ports, no_detect, keep_messages=True)
    writer = _Output(output)
    from kdissect.records.table import RecordTally, exchange_record_rows

    tally = RecordTally()
    try:
        for row in exchange_record_rows(analysis, frozenset(topics), max_uncompressed_mib * 1024 * 1024, tally):
            writer.write(row)
    finally:
        writer.close()
    if not quiet:
        for line in tally.lines():
            click.echo(f"kdissect: {line}", err=True)
        print_accounting(analysis)
