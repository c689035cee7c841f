"""Segment runs, the rows the Spark job shuffles (no Spark): packing segments
into per-connection runs and sorting the runs as the shuffle does gives back
every segment of every connection, unchanged and in capture order."""

from __future__ import annotations

from pathlib import Path

import pytest

from kdissect.wire.capture import ReadStats, read_segments
from kdissect.spark import plan, segments


def _canonical(segment) -> tuple:
    ends = sorted([(segment.src, segment.sport), (segment.dst, segment.dport)])
    return (*ends[0], *ends[1])


def _fields(segment) -> tuple:
    return (segment.capture_index, segment.frame_number, segment.ts, segment.src, segment.sport, segment.dst,
            segment.dport, segment.seq, segment.ack, segment.flags, bytes(segment.payload), segment.payload_len,
            segment.order_ts)


def _shuffled_runs(path: Path, split_size: int) -> list[tuple]:
    """Runs of every split of `path`, sorted by key then first frame as the job sorts them."""
    splits = plan.plan_splits([(str(path), "pcap")], split_size)
    scans = {split.split_id: plan.scan_range(split) for split in splits}
    final, fallbacks = plan.apply_scans(splits, scans)
    assert not fallbacks
    rows = []
    for split in final:
        for batch in segments.split_runs(split.as_row(), ReadStats()):
            rows.extend(zip(*(batch.column(name).to_pylist() for name in segments.RUN_SCHEMA.names)))
    names = segments.RUN_SCHEMA.names
    key_at = [names.index(name) for name in (*segments.KEY_COLUMNS, *segments.ORDER_COLUMNS)]
    rows.sort(key=lambda row: tuple(row[i] for i in key_at))
    return rows


@pytest.mark.parametrize("chunk_segments, split_size", [(3, 1 << 30), (1, 4096), (4096, 8192)])
def test_runs_give_back_each_connections_segments_in_order(captures_dir, monkeypatch, chunk_segments, split_size):
    monkeypatch.setattr(segments, "CHUNK_SEGMENTS", chunk_segments)
    for path in sorted(captures_dir.glob("*.pcap")):
        expected: dict[tuple, list[tuple]] = {}
        for segment in read_segments([str(path)]):
            expected.setdefault(_canonical(segment), []).append(_fields(segment))
        got: dict[tuple, list[tuple]] = {}
        for addr_a, port_a, addr_b, port_b, order_ts, capture_index, first_frame, packed in _shuffled_runs(
                path, split_size):
            unpacked = list(segments.run_segments(capture_index, addr_a, port_a, addr_b, port_b, packed))
            assert unpacked and (unpacked[0].order_ts, unpacked[0].frame_number) == (order_ts, first_frame)
            got.setdefault((addr_a, port_a, addr_b, port_b), []).extend(_fields(s) for s in unpacked)
        assert got == expected, path.name


def test_a_chunk_is_cut_by_payload_bytes(captures_dir, monkeypatch):
    path = captures_dir / "large_records.pcap"
    default_rows = _shuffled_runs(path, 1 << 30)
    monkeypatch.setattr(segments, "CHUNK_PAYLOAD_BYTES", 1000)
    rows = _shuffled_runs(path, 1 << 30)
    largest_segment = max(len(s.payload) for s in read_segments([str(path)]))
    # a chunk closes as soon as its payload reaches the limit: no run holds
    # more than the limit plus one segment
    assert all(len(row[-1]) < 1000 + 2 * (segments.SEGMENT_HEADER.size + largest_segment) for row in rows)
    assert len(rows) > 2 * len(default_rows)


def test_read_counts_travel_as_rows_and_are_summed_once_per_row(tmp_path):
    """A split's read counts are a row of the shuffle (not an accumulator, which
    counts a re-run task twice); the dissecting task sums the rows it gets and
    reports them in its accounting row."""
    import json

    import pyarrow as pa

    from kdissect.spark.dissect import ACCOUNTING, ConnectionRunner
    from kdissect.spark.part_files import PartSink

    first, second = ReadStats(), ReadStats()
    first.packets, first.bytes, first.problems = 10, 1000, [f"problem {i}" for i in range(70)]
    second.packets, second.bytes, second.problems = 5, 300, [f"other {i}" for i in range(70)]
    batch = pa.concat_tables([pa.Table.from_batches([segments.read_stats_batch(stats, 0)])
                              for stats in (first, second)]).combine_chunks().to_batches()[0]
    out = pa.Table.from_batches(list(ConnectionRunner([9092], True, ["x.pcap"], PartSink(str(tmp_path), 3)).run([batch]))).to_pylist()
    [accounting] = [row for row in out if row["kind"] == ACCOUNTING]
    read = json.loads(accounting["accounting"])["read"]
    assert (read["packets"], read["bytes"]) == (15, 1300)
    assert read["problems"] == first.problems + second.problems[:30]  # capped at 100 texts
    assert json.loads(accounting["accounting"])["segments"] == 0  # no connection was fed
    assert accounting["task_partition"] == 3
    assert not list(tmp_path.rglob("*.arrow"))  # no rows, no files
