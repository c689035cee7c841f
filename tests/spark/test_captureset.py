"""The Spark job and `kdissect export` on the same capture sets: overlapping
inputs (one capture set rule, kdissect/wire/captureset.py) and pcapng files cut
into byte ranges. Expected values: `kdissect export` on the single capture,
tshark's Kafka request count and TCP frame counts."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.spark import canonical, export_rows, run_local_job, table_rows, tshark_frame_count
from tests.support.tshark import kafka_pdus
from tests.wire.test_captureset import _interleaved_capture_points, _source, overlapping_set

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

PER_FILE = ("capture", "request_frame", "response_frame")


def _tshark_requests(tshark: str, path: Path) -> int:
    return sum(1 for pdu in kafka_pdus(tshark, path) if pdu.is_request)


@pytest.mark.parametrize("kind", ["twice", "shifted", "halves"])
def test_overlapping_inputs_give_the_single_captures_table_in_both_faces(spark, tshark, tmp_path, kind):
    source = _source("consume_group.pcap")
    files, duplicates, _offset = overlapping_set(source, kind, tmp_path / "in")
    single = export_rows([source], tmp_path / "single.parquet")
    cli = export_rows(files, tmp_path / "cli.parquet")
    manifest = run_local_job(spark, files, tmp_path / "out", split_size=8192)
    got = table_rows(tmp_path / "out", "exchanges")
    assert canonical(got) == canonical(cli)
    assert canonical(cli, PER_FILE) == canonical(single, PER_FILE)
    if kind != "halves":  # every packet from the first file
        assert canonical(cli, ("capture",)) == canonical(single, ("capture",))
    assert sum(1 for row in cli if row["request_frame"] is not None) == _tshark_requests(tshark, source)
    assert manifest["read"]["duplicate_packets"] == duplicates > 0
    assert manifest["read"]["packets"] == sum(tshark_frame_count(f) for f in files)
    assert manifest["byte_range_tasks"] > len(files)


def test_interleaved_capture_points_agree(spark, tmp_path):
    """Two capture points with different connections at the same times, plus
    a shifted copy of one: stream numbers follow the feed order in both faces."""
    files = _interleaved_capture_points(tmp_path)
    cli = export_rows(files, tmp_path / "cli.parquet")
    manifest = run_local_job(spark, files, tmp_path / "out", split_size=16384)
    got = table_rows(tmp_path / "out", "exchanges")
    assert {row["capture"] for row in cli} == {files[0].name, files[1].name}
    assert canonical(got, ("stream",)) == canonical(cli, ("stream",))
    assert canonical(got) == canonical(cli)
    assert manifest["read"]["duplicate_packets"] > 0


@pytest.mark.parametrize("split_size", [4096, 65536])
def test_pcapng_is_split_into_byte_ranges(spark, captures_dir, tmp_path, split_size):
    """dumpcap's format: read by several tasks, the same rows as export."""
    source = max(captures_dir.glob("*.pcap"), key=lambda p: p.stat().st_size)
    path = tmp_path / "capture.pcapng"
    subprocess.run(["editcap", "-F", "pcapng", str(source), str(path)], check=True)
    manifest = run_local_job(spark, [path], tmp_path / "out", split_size=split_size)
    assert manifest["inputs"][0]["format"] == "pcapng"
    assert manifest["inputs"][0]["read_tasks"] == manifest["byte_range_tasks"] >= min(4, path.stat().st_size // split_size)
    assert manifest["files_read_whole_after_boundary_check"] == []
    assert manifest["read"]["packets"] == tshark_frame_count(path)
    got = table_rows(tmp_path / "out", "exchanges")
    assert canonical(got) == canonical(export_rows([path], tmp_path / "cli.parquet"))
    assert canonical(got, ("capture",)) == canonical(export_rows([source], tmp_path / "pcap.parquet"), ("capture",))
