"""The Spark job's path for connections that cross a split, alone: two checkouts alternated.

    python3 benchmarks/bench_handoff.py --checkout BEFORE [--shape records] [--rounds 4]

Runs `kdissect.spark.job.run_job` on one of bench_spark.py's archives
(built by it; `records` by default) with every 4-tuple shipped
(`JobOptions(in_place=False)`: the path the job takes for connections open
at a split's start or end, and for the whole run after an in-place
conflict), `--no-forensic-tables`, master `local[1]`, the whole process tree
confined to CPU 0. Each round runs this script's checkout and `--checkout`
one after the other (the order alternating between rounds), each on the
tiny capture (captures/admin.pcap: start-up) and then on the archive, CPU
time of the process tree sampled from /proc as bench_spark.py does. A
round's figure is (before - before tiny) / (after - after tiny): above 1 the
checkout holding this script does the work in less CPU. The result is the
median over rounds and their range, flagged when the spread is over a
quarter of the median. Both checkouts need their own compiled build
(`tools/build_native.py`). Results go to benchmarks/out/bench_handoff_SHAPE.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import bench_spark
from bench_files import write_result

_JOB = """
import sys
from kdissect.spark.job import JobOptions, run_job
run_job(JobOptions(inputs=[sys.argv[1]], outdir=sys.argv[2], master="local[1]", overwrite=True,
                   in_place=False, forensic_tables=False))
"""


def _work(checkout: Path, archive: Path, outdir: Path) -> tuple[float, float]:
    """(CPU of the tiny capture's run, CPU of the archive's run) in `checkout`."""
    bench_spark.CHECKOUT = checkout
    cpus = {0}
    log = bench_spark.OUT / f"handoff_{checkout.name}.log"
    tiny = bench_spark._measured([sys.executable, "-c", _JOB, str(bench_spark.TINY), str(outdir)], log, cpus)[1]
    whole = bench_spark._measured([sys.executable, "-c", _JOB, str(archive), str(outdir)], log, cpus)[1]
    return tiny, whole


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkout", type=Path, required=True, help="the other kdissect checkout (before)")
    parser.add_argument("--shape", choices=list(bench_spark.SHAPES), default="records")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    size_mb, files, _ = bench_spark.SHAPES[args.shape]
    name = f"{size_mb}mb_{files}" + ("_whole_replays" if args.shape in bench_spark.WHOLE_REPLAYS else "")
    archive = bench_spark.OUT / f"archive_{name}"
    if not archive.is_dir():
        sys.exit(f"bench_handoff: no archive {archive}: run bench_spark.py --shape {args.shape} first")
    after, before = bench_spark.REPO, args.checkout.resolve()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="bench-handoff-") as scratch:
        for number in range(args.rounds):
            order = [(before, "before"), (after, "after")]
            if number % 2:
                order.reverse()
            found = {}
            for checkout, label in order:
                tiny, whole = _work(checkout, archive, Path(scratch) / label)
                found[label] = {"tiny_cpu": tiny, "archive_cpu": whole, "work_cpu": round(whole - tiny, 2)}
            found["ratio"] = round(found["before"]["work_cpu"] / found["after"]["work_cpu"], 3)
            rounds.append(found)
            print(f"round {number + 1}: before {found['before']['work_cpu']:.2f} s, after "
                  f"{found['after']['work_cpu']:.2f} s of CPU past start-up: {found['ratio']:.2f}x", flush=True)
    summary, said = bench_spark._spread([found["ratio"] for found in rounds], "median")
    print(f"every connection shipped, one core: {said}")
    write_result(bench_spark.OUT / f"bench_handoff_{args.shape}.json",
                 json.dumps({"before": str(before), "after": str(after), "archive": str(archive), "rounds": rounds,
                             **summary}, indent=1) + "\n")


if __name__ == "__main__":
    main()
