"""A job whose read stage is one task (one slot): that task reads the whole
capture set in feed order and dissects every connection as it is read, as
`kdissect export` does (kdissect.spark.dissect.read_capture_set), with
nothing held or shipped. Expected values: `kdissect export` on the same
files, tshark's frame counts and the duplicates each overlapping set is
built with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.support.spark import (canonical, editcap_split, export_rows, local_session, run_local_job, table_rows,
                                 tshark_frame_count, write_mixed_archive)
from tests.wire.test_captureset import _interleaved_capture_points, _source, overlapping_set

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """A one-slot session: every job of this module has one read task."""
    with local_session(cores=1, shuffle_partitions=2) as session:
        yield session


def _read_whole(manifest: dict, outdir: Path) -> None:
    """The job read the set in one task and handed nothing off."""
    assert manifest["one_read_task"] is True
    assert manifest["in_range"] == {"tuples_in_place": 0, "tuples_shipped": 0, "bytes_in_place": 0,
                                    "bytes_shipped": 0, "conflicts": 0}
    assert not (outdir / "_work").exists()


@pytest.mark.parametrize("kind", ["twice", "shifted", "halves"])
def test_overlapping_files_cut_into_ranges(spark, tmp_path, kind):
    """Copies across files (dropped once each) and files cut into checked
    byte ranges, all read by the one task: export's rows and its reading."""
    source = _source("consume_group.pcap")
    files, duplicates, _offset = overlapping_set(source, kind, tmp_path / "in")
    manifest = run_local_job(spark, files, tmp_path / "out", split_size=8192)
    _read_whole(manifest, tmp_path / "out")
    assert manifest["byte_range_tasks"] > len(files)  # ranges of cut files, read one after another
    assert canonical(table_rows(tmp_path / "out", "exchanges")) == canonical(
        export_rows(files, tmp_path / "cli.parquet"))
    assert manifest["read"]["duplicate_packets"] == duplicates > 0
    assert manifest["read"]["packets"] == sum(tshark_frame_count(f) for f in files)


def test_capture_points_at_the_same_times(spark, tmp_path):
    """Two capture points whose packets interleave in time, and a shifted copy
    of one: the merge feeds them in export's order (stream numbers included)."""
    files = _interleaved_capture_points(tmp_path)
    manifest = run_local_job(spark, files, tmp_path / "out", split_size=16384)
    _read_whole(manifest, tmp_path / "out")
    assert canonical(table_rows(tmp_path / "out", "exchanges")) == canonical(
        export_rows(files, tmp_path / "cli.parquet"))
    assert manifest["read"]["duplicate_packets"] > 0


def test_every_kind_of_input_and_connections_across_files(spark, captures_dir, tmp_path):
    """A file cut into ranges, a pcapng, a gzip file and rotated files whose
    connections continue from one file into the next: export's rows, every
    packet read, and the summary tables of the same rows."""
    local = tmp_path / "in"
    local.mkdir()
    rotated = write_mixed_archive(captures_dir, local)
    files = sorted(path for path in local.rglob("*") if path.is_file())
    assert len(rotated) >= 3
    manifest = run_local_job(spark, files, tmp_path / "out", split_size=64 << 10)
    _read_whole(manifest, tmp_path / "out")
    assert manifest["byte_range_tasks"] > 1
    expected = export_rows(files, tmp_path / "cli.parquet")
    got = table_rows(tmp_path / "out", "exchanges")
    assert canonical(got) == canonical(expected) and expected
    assert manifest["counts"]["exchanges"] == len(expected)
    assert manifest["read"]["packets"] == sum(tshark_frame_count(f) for f in files)  # (tshark reads gzip too)


def test_rotated_pieces_give_the_rows_of_the_single_capture(spark, captures_dir, tmp_path):
    """One capture cut into many rotated files: the one task's rows are
    export's of the pieces, which are export's of the single capture but for
    the file columns."""
    source = captures_dir / "java_clients_kafka.pcap"
    pieces = editcap_split(source, max(2, tshark_frame_count(source) // 7), tmp_path / "rotated")
    manifest = run_local_job(spark, pieces, tmp_path / "out")
    _read_whole(manifest, tmp_path / "out")
    got = table_rows(tmp_path / "out", "exchanges")
    per_file = ("capture", "request_frame", "response_frame")
    assert canonical(got) == canonical(export_rows(pieces, tmp_path / "pieces.parquet"))
    assert canonical(got, per_file) == canonical(export_rows([source], tmp_path / "single.parquet"), per_file)


@pytest.mark.parametrize("case", [
    "test_a_false_boundary_is_caught_after_the_read_and_the_file_read_again",
    "test_a_clock_going_back_across_a_cut_reads_the_file_again_in_ranges",
    "test_a_pcapng_interface_described_mid_file_reads_the_file_again",
])
def test_a_range_that_fails_its_check_is_read_again(spark, captures_dir, tmp_path, case):
    """The range check after the read holds for the one task too: a file whose
    cut ranges did not chain (a false record start, a clock going back across
    a cut, a pcapng interface described mid-file) is read again, and the rows
    are export's (test_read_once's cases, run in the one-slot session)."""
    from tests.spark import test_read_once

    getattr(test_read_once, case)(spark, captures_dir, tmp_path)
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["one_read_task"] is True


def test_long_polls_a_produce_on_another_connection_ended_get_export_s_waits(spark, captures_dir, tmp_path,
                                                                            monkeypatch):
    """Consumers whose fetches waited for a producer's data on another
    connection (the captures test_arrivals_join reads): the one task leaves
    both sides to the capture-wide step, as every read task does, and the
    rows (waits included) are export's."""
    from kdissect.spark import arrivals

    from tests.spark.test_arrivals_join import CAPTURES

    found: list[dict] = []
    produce_answers = arrivals.produce_answers

    def watched(*args: Any, **kwargs: Any) -> dict:
        fixes = produce_answers(*args, **kwargs)
        found.append(fixes)
        return fixes

    monkeypatch.setattr(arrivals, "produce_answers", watched)
    files = [captures_dir / name for name in CAPTURES]
    manifest = run_local_job(spark, files, tmp_path / "out")
    _read_whole(manifest, tmp_path / "out")
    assert len(found) == 1 and sum(len(fixes) for fixes in found[0].values()) >= 3
    expected = export_rows(files, tmp_path / "cli.parquet")
    assert canonical(table_rows(tmp_path / "out", "exchanges")) == canonical(expected)
    assert any(row["wait_reason"] == "long_poll" for row in expected)
