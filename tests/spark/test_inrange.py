"""Connections dissected where they were read, the rest shuffled (kdissect/spark/inrange.py).

The rows must be `kdissect export`'s whatever a cut does to a connection: a
connection crossing a byte-range boundary or a file boundary, mid-stream
(no SYN in the range) or with its SYN on one side of the cut, and a 4-tuple
reused in two ranges (which the after-job check must catch). Expected rows:
`kdissect export` on the same inputs; SYN frames and cut points from tshark
and editcap.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kdissect.spark import segments
from kdissect.spark.inrange import SplitReader
from kdissect.spark.plan import LocalScan, apply_scans, plan_splits, ranges_to_scan
from kdissect.wire.capture import ReadStats, read_segments
from tests.support.spark import canonical, editcap_split, export_rows, run_local_job, table_rows

SOURCE = "java_clients_kafka.pcap"  # several client connections, each opened (SYN) and closed (FIN)


def _key(segment) -> tuple:
    a, b = (segment.src, segment.sport), (segment.dst, segment.dport)
    return (*min(a, b), *max(a, b))


def _by_tuple(held: list) -> dict[tuple, list]:
    """The in-place segments (one list, in the order read) by canonical 4-tuple."""
    grouped: dict[tuple, list] = {}
    for segment in held:
        grouped.setdefault(_key(segment), []).append(segment)
    return grouped


def _rounded(rows: list[dict]) -> list[dict]:
    return canonical([{k: float(f"{v:.9g}") if isinstance(v, float) else v for k, v in row.items()} for row in rows])


def _syn_frames(path: Path) -> list[int]:
    out = subprocess.run(["tshark", "-n", "-r", str(path), "-Y", "tcp.flags.syn == 1 && tcp.flags.ack == 0",
                          "-T", "fields", "-e", "frame.number"], capture_output=True, text=True, check=True).stdout
    return [int(line) for line in out.split()]


def _planned(path: Path, split_size: int) -> list[dict]:
    splits = plan_splits([(str(path), "pcap")], split_size)
    scans = LocalScan(ranges_to_scan(splits), 1).result()
    return [split.as_row() for split in apply_scans(splits, scans)[0]]


@pytest.mark.parametrize("divisor", [1, 3, 7])
def test_every_segment_is_either_shipped_or_dissected_in_place(captures_dir, divisor):
    """Per split: no 4-tuple both shipped and dissected in place; an in-place
    4-tuple opens with a SYN in the range and is closed (FIN both ways or
    RST); over all splits, every segment of the file exactly once."""
    path = captures_dir / SOURCE
    frames: list[int] = []
    in_place_somewhere = 0
    for split in _planned(path, max(4096, path.stat().st_size // divisor)):
        reader = SplitReader(split, ReadStats(), last_range=False)
        shipped: dict[tuple, list] = {}
        for batch in reader.shipped_runs():
            for row in batch.to_pylist():
                key = (row["addr_a"], row["port_a"], row["addr_b"], row["port_b"])
                shipped.setdefault(key, []).extend(segments.run_segments(
                    row["capture_index"], *key, row["segments"]))
        held = reader.in_place_segments()
        # fed to one Dissector as read: in capture order, all 4-tuples together
        assert [s.frame_number for s in held] == sorted(s.frame_number for s in held)
        in_place = _by_tuple(held)
        assert not set(shipped) & set(in_place)
        for key, held in in_place.items():
            assert held[0].flags & 0x12 == 0x02, key  # opened in the range
            fins = {(s.src, s.sport) for s in held if s.flags & 0x01}
            assert len(fins) == 2 or any(s.flags & 0x04 for s in held), key
        for key, held in (*shipped.items(), *in_place.items()):
            assert {_key(s) for s in held} == {key}
            frames.extend(s.frame_number for s in held)
        assert reader.tuple_table().num_rows == len(shipped) + len(in_place)
        in_place_somewhere += len(in_place)
    assert sorted(frames) == [s.frame_number for s in read_segments([str(path)])]
    assert in_place_somewhere > 0 or divisor > 1


def test_over_the_budget_held_connections_are_shipped_whole_and_unchanged(captures_dir, monkeypatch):
    """A task holding more than BUFFER_BUDGET ships its candidates: every
    segment still goes out exactly once, shipped ones packed as read."""
    from kdissect.spark import inrange

    path = captures_dir / SOURCE
    split = _planned(path, 1 << 40)[0]
    monkeypatch.setattr(inrange, "BUFFER_BUDGET", 4 * inrange.HELD_SEGMENT_BYTES)  # a few held segments at most
    reader = SplitReader(split, ReadStats(), last_range=True)
    shipped: dict[tuple, list] = {}
    for batch in reader.shipped_runs():
        for row in batch.to_pylist():
            key = (row["addr_a"], row["port_a"], row["addr_b"], row["port_b"])
            shipped.setdefault(key, []).extend(segments.run_segments(row["capture_index"], *key, row["segments"]))
    in_place = _by_tuple(reader.in_place_segments())
    assert shipped and reader._buffered <= inrange.BUFFER_BUDGET
    expected = list(read_segments([str(path)]))
    got = {segment.frame_number: segment for held in (*shipped.values(), *in_place.values()) for segment in held}
    assert sorted(got) == [segment.frame_number for segment in expected]
    fields = ("ts", "src", "sport", "dst", "dport", "seq", "ack", "flags", "payload", "payload_len", "order_ts")
    for segment in expected:  # unpacked runs give back the segments as read
        assert [getattr(got[segment.frame_number], name) for name in fields] == \
            [getattr(segment, name) for name in fields]
    assert reader.counts.bytes_shipped + reader.counts.bytes_in_place == sum(
        segments.SEGMENT_HEADER.size + len(segment.payload) for segment in expected)


@pytest.mark.parametrize("divisor", [1, 3])
def test_the_check_table_spans_and_byte_counts_are_the_segments_as_read(captures_dir, divisor):
    """The driver's check reads each in-place 4-tuple's first and last capture
    times and its opening SYN, and the manifest its packed bytes: each from
    the segments as the capture reader reads them."""
    path = captures_dir / SOURCE
    everything = list(read_segments([str(path)]))
    for split in _planned(path, max(4096, path.stat().st_size // divisor)):
        reader = SplitReader(split, ReadStats(), last_range=False)
        shipped_bytes = sum(len(row["segments"]) for batch in reader.shipped_runs() for row in batch.to_pylist())
        held = _by_tuple(reader.in_place_segments())
        table = reader.tuple_table().to_pylist()
        spans = {(row["addr_a"], row["port_a"], row["addr_b"], row["port_b"]):
                 (row["first_ts"], row["last_ts"], row["syn_from_a"], row["syn_seq"]) for row in table if row["in_place"]}
        assert spans.keys() == held.keys()
        for key, segments_held in held.items():
            mine = [s for s in everything if _key(s) == key and s.frame_number in {h.frame_number for h in segments_held}]
            opening = mine[0]
            assert spans[key] == (opening.ts, mine[-1].ts, (opening.src, opening.sport) == key[:2], opening.seq)
        assert reader.counts.bytes_shipped == shipped_bytes
        assert reader.counts.bytes_in_place == sum(segments.SEGMENT_HEADER.size + len(s.payload)
                                                   for segments_held in held.values() for s in segments_held)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")
def test_connections_crossing_range_boundaries_are_shuffled_and_the_rest_dissected_in_place(spark, captures_dir,
                                                                                           tmp_path):
    path = captures_dir / SOURCE
    manifest = run_local_job(spark, [path], tmp_path / "out", split_size=max(4096, path.stat().st_size // 5))
    assert manifest["byte_range_tasks"] >= 4
    counts = manifest["in_range"]
    assert counts["tuples_in_place"] > 0 and counts["tuples_shipped"] > 0 and counts["conflicts"] == 0
    assert counts["bytes_in_place"] > 0 and counts["bytes_shipped"] > 0
    assert canonical(table_rows(tmp_path / "out", "exchanges")) == canonical(export_rows([path], tmp_path / "x.parquet"))


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")
@pytest.mark.parametrize("after_another_file", [False, True])
def test_connections_dissected_together_in_place_keep_each_ones_order(spark, captures_dir, tmp_path,
                                                                      after_another_file):
    """One range: its connections, open at once, are fed to one Dissector
    interleaved in capture order, so a task writes their rows interleaved.
    Each part comes out sorted by stream, and each stream's rows in the order
    `kdissect export` gives them. Alone, the capture is the read stage's one
    task (dissect.read_capture_set); after another file, a day earlier,
    it is the last of two read tasks, its connections in place (inrange)."""
    import pyarrow.parquet as pq

    from kdissect.wire.capture import iter_frames

    path = captures_dir / SOURCE
    inputs = [path]
    if after_another_file:
        other = captures_dir / "admin_kafka.pcap"
        first_ns = next(iter(iter_frames([path]))).ts
        other_first_ns = next(iter(iter_frames([other]))).ts
        earlier = tmp_path / "earlier.pcap"
        shift = (first_ns - other_first_ns) // 10**9 - 86400
        subprocess.run(["editcap", "-F", "pcap", "-t", str(shift), str(other), str(earlier)], check=True)
        inputs = [earlier, path]
    manifest = run_local_job(spark, inputs, tmp_path / "out")
    if after_another_file:
        assert manifest["one_read_task"] is False and manifest["read_tasks"] == 2
        assert manifest["in_range"]["tuples_in_place"] > 1 and manifest["in_range"]["conflicts"] == 0
    else:
        assert manifest["one_read_task"] is True

    def by_stream(rows: list[dict]) -> dict[int, list[tuple]]:
        streams: dict[int, list[tuple]] = {}
        for row in rows:
            streams.setdefault(row["stream"], []).append((row["correlation_id"], row["api_key"], row["request_ts"]))
        return streams

    parts = sorted((tmp_path / "out" / "exchanges").rglob("*.parquet"))
    spark_rows = []
    for part in parts:
        rows = pq.read_table(part).to_pylist()
        streams = [row["stream"] for row in rows]
        assert streams == sorted(streams), part
        spark_rows += rows
    export = export_rows(inputs, tmp_path / "x.parquet")
    export_streams = [row["stream"] for row in export]
    interleaved = sum(1 for before, after in zip(export_streams, export_streams[1:]) if after < before)
    assert interleaved > 0  # the connections' exchanges do interleave in capture order
    assert by_stream(spark_rows) == by_stream(export)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")
def test_a_file_boundary_mid_stream_and_right_after_a_syn(spark, captures_dir, tmp_path):
    """Rotated files: one cut falls mid-stream, another right after a SYN (the
    connection's opening alone in the first file); the middle file starts
    mid-stream. Also as pcapng."""
    path = captures_dir / SOURCE
    syns = _syn_frames(path)
    assert len(syns) >= 3
    after_syn = syns[len(syns) // 2]
    middle = (after_syn + syns[-1]) // 2  # mid-stream: between two openings
    directory = tmp_path / "rotated"
    directory.mkdir()
    pieces = []
    for index, (first, last) in enumerate([(1, after_syn), (after_syn + 1, middle), (middle + 1, 10**9)]):
        piece = directory / f"part{index}.pcap"
        subprocess.run(["editcap", "-F", "pcap", "-r", str(path), str(piece), f"{first}-{last}"], check=True)
        pieces.append(piece)
    expected = export_rows(pieces, tmp_path / "rotated.parquet")
    manifest = run_local_job(spark, pieces, tmp_path / "out")
    got = table_rows(tmp_path / "out", "exchanges")
    assert canonical(got) == canonical(expected) and expected
    assert manifest["in_range"]["tuples_shipped"] > 0 and manifest["in_range"]["conflicts"] == 0
    seen = [{_key(segment) for segment in read_segments([str(piece)])} for piece in pieces]
    assert seen[0] & seen[1] and seen[1] & seen[2], "no connection spans a cut"
    pcapngs = []
    for piece in pieces:
        converted = piece.with_suffix(".pcapng")
        subprocess.run(["editcap", "-F", "pcapng", str(piece), str(converted)], check=True)
        pcapngs.append(converted)
    manifest = run_local_job(spark, pcapngs, tmp_path / "out-ng", split_size=16384)
    assert manifest["byte_range_tasks"] > len(pcapngs)
    assert canonical(table_rows(tmp_path / "out-ng", "exchanges")) == canonical(
        export_rows(pcapngs, tmp_path / "ng.parquet"))


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")
def test_rotated_pieces_agree_with_every_connection_shuffled(spark, captures_dir, tmp_path):
    """Several files (two whole captures, one cut in two): the job with
    connections dissected in place and the job with every connection
    shuffled give the same tables as export."""
    path = captures_dir / SOURCE
    pieces = editcap_split(path, max(2, sum(1 for _ in read_segments([str(path)])) // 2), tmp_path / "rotated")
    pieces += [captures_dir / "admin_kafka.pcap", captures_dir / "consume_group_kafka.pcap"]
    expected = canonical(export_rows(pieces, tmp_path / "rotated.parquet"))
    in_place = run_local_job(spark, pieces, tmp_path / "in-place")
    assert in_place["in_range"]["tuples_in_place"] > 0
    shipped = run_local_job(spark, pieces, tmp_path / "shipped", in_place=False)
    assert shipped["in_range"]["tuples_in_place"] == 0
    for name in ("in-place", "shipped"):
        assert canonical(table_rows(tmp_path / name, "exchanges")) == expected, name
    for table in ("latency", "errors", "topics", "clients"):
        # sums over other groupings of the rows: floating point equal to 1e-9
        assert _rounded(table_rows(tmp_path / "in-place", table)) == _rounded(table_rows(tmp_path / "shipped", table))


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")
def test_a_reused_four_tuple(spark, captures_dir, tmp_path):
    """The capture followed by itself an hour later: every 4-tuple used twice.
    Read by one task, both uses go through its one Dissector. Cut between
    them, some 4-tuples are shipped from one range (open at its end) and
    dissected in place in the other: the check after the job catches them
    and the run is redone with every connection shuffled."""
    path = captures_dir / SOURCE
    later = tmp_path / "later.pcap"
    subprocess.run(["editcap", "-t", "3600", str(path), str(later)], check=True)
    twice = tmp_path / "twice.pcap"
    subprocess.run(["mergecap", "-a", "-F", "pcap", "-w", str(twice), str(path), str(later)], check=True)
    expected = canonical(export_rows([twice], tmp_path / "twice.parquet"))
    whole = run_local_job(spark, [twice], tmp_path / "whole")
    assert whole["read_tasks"] == 1 and whole["one_read_task"]  # (the whole capture set's feed, as export's)
    assert canonical(table_rows(tmp_path / "whole", "exchanges")) == expected
    cut = run_local_job(spark, [twice], tmp_path / "cut", split_size=path.stat().st_size)  # the cut near the second use
    assert cut["read_tasks"] >= 2 and cut["in_range"]["conflicts"] > 0
    assert canonical(table_rows(tmp_path / "cut", "exchanges")) == expected


def _one_connection(source: Path, stream: int, target: Path) -> Path:
    subprocess.run(["tshark", "-r", str(source), "-Y", f"tcp.stream=={stream}", "-F", "pcap", "-w", str(target)],
                   check=True, capture_output=True)
    return target


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")
@pytest.mark.parametrize("gap, conflicts", [(3600, 0), (60, 1)])
def test_a_four_tuple_reused_in_the_next_range(spark, captures_dir, tmp_path, gap, conflicts):
    """One connection (SYN to FIN), another one 30 s later, then the first
    again `gap` seconds later, the cut right before it. An hour later each
    use is a connection of its own (the check accepts both uses dissected
    in place); a minute later with the same SYN sequence number the
    reassembler takes it for stragglers of the closed connection, so the
    check refuses it and the run is redone shuffled. Rows: export's."""
    source = captures_dir / SOURCE
    first = _one_connection(source, 0, tmp_path / "first.pcap")
    other = _one_connection(source, 1, tmp_path / "other.pcap")
    shifted_other, again = tmp_path / "other-later.pcap", tmp_path / "again.pcap"
    subprocess.run(["editcap", "-F", "pcap", "-t", "30", str(other), str(shifted_other)], check=True)
    subprocess.run(["editcap", "-F", "pcap", "-t", str(gap), str(first), str(again)], check=True)
    joined = tmp_path / "joined.pcap"
    subprocess.run(["mergecap", "-a", "-F", "pcap", "-w", str(joined), str(first), str(shifted_other), str(again)],
                   check=True)
    cut = 24 + (first.stat().st_size - 24) + (shifted_other.stat().st_size - 24)
    manifest = run_local_job(spark, [joined], tmp_path / "out", split_size=cut)
    assert manifest["read_tasks"] == 2
    assert manifest["in_range"]["conflicts"] == conflicts
    if not conflicts:
        # both uses in place; the other connection closed right at the end of its range: shipped
        assert manifest["in_range"]["tuples_in_place"] == 2 and manifest["in_range"]["tuples_shipped"] == 1
    assert canonical(table_rows(tmp_path / "out", "exchanges")) == canonical(
        export_rows([joined], tmp_path / "x.parquet"))
