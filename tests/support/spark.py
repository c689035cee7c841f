"""Helpers for the Spark job tests: one local session and a job run in it,
the mixed archive the store tests read, the CLI's exchange table for
comparison, and order-independent table comparison."""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pyarrow.dataset as ds
import pyarrow.parquet as pq

from kdissect.cli import main as cli_main

REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def local_session(cores: int = 2, shuffle_partitions: int = 4) -> Iterator[Any]:
    """A small local SparkSession for a test module; stopped at the end."""
    from kdissect.spark.session import start_session

    session = start_session(
        f"local[{cores}]",
        app_name="kdissect-tests",
        extra_conf={"spark.sql.shuffle.partitions": str(shuffle_partitions),
                    "spark.default.parallelism": str(cores)},
    )
    try:
        yield session
    finally:
        session.stop()


def run_local_job(spark: Any, inputs: list[Path], outdir: Path, **options: Any) -> dict:
    """The Spark job on `inputs` in the session `spark`, into `outdir`; the manifest it wrote."""
    from kdissect.spark.job import JobOptions, run_job

    run_job(JobOptions(inputs=[str(p) for p in inputs], outdir=str(outdir), master=None, **options), spark=spark)
    return json.loads((outdir / "manifest.json").read_text())


def write_mixed_archive(captures_dir: Path, local: Path) -> list[Path]:
    """Into `local`, copies of lab captures in every shape the job reads: the
    largest pcap (big.pcap, large enough to be cut into byte ranges), a
    pcapng (group.pcapng), a gzip file (admin.pcap.gz) and a rotated set
    whose connections span files (rotated/); the rotated files."""
    source = max(captures_dir.glob("*.pcap"), key=lambda p: p.stat().st_size)
    shutil.copy(source, local / "big.pcap")
    subprocess.run(["editcap", "-F", "pcapng", str(captures_dir / "consume_group.pcap"), str(local / "group.pcapng")],
                   check=True, capture_output=True)
    (local / "admin.pcap.gz").write_bytes(gzip.compress((captures_dir / "admin.pcap").read_bytes()))
    rotated_source = captures_dir / "consume_group_kafka.pcap"
    return editcap_split(rotated_source, max(2, tshark_frame_count(rotated_source) // 4), local / "rotated")


def export_rows(paths: list[Path], out: Path, ports: tuple[int, ...] = ()) -> list[dict]:
    """Rows of `kdissect export PATHS -o out.parquet` (run in-process through the CLI shell)."""
    argv = ["export", *[str(p) for p in paths], "-o", str(out), "--quiet"]
    for port in ports:
        argv += ["--port", str(port)]
    status = cli_main(argv)
    assert status == 0, f"kdissect export exited {status}"
    return pq.read_table(out).to_pylist()


def table_rows(outdir: Path, name: str) -> list[dict]:
    return ds.dataset(str(outdir / name), format="parquet").to_table().to_pylist()


def _order(row: dict) -> tuple:
    def number(value: Any) -> float:
        if hasattr(value, "timestamp"):  # a datetime (timestamp columns)
            return value.timestamp()
        return -1.0 if value is None else float(value)

    return (number(row.get("stream")), number(row.get("request_ts")), number(row.get("response_ts")),
            number(row.get("correlation_id")), repr(sorted(row.items())))


def canonical(rows: list[dict], drop: tuple[str, ...] = ()) -> list[dict]:
    """Rows without the `drop` columns, in a fixed order (stream, times, correlation id);
    NaN made comparable."""
    def clean(row: dict) -> dict:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items() if k not in drop}

    return sorted((clean(row) for row in rows), key=_order)


def editcap_split(source: Path, packets_per_file: int, directory: Path) -> list[Path]:
    """Cut a capture into rotated pcap files of N packets each with editcap -c."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["editcap", "-F", "pcap", "-c", str(packets_per_file), str(source), str(directory / source.name)],
                   check=True, capture_output=True)
    return sorted(directory.iterdir())


def tshark_frame_count(path: Path) -> int:
    """Frames tshark reads (it exits 2 on a file cut mid-packet but lists the frames before)."""
    done = subprocess.run(["tshark", "-r", str(path), "-T", "fields", "-e", "frame.number"],
                          capture_output=True, text=True)
    assert done.returncode in (0, 2), done.stderr
    return len(done.stdout.split())


def run_cli(args: list[str], env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -m kdissect ARGS` in a child process with the given environment."""
    return subprocess.run([sys.executable, "-m", "kdissect", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def env_without_java() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = "/nonexistent-bin"
    return env
