"""Cut the capture set into read tasks ("splits").

Plain pcap and pcapng files larger than the split size are cut into byte
ranges (see `pcapsplit`); gzip files are read whole by one task each. A
pre-pass walks each range with the capture reader's own loop (`scan_range`,
reading without decoding): it finds the range's first record or block, counts
its packets, notes where the walk stopped, the latest packet time, and for
pcapng the section and interface blocks it met and each interface's latest
ticks. The driver checks that the ranges chain together and hands every
range what a reader must know at its start and cannot see from there: the
frame number of its first packet, the latest packet time of the file before
it (the feed order, see kdissect.wire.captureset), and for pcapng the section in
force (byte order and interfaces, which a section header later in the file
resets). A file whose ranges do not chain is read by one task.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace

from kdissect.wire.capture import FileRange, interface_from_description, open_raw
from kdissect.wire.capture import scan_range as scan_file_range
from kdissect.spark import pcapsplit

DEFAULT_SPLIT_SIZE = 128 * 1024 * 1024
RANGE_KINDS = ("pcap", "pcapng")  # read as byte ranges; anything else ("whole") by one task from the start


@dataclass(frozen=True)
class Split:
    split_id: int
    capture_index: int
    path: str
    kind: str  # "pcap" / "pcapng" (byte range) or "whole" (gzip, or a fallback: one task, from the start)
    start: int  # byte range [start, end) whose record starts this split owns
    end: int
    file_size: int
    boundary: int = -1  # offset of the first record start in the range; -1: none
    first_frame: int = 1  # frame number of that record
    order_ts: int = 0  # latest packet time (ns) of the file before the range
    byte_order: str = "<"  # pcapng: the section in force at the boundary ...
    interfaces: str = "[]"  # ... and its interface descriptions, JSON

    def as_row(self) -> dict:
        return asdict(self)


def split_schema():
    """The Spark schema of Split rows."""
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    return StructType([
        StructField("split_id", IntegerType()),
        StructField("capture_index", IntegerType()),
        StructField("path", StringType()),
        StructField("kind", StringType()),
        StructField("start", LongType()),
        StructField("end", LongType()),
        StructField("file_size", LongType()),
        StructField("boundary", LongType()),
        StructField("first_frame", LongType()),
        StructField("order_ts", LongType()),
        StructField("byte_order", StringType()),
        StructField("interfaces", StringType()),
    ])


def file_range(split: dict) -> FileRange:
    """The capture reader's view of a byte-range split (a Split row)."""
    return FileRange(split["path"], split["capture_index"], split["kind"], split["boundary"], split["end"],
                     split["first_frame"], split["order_ts"], split["byte_order"],
                     tuple(tuple(d) for d in json.loads(split["interfaces"])))


def file_size(path: str) -> int:
    """Size of a capture: a local path or a store URI (kdissect.wire.stores)."""
    from kdissect.wire import stores

    return stores.any_size(path)


def plan_splits(ordered: list[tuple[str, str]], split_size: int,
                sizes: list[int] | None = None) -> list[Split]:
    """Splits for (path, kind) pairs given in capture-set order (`sizes`: the
    files' sizes if known, else asked of the file system)."""
    splits: list[Split] = []
    for capture_index, (path, kind) in enumerate(ordered):
        size = sizes[capture_index] if sizes is not None else file_size(path)
        if kind not in RANGE_KINDS:
            splits.append(Split(len(splits), capture_index, path, "whole", 0, size, size, 0))
            continue
        first = pcapsplit.GLOBAL_HEADER_LEN if kind == "pcap" else 0
        start = 0
        while True:
            end = min(size, max(start + split_size, first + 1))
            boundary = first if start == 0 else -1
            splits.append(Split(len(splits), capture_index, path, kind, start, end, size, boundary))
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
    stop: int  # first record start at or past the range's end, the file size, or -1 after damage or a cut
    latest: int = 0  # pcap: latest packet time in the range (ns)
    byte_order: str = ""  # pcapng: the byte order the range was read with
    events: list = field(default_factory=list)  # pcapng: see capture.Walk
    ticks: dict = field(default_factory=dict)


def scan_range(split: Split) -> RangeScan:
    """Pre-pass for one range: find its first record, walk the range."""
    with open_raw(split.path) as stream:
        if split.kind == "pcap":
            fmt = pcapsplit.read_format(stream)
            if fmt is None:
                return RangeScan(split.split_id, -1, 0, split.file_size)
            boundary = pcapsplit.find_boundary(stream, fmt, split.start, split.end, split.file_size)
            order = "<"
        else:
            order = pcapsplit.pcapng_byte_order(stream)  # type: ignore[assignment]
            if order is None:
                return RangeScan(split.split_id, -1, 0, split.file_size)
            boundary = pcapsplit.find_block_boundary(stream, order, split.start, split.end, split.file_size)
    if boundary is None:
        return RangeScan(split.split_id, -1, 0, -1)
    walk = scan_file_range(FileRange(split.path, split.capture_index, split.kind, boundary, split.end,
                                     byte_order=order))
    return RangeScan(split.split_id, boundary, walk.number, walk.stop, walk.order_ts, order, walk.events,
                     walk.ticks)


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
    """The pre-pass as a Spark job, one task per range (any master); the
    tasks reach the stores with the driver's settings."""
    from kdissect.wire import stores

    store_settings = stores.settings()

    def scan(split: Split) -> RangeScan:
        stores.configure_once(store_settings)
        return scan_range(split)

    scanned = sc.parallelize(to_scan, max(1, len(to_scan))).map(scan).collect()
    return {scan.split_id: scan for scan in scanned}


def ranges_chain(file_splits: list[Split], scans: dict[int, RangeScan]) -> bool:
    """True if each range's walk stops exactly at the next range's first record."""
    head = file_splits[0]
    first = scans[head.split_id]
    expected_start = pcapsplit.GLOBAL_HEADER_LEN if head.kind == "pcap" else 0
    if first.boundary != expected_start and head.file_size > expected_start:
        return False
    expected = first.stop
    for split in file_splits[1:]:
        scan = scans[split.split_id]
        if expected < 0 or expected >= split.end or expected >= split.file_size:
            # The previous walk ended (damage, a cut, the file's end) or
            # stopped beyond this whole range: it must hold no record start.
            if scan.boundary != -1:
                return False
            continue
        if scan.boundary != expected:
            return False
        expected = scan.stop
    return True


class _SectionReplay:
    """The pcapng section in force, replayed range by range on the driver."""

    def __init__(self, byte_order: str) -> None:
        self.byte_order = byte_order
        self.interfaces: list[tuple] = []

    def latest(self, scan: RangeScan) -> int:
        """The latest packet time (ns) in the range, from its interfaces' largest ticks."""
        parts = [list(self.interfaces)]  # part 0: the section in force at the boundary
        for event in scan.events:
            if event[0] == "section":
                parts.append([])
            else:
                parts[-1].append(tuple(event[2]))
        latest = 0
        for (part, interface, known), ticks in scan.ticks.items():
            inherited = len(self.interfaces) if part == 0 else 0
            if interface < inherited + known:  # the reader has that interface at that packet
                _linktype, mul, div, offset, _snaplen, _resolution = interface_from_description(parts[part][interface])
                latest = max(latest, (ticks * mul if div == 1 else (ticks * mul + div // 2) // div) + offset)
        return latest

    def advance(self, scan: RangeScan) -> None:
        for event in scan.events:
            if event[0] == "section":
                self.byte_order, self.interfaces = event[2], []
            else:
                self.interfaces.append(tuple(event[2]))


def apply_scans(splits: list[Split], scans: dict[int, RangeScan]) -> tuple[list[Split], list[str]]:
    """Fill boundaries, first frame numbers, latest times before each range
    and pcapng sections; files whose ranges do not chain go whole.

    Returns (splits, paths of files that fell back to one task).
    """
    by_file: dict[int, list[Split]] = {}
    for split in splits:
        by_file.setdefault(split.capture_index, []).append(split)
    result: list[Split] = []
    fallbacks: list[str] = []
    for capture_index in sorted(by_file):
        group = by_file[capture_index]
        if group[0].kind not in RANGE_KINDS:
            result.extend(group)
            continue
        if len(group) == 1:  # one range, not scanned: its first record is the file's
            result.append(replace(group[0], boundary=pcapsplit.GLOBAL_HEADER_LEN if group[0].kind == "pcap" else 0))
            continue
        planned = _chain_file(group, scans) if ranges_chain(group, scans) else None
        if planned is None:
            fallbacks.append(group[0].path)
            result.append(replace(group[0], kind="whole", end=group[0].file_size, boundary=0))
            continue
        result.extend(planned)
    return [replace(split, split_id=index) for index, split in enumerate(result)], fallbacks


def _chain_file(group: list[Split], scans: dict[int, RangeScan]) -> list[Split] | None:
    """The ranges of one file with what each must know at its start; None if
    a range was walked in another byte order than the section in force there."""
    planned = []
    frame = 1
    latest = 0
    section = _SectionReplay(scans[group[0].split_id].byte_order)
    for split in group:
        scan = scans[split.split_id]
        if scan.boundary == -1:
            continue  # owns no record: nothing to read
        if split.kind == "pcapng" and scan.byte_order != section.byte_order:
            return None
        planned.append(replace(split, boundary=scan.boundary, first_frame=frame, order_ts=latest,
                               byte_order=section.byte_order, interfaces=json.dumps(section.interfaces)))
        frame += scan.records
        if split.kind == "pcapng":
            latest = max(latest, section.latest(scan))
            section.advance(scan)
        else:
            latest = max(latest, scan.latest)
    return planned
