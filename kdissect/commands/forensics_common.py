"""What `kdissect topics`, `groups` and `clients` share: options, the run,
and writing or printing their tables (kdissect.forensics)."""

from __future__ import annotations

from typing import Any

from kdissect.failures import InputError
from kdissect.shared.options import WIDE_HELP, ForensicSettings, flag, forensic_settings, option


class ForensicOptions(ForensicSettings):
    output: str | None = option(
        "-o", "--output",
        help="Write every column of one table (--table) to this file; format from the extension (.jsonl, .csv, "
             ".parquet). Without it, text tables on stdout.")
    wide: bool = flag("--wide", help=WIDE_HELP)
    table: str | None = option("--table", metavar="NAME",
                               help="Which of the command's tables to print or write (default: the first).")
    quiet: bool = flag("-q", "--quiet", help="Do not print the accounting summary on stderr.")


def run_forensics(options: ForensicOptions, command: str) -> None:
    """Run the capture set through Forensics; print or write the command's tables."""
    from kdissect.commands.runtime import print_accounting, run_analysis, say, table_width
    from kdissect.forensics import COMMAND_TABLES, FORENSIC_APIS, Forensics

    names = COMMAND_TABLES[command]
    if options.table is not None and options.table not in names:
        raise InputError(f"--table {options.table!r}: {command} has the tables {', '.join(names)}")
    settings = forensic_settings(options)
    analysis = run_analysis(options, quiet=options.quiet, keep_apis=FORENSIC_APIS, output=options.output)
    forensics = Forensics(**settings)
    if hasattr(analysis, "on_hidden"):  # a selection: topic names still come from every exchange
        analysis.on_hidden.append(forensics.learn_names)
    for ex in analysis:
        forensics.add(ex)
        ex.request = ex.response = None  # memory follows the tallies, not the exchanges
    forensics.finish()
    tables = forensics.tables(release=True)
    selected = filter_rows(tables, options)
    if options.output is not None:
        write_table(options.table or names[0], selected(options.table or names[0]), options.output,
                    analysis.ts_unit)
    else:
        from kdissect.commands.runtime import echo_pieces
        from kdissect.stats.text_table import joined_pieces
        from kdissect.forensics.render import METADATA_STORM_COLUMNS, render_flags, render_lines, table_lines

        width = table_width(options.wide)
        shown = [options.table] if options.table else [name for name in names
                                                      if name not in ("topic_lag", "group_lag_over_time")]
        # a table may have a row per client id: printed line by line, not held as text
        parts = [table_lines(name, selected(name), width) for name in shown]
        if command == "groups" and not options.table:
            parts.append(iter([render_flags(tables, clients=False, width=width)]))
        elif command == "clients" and not options.table:
            parts.append(render_lines("metadata storms (60+ Metadata requests in a minute)",
                                      METADATA_STORM_COLUMNS, tables.metadata_storms, width))
        echo_pieces(joined_pieces(parts))
    if not options.quiet:
        if tables.unresolved_topic_ids:
            say(f"kdissect: {len(tables.unresolved_topic_ids)} topic ids that no response in the capture "
                "names are shown as ids")
        print_accounting(analysis)


def filter_rows(tables: Any, options: Any) -> Any:
    topics = frozenset(getattr(options, "topics", ()) or ())

    def rows(name: str) -> list[dict[str, Any]]:
        found = tables.table(name)
        if topics and found and "topic" in found[0]:
            found = [row for row in found if row["topic"] in topics]
        return found

    return rows


def output_table(table: str) -> Any:
    """The `kdissect.shared.output.Table` of a forensic table (for `open_writer`)."""
    from kdissect.forensics.tables import TABLE_COLUMNS, arrow_schema
    from kdissect.shared.output import Table

    columns = TABLE_COLUMNS[table]
    return Table([name for name, _ in columns],
                 frozenset(name for name, kind in columns if kind.startswith("list<")),
                 lambda ts_unit="us": arrow_schema(table, ts_unit),
                 frozenset(name for name, kind in columns if kind == "timestamp"))


def write_table(name: str, rows: list[dict[str, Any]], path: str, ts_unit: str) -> None:
    from kdissect.shared.output import open_writer

    with open_writer(path, table=output_table(name), ts_unit=ts_unit) as writer:
        for row in rows:
            writer.write(row)
