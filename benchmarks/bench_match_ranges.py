"""CPU time of the driver's end-to-end matching (local mode), in-process (no Spark, no JVM).

    python3 benchmarks/bench_match_ranges.py WORK --prepare CAPTURE... [--checkout DIR]
    python3 benchmarks/bench_match_ranges.py WORK [--rounds 5] [--checkout DIR]

`--prepare` reads the captures (one split each) as the Spark job's read
tasks do (`kdissect.spark.dissect.read_partition`, every forensic table)
and keeps their files in WORK (a new directory): the tasks' forensic
states and their produced and fetched offset ranges under WORK/forensics.
Without it: the tasks' states merged (`merged_forensics`), then
`kdissect.spark.forensics.match_here` on the range files, as the job's
driver runs it in local mode when they are at most DRIVER_MATCH_BYTES:
read, resolve, sort and match every topic-partition's ranges into the
latency histograms. One warm-up run, then the median and range of
`--rounds` runs in CPU time (process_time) of `match_here` alone. To compare
two checkouts, prepare WORK once and run this alternately with `--checkout`
naming each (each with its compiled build), or under callgrind with
`--rounds 0` (the warm-up run only).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path


def prepare(work: str, captures: list[str]) -> None:
    import pyarrow as pa

    from kdissect.shared.inputs import file_kind
    from kdissect.spark.dissect import read_partition
    from kdissect.spark.plan import number_tasks, plan_splits, probe_ranges, read_splits

    Path(work).mkdir()
    inputs = [(path, file_kind(path) or "pcap") for path in captures]
    splits = [split.as_row() for split in read_splits(number_tasks(probe_ranges(plan_splits(inputs, 1 << 40))))]
    last = max(split["split_id"] for split in splits)
    names = [Path(path).name for path in captures]
    for split in splits:
        for _ in read_partition([pa.RecordBatch.from_pylist([split])], True, last, 4, [9092], True, names, work):
            pass


def match(work: str) -> tuple[float, int]:
    """CPU seconds of `match_here` on WORK's range files, and the records it matched."""
    from kdissect.shared.outdir_tree import as_tree
    from kdissect.spark.forensics import _directory, match_here, merged_forensics

    forensics = merged_forensics(work)
    directory = _directory(as_tree(work))
    files = directory.files(prefix="ranges-", suffix=".parquet")
    names = dict(forensics.names.names)
    start = time.process_time()
    tally = match_here(directory, files, names, forensics.horizon_ns, forensics.slack_ns)
    elapsed = time.process_time() - start
    return elapsed, sum(histogram.count for histogram in tally.histograms.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work")
    parser.add_argument("--prepare", nargs="+", metavar="CAPTURE")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--checkout", default=str(Path(__file__).resolve().parent.parent),
                        help="the kdissect checkout to measure (default: this script's)")
    args = parser.parse_args()
    sys.path.insert(0, args.checkout)
    if args.prepare:
        prepare(args.work, args.prepare)
        return
    _, records = match(args.work)  # warm: imports
    times = [match(args.work)[0] for _ in range(args.rounds)]
    import kdissect

    summary = (f"median {statistics.median(times):.3f} s CPU (range {min(times):.3f}-{max(times):.3f}, "
               f"{len(times)} runs)" if times else "warm-up run only")
    print(f"{Path(kdissect.__file__).parent.parent}: match_here, {records} records matched: {summary}")


if __name__ == "__main__":
    main()
