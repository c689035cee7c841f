"""Every command that reads captures takes files, directories and globs alike
(kdissect.shared.inputs.expand_inputs): a directory of rotated files, or a glob over
them, gives exactly what listing the files gives. The rotation is editcap's."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from kdissect.cli import main
from tests.support.pipeline import ports_of, reference_captures
from tests.support.spark import editcap_split, tshark_frame_count

COMMANDS = {
    "export": [],
    "show": [],
    "stats": ["--json"],
    "records": [],
}


@pytest.fixture(scope="module")
def rotated(tmp_path_factory) -> tuple[Path, list[Path], Path]:
    """(directory, its capture files, the whole capture): one capture cut by
    editcap into rotated files, one of them gzipped, plus files that are not
    captures and a subdirectory."""
    source = max(reference_captures(), key=lambda p: p.stat().st_size)
    directory = tmp_path_factory.mktemp("inputs") / "rotated"
    pieces = editcap_split(source, max(2, tshark_frame_count(source) // 5), directory / "sub")
    assert len(pieces) >= 4
    zipped = pieces[1].with_name(pieces[1].name + ".gz")
    zipped.write_bytes(gzip.compress(pieces[1].read_bytes()))
    pieces[1].unlink()
    pieces[1] = zipped
    (directory / "notes.txt").write_text("not a capture\n")
    (directory / "sub" / "index.json").write_text("{}\n")
    return directory, pieces, source


def _run(capsys, command: str, inputs: list[str], ports: list[str]) -> tuple[str, str]:
    code = main([command, *inputs, *COMMANDS[command], *ports])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out, err


@pytest.mark.parametrize("command", list(COMMANDS))
def test_directory_and_globs_equal_the_listed_files(capsys, rotated, command: str) -> None:
    directory, pieces, source = rotated
    ports = [arg for port in ports_of(source) for arg in ("--port", str(port))]
    listed, listed_err = _run(capsys, command, [str(p) for p in reversed(pieces)], ports)
    assert listed.strip()
    for inputs in ([str(directory)], [str(directory / "sub" / "*")], [str(directory / "**")],
                   [str(directory / "sub" / "*.pcap*"), str(pieces[0])]):
        out, err = _run(capsys, command, inputs, ports)
        assert out == listed, inputs
        # stderr: the same accounting, plus one line naming what was skipped
        assert [line for line in err.splitlines() if not line.startswith("kdissect: not captures, skipped: ")] \
            == listed_err.splitlines()


def test_rotated_directory_gives_the_whole_captures_exchanges(capsys, rotated) -> None:
    directory, _, source = rotated
    ports = [arg for port in ports_of(source) for arg in ("--port", str(port))]
    whole, _ = _run(capsys, "export", [str(source)], ports)
    rotated_rows, err = _run(capsys, "export", [str(directory)], ports)
    assert "kdissect: not captures, skipped: " in err and "notes.txt" in err and "index.json" in err
    # per-file columns (capture name, frame numbers) differ by construction
    per_file = ("capture", "request_frame", "response_frame")

    def rows(text: str) -> list[dict]:
        return [{k: v for k, v in json.loads(line).items() if k not in per_file} for line in text.splitlines()]

    key = lambda row: (row["stream"], row["correlation_id"])  # noqa: E731
    assert sorted(rows(rotated_rows), key=key) == sorted(rows(whole), key=key)
