"""One core of Spark against one `kdissect export` process, both measured at the same time.

    python3 benchmarks/bench_spark_beside_export.py --shape many-small [--format pcapng] [--pairs 6]
    python3 benchmarks/bench_spark_beside_export.py --shape records --pairs 6
    python3 benchmarks/bench_spark_beside_export.py --shape connections --pairs 6

bench_spark.py runs each command after the other, so a figure mixes two
states of a shared machine: its speed moves by a fifth to a half within
minutes, and the start-up each run subtracts (a Spark run on a tiny capture)
moved 6.9-12.3 s of CPU between runs, against 5-9 s of work on a 60 MB archive.
Here the two commands run side by side instead, one per CPU:

1. Spark on the tiny capture (captures/admin.pcap), `kdissect spark
   --master local[1] --no-forensic-tables`, its process tree on one CPU;
   on the other CPU, `kdissect export` on the tiny capture, run again and
   again until the Spark run ends;
2. the same on the archive (the shape's, built by bench_spark.py), with
   `export` on the archive again and again beside it (the run under way
   when Spark ends is finished and counted).

Each pair gives Spark's work and `export`'s (the median of its archive
runs minus the median of its tiny runs, taken in the same minutes), and
the figure export's work / Spark's: at least 0.9 is issue #29's one-core
goal. Spark's work is its archive run's CPU minus its tiny run's (whole
process trees, sampled from /proc), each counted from the job's line
`kdissect: N read tasks` on: the read stage planned, the JVM and the
session up. Whole runs on the tiny capture took 6.9-12.3 s of CPU here,
and 2.7-4.8 s from that line on: most of the noise is the JVM's own start
(JIT compilation, class loading), while what comes after the line (the
read stage's set-up in the JVM, the worker, the tasks, the driver's
finishing) is counted in both runs. The figure by whole runs is printed too.
The CPUs swap every pair. Printed: each pair, then the median and range;
a range over a quarter of the median is flagged as too wide to trust.
The row counts of both outputs are compared every pair (the rows
themselves: bench_spark.py and tests/spark). Needs two CPUs.
Results go to benchmarks/out/bench_spark_beside_export_SHAPE_FORMAT.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_files import write_result  # noqa: E402
from bench_spark import READ_STAGE_LINE, SHAPES, TINY, _spread, measured_from, shape_archive  # noqa: E402

OUT = HERE / "out" / "beside_export"


def side_by_side(inputs: list[str], spark_cpu: int, split_size: str, tag: str) -> tuple[float, float, list[float]]:
    """(Spark's CPU seconds, of them those from its read tasks' line on, the
    CPU seconds of each export run beside it)."""
    python = sys.executable
    spark_command = [python, "-m", "kdissect", "spark", *inputs, "-o", str(OUT / f"spark_{tag}"),
                     "--master", "local[1]", "--overwrite", "--no-forensic-tables", "--split-size", split_size]
    export_command = [python, "-m", "kdissect", "export", *inputs, "-o", str(OUT / f"export_{tag}.parquet"),
                      "--quiet"]
    done = threading.Event()
    exports: list[float] = []

    def export_until_done() -> None:
        while True:
            exports.append(measured_from(export_command, OUT / f"export_{tag}.log", {1 - spark_cpu})[1])
            if done.is_set():
                return

    beside = threading.Thread(target=export_until_done)
    beside.start()
    try:
        _, spark, from_read = measured_from(spark_command, OUT / f"spark_{tag}.log", {spark_cpu}, READ_STAGE_LINE)
        assert from_read is not None
    finally:
        done.set()
        beside.join()
    return spark, from_read, exports


def same_count(tag: str) -> int:
    """The exchanges both commands wrote for run `tag` (they must agree)."""
    import pyarrow.parquet as pq

    spark_rows = json.loads((OUT / f"spark_{tag}" / "manifest.json").read_text())["counts"]["exchanges"]
    export_rows = pq.ParquetFile(OUT / f"export_{tag}.parquet").metadata.num_rows
    if spark_rows != export_rows:
        raise SystemExit(f"bench_spark_beside_export: spark wrote {spark_rows} exchanges, export {export_rows}")
    return spark_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=list(SHAPES), default="many-small")
    parser.add_argument("--format", choices=["pcap", "pcapng"], default="pcap")
    parser.add_argument("--pairs", type=int, default=6)
    args = parser.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("bench_spark_beside_export: needs two CPUs")
    OUT.mkdir(parents=True, exist_ok=True)
    files = shape_archive(args.shape, args.format)
    split_size = SHAPES[args.shape][2]
    archive = [str(files[0].parent)]
    pairs = []
    for pair in range(args.pairs):
        spark_cpu = pair % 2
        spark_tiny, tiny_from_read, export_tinies = side_by_side([str(TINY)], spark_cpu, split_size, "tiny")
        spark_archive, archive_from_read, export_archives = side_by_side(archive, spark_cpu, split_size, "archive")
        exchanges = same_count("archive")
        spark_work = archive_from_read - tiny_from_read
        whole_work = spark_archive - spark_tiny
        export_work = statistics.median(export_archives) - statistics.median(export_tinies)
        found = {"spark_cpu": spark_cpu, "spark_tiny": round(spark_tiny, 2), "spark_archive": round(spark_archive, 2),
                 "spark_tiny_from_read": round(tiny_from_read, 2),
                 "spark_archive_from_read": round(archive_from_read, 2),
                 "export_tiny": [round(x, 2) for x in export_tinies],
                 "export_archive": [round(x, 2) for x in export_archives],
                 "spark_work": round(spark_work, 2), "spark_whole_work": round(whole_work, 2),
                 "export_work": round(export_work, 2), "ratio": round(export_work / spark_work, 3),
                 "whole_ratio": round(export_work / whole_work, 3), "exchanges": exchanges}
        pairs.append(found)
        print(f"pair {pair + 1} (Spark on CPU {spark_cpu}): Spark from its read stage {archive_from_read:.2f} - "
              f"{tiny_from_read:.2f} = {spark_work:.2f} s CPU (whole runs {spark_archive:.1f} - {spark_tiny:.1f} "
              f"= {whole_work:.2f}); export beside it {statistics.median(export_archives):.2f} "
              f"({len(export_archives)} runs) - {statistics.median(export_tinies):.2f} ({len(export_tinies)} runs) "
              f"= {export_work:.2f} s: {export_work / spark_work:.3f}x export's work "
              f"({export_work / whole_work:.3f}x by whole runs)", flush=True)
    summary, said = _spread([found["ratio"] for found in pairs], "median_vs_export")
    whole, whole_said = _spread([found["whole_ratio"] for found in pairs], "median_vs_export")
    print(f"{args.shape} {args.format}, one core against export, by CPU time from the read stage: {said}")
    print(f"  (by whole runs, start-up's own noise included: {whole_said})")
    result = {"shape": args.shape, "format": args.format, "split_size": split_size, "archive_files": len(files),
              "archive_bytes": sum(f.stat().st_size for f in files), "pairs": pairs, "1 core": summary,
              "1 core, whole runs": whole}
    write_result(HERE / "out" / f"bench_spark_beside_export_{args.shape}_{args.format}.json",
                 json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
