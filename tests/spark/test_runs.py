"""Segment runs, what the Spark job hands off between its tasks (no Spark):
packing segments into per-connection runs, spooling them to files by bucket
and merging each bucket back (kdissect.spark.handoff) gives back every
segment of every connection, unchanged and in capture order."""

from __future__ import annotations

from pathlib import Path

import pytest

from kdissect.wire.capture import ReadStats, read_segments
from kdissect.shared.outdir_tree import Tree
from kdissect.spark import handoff, plan, segments


def _canonical(segment) -> tuple:
    ends = sorted([(segment.src, segment.sport), (segment.dst, segment.dport)])
    return (*ends[0], *ends[1])


def _fields(segment) -> tuple:
    return (segment.capture_index, segment.frame_number, segment.ts, segment.src, segment.sport, segment.dst,
            segment.dport, segment.seq, segment.ack, segment.flags, bytes(segment.payload), segment.payload_len,
            segment.order_ts)


def _shuffled_runs(path: Path, split_size: int, work: Path, buckets: int = 3) -> list[tuple]:
    """Runs of every split of `path`, spooled by bucket and merged back per
    bucket, as the job's read and dissecting tasks do; each 4-tuple's runs
    must come out consecutively."""
    splits = plan.plan_splits([(str(path), "pcap")], split_size)
    scans = {split.split_id: plan.scan_range(split) for split in splits}
    final, fallbacks = plan.apply_scans(splits, scans)
    assert not fallbacks
    tree = Tree(str(work))
    indexes = []
    for split in final:
        spool = handoff.RunSpool(tree, split.split_id, buckets)
        for batch in segments.split_runs(split.as_row(), ReadStats()):
            spool.add(batch)
        indexes.append(spool.close())
    rows = []
    for bucket, pieces in sorted(handoff.merge_indexes(indexes).items()):
        merged = list(handoff.bucket_runs(tree, pieces))
        keys = [row[:4] for row in merged]
        assert all(handoff.bucket_of(*key, buckets) == bucket for key in keys)
        seen = [key for index, key in enumerate(keys) if index == 0 or keys[index - 1] != key]
        assert len(seen) == len(set(seen)), "a 4-tuple's runs came in two places"
        rows.extend(merged)
    return rows


# (small spool and batch sizes: many spool files per split and many batches per bucket)
@pytest.mark.parametrize("chunk_segments, split_size, spool_bytes, batch_bytes",
                         [(3, 1 << 30, 64 << 20, 1 << 20), (1, 4096, 20_000, 3_000), (4096, 8192, 1, 1)])
def test_runs_give_back_each_connections_segments_in_order(captures_dir, monkeypatch, tmp_path, chunk_segments,
                                                           split_size, spool_bytes, batch_bytes):
    monkeypatch.setattr(segments, "CHUNK_SEGMENTS", chunk_segments)
    monkeypatch.setattr(handoff, "SPOOL_BYTES", spool_bytes)
    monkeypatch.setattr(handoff, "BATCH_BYTES", batch_bytes)
    for path in sorted(captures_dir.glob("*.pcap")):
        expected: dict[tuple, list[tuple]] = {}
        for segment in read_segments([str(path)]):
            expected.setdefault(_canonical(segment), []).append(_fields(segment))
        got: dict[tuple, list[tuple]] = {}
        for addr_a, port_a, addr_b, port_b, order_ts, capture_index, first_frame, packed in _shuffled_runs(
                path, split_size, tmp_path / path.stem):
            unpacked = list(segments.run_segments(capture_index, addr_a, port_a, addr_b, port_b, packed))
            assert unpacked and (unpacked[0].order_ts, unpacked[0].frame_number) == (order_ts, first_frame)
            got.setdefault((addr_a, port_a, addr_b, port_b), []).extend(_fields(s) for s in unpacked)
        assert got == expected, path.name


def test_a_chunk_is_cut_by_payload_bytes(captures_dir, monkeypatch, tmp_path):
    path = captures_dir / "large_records.pcap"
    default_rows = _shuffled_runs(path, 1 << 30, tmp_path / "default")
    monkeypatch.setattr(segments, "CHUNK_PAYLOAD_BYTES", 1000)
    rows = _shuffled_runs(path, 1 << 30, tmp_path / "small")
    largest_segment = max(len(s.payload) for s in read_segments([str(path)]))
    # a chunk closes as soon as its payload reaches the limit: no run holds
    # more than the limit plus one segment
    assert all(len(row[-1]) < 1000 + 2 * (segments.SEGMENT_HEADER.size + largest_segment) for row in rows)
    assert len(rows) > 2 * len(default_rows)


def test_each_split_reports_its_read_counts_once(captures_dir, tmp_path):
    """A split's read counts travel in one accounting row of its own (not an
    accumulator, which counts a re-run task twice): one row per split, and
    the rows add up to the file's packets as capinfos counts them."""
    import json

    import pyarrow as pa

    from kdissect.spark.dissect import read_partition
    from kdissect.spark.handoff import SHIPPED_KEY
    from tests.support.pcaps import packet_count

    path = captures_dir / "large_records.pcap"
    splits = [split.as_row() for split in plan.read_splits(plan.number_tasks(plan.probe_ranges(
        plan.plan_splits([(str(path), "pcap")], 64 << 10))))]
    assert len(splits) > 2
    rows = [row for batch in read_partition([pa.RecordBatch.from_pylist(splits)], False, -1, 8, [9092], True,
                                            [path.name], str(tmp_path), forensic_tables=False, buckets=3)
            for row in batch.to_pylist()]
    assert [row["task_partition"] for row in rows] == [8 + split["split_id"] for split in splits]
    values = [json.loads(row["accounting"]) for row in rows]
    assert sum(value["read"]["packets"] for value in values) == packet_count(path)
    # every shipped 4-tuple's runs were left in the split's files, in the three buckets
    assert {int(bucket) for value in values for bucket in value[SHIPPED_KEY]} <= {0, 1, 2}
    assert all(value[SHIPPED_KEY] for value in values)


def test_the_bucket_with_the_most_batches_is_launched_first():
    # batches are bounded by BATCH_BYTES, so a bucket's batch count measures its bytes
    by_bucket = {0: [("split-00000-000.arrow", 0, 1)],
                 1: [("split-00000-000.arrow", 1, 3), ("split-00001-000.arrow", 0, 4)],
                 2: [("split-00001-000.arrow", 4, 7)],
                 3: [("split-00001-000.arrow", 11, 1)]}
    assert [bucket for bucket, _ in handoff.launch_order(by_bucket)] == [1, 2, 0, 3]
    assert handoff.launch_order(by_bucket)[0][1] == by_bucket[1]
    assert handoff.launch_order({}) == []
