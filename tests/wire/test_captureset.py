"""The capture-set rule (kdissect/wire/captureset.py), without Spark: several files
are merged by time into one feed order, and copies of a packet in several
files are fed once. Overlapping inputs are made with editcap from the lab
captures (a capture twice, a copy shifted by 0.5 ms, two halves that
overlap, rotated pieces); expected values come from the single file and from
tshark's frame counts. The Spark job's side of the rule (runs of one
connection merged by `ConnectionMerge`) must give every connection exactly
the CLI's feed order restricted to it."""

from __future__ import annotations

import functools
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support import impair
from kdissect.wire.capture import CaptureSet, ReadStats, iter_frames, read_segments
from kdissect.wire.captureset import DUPLICATE_WINDOW_NS, ConnectionMerge, DuplicateFilter
from kdissect.model.packet import TcpSegment
from kdissect.spark import plan, segments
from kdissect.shared.inputs import file_kind
from tests.support.pcaps import lab_captures

SOURCES = ["produce_pipelined.pcap", "consume_group.pcap", "large_records.pcap"]


def _source(name: str) -> Path:
    [path] = [p for p in lab_captures() if p.name == name]
    return path


# tshark's counts are kept per file (every path is a lab capture or a file of
# one test's own tmp_path, never rewritten), so a source is counted once
@functools.cache
def _tshark_tcp_frames(path: Path, condition: str = "") -> int:
    expression = "tcp" + (f" and {condition}" if condition else "")
    out = subprocess.run(["tshark", "-n", "-r", str(path), "-Y", expression, "-T", "fields", "-e", "frame.number"],
                         check=True, capture_output=True, text=True).stdout
    return len(out.split())


@functools.cache
def _frames(path: Path) -> int:
    out = subprocess.run(["tshark", "-n", "-r", str(path), "-T", "fields", "-e", "frame.number"],
                         check=True, capture_output=True, text=True).stdout
    return len(out.split())


def _identity(segment: TcpSegment) -> tuple:
    return (segment.ts, segment.src, segment.sport, segment.dst, segment.dport, segment.seq, segment.ack,
            segment.flags, bytes(segment.payload), segment.payload_len)


def overlapping_set(source: Path, kind: str, directory: Path) -> tuple[list[Path], int, int]:
    """(files, duplicates expected, frame number in `source` of the second
    file's first frame - 1, for the halves; else 0)."""
    directory.mkdir(parents=True, exist_ok=True)
    tcp = _tshark_tcp_frames(source)
    if kind == "twice":
        first, second = directory / "a.pcap", directory / "b.pcap"
        shutil.copy(source, first)
        shutil.copy(source, second)
        return [first, second], tcp, 0
    if kind == "shifted":  # a second capture point 0.5 ms later
        first, second = directory / "a.pcap", directory / "b.pcap"
        shutil.copy(source, first)
        subprocess.run(["editcap", "-t", "0.0005", str(source), str(second)], check=True, capture_output=True)
        return [first, second], tcp, 0
    if kind == "halves":  # packets 1..60% and 40%..100%
        count = _frames(source)
        low, high = count * 2 // 5, count * 3 // 5
        first, second = directory / "first.pcap", directory / "second.pcap"
        subprocess.run(["editcap", "-r", str(source), str(first), f"1-{high}"], check=True, capture_output=True)
        subprocess.run(["editcap", "-r", str(source), str(second), f"{low}-{count}"], check=True,
                       capture_output=True)
        overlap = _tshark_tcp_frames(source, f"frame.number >= {low} and frame.number <= {high}")
        return [first, second], overlap, low - 1
    assert kind == "rotated"
    subprocess.run(["editcap", "-c", str(max(2, _frames(source) // 4)), str(source), str(directory / "piece.pcap")],
                   check=True, capture_output=True)
    return sorted(directory.iterdir()), 0, 0


@pytest.mark.parametrize("kind", ["twice", "shifted", "halves", "rotated"])
@pytest.mark.parametrize("name", SOURCES)
def test_overlapping_inputs_read_as_the_single_capture(tmp_path: Path, name: str, kind: str) -> None:
    source = _source(name)
    files, duplicates, offset = overlapping_set(source, kind, tmp_path / kind)
    single = list(read_segments([source]))
    stats = ReadStats()
    merged = list(read_segments(files, stats))
    assert [_identity(s) for s in merged] == [_identity(s) for s in single]
    assert stats.duplicate_packets == duplicates
    assert stats.tcp_segments == len(single) + duplicates
    assert stats.packets == sum(_frames(f) for f in files)
    if kind in ("twice", "shifted"):
        # the first copy in feed order wins: the earlier (or lower-numbered) file
        assert {s.capture_index for s in merged} == {0}
        assert [s.frame_number for s in merged] == [s.frame_number for s in single]
    if kind == "halves":
        # frames of the second file, numbered from its own start
        assert [s.frame_number + (offset if s.capture_index == 1 else 0) for s in merged] == \
            [s.frame_number for s in single]
        assert {s.capture_index for s in merged} == {0, 1}


def test_repeats_within_one_file_are_not_duplicates(tmp_path: Path) -> None:
    """A trace with duplicated packets (as a switch or a retransmission makes
    them), given twice: the second file's copies go, the first file's own
    repeats stay for reassembly."""
    trace = impair.load_pcap(_source("produce_pipelined.pcap"))
    doubled = impair.duplicate(trace, seed=3, rate=0.2, max_delay=0)
    first = impair.write_pcap(doubled, tmp_path / "a.pcap")
    second = impair.write_pcap(doubled, tmp_path / "b.pcap")
    single = list(read_segments([first]))
    assert len(single) > len(trace.packets)  # the repeats are there
    stats = ReadStats()
    merged = list(read_segments([first, second], stats))
    assert [_identity(s) for s in merged] == [_identity(s) for s in single]
    assert stats.duplicate_packets == len(single)


def test_feed_order_merges_by_time_and_keeps_each_files_order(tmp_path: Path) -> None:
    """File X's clock goes backwards (times 10, 20, 15, 30 s); file Y has 12,
    17, 25 s. X's third packet stays behind its second, at X's latest time
    (20 s); ties go to the file with the lower capture index (X, the one
    whose first packet is earlier). Expected order worked out by hand from
    the rule in captureset's docstring."""
    base = impair.load_pcap(_source("admin.pcap")).packets[0]
    second = 10**9

    def file(name: str, seconds: list[int]) -> Path:
        packets = tuple(replace(base, ts_ns=(1_700_000_000 + s) * second) for s in seconds)
        return impair.write_pcap(impair.Trace(packets), tmp_path / name)

    x = file("x.pcap", [10, 20, 15, 30])
    y = file("y.pcap", [12, 17, 25])
    order = [(f.capture_index, f.frame_number) for f in iter_frames([y, x])]
    assert order == [(0, 1), (1, 1), (1, 2), (0, 2), (0, 3), (1, 3), (0, 4)]
    assert [f.order_ts // second - 1_700_000_000 for f in iter_frames([x])] == [10, 20, 20, 30]
    assert [f.ts // second - 1_700_000_000 for f in iter_frames([x])] == [10, 20, 15, 30]
    # the same packets as segments (identical TCP packets from two files, but
    # several seconds apart: not duplicates)
    stats = ReadStats()
    assert [(s.capture_index, s.frame_number) for s in read_segments([x, y], stats)] == order
    assert stats.duplicate_packets == 0


def _interleaved_capture_points(tmp_path: Path) -> list[Path]:
    """Two capture points seeing different connections at the same time (one
    lab capture moved into the other's time span), plus a shifted copy of the
    first: overlapping files, distinct and identical connections."""
    a = _source("produce_pipelined.pcap")
    b = _source("consume_group.pcap")
    first_a = next(iter(iter_frames([a]))).ts
    first_b = next(iter(iter_frames([b]))).ts
    moved = tmp_path / "b_moved.pcap"
    delta = (first_a - first_b) / 1e9 + 0.0003
    subprocess.run(["editcap", "-t", f"{delta:.6f}", str(b), str(moved)], check=True, capture_output=True)
    shifted = tmp_path / "a_shifted.pcap"
    subprocess.run(["editcap", "-t", "0.0005", str(a), str(shifted)], check=True, capture_output=True)
    return [a, moved, shifted]


def _backwards(tmp_path: Path) -> list[Path]:
    """A capture whose clock jumps back by 2 s in the middle, and a copy of it
    shifted by 1 ms."""
    trace = impair.load_pcap(_source("consume_group.pcap"))
    middle = len(trace.packets) // 2
    packets = tuple(p if i < middle else replace(p, ts_ns=p.ts_ns - 2 * 10**9) for i, p in enumerate(trace.packets))
    first = impair.write_pcap(impair.Trace(packets, trace.snaplen), tmp_path / "back.pcap")
    moved = tuple(replace(p, ts_ns=p.ts_ns + 10**6) for p in packets)
    second = impair.write_pcap(impair.Trace(moved, trace.snaplen), tmp_path / "back_copy.pcap")
    return [first, second]


def _spark_order(files: list[Path], split_size: int) -> tuple[dict[tuple, list[tuple]], int]:
    """Each connection's segments as the Spark job feeds them: every file
    split into byte ranges and read into runs, the runs sorted as the shuffle
    sorts them, then merged per connection by ConnectionMerge."""
    ordered = [str(f) for f in CaptureSet(files).paths]
    splits = plan.plan_splits([(path, file_kind(path)) for path in ordered], split_size)
    scans = {split.split_id: plan.scan_range(split) for split in plan.ranges_to_scan(splits)}
    final, fallbacks = plan.apply_scans(splits, scans)
    assert fallbacks == []
    rows = []
    for split in final:
        for batch in segments.split_runs(split.as_row(), ReadStats()):
            rows.extend(zip(*(batch.column(name).to_pylist() for name in segments.RUN_SCHEMA.names)))
    names = segments.RUN_SCHEMA.names
    at = [names.index(name) for name in (*segments.KEY_COLUMNS, *segments.ORDER_COLUMNS)]
    rows.sort(key=lambda row: tuple(row[i] for i in at))
    got: dict[tuple, list[tuple]] = {}
    duplicates = 0
    merge = None
    current = None
    for addr_a, port_a, addr_b, port_b, _order_ts, capture_index, _frame, packed in rows:
        key = (addr_a, port_a, addr_b, port_b)
        if key != current:
            if merge is not None:
                got[current].extend((s.capture_index, s.frame_number) for s in merge.finish())
                duplicates += merge.duplicates
            merge, current = ConnectionMerge(), key
            got[key] = []
        run = segments.run_segments(capture_index, addr_a, port_a, addr_b, port_b, packed)
        got[key].extend((s.capture_index, s.frame_number) for s in merge.add_run(run))
    if merge is not None:
        got[current].extend((s.capture_index, s.frame_number) for s in merge.finish())
        duplicates += merge.duplicates
    return got, duplicates


@pytest.fixture(scope="module")
def spark_inputs(tmp_path_factory):
    """The input files of each kind, made once for the three chunkings."""
    made: dict[str, list[Path]] = {}

    def inputs(kind: str) -> list[Path]:
        if kind not in made:
            directory = tmp_path_factory.mktemp(kind)
            if kind == "capture-points":
                made[kind] = _interleaved_capture_points(directory)
            elif kind == "backwards":
                made[kind] = _backwards(directory)
            else:
                made[kind] = overlapping_set(_source("consume_group.pcap"), kind, directory / kind)[0]
        return made[kind]

    return inputs


@pytest.mark.parametrize("chunk_segments,split_size", [(4096, 1 << 30), (7, 20000), (1, 4096)])
@pytest.mark.parametrize("kind", ["twice", "shifted", "halves", "rotated", "capture-points", "backwards"])
def test_spark_connection_order_is_the_cli_order_restricted(spark_inputs, monkeypatch, kind: str,
                                                            chunk_segments: int, split_size: int) -> None:
    files = spark_inputs(kind)
    stats = ReadStats()
    expected: dict[tuple, list[tuple]] = {}
    for s in read_segments(files, stats):
        ends = sorted([(s.src, s.sport), (s.dst, s.dport)])
        expected.setdefault((*ends[0], *ends[1]), []).append((s.capture_index, s.frame_number))
    monkeypatch.setattr(segments, "CHUNK_SEGMENTS", chunk_segments)
    got, duplicates = _spark_order(files, split_size)
    assert got == expected
    assert duplicates == stats.duplicate_packets
    if kind in ("capture-points", "backwards", "shifted"):
        assert duplicates > 0


def _segment(ci: int, number: int, seconds: float, seq: int) -> TcpSegment:
    ts = int(seconds * 1e9)
    return TcpSegment(ci, number, ts, "10.0.0.1", 1000, "10.0.0.2", 9092, seq, 1, 0x18, b"x" * 10, 10)


def test_duplicate_filter_holds_a_window_not_the_capture() -> None:
    """Two files of 100 s of packets, 10 per second, interleaved: the filter
    never holds more than the last second's kept packets, and drops exactly
    the second file's copies."""
    dedup = DuplicateFilter()
    largest = 0
    for step in range(1000):
        for ci, delay in ((0, 0.0), (1, 0.0004)):
            segment = _segment(ci, step + 1, step / 10 + delay, step * 10)
            dedup.keep(segment)
            largest = max(largest, len(dedup._recent), len(dedup._last))
    assert dedup.duplicates == 1000
    assert largest <= DUPLICATE_WINDOW_NS // 10**8 + 2


def test_window_edges_and_which_copy_wins() -> None:
    """A copy exactly one window later is a duplicate; a nanosecond more is
    not. A repeat within one file is kept and becomes the copy to match."""
    window = DUPLICATE_WINDOW_NS
    dedup = DuplicateFilter()
    first = _segment(0, 1, 100.0, 5)
    assert dedup.keep(first)
    assert not dedup.keep(replace_segment(first, 1, first.ts + window))
    assert dedup.keep(replace_segment(first, 1, first.ts + window + 1))  # beyond: kept, from file 1 now
    assert dedup.keep(replace_segment(first, 1, first.ts + window + 2))  # same file as the last kept: kept
    assert not dedup.keep(replace_segment(first, 0, first.ts + window + 3))
    assert dedup.duplicates == 2


def replace_segment(segment: TcpSegment, capture_index: int, ts: int) -> TcpSegment:
    return TcpSegment(capture_index, segment.frame_number, ts, segment.src, segment.sport, segment.dst,
                      segment.dport, segment.seq, segment.ack, segment.flags, segment.payload, segment.payload_len)
