"""What `kdissect export` does, without click.

`kdissect.commands.export` wraps `export()` in a click command (and lends the
capture helpers here to `show`, `stats` and `records`). The CLI shell calls
`export()` directly when the arguments are plain (`kdissect.cli.plain_export_args`),
so the commonest run does not import click at all: that import is a tenth of
the time of a small export.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from kdissect.failures import InputError


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


def check_readable(paths: tuple[str, ...]) -> list[str]:
    for path in paths:
        if not os.path.exists(path):
            raise InputError(f"{path}: no such file")
        if os.path.isdir(path):
            raise InputError(f"{path}: is a directory")
        if not os.access(path, os.R_OK):
            raise InputError(f"{path}: permission denied")
    return list(paths)


def run_analysis(captures: tuple[str, ...], ports: tuple[int, ...], no_detect: bool,
                 keep_messages: bool = False) -> Any:
    """An iterable Analysis over the capture set (exchanges; `.accounting`)."""
    from kdissect.pipeline import Analysis

    paths = check_readable(captures)
    return Analysis(paths, ports or (9092,), not no_detect, keep_messages,
                    progress=sys.stderr.isatty())


def print_accounting(analysis: Any) -> None:
    """The accounting summary (and the reader's problems) on stderr."""
    for line in analysis.accounting.summary_lines():
        say(f"kdissect: {line}")
    for problem in analysis.read_stats.problems:
        say(f"kdissect: {problem}".encode("utf-8", "replace").decode("utf-8"))


_TUNE_FROM_BYTES = 4 << 20


def tune_allocator(paths: list[str]) -> None:
    """For large captures, let malloc reuse freed memory (see kdissect.allocator)."""
    if sum(os.path.getsize(p) for p in paths) < _TUNE_FROM_BYTES:
        return  # not worth the ctypes import
    from kdissect.allocator import keep_freed_memory

    keep_freed_memory()


def export(captures: tuple[str, ...], ports: tuple[int, ...], no_detect: bool,
           output: str | None, quiet: bool) -> None:
    """Write one row per request/response exchange."""
    from kdissect.output import open_writer

    analysis = run_analysis(captures, ports, no_detect)
    tune_allocator(analysis.capture_set.paths)
    writer = open_writer(output, ts_unit=analysis.ts_unit)
    try:
        writer.write_exchanges(analysis)
    finally:
        writer.close()
    if not quiet:
        print_accounting(analysis)
