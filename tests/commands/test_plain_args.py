"""`kdissect export` with plain arguments runs without click; with any
arguments it must behave exactly as the click command does: same exit
status, same stdout and stderr, same output file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kdissect import cli
from tests.support import impair
from tests.support.paths import REPO

CAPTURES = REPO / "captures"


def _run(argv: list[str], capsys, monkeypatch, plain: bool) -> tuple[int, str, str]:
    with monkeypatch.context() as m:
        if not plain:
            m.setattr(cli, "plain_export_args", lambda args: None)
        code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _cases(tmp: Path) -> dict[str, list[str]]:
    admin = str(CAPTURES / "admin.pcap")
    pipelined = str(CAPTURES / "produce_pipelined.pcap")
    cut = impair.cut_file(shutil.copy(CAPTURES / "sasl.pcap", tmp / "cut.pcap"), 5000)
    odd_name = impair.cut_file(shutil.copy(CAPTURES / "admin.pcap", tmp / "d\u00e9j\u00e0 vu.pcap"), 4000)
    (tmp / "text.pcap").write_text("not a capture\n")
    (tmp / "empty").mkdir()
    return {
        "jsonl-file": ["export", admin, "-o", "OUT.jsonl"],
        "csv-quiet": ["export", admin, "-o", "OUT.csv", "-q"],
        "stdout": ["export", admin],
        "stdout-dash": ["export", "-p", "9092", admin, "-o", "-", "--no-detect"],
        "two-files-ports": ["export", admin, pipelined, "--port", "19092", "-p", "9092", "--output", "OUT.jsonl"],
        "cut-file": ["export", str(cut), "-o", "OUT.jsonl"],
        "non-ascii-problem": ["export", str(odd_name), "-o", "OUT.jsonl"],
        "missing": ["export", str(tmp / "missing.pcap")],
        "directory": ["export", str(tmp)],
        "glob": ["export", str(tmp / "*.pcap"), "-o", "OUT.jsonl"],
        "empty-directory": ["export", str(tmp / "empty")],
        "not-a-capture": ["export", str(tmp / "text.pcap")],
        "unknown-format": ["export", admin, "-o", "OUT.txt"],
        "unwritable": ["export", admin, "-o", str(tmp / "no" / "such" / "dir.jsonl")],
    }


@pytest.mark.parametrize("case", ["jsonl-file", "csv-quiet", "stdout", "stdout-dash", "two-files-ports", "cut-file",
                                  "non-ascii-problem", "missing", "directory", "glob", "empty-directory",
                                  "not-a-capture", "unknown-format", "unwritable"])
def test_plain_export_equals_click_export(tmp_path: Path, capsys, monkeypatch, case: str) -> None:
    argv = _cases(tmp_path)[case]
    assert cli.plain_export_args(argv) is not None, "these arguments should take the plain path"
    results = []
    for plain in (True, False):
        out_file = tmp_path / f"{'plain' if plain else 'click'}{Path(argv[-1]).suffix if 'OUT' in argv[-1] else ''}"
        args = [str(out_file) if a.startswith("OUT") else a for a in argv]
        code, out, err = _run(args, capsys, monkeypatch, plain)
        written = out_file.read_bytes() if "OUT" in " ".join(argv) and out_file.exists() else None
        results.append((code, out, err.replace(str(out_file), "OUT"), written))
    assert results[0] == results[1]
    if case in ("jsonl-file", "stdout", "cut-file", "directory", "glob"):
        assert results[0][0] == 0 and "kdissect: exchanges:" in results[0][2]
    if case in ("directory", "glob"):
        assert "kdissect: not captures, skipped: " in results[0][2] and "text.pcap" in results[0][2]
    if case in ("missing", "empty-directory", "not-a-capture", "unknown-format", "unwritable"):
        assert results[0][0] == 2 and results[0][2].startswith("kdissect: error: ")


@pytest.mark.parametrize("argv", [
    ["export"],
    ["export", "-q"],
    ["export", "a.pcap", "--help"],
    ["export", "a.pcap", "-h"],
    ["export", "a.pcap", "--output=x.jsonl"],
    ["export", "a.pcap", "-ox.jsonl"],
    ["export", "a.pcap", "-o"],
    ["export", "a.pcap", "-o", "a.jsonl", "-o", "b.jsonl"],
    ["export", "a.pcap", "-p", "0"],
    ["export", "a.pcap", "-p", "65536"],
    ["export", "a.pcap", "-p", "x"],
    ["export", "a.pcap", "-p", "-1"],
    ["export", "a.pcap", "--", "b.pcap"],
    ["export", "-", "a.pcap"],
    ["export", "a.pcap", "--unknown"],
    ["show", "a.pcap"],
    ["--version"],
    [],
])
def test_unusual_arguments_go_to_click(argv: list[str]) -> None:
    assert cli.plain_export_args(argv) is None


@pytest.mark.parametrize("argv", [
    ["export", "a.pcap", "-p", "0"],
    ["export"],
    ["export", "a.pcap", "--output=x.jsonl", "--bogus"],
])
def test_click_errors_are_one_line_and_a_hint(argv: list[str], capsys) -> None:
    # (the README's promise: a usage error is one line, exit 2; click's usage block is not printed)
    code = cli.main(argv)
    _, err = capsys.readouterr()
    lines = err.splitlines()
    assert code == 2 and len(lines) == 2, err
    assert lines[0].startswith("kdissect: error: ") and "Usage:" not in err
    assert lines[1] == "kdissect: hint: 'kdissect export --help' lists the options"


def _export_in_a_child(tmp_path: Path, options: list[str], modules: list[str]) -> subprocess.CompletedProcess:
    """`kdissect export admin.pcap -o x.jsonl OPTIONS` through cli.main in a
    fresh Python; it prints the status, then whether each of `modules` was imported."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO)
    argv = ["export", str(CAPTURES / "admin.pcap"), "-o", str(tmp_path / "x.jsonl"), *options]
    code = (f"import sys; from kdissect.cli import main; status = main({argv!r}); "
            f"print(status, *(m in sys.modules for m in {modules!r}))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)


def test_plain_export_does_not_import_click(tmp_path: Path) -> None:
    result = _export_in_a_child(tmp_path, ["-q"], ["click"])
    assert result.stdout.split() == ["0", "False"], result.stderr
    assert (tmp_path / "x.jsonl").read_text().count("\n") == 17  # admin.pcap's exchanges (tshark: 17 requests)


def test_plaintext_export_does_not_load_the_tls_layer(tmp_path: Path) -> None:
    """Without TLS in the capture or a key log, neither kdissect.conn.tls nor
    cryptography is imported (about 30 ms and 6 MiB at every start), also
    when the accounting lines are printed."""
    result = _export_in_a_child(tmp_path, [], ["kdissect.conn.tls", "cryptography"])
    assert result.stdout.split() == ["0", "False", "False"], result.stderr
    assert "exchanges: 17" in result.stderr  # the accounting lines were printed


def test_cli_group_is_still_importable() -> None:
    from kdissect.cli import cli as group

    assert sorted(group.list_commands(None)) == sorted(cli.COMMANDS)


def test_large_export_with_tuned_allocator_matches_in_process_rows(tmp_path: Path) -> None:
    """A capture over export_core's size threshold (the allocator is tuned)
    exports exactly the rows an untuned in-process analysis gives."""
    from kdissect.commands import export_core
    from kdissect.shared.output import exchange_line_for
    from kdissect.conn.pipeline import analyze

    big = impair.write_pcap(impair.repeat(impair.load_pcap(CAPTURES / "large_records.pcap"), 8), tmp_path / "big.pcap")
    assert big.stat().st_size >= export_core._TUNE_FROM_BYTES
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO)
    out = tmp_path / "big.jsonl"
    result = subprocess.run([sys.executable, "-m", "kdissect", "export", str(big), "-o", str(out)],
                            capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    exchanges, accounting = analyze([str(big)])
    expected = "".join(exchange_line_for("us")(e) for e in exchanges)
    assert out.read_text() == expected
    assert accounting.exchanges > 0
    assert result.stderr.splitlines() == [f"kdissect: {line}" for line in accounting.summary_lines()]
