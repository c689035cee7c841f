"""What `kdissect export` does, without click.

`kdissect.commands.export` wraps `export()` in a click command (the capture
helpers every command shares are in `kdissect.commands.runtime`). The CLI
shell calls `export()` directly when the arguments are plain
(`kdissect.cli.plain_export_args`), so the commonest run does not import
click at all: that import is a tenth of the time of a small export.
"""

from __future__ import annotations

from typing import Any

from kdissect.commands.runtime import print_accounting, run_analysis
from kdissect.shared.options import OUTPUT_HELP, CaptureInputs, RowOrder, flag, option


class ExportOptions(RowOrder, CaptureInputs):
    """Write one row per request/response exchange."""

    output: str | None = option("-o", "--output", help=OUTPUT_HELP)
    quiet: bool = flag("-q", "--quiet", help="Do not print the accounting summary on stderr.")


_TUNE_FROM_BYTES = 4 << 20


def tune_allocator(paths: list[str]) -> None:
    """For large captures, let malloc reuse freed memory (see kdissect.shared.allocator)."""
    from kdissect.wire.stores import any_size

    if sum(any_size(str(p)) for p in paths) < _TUNE_FROM_BYTES:
        return  # not worth the ctypes import
    from kdissect.shared.allocator import keep_freed_memory

    keep_freed_memory()


def export(options: ExportOptions) -> None:
    """Write one row per request/response exchange."""
    from kdissect.shared.output import open_writer

    if options.sort is not None:
        from kdissect.filters.selection import check_sort_column

        check_sort_column(options.sort)
    analysis = run_analysis(options, quiet=options.quiet, output=options.output)
    tune_allocator(analysis.capture_set.paths)
    rows: Any = analysis
    if options.sort is not None or options.top is not None:
        from kdissect.filters.selection import ordered

        rows = ordered(analysis, options.sort, options.top)
    with open_writer(options.output, ts_unit=analysis.ts_unit) as writer:
        writer.write_exchanges(rows)
    if not options.quiet:
        print_accounting(analysis)
