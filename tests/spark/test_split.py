"""Byte-range splitting of pcap files (no Spark): every split size gives back
exactly the records tshark sees, with the right frame numbers."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from kdissect.wire.capture import FRAMES, ReadStats, read_file, read_range
from kdissect.failures import InputError
from kdissect.spark import pcapsplit, plan
from kdissect.shared.inputs import expand_inputs
from kdissect.spark.session import check_java, find_java
from tests.support.pcaps import epoch_ns
from tests.support.spark import env_without_java, run_cli, tshark_frame_count
from tests.support.paths import REPO


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


@pytest.mark.parametrize("kind", ["pcap", "pcapng"])
def test_a_files_last_range_takes_up_to_a_tenth_more_than_the_split_size(kind):
    # Hadoop's FileInputFormat rule (SPLIT_SLOP 1.1): a range is cut off only
    # while more than 1.1 split sizes are left, so no sliver becomes a task
    sizes = [1000, 1100, 1101, 2099, 2101, 3100, 3101]
    splits = plan.plan_splits([(f"f{i}", kind) for i in range(len(sizes))], 1000, sizes)
    by_file = [[(s.start, s.end) for s in splits if s.capture_index == i] for i in range(len(sizes))]
    assert by_file == [
        [(0, 1000)],
        [(0, 1100)],
        [(0, 1000), (1000, 1101)],
        [(0, 1000), (1000, 2099)],
        [(0, 1000), (1000, 2000), (2000, 2101)],
        [(0, 1000), (1000, 2000), (2000, 3100)],
        [(0, 1000), (1000, 2000), (2000, 3000), (3000, 3101)],
    ]


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


def test_package_zip_for_remote_executors(tmp_path):
    """The zip holds the sources and each one's bytecode, which a fresh
    interpreter importing from the zip loads instead of compiling the source
    (the module's file is the .pyc) and which runs as the source does."""
    import subprocess
    import sys
    import zipfile

    from kdissect.spark.session import package_zip

    path = package_zip()
    names = zipfile.ZipFile(path).namelist()
    assert "kdissect/__init__.py" in names and "kdissect/spark/dissect.py" in names
    assert "kdissect/spark/log4j2.properties" in names
    assert not [n for n in names if "__pycache__" in n]
    sources = [n for n in names if n.endswith(".py")]
    assert sorted(n + "c" for n in sources) == sorted(n for n in names if n.endswith(".pyc"))
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import kdissect.spark.dissect as d, kdissect.protocol.errors as e;"
             "print(d.__file__); print(e.error_name(3))")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", probe, path], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    loaded, name = done.stdout.split()
    assert loaded == f"{path}/kdissect/spark/dissect.pyc"
    assert name == "UNKNOWN_TOPIC_OR_PARTITION"  # error code 3 in Kafka's protocol


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


def test_cli_unreachable_store_outdir_is_a_one_line_error(captures_dir, capsys):
    """OUTDIR may be a store URI (kdissect.wire.stores): one that does not answer
    is refused before anything starts, in one line naming it."""
    from kdissect.cli import main

    assert main(["spark", str(captures_dir / "admin.pcap"), "-o", "webhdfs://127.0.0.1:9/reports"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == ["kdissect: error: webhdfs://127.0.0.1:9/reports: cannot reach the store"]
    assert not Path("webhdfs:").exists()


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


# -- pcapng ---------------------------------------------------------------------------


def _pcapng_copy(captures_dir: Path, tmp_path: Path) -> Path:
    path = tmp_path / "copy.pcapng"
    subprocess.run(["editcap", "-F", "pcapng", str(_biggest(captures_dir)), str(path)], check=True)
    return path


@pytest.mark.parametrize("split_size", [700, 4096, 65536])
def test_pcapng_every_split_size_yields_tsharks_frames(captures_dir, tshark, tmp_path, split_size):
    path = _pcapng_copy(captures_dir, tmp_path)
    records, final, fallbacks = _walk_all(path, split_size, "pcapng")
    assert fallbacks == []
    assert all(split.kind == "pcapng" for split in final)
    assert len([s for s in final if s.boundary > 0]) >= min(3, path.stat().st_size // split_size - 1)
    _assert_same_frames(records, _tshark_frames(path))


def _sections(tmp_path: Path, second_big_endian: bool) -> Path:
    """Three sections (cat of pcapng files, as a ring buffer's files glued
    together would give): interfaces of other link types and resolutions
    (us and ns; 2^-20 s; ns with a time offset of -3600 s) in each, so a range
    must know the section in force at its start to read times and link types."""
    from tests.support import impair

    trace = impair.load_pcap(max(_captures(REPO_CAPTURES), key=lambda p: p.stat().st_size))
    third = len(trace.packets) // 3
    parts = [impair.Trace(trace.packets[i * third:(i + 1) * third], trace.snaplen) for i in range(3)]
    first = impair.pcapng_bytes(impair.mixed_links(parts[0], ("ethernet", "sll2")), tsresol=[6, 9])
    second = impair.pcapng_bytes(impair.mixed_links(parts[1], ("raw",)), tsresol=[0x80 | 20],
                                 big_endian=second_big_endian)
    shifted = impair.Trace(tuple(replace_ts(p, 3600 * 10**9) for p in parts[2].packets), parts[2].snaplen)
    third_bytes = _with_tsoffset(impair.pcapng_bytes(shifted, tsresol=9), -3600)
    path = tmp_path / "sections.pcapng"
    path.write_bytes(first + second + third_bytes)
    return path


def replace_ts(packet, delta_ns: int):
    from dataclasses import replace

    return replace(packet, ts_ns=packet.ts_ns + delta_ns)


def _with_tsoffset(data: bytes, seconds: int) -> bytes:
    """Add an if_tsoffset option to the (single, little-endian) interface of a pcapng made by impair."""
    out = bytearray()
    pos = 0
    while pos < len(data):
        block_type, length = struct.unpack_from("<II", data, pos)
        block = data[pos:pos + length]
        if block_type == 1:
            body = block[8:-4]
            options = body[8:]
            end = options.rfind(b"\x00\x00\x00\x00")  # opt_endofopt
            option = struct.pack("<HHq", 14, 8, seconds)
            body = body[:8] + (options[:end] if end >= 0 else options) + option + b"\x00\x00\x00\x00"
            length = 12 + len(body)
            block = struct.pack("<II", 1, length) + body + struct.pack("<I", length)
        out += block
        pos += struct.unpack_from("<I", data, pos + 4)[0]
    return bytes(out)


REPO_CAPTURES = REPO / "captures"


@pytest.mark.parametrize("split_size", [600, 4096, 30000])
def test_pcapng_sections_and_interfaces_in_force_at_each_range(tshark, tmp_path, split_size):
    path = _sections(tmp_path, second_big_endian=False)
    expected = _tshark_frames(path)
    records, final, fallbacks = _walk_all(path, split_size, "pcapng")
    assert fallbacks == []
    _assert_same_frames(records, expected)
    # ranges start inside the sections, after their section headers, and know their interfaces
    in_force = {split.interfaces for split in final if split.boundary > 0}
    wanted = {json.dumps(d) for d in ([[1, 262144, 6, 0], [276, 262144, 9, 0]], [[101, 262144, 0x80 | 20, 0]],
                                      [[1, 262144, 9, -3600]])}
    assert len(in_force & wanted) >= (3 if split_size < 5000 else 2)
    # and the segments (link types decoded with the interface in force) equal the whole-file reader's
    stats = ReadStats()
    split_segments = [s for split in final for s in read_range(plan.file_range(split.as_row()), stats)]
    whole = list(read_file(path, 0, ReadStats()))
    assert [(s.frame_number, s.ts, s.order_ts, s.src, s.seq, bytes(s.payload)) for s in split_segments] == \
        [(s.frame_number, s.ts, s.order_ts, s.src, s.seq, bytes(s.payload)) for s in whole]
    assert len(whole) > 100


def test_pcapng_range_in_a_section_of_the_other_byte_order_falls_back(tshark, tmp_path):
    path = _sections(tmp_path, second_big_endian=True)
    records, final, fallbacks = _walk_all(path, 4096, "pcapng")
    assert fallbacks == [str(path)]
    assert len(final) == 1 and final[0].kind == "whole"
    _assert_same_frames(records, _tshark_frames(path))


def test_pcapng_cut_and_damaged_files(captures_dir, tmp_path):
    path = _pcapng_copy(captures_dir, tmp_path)
    data = path.read_bytes()
    cut = tmp_path / "cut.pcapng"
    cut.write_bytes(data[: len(data) - 10])
    records, _final, fallbacks = _walk_all(cut, 4096, "pcapng")
    assert fallbacks == []
    assert len(records) == tshark_frame_count(cut)
    # a block whose trailing length is wrong: the reader stops there, and so
    # does the split read, with the same counts
    damaged = tmp_path / "damaged.pcapng"
    broken = bytearray(data)
    pos, blocks = 0, 0
    while pos < len(broken) * 2 // 3:
        length = struct.unpack_from("<I", broken, pos + 4)[0]
        pos += length
        blocks += 1
    length = struct.unpack_from("<I", broken, pos + 4)[0]
    struct.pack_into("<I", broken, pos + length - 4, length + 4)
    damaged.write_bytes(bytes(broken))
    whole_stats = ReadStats()
    whole = [(f.frame_number, f.ts) for f in read_file(damaged, 0, whole_stats, mode=FRAMES)]
    splits = plan.plan_splits([(str(damaged), "pcapng")], 4096)
    final, _ = plan.apply_scans(splits, {s.split_id: plan.scan_range(s) for s in splits})
    split_stats = ReadStats()
    got = [(f.frame_number, f.ts) for split in final
           for f in (read_range(plan.file_range(split.as_row()), split_stats, mode=FRAMES)
                     if split.kind in plan.RANGE_KINDS else read_file(damaged, 0, split_stats, mode=FRAMES))]
    assert got == whole and len(whole) > 10
    assert (split_stats.damaged_files, split_stats.unread_bytes, split_stats.packets) == \
        (whole_stats.damaged_files, whole_stats.unread_bytes, whole_stats.packets) == (1, len(data) - pos, len(whole))


def test_pcapng_boundary_found_mid_block(captures_dir, tmp_path):
    path = _pcapng_copy(captures_dir, tmp_path)
    data = path.read_bytes()
    offsets, pos = [], 0
    while pos < len(data):
        offsets.append(pos)
        pos += struct.unpack_from("<I", data, pos + 4)[0]
    with open(path, "rb") as stream:
        for at in offsets[3:40]:
            following = next(o for o in offsets if o > at)
            assert pcapsplit.find_block_boundary(stream, "<", at + 1, len(data), len(data)) == following
            assert pcapsplit.find_block_boundary(stream, "<", at, len(data), len(data)) == at
