"""`kdissect export CAPTURE... [-o FILE]`: the exchange table (JSONL, CSV or Parquet)."""

from __future__ import annotations

from typing import Any, Callable

import click

# shared by export, show and stats (they live beside export() so that the
# CLI's click-free path for plain export arguments can use them too)
from kdissect.commands.export_core import (
    check_readable,
    export,
    print_accounting,
    run_analysis,
)

__all__ = ["capture_options", "check_readable", "command", "print_accounting", "run_analysis"]


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


@click.command("export")
@capture_options
@click.option("-o", "--output", "output", type=str, default=None,
              help="Output file; format from the extension (.jsonl, .csv, .parquet). Default: JSONL on stdout.")
@click.option("--quiet", "-q", is_flag=True, help="Do not print the accounting summary on stderr.")
def command(captures: tuple[str, ...], ports: tuple[int, ...], no_detect: bool,
            output: str | None, quiet: bool) -> None:
    """Write one row per request/response exchange."""
    export(captures, ports, no_detect, output, quiet)
