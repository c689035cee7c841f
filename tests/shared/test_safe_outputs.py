"""No output destroys data (issue 23, items 3 and 6), on real captures.

- An output file that is an input (the same path, a symbolic link to it, a
  hard link of it) is refused before anything is written, by every verb
  with -o: the capture stays byte for byte.
- Every output file is written under a temporary name and renamed: on a
  really full disk (a 64 KiB tmpfs: the `full_disk` fixture of tests/conftest.py) the earlier output stays
  byte for byte, no temporary file is left, and the error is one line with
  exit 2. The disk is filled so that the output cannot fit: its size is
  taken from the same command writing to an ordinary directory.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from kdissect.cli import main
from tests.conftest import CAPTURES

SOURCE = CAPTURES / "forensics_kafka.pcap"  # real traffic: produce, fetch, groups, many clients

# every verb with -o FILE, and an output name of the format each writes
VERBS = [
    ("export", "out.csv"),
    ("export", "out.jsonl"),
    ("export", "out.parquet"),
    ("records", "out.csv"),
    ("topics", "out.csv"),
    ("groups", "out.csv"),
    ("clients", "out.jsonl"),
    ("report", "out.html"),
]


def _run(args: list[str], capsys) -> tuple[int, list[str]]:
    status = main(args)
    return status, capsys.readouterr().err.strip().splitlines()


def _files(directory: Path) -> dict[str, bytes]:
    """Every file under `directory` and its bytes (symbolic links as their target's name)."""
    found = {}
    for path in sorted(directory.rglob("*")):
        if path.is_symlink():
            found[str(path.relative_to(directory))] = b"-> " + os.readlink(path).encode()
        elif path.is_file():
            found[str(path.relative_to(directory))] = path.read_bytes()
    return found


# -- an output that is an input ----------------------------------------------------


@pytest.mark.parametrize("verb", sorted({verb for verb, _ in VERBS}))
@pytest.mark.parametrize("how", ["same path", "symbolic link", "hard link"])
def test_an_output_that_is_an_input_is_refused(verb, how, tmp_path, capsys):
    """`export cap.csv -o cap.csv` truncated the capture before reading it; now
    every verb refuses, as cp does, and the capture is untouched. The capture
    is named .csv/.html so that the output format is accepted."""
    suffix = ".html" if verb == "report" else ".csv"
    capture = tmp_path / f"capture{suffix}"
    capture.write_bytes(SOURCE.read_bytes())
    output = capture
    if how == "symbolic link":
        output = tmp_path / f"link{suffix}"
        output.symlink_to(capture.name)
    elif how == "hard link":
        output = tmp_path / f"hard{suffix}"
        os.link(capture, output)
    before = _files(tmp_path)
    status, err = _run([verb, str(capture), "-o", str(output), "-q"], capsys)
    assert status == 2
    assert len(err) == 1 and err[0].startswith(f"kdissect: error: -o {output} is ") and "refusing" in err[0]
    assert _files(tmp_path) == before  # nothing written, nothing left behind
    assert capture.read_bytes() == SOURCE.read_bytes()


def test_a_capture_found_in_a_directory_is_protected_too(tmp_path, capsys):
    """The input given as a directory: the capture found in it is an input."""
    (tmp_path / "in").mkdir()
    capture = tmp_path / "in" / "capture.jsonl"
    capture.write_bytes(SOURCE.read_bytes())
    status, err = _run(["export", str(tmp_path / "in"), "-o", str(capture)], capsys)
    assert status == 2 and "is an input" in err[0]
    assert capture.read_bytes() == SOURCE.read_bytes()


def test_a_report_beside_spark_tables_but_not_over_them(tmp_path, capsys):
    """`report OUTDIR -o OUTDIR/manifest.json` would overwrite a file the
    page is drawn from: refused (no Spark needed: the check comes first)."""
    outdir = tmp_path / "tables"
    (outdir / "exchanges").mkdir(parents=True)
    (outdir / "manifest.json").write_text('{"tool": "kdissect spark"}\n')
    before = _files(tmp_path)
    status, err = _run(["report", str(outdir), "-o", str(outdir / "manifest.json")], capsys)
    assert status == 2 and "is an input" in err[0]
    assert _files(tmp_path) == before


# -- atomic writes -------------------------------------------------------------------


def test_an_output_is_replaced_whole_through_links_with_its_permissions(tmp_path, capsys):
    """A symbolic link is written through (the link stays, as with cp); the
    replaced file keeps its mode; no temporary file is left."""
    real = tmp_path / "real.csv"
    real.write_text("earlier\n")
    real.chmod(0o640)
    link = tmp_path / "link.csv"
    link.symlink_to(real.name)
    status, _ = _run(["export", str(SOURCE), "-o", str(link), "-q"], capsys)
    assert status == 0
    assert link.is_symlink() and real.read_text().startswith("capture,stream,")
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.csv", "real.csv"]
    # a device is written in place (never renamed over)
    assert _run(["export", str(SOURCE), "-o", "/dev/null", "-q"], capsys)[0] == 0
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def _fill(mount_point: Path, leave: int) -> None:
    """Fill the file system until only `leave` bytes are free."""
    status = os.statvfs(mount_point)
    free = status.f_bavail * status.f_frsize
    with open(mount_point / "filler", "wb") as stream:
        stream.write(b"\0" * (free - leave))
    status = os.statvfs(mount_point)
    assert status.f_bavail * status.f_frsize == leave


@pytest.mark.parametrize("verb,name", [v for v in VERBS if v[0] in ("export", "records", "topics", "report")])
def test_a_full_disk_keeps_the_earlier_output(verb, name, full_disk, tmp_path, capsys):
    roomy = tmp_path / "roomy"
    roomy.mkdir()
    assert _run([verb, str(SOURCE), "-o", str(roomy / name), "-q"], capsys)[0] == 0
    needed = (roomy / name).stat().st_size
    page = os.statvfs(full_disk).f_frsize
    target = full_disk / name
    earlier = b"the earlier output\n"
    target.write_bytes(earlier)
    _fill(full_disk, page)  # one page left: the output starts, then cannot go on
    assert needed > page, "the output would fit: the test would prove nothing"
    status, err = _run([verb, str(SOURCE), "-o", str(target), "-q"], capsys)
    assert status == 2
    assert err == [f"kdissect: error: cannot write {target}: No space left on device"]
    assert target.read_bytes() == earlier
    assert sorted(p.name for p in full_disk.iterdir()) == sorted(["filler", name])  # no temporary file left
    # with room again, the same command replaces the earlier output
    (full_disk / "filler").unlink()
    if needed < 48 << 10:
        assert _run([verb, str(SOURCE), "-o", str(target), "-q"], capsys)[0] == 0
        assert target.stat().st_size == needed and sorted(p.name for p in full_disk.iterdir()) == [name]


def test_a_tls_key_log_is_an_input_too(tmp_path, capsys):
    """Key logs are read like captures: an output over one is refused."""
    pcap = sorted((CAPTURES / "tls").glob("*.pcap"))[0]
    keys = tmp_path / "keys.jsonl"
    keys.write_bytes(sorted((CAPTURES / "tls").glob("*.keys"))[0].read_bytes())
    before = keys.read_bytes()
    status, err = _run(["export", str(pcap), "--tls-keylog", str(keys), "-o", str(keys), "-q"], capsys)
    assert status == 2 and err == [f"kdissect: error: -o {keys} is an input: refusing to write over it "
                                   "(choose another output file)"]
    assert keys.read_bytes() == before


def test_a_terminated_run_leaves_the_earlier_output(tmp_path):
    """`kill` (SIGTERM) while the output is being written: the run ends
    (exit 143), its temporary file is removed, the earlier output stays.
    The process is stopped as soon as its temporary file appears, so the
    signal surely lands while it writes."""
    import signal
    import sys
    import time

    target = tmp_path / "records.csv"
    target.write_text("the earlier output\n")
    child = subprocess.Popen([sys.executable, "-m", "kdissect", "records", str(CAPTURES), "-p", "9092",
                              "-o", str(target), "-q"], cwd=CAPTURES.parent, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not [p for p in tmp_path.iterdir() if p.name.endswith(".kdissect-tmp")]:
        assert child.poll() is None, "the run ended before its output file was opened"
        assert time.monotonic() < deadline
        time.sleep(0.001)
    child.send_signal(signal.SIGSTOP)
    child.send_signal(signal.SIGTERM)
    child.send_signal(signal.SIGCONT)
    _out, err = child.communicate(timeout=120)
    assert child.returncode == 128 + signal.SIGTERM, err
    assert b"Traceback" not in err
    assert target.read_text() == "the earlier output\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["records.csv"]
