"""`kdissect spark INPUT... -o OUTDIR`: the batch job over a capture archive."""

from __future__ import annotations

import re

import click

from kdissect.failures import InputError

_SIZE = re.compile(r"^\s*(\d+)\s*([kmg]i?b?|b)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """'134217728', '128m', '64MiB', '1g' -> bytes."""
    match = _SIZE.match(text)
    if not match:
        raise InputError(f"--split-size {text!r}: expected a number of bytes, e.g. 134217728 or 128m")
    number = int(match.group(1))
    unit = (match.group(2) or "b").lower()[0]
    value = number * {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[unit]
    if value < 4096:
        raise InputError(f"--split-size {text!r}: must be at least 4096 bytes")
    return value


@click.command("spark")
@click.argument("inputs", nargs=-1, required=True)
@click.option("-o", "--output", "outdir", required=True, help="Output directory for the Parquet tables.")
@click.option("--port", "-p", "ports", type=click.IntRange(1, 65535), multiple=True,
              help="A port Kafka brokers listen on (repeatable; default 9092).")
@click.option("--no-detect", is_flag=True, help="Only treat connections on the Kafka ports as Kafka.")
@click.option("--master", default="local[*]", show_default=True, help="Spark master URL.")
@click.option("--split-size", default="128m", show_default=True,
              help="Cut pcap files larger than this into byte ranges read in parallel.")
@click.option("--partitions", type=click.IntRange(1), default=None,
              help="Shuffle partitions (default: from input size and cores).")
def command(inputs: tuple[str, ...], outdir: str, ports: tuple[int, ...], no_detect: bool, master: str,
            split_size: str, partitions: int | None) -> None:
    """Turn capture files, directories (recursive) or globs into Parquet tables of
    exchanges, latency, errors, throttling and a per-minute time series."""
    from kdissect.spark.inputs import expand_inputs
    from kdissect.spark.job import JobOptions, prepare_outdir, run_job
    from kdissect.spark.session import check_java

    options = JobOptions(
        inputs=list(inputs), outdir=outdir, ports=ports or (9092,), detect=not no_detect,
        master=master, split_size=parse_size(split_size), partitions=partitions,
    )
    check_java()  # before anything slow, and before Spark prints its own errors
    expand_inputs(list(inputs))  # a bad input fails here, before OUTDIR is created
    prepare_outdir(outdir)
    result = run_job(options, log=lambda message: click.echo(f"kdissect: {message}", err=True))
    click.echo(result.summary)
    click.echo(f"tables and manifest.json written to {outdir}")
