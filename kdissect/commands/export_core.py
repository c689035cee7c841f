"""What `kdissect export` does, without click, and the capture helpers of
every command that reads captures.

`kdissect.commands.export` wraps `export()` in a click command; `show`,
`stats` and `records` use `run_analysis` and `print_accounting`. The CLI
shell calls `export()` directly when the arguments are plain
(`kdissect.cli.plain_export_args`), so the commonest run does not import
click at all: that import is a tenth of the time of a small export.
"""

from __future__ import annotations

import sys
from typing import Any

from kdissect.options import OUTPUT_HELP, CaptureInputs, flag, option


class ExportOptions(CaptureInputs):
    """Write one row per request/response exchange."""

    output: str | None = option("-o", "--output", help=OUTPUT_HELP)
    quiet: bool = flag("-q", "--quiet", help="Do not print the accounting summary on stderr.")


def say(line: str) -> None:
    """One line on stderr, as `click.echo(line, err=True)` writes it."""
    if line.isascii() and "\x1b" not in line:
        stream = sys.stderr
        stream.write(line + "\n")
        stream.flush()
        return
    # non-ASCII text or escape sequences: click's own stream and ANSI handling
    import click

    click.echo(line, err=True)


def run_analysis(options: CaptureInputs, keep_messages: bool = False, quiet: bool = False,
                 keep_apis: Any = ()) -> Any:
    """An iterable Analysis over the captures the options name (exchanges;
    `.accounting`). Files under a directory or glob that are not captures are
    skipped and, unless `quiet`, named in one line on stderr. `keep_apis`:
    api keys whose exchanges keep their decoded messages."""
    from kdissect.inputs import expand_inputs
    from kdissect.pipeline import Analysis

    paths, skipped = expand_inputs(options.captures)
    if skipped and not quiet:
        names = ", ".join(skipped[:3]) + (f" and {len(skipped) - 3} more" if len(skipped) > 3 else "")
        say(f"kdissect: not captures, skipped: {names}".encode("utf-8", "replace").decode("utf-8"))
    return Analysis(paths, options.ports or (9092,), not options.no_detect, keep_messages,
                    progress=sys.stderr.isatty(), tls_keylogs=options.tls_keylogs, keep_apis=keep_apis)


def print_accounting(analysis: Any) -> None:
    """The accounting summary (and the reader's problems) on stderr."""
    for line in analysis.summary_lines():
        say(f"kdissect: {line}")
    for problem in analysis.read_stats.problems:
        say(f"kdissect: {problem}".encode("utf-8", "replace").decode("utf-8"))


_TUNE_FROM_BYTES = 4 << 20


def tune_allocator(paths: list[str]) -> None:
    """For large captures, let malloc reuse freed memory (see kdissect.allocator)."""
    from kdissect.stores import any_size

    if sum(any_size(str(p)) for p in paths) < _TUNE_FROM_BYTES:
        return  # not worth the ctypes import
    from kdissect.allocator import keep_freed_memory

    keep_freed_memory()


def export(options: ExportOptions) -> None:
    """Write one row per request/response exchange."""
    from kdissect.output import open_writer

    analysis = run_analysis(options, quiet=options.quiet)
    tune_allocator(analysis.capture_set.paths)
    writer = open_writer(options.output, ts_unit=analysis.ts_unit)
    try:
        writer.write_exchanges(analysis)
    finally:
        writer.close()
    if not options.quiet:
        print_accounting(analysis)
