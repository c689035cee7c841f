"""Cut the capture set into read tasks ("splits").

Classic pcap files larger than the split size are cut into byte ranges
(see `pcapsplit`); pcapng and gzip files are read whole by one task each. A
pre-pass finds each range's first record and counts its records; the driver
checks the ranges chain together and turns the counts into each range's
first frame number, so frame numbers are exact per file.
"""

from __future__ import annotations

import multiprocessing
import os
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace

from kdissect.spark import pcapsplit

DEFAULT_SPLIT_SIZE = 128 * 1024 * 1024


@dataclass(frozen=True)
class Split:
    split_id: int
    capture_index: int
    path: str
    kind: str  # "pcap" (byte range) or "whole" (pcapng/gzip: one task, capture reader)
    start: int  # byte range [start, end) whose record starts this split owns
    end: int
    file_size: int
    boundary: int = -1  # offset of the first record start in the range; -1: none
    first_frame: int = 1  # frame number of that record

    def as_row(self) -> dict:
        return asdict(self)


def plan_splits(ordered: list[tuple[str, str]], split_size: int) -> list[Split]:
    """Splits for (path, kind) pairs given in capture-set order."""
    splits: list[Split] = []
    for capture_index, (path, kind) in enumerate(ordered):
        size = os.path.getsize(path)
        if kind != "pcap":
            splits.append(Split(len(splits), capture_index, path, "whole", 0, size, size))
            continue
        start = 0
        while True:
            end = min(size, max(start + split_size, pcapsplit.GLOBAL_HEADER_LEN + 1))
            boundary = pcapsplit.GLOBAL_HEADER_LEN if start == 0 else -1
            splits.append(Split(len(splits), capture_index, path, "pcap", start, end, size, boundary))
            start = end
            if start >= size:
                break
    return splits


@dataclass(frozen=True)
class RangeScan:
    """What the pre-pass learned about one byte range."""

    split_id: int
    boundary: int  # -1 when no record starts in the range
    records: int
    stop: int


def scan_range(split: Split) -> RangeScan:
    """Pre-pass for one range: find its first record, count records, note where the walk stopped."""
    with open(split.path, "rb", buffering=1 << 16) as stream:
        fmt = pcapsplit.read_format(stream)
        if fmt is None:
            return RangeScan(split.split_id, -1, 0, split.file_size)
        boundary = pcapsplit.find_boundary(stream, fmt, split.start, split.end, split.file_size)
        if boundary is None:
            return RangeScan(split.split_id, -1, 0, -1)
        walk = pcapsplit.count_records(stream, fmt, boundary, split.end, split.file_size)
        return RangeScan(split.split_id, boundary, walk.records, walk.stop)


def ranges_to_scan(splits: list[Split]) -> list[Split]:
    """The splits the pre-pass must scan: every range of files cut into several."""
    by_file: dict[int, list[Split]] = {}
    for split in splits:
        by_file.setdefault(split.capture_index, []).append(split)
    return [split for group in by_file.values() if len(group) > 1 for split in group]


def local_task_slots(master: str | None) -> int | None:
    """How many tasks a local master runs at once (local, local[N], local[*],
    local[N,F]), capped at the CPUs this process may use; None if not local."""
    if master is None:
        return None
    match = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\s*\d+)?\])?", master.strip())
    if match is None:
        return None
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    wanted = match.group(1)
    slots = 1 if wanted is None else usable if wanted == "*" else int(wanted)
    return max(1, min(slots, usable))


class LocalScan:
    """The pre-pass run by worker processes of the driver, for local masters.

    In local mode the driver's machine is the executors' machine, so the
    pre-pass need not wait for the JVM: started before the Spark session, it
    runs while the JVM starts, and saves a Spark job (whose tasks would each
    start a Python worker first).
    """

    def __init__(self, to_scan: list[Split], workers: int) -> None:
        # fork: cheap, and the children only run scan_range (when a session
        # exists already, as in tests, they inherit its gateway socket unused)
        self._pool = ProcessPoolExecutor(max_workers=max(1, min(workers, len(to_scan))),
                                         mp_context=multiprocessing.get_context("fork"))
        self._futures = [self._pool.submit(scan_range, split) for split in to_scan]

    def abandon(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def result(self) -> dict[int, RangeScan]:
        try:
            scans = [future.result() for future in self._futures]
        finally:
            self._pool.shutdown(cancel_futures=True)
        return {scan.split_id: scan for scan in scans}


def scan_with_spark(sc, to_scan: list[Split]) -> dict[int, RangeScan]:
    """The pre-pass as a Spark job, one task per range (any master)."""
    scanned = sc.parallelize(to_scan, max(1, len(to_scan))).map(scan_range).collect()
    return {scan.split_id: scan for scan in scanned}


def ranges_chain(file_splits: list[Split], scans: dict[int, RangeScan]) -> bool:
    """True if each range's walk stops exactly at the next range's first record."""
    first = scans[file_splits[0].split_id]
    if first.boundary != pcapsplit.GLOBAL_HEADER_LEN and file_splits[0].file_size > pcapsplit.GLOBAL_HEADER_LEN:
        return False
    expected = first.stop
    for split in file_splits[1:]:
        scan = scans[split.split_id]
        if expected >= split.end or expected >= split.file_size:
            # The previous walk stopped beyond this whole range: it must hold no record start.
            if scan.boundary != -1:
                return False
            continue
        if scan.boundary != expected:
            return False
        expected = scan.stop
    return True


def apply_scans(splits: list[Split], scans: dict[int, RangeScan]) -> tuple[list[Split], list[str]]:
    """Fill boundaries and first frame numbers; files whose ranges do not chain go whole.

    Returns (splits, paths of files that fell back to one task).
    """
    by_file: dict[int, list[Split]] = {}
    for split in splits:
        by_file.setdefault(split.capture_index, []).append(split)
    result: list[Split] = []
    fallbacks: list[str] = []
    for capture_index in sorted(by_file):
        group = by_file[capture_index]
        if group[0].kind != "pcap" or len(group) == 1:
            result.extend(group)
            continue
        if not ranges_chain(group, scans):
            fallbacks.append(group[0].path)
            whole = replace(group[0], end=group[0].file_size, boundary=pcapsplit.GLOBAL_HEADER_LEN)
            result.append(whole)
            continue
        frame = 1
        for split in group:
            scan = scans[split.split_id]
            if scan.boundary == -1:
                continue  # owns no record: nothing to read
            result.append(replace(split, boundary=scan.boundary, first_frame=frame))
            frame += scan.records
    return [replace(split, split_id=index) for index, split in enumerate(result)], fallbacks
