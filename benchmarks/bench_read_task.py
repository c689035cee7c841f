"""CPU time of one Spark read task, in-process (no Spark, no JVM).

    python3 benchmarks/bench_read_task.py CAPTURE [--rounds 7] [--no-forensic-tables] [--checkout DIR]
                                          [--split-size 10m] [--stage probe|read|both]

The capture (pcap or pcapng) is one split read as the Spark job's read stage reads it
(`kdissect.spark.dissect.read_partition` with every 4-tuple dissected in
place), its files written to a temporary work directory; with the forensic
tallies unless `--no-forensic-tables`. The collector's threshold is the
Spark worker daemon's. One warm-up run, then the median and range of
`--rounds` runs in CPU time (process_time). To compare two checkouts, run
it alternately with `--checkout` naming each (each with its compiled build);
by default the checkout holding this script.

With `--split-size` the file is cut into byte ranges as the job cuts it,
each range's first record found by the driver's probe
(`kdissect.spark.plan.probe_ranges`), and every range read in turn (the
last range last, so the timings sum all read tasks of the file);
`--stage probe` times the planning alone (plan, probe, numbering),
`--stage read` the read tasks alone (planned once, outside the timing).
`--walk-fresh` clears the forensic tallies' held batches
(`kdissect.records.quick_spans`) before every run, so each run walks every
record batch as a fresh worker would (else later runs find the earlier
runs' batches held and skip their walk).
"""

from __future__ import annotations

import argparse
import gc
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path



def plan(path: str, split_size: int) -> list[dict]:
    """The read tasks' Split rows, planned and probed as the job's driver does."""
    from kdissect.shared.inputs import file_kind
    from kdissect.spark.plan import number_tasks, plan_splits, probe_ranges, read_splits

    kind = file_kind(path) or "pcap"
    return [split.as_row() for split in read_splits(number_tasks(probe_ranges(plan_splits([(path, kind)],
                                                                                           split_size))))]


def read_task(path: str, splits: list[dict], forensic_tables: bool) -> None:
    import pyarrow as pa

    from kdissect.spark.dissect import read_partition

    last = max(split["split_id"] for split in splits)
    work = tempfile.mkdtemp(prefix="bench-read-task-")
    try:
        for split in splits:
            for _ in read_partition([pa.RecordBatch.from_pylist([split])], True, last, 4, [9092], True,
                                    [Path(path).name], work, forensic_tables=forensic_tables):
                pass
    finally:
        shutil.rmtree(work)


def size_of(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    text = text.strip().lower()
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("capture")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--no-forensic-tables", action="store_true")
    parser.add_argument("--split-size", type=size_of, default=1 << 40,
                        help="cut the file into byte ranges of this size (10m, 128m; default: one split)")
    parser.add_argument("--stage", choices=["probe", "read", "both"], default="both",
                        help="time the driver's planning and probe, the read tasks, or both (default)")
    parser.add_argument("--walk-fresh", action="store_true",
                        help="clear the quick walk's held batches before each run (see the docstring)")
    parser.add_argument("--checkout", default=str(Path(__file__).resolve().parent.parent),
                        help="the kdissect checkout to measure (default: this script's)")
    args = parser.parse_args()
    sys.path.insert(0, args.checkout)
    from kdissect.spark.worker_daemon import FEWER_COLLECTIONS

    gc.set_threshold(max(gc.get_threshold()[0], FEWER_COLLECTIONS), *gc.get_threshold()[1:])
    tables = not args.no_forensic_tables

    def run() -> None:
        if args.walk_fresh:
            from kdissect.records import quick_spans

            quick_spans._recent.clear()
        splits = plan(args.capture, args.split_size) if args.stage != "read" else planned
        if args.stage != "probe":
            read_task(args.capture, splits, tables)

    planned = plan(args.capture, args.split_size)
    run()  # warm: imports, caches
    times = []
    for _ in range(args.rounds):
        start = time.process_time()
        run()
        times.append(time.process_time() - start)
    import kdissect

    what = {"both": "plan + read tasks", "read": "read tasks", "probe": "plan + probe"}[args.stage]
    print(f"{Path(kdissect.__file__).parent.parent}: {what} ({len(planned)} splits), "
          f"{'every table' if tables else '--no-forensic-tables'}: "
          f"median {statistics.median(times):.3f} s CPU (range {min(times):.3f}-{max(times):.3f}, {len(times)} runs)")


if __name__ == "__main__":
    main()
