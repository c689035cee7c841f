"""`kdissect export CAPTURE... [-o FILE]`: the exchange table (JSONL, CSV or Parquet)."""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

import click

from kdissect.failures import InputError

# -- shared by export, show and stats --------------------------------------


def capture_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """CAPTURE... plus --port and --no-detect."""
    function = click.option(
        "--no-detect", is_flag=True,
        help="Only treat connections on the Kafka ports as Kafka (no detection by shape).",
    )(function)
    function = click.option(
        "--port", "-p", "ports", type=click.IntRange(1, 65535), multiple=True,
        help="A port Kafka brokers listen on (repeatable; default 9092).",
    )(function)
    return click.argument("captures", nargs=-1, required=True,
                          type=str)(function)


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
        click.echo(f"kdissect: {line}", err=True)
    for problem in analysis.read_stats.problems:
        click.echo(f"kdissect: {problem}".encode("utf-8", "replace").decode("utf-8"), err=True)


@click.command("export")
@capture_options
@click.option("-o", "--output", "output", type=str, default=None,
              help="Output file; format from the extension (.jsonl, .csv, .parquet). Default: JSONL on stdout.")
@click.option("--quiet", "-q", is_flag=True, help="Do not print the accounting summary on stderr.")
def command(captures: tuple[str, ...], ports: tuple[int, ...], no_detect: bool,
            output: str | None, quiet: bool) -> None:
    """Write one row per request/response exchange."""
    from kdissect.output import open_writer

    analysis = run_analysis(captures, ports, no_detect)
    writer = open_writer(output)
    write_exchange = writer.write_exchange
    try:
        for exchange in analysis:
            write_exchange(exchange)
    finally:
        writer.close()
    if not quiet:
        print_accounting(analysis)
