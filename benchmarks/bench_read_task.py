"""CPU time of one Spark read task, in-process (no Spark, no JVM).

    python3 benchmarks/bench_read_task.py CAPTURE [--rounds 7] [--no-forensic-tables] [--checkout DIR]

The capture is one split read as the Spark job's read stage reads it
(`kdissect.spark.dissect.read_partition` with every 4-tuple dissected in
place), its files written to a temporary work directory; with the forensic
tallies unless `--no-forensic-tables`. The collector's threshold is the
Spark worker daemon's. One warm-up run, then the median and range of
`--rounds` runs in CPU time (process_time). To compare two checkouts, run
it alternately with `--checkout` naming each (each with its compiled build);
by default the checkout holding this script.
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



def read_task(path: str, forensic_tables: bool) -> None:
    import pyarrow as pa

    from kdissect.spark.dissect import read_partition
    from kdissect.spark.plan import number_tasks, plan_splits

    splits = [split.as_row() for split in number_tasks(plan_splits([(path, "pcap")], 1 << 40))]
    work = tempfile.mkdtemp(prefix="bench-read-task-")
    try:
        for split in splits:
            for _ in read_partition([pa.RecordBatch.from_pylist([split])], True, split["split_id"], 4, [9092], True,
                                    [Path(path).name], work, forensic_tables=forensic_tables):
                pass
    finally:
        shutil.rmtree(work)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("capture")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--no-forensic-tables", action="store_true")
    parser.add_argument("--checkout", default=str(Path(__file__).resolve().parent.parent),
                        help="the kdissect checkout to measure (default: this script's)")
    args = parser.parse_args()
    sys.path.insert(0, args.checkout)
    from kdissect.spark.worker_daemon import FEWER_COLLECTIONS

    gc.set_threshold(max(gc.get_threshold()[0], FEWER_COLLECTIONS), *gc.get_threshold()[1:])
    tables = not args.no_forensic_tables
    read_task(args.capture, tables)  # warm: imports, caches
    times = []
    for _ in range(args.rounds):
        start = time.process_time()
        read_task(args.capture, tables)
        times.append(time.process_time() - start)
    import kdissect

    print(f"{Path(kdissect.__file__).parent.parent}: read task, {'every table' if tables else '--no-forensic-tables'}: "
          f"median {statistics.median(times):.3f} s CPU (range {min(times):.3f}-{max(times):.3f}, {len(times)} runs)")


if __name__ == "__main__":
    main()
