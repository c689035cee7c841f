"""Byte-range splitting of pcap files (no Spark): every split size gives back
exactly the records tshark sees, with the right frame numbers."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from kdissect.capture import FRAMES, ReadStats, read_file, read_range
from kdissect.failures import InputError
from kdissect.spark import pcapsplit, plan
from kdissect.spark.inputs import expand_inputs
from kdissect.spark.session import check_java, find_java
from tests.support.pcaps import epoch_ns
from tests.support.spark import env_without_java, run_cli, tshark_frame_count


def _captures(captures_dir: Path) -> list[Path]:
    found = sorted(p for p in captures_dir.glob("*.pcap") if p.stat().st_size > 24)
    assert found, f"no recorded captures in {captures_dir}"
    return found


def _biggest(captures_dir: Path) -> Path:
    return max(_captures(captures_dir), key=lambda p: p.stat().st_size)


def _tshark_frames(path: Path) -> list[tuple[int, int, int]]:
    """(frame number, epoch time in ns, captured length) per frame, from tshark."""
    out = subprocess.run(
        ["tshark", "-r", str(path), "-T", "fields", "-e", "frame.number", "-e", "frame.time_epoch",
         "-e", "frame.cap_len"], check=True, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        number, epoch, caplen = line.split("\t")
        rows.append((int(number), epoch_ns(epoch), int(caplen)))
    return rows


def _walk_all(path: Path, split_size: int, kind: str = "pcap"
              ) -> tuple[list[tuple[int, int, int]], list[plan.Split], list[str]]:
    """(frame number, ts, captured length) of every frame, read split by split
    as the job reads them, with the final splits and the files that fell back."""
    splits = plan.plan_splits([(str(path), kind)], split_size)
    scans = {split.split_id: plan.scan_range(split) for split in splits}
    final, fallbacks = plan.apply_scans(splits, scans)
    records = []
    for split in final:
        stats = ReadStats()
        if split.kind in plan.RANGE_KINDS:
            frames = read_range(plan.file_range(split.as_row()), stats, mode=FRAMES)
        else:
            frames = read_file(path, 0, stats, mode=FRAMES)
        records.extend((frame.frame_number, frame.ts, len(frame.data)) for frame in frames)
    return records, final, fallbacks


def _assert_same_frames(records: list[tuple[int, int, int]], expected: list[tuple[int, int, int]]) -> None:
    assert [(n, caplen) for n, _, caplen in records] == [(n, caplen) for n, _, caplen in expected]
    for (_, ts, _), (_, epoch, _) in zip(records, expected):
        assert 0 <= ts - epoch <= 1  # exact ns (tshark truncates 2^-k s ticks, kdissect rounds)


@pytest.mark.parametrize("split_size", [700, 4096, 65536])
@pytest.mark.parametrize("file_format", ["pcap", "nsecpcap", "modpcap"])
def test_every_split_size_yields_tsharks_frames(captures_dir, tshark, tmp_path, split_size, file_format):
    path = tmp_path / "copy.pcap"
    subprocess.run(["editcap", "-F", file_format, str(_biggest(captures_dir)), str(path)], check=True)
    expected = _tshark_frames(path)
    records, final, fallbacks = _walk_all(path, split_size)
    assert fallbacks == []
    assert len([s for s in final if s.boundary > 24]) >= min(3, path.stat().st_size // split_size - 1)
    _assert_same_frames(records, expected)
    with open(path, "rb") as stream:
        assert pcapsplit.read_format(stream).header.ticks_per_second == (
            10**9 if file_format == "nsecpcap" else 10**6)


def test_boundary_found_mid_record(captures_dir):
    """Starting the search inside a record finds the next record header, not a false one."""
    path = _biggest(captures_dir)
    with open(path, "rb") as stream:
        fmt = pcapsplit.read_format(stream)
        header = struct.Struct(fmt.header.byte_order + "IIII")
        stream.seek(24)
        sec, frac, caplen, wire = header.unpack(stream.read(16))
        second = 24 + 16 + caplen
        size = path.stat().st_size
        assert pcapsplit.find_boundary(stream, fmt, 25, size, size) == second
        assert pcapsplit.find_boundary(stream, fmt, second, size, size) == second


def test_ranges_that_do_not_chain_fall_back_to_one_task(captures_dir):
    path = _biggest(captures_dir)
    splits = plan.plan_splits([(str(path), "pcap")], 4096)
    scans = {split.split_id: plan.scan_range(split) for split in splits}
    # Pretend the second non-empty range found a wrong boundary (one byte late).
    victim = next(s for s in splits[1:] if scans[s.split_id].boundary != -1)
    bad = scans[victim.split_id]
    scans[victim.split_id] = plan.RangeScan(bad.split_id, bad.boundary + 1, bad.records, bad.stop)
    final, fallbacks = plan.apply_scans(splits, scans)
    assert fallbacks == [str(path)]
    assert len(final) == 1 and final[0].start == 0 and final[0].end == path.stat().st_size


def test_cut_file_ends_at_last_whole_record(captures_dir, tmp_path):
    path = _biggest(captures_dir)
    cut = tmp_path / "cut.pcap"
    data = path.read_bytes()
    cut.write_bytes(data[: len(data) - 10])
    expected = tshark_frame_count(cut)
    records, _final, fallbacks = _walk_all(cut, 4096)
    assert fallbacks == []
    assert len(records) == expected


def test_inputs_directories_globs_and_non_captures(captures_dir, tmp_path):
    pcaps = _captures(captures_dir)
    (tmp_path / "sub").mkdir()
    shutil.copy(pcaps[0], tmp_path / "sub" / "a.pcap")
    (tmp_path / "notes.txt").write_text("not a capture")
    found, skipped = expand_inputs([str(tmp_path)])
    assert found == [str(tmp_path / "sub" / "a.pcap")]
    assert skipped == [str(tmp_path / "notes.txt")]
    found, _ = expand_inputs([str(tmp_path / "**" / "*.pcap")])
    assert found == [str(tmp_path / "sub" / "a.pcap")]
    with pytest.raises(InputError, match="not a pcap"):
        expand_inputs([str(tmp_path / "notes.txt")])
    with pytest.raises(InputError, match="no such file"):
        expand_inputs([str(tmp_path / "missing.pcap")])


def test_java_missing_is_a_clear_error(tmp_path):
    with pytest.raises(InputError, match=r"Java not found.*Java 17 or newer"):
        find_java({"PATH": "/nonexistent-bin"})
    with pytest.raises(InputError, match="JAVA_HOME"):
        find_java({"PATH": "", "JAVA_HOME": str(tmp_path)})
    assert check_java()  # this machine has Java 17+


def test_cli_without_java_exits_2_with_one_line(captures_dir, tmp_path):
    result = run_cli(["spark", str(_biggest(captures_dir)), "-o", str(tmp_path / "out")], env_without_java())
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kdissect: error: Java not found")
    assert "Traceback" not in result.stderr


def test_package_zip_for_remote_executors():
    import zipfile

    from kdissect.spark.session import package_zip

    names = zipfile.ZipFile(package_zip()).namelist()
    assert "kdissect/__init__.py" in names and "kdissect/spark/dissect.py" in names
    assert "kdissect/spark/log4j2.properties" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_cli_bad_inputs_are_one_line_errors(tmp_path, capsys):
    from kdissect.cli import main

    assert main(["spark", str(tmp_path / "missing.pcap"), "-o", str(tmp_path / "out")]) == 2
    assert "missing.pcap: no such file or directory" in capsys.readouterr().err
    (tmp_path / "notes.txt").write_text("hello")
    assert main(["spark", str(tmp_path / "notes.txt"), "-o", str(tmp_path / "out")]) == 2
    assert "not a pcap, pcapng or gzip capture" in capsys.readouterr().err
    assert main(["spark", str(tmp_path), "-o", str(tmp_path / "out"), "--split-size", "12q"]) == 2
    assert "--split-size" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # nothing is created for a run that cannot start


def test_cli_remote_outdir_is_a_one_line_error(captures_dir, capsys):
    """The tasks write the exchange files into OUTDIR directly: a remote URL
    is refused before anything starts."""
    from kdissect.cli import main

    assert main(["spark", str(captures_dir / "admin.pcap"), "-o", "hdfs://namenode/reports"]) == 2
    err = capsys.readouterr().err
    assert "OUTDIR must be a local or mounted path" in err and len(err.strip().splitlines()) == 1
    assert not Path("hdfs:").exists()


def test_cli_run_prints_only_its_own_lines(captures_dir, tmp_path):
    """A whole `kdissect spark` run in a child process: the summary on stdout,
    and on stderr only kdissect's progress lines (no Spark log-level banner,
    no log4j lines); the JVM's own module warning is the one line allowed."""
    result = run_cli(["spark", str(captures_dir / "admin.pcap"), "-o", str(tmp_path / "out"),
                      "--master", "local[1]"], dict(os.environ))
    assert result.returncode == 0, result.stderr
    assert "tables and manifest.json written to" in result.stdout
    foreign = [line for line in result.stderr.splitlines()
               if not line.startswith("kdissect: ") and "Using incubator modules" not in line]
    assert foreign == []
