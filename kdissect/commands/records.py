"""`kdissect records CAPTURE... [--port P] [--topic T] [-o FILE]`: one row per record.

Rows come from the record data of Produce requests (direction "produce") and
Fetch / ShareFetch responses (direction "fetch"); columns are
`kdissect.records.table.RECORD_COLUMNS`. Topics that the wire names only by id
(Produce v13+, Fetch v13+, ShareFetch) are named from Metadata responses seen
earlier in the capture, else given as the id.
"""

from __future__ import annotations

from typing import Any

import click

from kdissect.commands.export import capture_options, print_accounting, run_analysis


def _open_record_writer(path: str | None) -> Any:
    """The `export` writers (same formats, extensions and errors) over the records table."""
    from kdissect.output import Table, open_writer
    from kdissect.records.table import RECORD_COLUMN_NAMES, RECORD_LIST_COLUMNS, RECORD_SCHEMA

    table = Table(RECORD_COLUMN_NAMES, RECORD_LIST_COLUMNS, lambda: RECORD_SCHEMA)
    return open_writer(path, click.get_text_stream("stdout"), table=table)


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
    writer = _open_record_writer(output)
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
