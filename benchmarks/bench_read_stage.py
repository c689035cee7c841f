"""CPU time of a one-slot read stage, in-process (no Spark, no JVM): the
capture set read by its one task (`kdissect.spark.dissect.read_capture_set`)
against the same splits sorted into in-place and shipped connections
(`read_partition`) plus the dissecting tasks of the shipped ones
(`dissect_buckets`), which is how a one-slot job read before 2026-11-28 19:30
and how each task of a several-slot job still reads; and the one task's read
alone ("read only": the segments read and merged, none dissected), whose
share bounds any design where every task reads the whole set and dissects
its own share of the connections.

    python3 benchmarks/bench_read_stage.py CAPTURE_OR_DIR... [--rounds 5] [--no-forensic-tables]
                                           [--split-size 128m] [--buckets 4] [--owned-halves]

The inputs are ordered and planned as the job's driver does (files by
first packet time, cut at `--split-size`, ranges probed). The ways run
in turn in one process (in reverse order every other round), after one
warm-up of each, so each round's runs meet the machine in the same state;
printed: each way's median and range of CPU seconds (process_time), and
the median and range of the rounds' ratios.
Each run writes into a fresh temporary work directory. `--buckets` is the
number of dissecting tasks the shipped connections go to (the job's
`shuffle_partitions` on one slot: one per 128 MiB of capture).
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench_read_task import size_of  # noqa: E402  (sizes as 128m, 10m)


def planned(inputs: list[str], split_size: int) -> tuple[list[dict], list, list[str]]:
    """(Split rows, the files' first packet times, capture names), as the driver plans them."""
    from kdissect.spark.job import _ordered_captures, capture_name
    from kdissect.spark.plan import number_tasks, plan_splits, probe_ranges, read_splits

    ordered, _resolutions, firsts, _skipped = _ordered_captures(inputs)
    splits = read_splits(number_tasks(probe_ranges(plan_splits(ordered, split_size))))
    return [split.as_row() for split in splits], firsts, [capture_name(path) for path, _ in ordered]


def one_task(splits: list[dict], firsts: list, names: list[str], tables: bool, buckets: int) -> None:
    import pyarrow as pa

    from kdissect.spark.dissect import read_capture_set

    work = tempfile.mkdtemp(prefix="bench-read-stage-")
    try:
        for _ in read_capture_set([pa.RecordBatch.from_pylist(splits)], firsts, buckets, [9092], True, names, work,
                                  forensic_tables=tables):
            pass
    finally:
        shutil.rmtree(work)


def _fed_only(keep: Any) -> Any:
    """A way: the one task's read (the same split readers, the files' merge,
    the duplicate filter) whose Dissector is fed only the segments `keep` passes."""
    from unittest import mock

    from kdissect.spark.dissect import ConnectionRunner

    run_capture_set = ConnectionRunner.run_capture_set

    def fed_only(runner: ConnectionRunner, segments: Any) -> Any:
        return run_capture_set(runner, filter(keep, segments))

    def way(splits: list[dict], firsts: list, names: list[str], tables: bool, buckets: int) -> None:
        with mock.patch.object(ConnectionRunner, "run_capture_set", fed_only):
            one_task(splits, firsts, names, tables, buckets)

    return way


def _owned_half(half: int) -> Any:
    """`keep` of the segments whose 4-tuple (either direction) hashes to
    `half` of two: a CRC of its canonical form, the same in any process."""
    import zlib

    owners: dict[tuple, int] = {}

    def keep(segment: Any) -> bool:
        key = (segment.src, segment.sport, segment.dst, segment.dport)
        owner = owners.get(key)
        if owner is None:
            ends = sorted([f"{segment.src}|{segment.sport}", f"{segment.dst}|{segment.dport}"])
            owner = owners[key] = zlib.crc32("/".join(ends).encode()) % 2
        return owner == half

    return keep


read_only = _fed_only(lambda segment: False)


def sorted_and_shipped(splits: list[dict], firsts: list, names: list[str], tables: bool, buckets: int) -> None:
    import pyarrow as pa

    from kdissect.spark.dissect import dissect_buckets, read_partition
    from kdissect.spark.handoff import SHIPPED_KEY, launch_order, merge_indexes

    work = tempfile.mkdtemp(prefix="bench-read-stage-")
    try:
        rows = pa.Table.from_batches(list(read_partition(
            [pa.RecordBatch.from_pylist(splits)], True, splits[-1]["split_id"], buckets, [9092], True, names, work,
            forensic_tables=tables, buckets=buckets)))
        accounting = rows.column("accounting").to_pylist()  # (every output row is an accounting row)
        shipped = launch_order(merge_indexes([json.loads(text).get(SHIPPED_KEY, {}) for text in accounting]))
        if shipped:
            indexes = pa.RecordBatch.from_arrays([pa.array(range(len(shipped)), pa.int64())], ["id"])
            for _ in dissect_buckets([indexes], shipped, [9092], True, names, work, forensic_tables=tables):
                pass
    finally:
        shutil.rmtree(work)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="+")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-forensic-tables", action="store_true")
    parser.add_argument("--split-size", type=size_of, default=128 << 20)
    parser.add_argument("--buckets", type=int, default=4)
    parser.add_argument("--owned-halves", action="store_true",
                        help="also time each half of the connections (by a CRC of the 4-tuple) fed alone")
    args = parser.parse_args()
    from kdissect.spark.worker_daemon import FEWER_COLLECTIONS

    gc.set_threshold(max(gc.get_threshold()[0], FEWER_COLLECTIONS), *gc.get_threshold()[1:])
    tables = not args.no_forensic_tables
    splits, firsts, names = planned(args.inputs, args.split_size)
    ways: dict[str, Any] = {"one task, whole set": one_task, "sorted and shipped": sorted_and_shipped,
                            "read only": read_only}
    if args.owned_halves:
        ways.update({f"owned half {half}": _fed_only(_owned_half(half)) for half in (0, 1)})
    times: dict[str, list[float]] = {name: [] for name in ways}
    for way in ways.values():  # warm: imports, caches
        way(splits, firsts, names, tables, args.buckets)
    for round_number in range(args.rounds):
        # each way first in every other round: what one run leaves (freed
        # arenas, caches) meets every way alike
        order = list(ways.items()) if round_number % 2 == 0 else list(ways.items())[::-1]
        for name, way in order:
            gc.collect()
            start = time.process_time()
            way(splits, firsts, names, tables, args.buckets)
            times[name].append(time.process_time() - start)
    print(f"{len(names)} files, {len(splits)} splits, {'every table' if tables else '--no-forensic-tables'}, "
          f"{args.rounds} alternating pairs:")
    for name, found in times.items():
        print(f"  {name}: median {statistics.median(found):.3f} s CPU (range {min(found):.3f}-{max(found):.3f})")
    ratios = [old / new for old, new in zip(times["sorted and shipped"], times["one task, whole set"])]
    print(f"  sorted and shipped / one task: median {statistics.median(ratios):.2f}x "
          f"(range {min(ratios):.2f}-{max(ratios):.2f})")
    # a design where each of two tasks reads the whole set and dissects half
    # its connections pays the read twice: each task costs at least half the
    # dissecting plus the whole read, so two of them beat one by at most this
    bounds = [whole / ((whole - read) / 2 + read) for whole, read in zip(times["one task, whole set"], times["read only"])]
    shares = [read / whole for whole, read in zip(times["one task, whole set"], times["read only"])]
    print(f"  the read's share of the one task: median {statistics.median(shares):.0%} "
          f"(range {min(shares):.0%}-{max(shares):.0%}); two tasks each reading the whole set and dissecting "
          f"half of it: at most {statistics.median(bounds):.2f}x one task (range {min(bounds):.2f}-{max(bounds):.2f})")
    if args.owned_halves:
        # the slower half sets two such tasks' pace
        paces = [whole / max(first, second) for whole, first, second
                 in zip(times["one task, whole set"], times["owned half 0"], times["owned half 1"])]
        print(f"  two tasks owning half the 4-tuples each: the slower one's pace {statistics.median(paces):.2f}x "
              f"one task (range {min(paces):.2f}-{max(paces):.2f})")


if __name__ == "__main__":
    main()
