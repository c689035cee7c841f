"""The Spark job's OUTDIR never costs the user data (issue 23, item 2).

`kdissect spark dir/exchanges/evidence.pcap -o dir` deleted dir/exchanges/
(the capture and a notes file); a non-empty OUTDIR lost unrelated files in
latency/, errors/, topics/ and clients/ and its manifest.json. The rule
(kdissect.spark.outdir): a new or empty OUTDIR is used; an earlier kdissect
output is replaced only with --overwrite, and then only kdissect's own files;
anything else is refused; nothing that is, holds or is inside an input is
ever written or removed.

Refusals happen before Spark starts, so most tests here run no Spark job;
one test (slow) runs the job twice in local mode.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kdissect.cli import main
from kdissect.shared.protected_inputs import ProtectedInputs
from kdissect.spark.job import TABLES, WORK_DIR
from kdissect.spark.outdir import MARKER, claim_outdir
from tests.conftest import CAPTURES, small_tmpfs

SOURCE = CAPTURES / "admin.pcap"


def _files(directory: Path) -> dict[str, bytes]:
    """Every file and directory under `directory`: bytes, or None for a directory."""
    found: dict[str, bytes | None] = {}
    for path in sorted(directory.rglob("*")):
        key = str(path.relative_to(directory))
        if path.is_symlink():
            found[key] = b"-> " + os.readlink(path).encode()
        else:
            found[key] = path.read_bytes() if path.is_file() else None
    return found


def _spark(args: list[str], capsys, face: str = "kdissect") -> tuple[int, list[str]]:
    if face == "kdissect":
        status = main(["spark", *args])
    else:
        from kdissect.spark.submit_main import main as submit_main

        status = submit_main(args)
    captured = capsys.readouterr()
    return status, (captured.err + captured.out).strip().splitlines()


@pytest.mark.parametrize("face", ["kdissect", "spark-submit"])
@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_an_outdir_holding_the_input_is_refused(face, overwrite, tmp_path, capsys):
    """The issue's run: the capture lies in OUTDIR/exchanges/ beside the
    user's notes. Refused, --overwrite or not, by both faces; every file stays."""
    work = tmp_path / "dir"
    (work / "exchanges").mkdir(parents=True)
    evidence = work / "exchanges" / "evidence.pcap"
    evidence.write_bytes(SOURCE.read_bytes())
    (work / "exchanges" / "notes.txt").write_text("who sent what, when\n")
    before = _files(tmp_path)
    status, lines = _spark([str(evidence), "-o", str(work), *overwrite], capsys, face)
    assert status == 2
    assert lines == [f"kdissect: error: OUTDIR {work} holds the input {evidence}: refusing to write there "
                     "(choose an OUTDIR apart from the inputs)"]
    assert _files(tmp_path) == before


@pytest.mark.parametrize("face", ["kdissect", "spark-submit"])
@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_a_directory_that_is_no_kdissect_output_is_refused(face, overwrite, tmp_path, capsys):
    """Files of the user's own in latency/, errors/, topics/, clients/ and a
    manifest.json of some other tool: refused, and byte for byte as they were."""
    outdir = tmp_path / "out"
    for name in ("latency", "errors", "topics", "clients"):
        (outdir / name).mkdir(parents=True)
        (outdir / name / "mine.csv").write_bytes(f"{name}\n".encode() * 100)
    (outdir / "manifest.json").write_text('{"tool": "something else"}\n')
    before = _files(tmp_path)
    status, lines = _spark([str(SOURCE), "-o", str(outdir), *overwrite], capsys, face)
    assert status == 2 and len(lines) == 1
    assert "is not empty and holds no earlier kdissect spark output" in lines[0]
    assert _files(tmp_path) == before


def test_an_outdir_inside_an_input_directory_is_refused(tmp_path, capsys):
    inputs = tmp_path / "captures"
    inputs.mkdir()
    (inputs / "a.pcap").write_bytes(SOURCE.read_bytes())
    status, lines = _spark([str(inputs), "-o", str(inputs / "report")], capsys)
    assert status == 2 and lines == [f"kdissect: error: OUTDIR {inputs / 'report'} is inside the input {inputs}: "
                                     "refusing to write there (choose an OUTDIR apart from the inputs)"]
    assert not (inputs / "report").exists()


def test_both_faces_take_overwrite():
    from kdissect.commands.spark import SparkOptions
    from kdissect.shared.options import parse_plain
    from kdissect.spark.options import SparkJobOptions, job_options

    for options in (SparkOptions, SparkJobOptions):
        assert job_options(parse_plain(options, [str(SOURCE), "-o", "out", "--overwrite"]), None).overwrite
        assert not job_options(parse_plain(options, [str(SOURCE), "-o", "out"]), None).overwrite


def _earlier_output(outdir: Path) -> None:
    """What a run leaves: claimed (the marker), then a part file and _SUCCESS
    per table, scratch files in _work/ and the manifest. The part files'
    bytes do not matter here: the claim looks at names, never at contents."""
    claim_outdir(str(outdir), ProtectedInputs([str(SOURCE)]), False, TABLES, WORK_DIR)
    for table in TABLES:
        (outdir / table).mkdir()
        (outdir / table / "part-00000.parquet").write_bytes(b"PAR1 earlier PAR1")
        (outdir / table / "_SUCCESS").write_bytes(b"")
    (outdir / "exchanges" / "part-00001.parquet").write_bytes(b"PAR1 earlier PAR1")
    (outdir / WORK_DIR / "exchanges").mkdir(parents=True)
    (outdir / WORK_DIR / "exchanges" / "part-00003.arrow").write_bytes(b"scratch")
    (outdir / "manifest.json").write_text('{"tool": "kdissect spark"}\n')


def test_an_earlier_output_needs_overwrite_and_loses_only_kdissects_files(tmp_path, capsys):
    outdir = tmp_path / "out"
    _earlier_output(outdir)
    (outdir / "notes.txt").write_text("my notes\n")
    (outdir / "mine").mkdir()
    (outdir / "mine" / "data.bin").write_bytes(bytes(range(256)))
    before = _files(tmp_path)
    status, lines = _spark([str(SOURCE), "-o", str(outdir)], capsys)
    assert status == 2 and "holds an earlier kdissect spark output: give --overwrite" in lines[0]
    assert _files(tmp_path) == before
    # with --overwrite (the claim alone: the job's run is the slow test below)
    assert claim_outdir(str(outdir), ProtectedInputs([str(SOURCE)]), True, TABLES, WORK_DIR) == str(outdir)
    after = _files(tmp_path)
    assert {key: value for key, value in before.items() if key.startswith(("out/notes", "out/mine"))} == \
        {key: value for key, value in after.items() if key.startswith(("out/notes", "out/mine"))}
    left = sorted(key for key in after if not key.startswith(("out/notes", "out/mine")))
    assert left == ["out", f"out/{MARKER}", *sorted(f"out/{table}" for table in TABLES)]  # empty table directories


@pytest.mark.parametrize("intruder", ["foreign file", "hard link", "symbolic link", "table as a file"])
def test_overwrite_refuses_what_is_not_kdissects_or_is_an_input(intruder, tmp_path, capsys):
    outdir = tmp_path / "out"
    _earlier_output(outdir)
    capture = tmp_path / "capture.pcap"
    capture.write_bytes(SOURCE.read_bytes())
    expected = "was not written by kdissect"
    if intruder == "foreign file":  # the table would no longer read as Parquet
        (outdir / "latency" / "mine.txt").write_text("mine\n")
    elif intruder == "hard link":  # removing it would not lose the capture, but it is one
        os.link(capture, outdir / "exchanges" / "part-00042.parquet")
        expected = f"is the same file as the input {capture}: refusing to remove it"
    elif intruder == "symbolic link":  # a table directory that leads to the inputs
        (outdir / "waits" / "part-00000.parquet").unlink()
        (outdir / "waits" / "_SUCCESS").unlink()
        (outdir / "waits").rmdir()
        (outdir / "waits").symlink_to(tmp_path)
        expected = f"holds the input {capture}: refusing to remove it"
    else:
        (outdir / "errors" / "part-00000.parquet").unlink()
        (outdir / "errors" / "_SUCCESS").unlink()
        (outdir / "errors").rmdir()
        (outdir / "errors").write_text("a file of mine\n")
        expected = "is not a table directory kdissect wrote"
    before = _files(outdir)
    status, lines = _spark([str(capture), "-o", str(outdir), "--overwrite"], capsys)
    assert status == 2 and len(lines) == 1 and expected in lines[0], lines
    assert _files(outdir) == before
    assert capture.read_bytes() == SOURCE.read_bytes()


# -- the job itself, twice ------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")
def test_overwrite_replaces_the_tables_and_keeps_the_rest(tmp_path, capsys):
    """A real run, the user's files added, a refused rerun, then a rerun
    with --overwrite: the tables are the new run's (equal to `kdissect
    export`), the user's files byte for byte as they were."""
    from kdissect.spark.job import JobOptions, run_job
    from tests.support.spark import canonical, export_rows, local_session, table_rows

    outdir = tmp_path / "out"
    first_input, second_input = CAPTURES / "admin.pcap", CAPTURES / "consume_group.pcap"
    with local_session(cores=2, shuffle_partitions=2) as spark:
        run_job(JobOptions(inputs=[str(first_input)], outdir=str(outdir), master=None), spark=spark)
        (outdir / "notes.txt").write_text("my notes\n")
        (outdir / "mine").mkdir()
        (outdir / "mine" / "data.bin").write_bytes(bytes(range(256)))
        before = _files(outdir)
        status, lines = _spark([str(second_input), "-o", str(outdir)], capsys)
        assert status == 2 and "give --overwrite" in lines[0]
        assert _files(outdir) == before
        result = run_job(JobOptions(inputs=[str(second_input)], outdir=str(outdir), master=None, overwrite=True,
                                    partitions=1), spark=spark)
    after = _files(outdir)
    for mine in ("notes.txt", "mine", "mine/data.bin"):
        assert after[mine] == before[mine]
    assert [entry["name"] for entry in result.manifest["inputs"]] == [second_input.name]
    # one part (of the one read task, which dissected every connection in place, or of the one shuffle partition)
    assert len({p.name for p in (outdir / "exchanges").rglob("*.parquet")}) == 1  # (capture_date=...)
    assert canonical(table_rows(outdir, "exchanges")) == \
        canonical(export_rows([second_input], tmp_path / "export.parquet"))
    assert not (outdir / WORK_DIR).exists()
    assert not [key for key in after if key.endswith(".kdissect-tmp")]


def test_an_outdir_holding_a_key_log_is_refused(tmp_path, capsys):
    outdir = tmp_path / "out"
    outdir.mkdir()
    keys = outdir / "session.keys"
    keys.write_bytes(sorted((CAPTURES / "tls").glob("*.keys"))[0].read_bytes())
    pcap = sorted((CAPTURES / "tls").glob("*.pcap"))[0]
    before = _files(tmp_path)
    status, lines = _spark([str(pcap), "--tls-keylog", str(keys), "-o", str(outdir), "--overwrite"], capsys)
    assert status == 2 and lines[0].startswith(f"kdissect: error: OUTDIR {outdir} holds the input {keys}")
    assert _files(tmp_path) == before


@pytest.mark.slow
def test_a_full_disk_under_the_job_is_one_error_line(tmp_path):
    """The tasks write into OUTDIR themselves: on a full disk (a 128 KiB
    tmpfs) the run ends with kdissect's one error line and exit 2 (Spark
    logs its task failure above it), not an internal error."""
    import subprocess
    import sys

    with small_tmpfs(tmp_path / "full", "128k") as mount_point:
        result = subprocess.run([sys.executable, "-m", "kdissect", "spark", str(CAPTURES / "forensics_kafka.pcap"),
                                 "-o", str(mount_point / "out"), "--master", "local[1]"],
                                cwd=CAPTURES.parent, capture_output=True, text=True, timeout=600)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 2, result.stderr[-2000:]
    assert last.startswith(f"kdissect: error: cannot write {mount_point / 'out'}/")
    assert last.endswith(": No space left on device")
