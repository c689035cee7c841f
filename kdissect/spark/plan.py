"""Cut the capture set into read tasks ("splits").

Plain pcap and pcapng files larger than the split size are cut into byte
ranges (see `pcapsplit`); gzip files are read whole by one task each.

Each byte of a cut file is read once. The driver only probes: for each
range after the first it reads a small window at the split point and finds
the range's first record or block there (`probe_ranges`: a chain of
plausible record headers, or of pcapng blocks, from that offset), and for
pcapng it reads the file's head, the section header and the interface
descriptions right after it, which every later range is handed. The tasks
then read their ranges numbering packets locally (kdissect.spark.frames),
with feed times counted from the range's start, and each reports how its
read ended (`RangeEnd`): its packet count, where its walk stopped, its
latest packet time, the feed time of its first segment and the last
section or interface block it met.

After the job the driver checks what the probe could only guess
(`check_ranges`): each range must start exactly where the previous one's
walk stopped (so every boundary was a true record start, as walking from
the file's true first record only lands on true ones), no range may start
with a packet earlier than the file's latest time before it (so the feed
times counted from the range's start are the file's), and for pcapng no
range but the last may meet a section header or an interface description
after the head (which the later ranges did not know). The packet counts
give every range its frame offset (global = local + packets of the file's
earlier ranges), applied where the tables are finished. A file that fails
the check is read again the safe way: the whole-range pre-pass below
(`scan_range` for each range, chained by `apply_scans`, which hands every
range its first frame number, the file's latest time before it and the
pcapng section in force, or falls back to one task for the file), and the
job's read stage runs again.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Iterable

from kdissect.wire.capture import FileRange, interface_from_description, pcapng_head
from kdissect.wire.capture import scan_range as scan_file_range
from kdissect.spark import pcapsplit
from kdissect.spark.frames import local_first_frame

DEFAULT_SPLIT_SIZE = 128 * 1024 * 1024
# a file's last range may be this much longer than the split size (Hadoop's
# FileInputFormat does the same): a sliver of a range would be a read task of
# its own and one more boundary whose connections are shuffled
SPLIT_SLOP = 1.1
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
    # a range of a cut file whose read is checked after the job (see the
    # module comment): numbered locally unless it starts the file
    checked: bool = False
    head_end: int = 0  # checked pcapng: where the file's head (section header, interfaces) ends

    def as_row(self) -> dict:
        return asdict(self)


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
            end = size if size - start <= split_size * SPLIT_SLOP else min(size, max(start + split_size, first + 1))
            boundary = first if start == 0 else -1
            splits.append(Split(len(splits), capture_index, path, kind, start, end, size, boundary))
            start = end
            if start >= size:
                break
    return splits


# -- the probe: a small window at each split point -------------------------------------

PROBE_WINDOW = 8 << 10  # bytes looked at a time from a split point for the first record
PROBE_BLOCK = 16 << 10  # bytes per ranged read from a store while probing
PROBE_THREADS = 16  # files probed at once (a store's latency, not its bandwidth, bounds one after another)


def _probe_stream(path: str, size: int) -> Any:
    from kdissect.wire import stores

    if stores.is_uri(path):
        return stores.RangedFile(path, size, block_size=PROBE_BLOCK)
    return open(path, "rb")


def probe_file(group: list[Split]) -> list[Split]:
    """The ranges of one cut file with the first record or block each owns
    (boundary -1: none), found from a small window at each split point; for
    pcapng the byte order of the file's first section, and for each range the
    interfaces of the file's head described before its boundary. A file that
    does not start as its format should is left to one task."""
    first = group[0]
    whole = [replace(first, kind="whole", end=first.file_size, boundary=0)]
    with _probe_stream(first.path, first.file_size) as stream:
        described: list[tuple[int, Any]] = []
        if first.kind == "pcap":
            fmt = pcapsplit.read_format(stream)
            if fmt is None:
                return whole
            order, head_end = "<", pcapsplit.GLOBAL_HEADER_LEN

            def find(split: Split) -> int | None:
                return pcapsplit.find_boundary(stream, fmt, split.start, split.end, split.file_size, PROBE_WINDOW)
        else:
            head = pcapng_head(stream)
            if head is None:
                return whole
            order, described, head_end = head

            def find(split: Split) -> int | None:
                return pcapsplit.find_block_boundary(stream, order, split.start, split.end, split.file_size,
                                                     PROBE_WINDOW)
        probed = []
        for split in group:
            boundary = split.boundary if split.start == 0 else find(split)
            known = [description for offset, description in described if split.start > 0
                     and boundary is not None and offset < boundary]
            probed.append(replace(split, boundary=-1 if boundary is None else boundary, byte_order=order,
                                  interfaces=json.dumps(known), checked=True, head_end=head_end))
    return probed


class Probe:
    """`probe_ranges` run by driver threads, started before the Spark session
    (the probe waits on the store, the session on the JVM)."""

    def __init__(self, splits: list[Split], threads: int = PROBE_THREADS) -> None:
        self._splits = splits
        groups = _cut_files(splits)
        self._pool = ThreadPoolExecutor(max_workers=max(1, min(threads, len(groups)))) if groups else None
        self._futures = {capture_index: self._pool.submit(probe_file, group)  # type: ignore[union-attr]
                         for capture_index, group in groups.items()}

    def abandon(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def result(self) -> list[Split]:
        """Every planned range, probed (see `number_tasks`)."""
        try:
            probed = {capture_index: future.result() for capture_index, future in self._futures.items()}
        finally:
            self.abandon()
        ranges: list[Split] = []
        for split in self._splits:
            if split.capture_index in probed:
                ranges.extend(probed.pop(split.capture_index))
            elif split.capture_index not in self._futures:
                ranges.append(split)
        return ranges


def probe_ranges(splits: list[Split]) -> list[Split]:
    """The planned splits with each cut file's ranges probed (`probe_file`)."""
    return Probe(splits).result()


def _cut_files(splits: list[Split]) -> dict[int, list[Split]]:
    by_file: dict[int, list[Split]] = {}
    for split in splits:
        if split.kind in RANGE_KINDS:
            by_file.setdefault(split.capture_index, []).append(split)
    return {capture_index: group for capture_index, group in by_file.items() if len(group) > 1}


def number_tasks(ranges: list[Split]) -> list[Split]:
    """Split ids for the ranges that own records (-1 for the others), and
    the locally numbered ranges' marked first frame numbers (kdissect.spark.frames)."""
    numbered = []
    split_id = 0
    for split in ranges:
        if split.boundary < 0:
            numbered.append(replace(split, split_id=-1))
            continue
        if split.checked and split.start > 0:
            numbered.append(replace(split, split_id=split_id, first_frame=local_first_frame(split_id), order_ts=0))
        else:
            numbered.append(replace(split, split_id=split_id))
        split_id += 1
    return numbered


def read_splits(ranges: list[Split]) -> list[Split]:
    """The numbered ranges that are read, each its own task partition (the
    read stage's Spark tasks may take several: `job.read_task_sizes`)."""
    return [split for split in ranges if split.split_id >= 0]


@dataclass(frozen=True)
class RangeEnd:
    """How a checked range's read ended, as its task reports it."""

    split_id: int
    records: int  # packets read
    stop: int  # as RangeScan.stop
    latest: int  # latest packet time in the range (ns)
    first_order: int | None  # feed time of its first TCP segment (counted from the range's start); None: none
    last_block: int  # offset of the last section header or interface description met, -1: none

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_ranges(ranges: list[Split], ends: list[dict[str, Any]]) -> tuple[list[int], list[int]]:
    """The capture indexes of cut files whose ranges failed the check after
    the job (see the module comment), and each task's frame offset (by split id)."""
    reported = {end["split_id"]: end for end in ends}
    offsets = [0] * (1 + max((split.split_id for split in ranges), default=-1))
    failed = []
    by_file: dict[int, list[Split]] = {}
    for split in ranges:
        if split.checked:
            by_file.setdefault(split.capture_index, []).append(split)
    for capture_index, group in by_file.items():
        read = [split for split in group if split.split_id >= 0]
        missing = [split.split_id for split in read if split.split_id not in reported]
        if missing:
            raise RuntimeError(f"ranges {missing} of {group[0].path} were read but not reported")
        if not _chained(group, reported) or not _consistent(read, reported):
            failed.append(capture_index)
            continue
        records = 0
        for split in read:
            offsets[split.split_id] = records
            records += reported[split.split_id]["records"]
    return failed, offsets


def _chained(group: list[Split], reported: dict[int, dict[str, Any]]) -> bool:
    """True if each range starts exactly where the previous range's read stopped."""
    return _stops_chain(reported[group[0].split_id]["stop"], ((split, split.boundary) for split in group[1:]),
                        lambda split: reported[split.split_id]["stop"])


def _stops_chain(expected: int, later: Iterable[tuple[Split, int]], stop_of: Callable[[Split], int]) -> bool:
    """True if each later range's first record (its boundary) is where the
    range before it stopped (`expected` for the first of them); `stop_of` a
    range where its read stopped, asked only of a range that owns records.
    The one chain rule of the check after the read and of the whole-range
    pre-pass."""
    for split, boundary in later:
        if expected < 0 or expected >= split.end or expected >= split.file_size:
            # the previous read ended (damage, a cut, the file's end) or
            # stopped beyond this whole range: it must own no record
            if boundary != -1:
                return False
            continue
        if boundary != expected:
            return False
        expected = stop_of(split)
    return True


def _consistent(read: list[Split], reported: dict[int, dict[str, Any]]) -> bool:
    """True if every range read with what the ranges before it turned out to hold."""
    latest = 0
    for split in read:
        end = reported[split.split_id]
        first = end["first_order"]
        if split.start > 0 and first is not None and first < latest:
            return False  # the file's clock went back across the split point: its feed times differ
        if split is not read[-1] and end["last_block"] >= split.head_end:
            return False  # a section or interface the later ranges did not know
        latest = max(latest, end["latest"])
    return True


def safe_ranges(planned: list[Split], ranges: list[Split], failed: list[int], scans: dict[int, RangeScan]
                ) -> tuple[list[Split], list[str]]:
    """`ranges` with the failed files' ranges planned again from a whole-range
    pre-pass (`scans` of `ranges_to_scan` of their planned splits), numbered
    again (`number_tasks`); and the paths of files that fell back to one task."""
    again = [split for split in planned if split.capture_index in failed]
    chained, fallbacks = apply_scans(again, scans)
    by_file: dict[int, list[Split]] = {}
    for split in chained:
        by_file.setdefault(split.capture_index, []).append(split)
    merged: list[Split] = []
    for split in ranges:
        if split.capture_index not in failed:
            merged.append(split)
        elif split.capture_index in by_file:
            merged.extend(by_file.pop(split.capture_index))
    return number_tasks(merged), fallbacks


# -- the whole-range pre-pass (the safe way, for files that failed the check) -----------


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
    with _probe_stream(split.path, split.file_size) as stream:
        if split.kind == "pcap":
            fmt = pcapsplit.read_format(stream)
            if fmt is None:
                return RangeScan(split.split_id, -1, 0, split.file_size)
            boundary = pcapsplit.find_boundary(stream, fmt, split.start, split.end, split.file_size, PROBE_WINDOW)
            order = "<"
        else:
            order = pcapsplit.pcapng_byte_order(stream)  # type: ignore[assignment]
            if order is None:
                return RangeScan(split.split_id, -1, 0, split.file_size)
            boundary = pcapsplit.find_block_boundary(stream, order, split.start, split.end, split.file_size,
                                                     PROBE_WINDOW)
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
    return _stops_chain(first.stop, ((split, scans[split.split_id].boundary) for split in file_splits[1:]),
                        lambda split: scans[split.split_id].stop)


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
