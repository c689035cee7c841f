"""What the commands print on a terminal, read through a pseudo-terminal of
120 columns as a person would see it: no line wider than the terminal, the
columns that answer each table's question present; on a pipe or with
`--wide`, every column. Also the units the written files share and the
package's public names."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from tests.support.paths import REPO

CAPTURE = REPO / "captures" / "forensics_kafka.pcap"
MANIFEST = REPO / "captures" / "forensics_kafka.manifest.json"


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["PYTHONPATH"] = str(REPO)
    return env


def on_terminal(args: list[str], columns: int = 120) -> str:
    """stdout of `kdissect ARGS` run on a pseudo-terminal `columns` wide (stderr apart)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    process = subprocess.Popen([sys.executable, "-m", "kdissect", *args], cwd=REPO, env=_environment(),
                               stdin=subprocess.DEVNULL, stdout=follower, stderr=subprocess.DEVNULL)
    os.close(follower)
    chunks = []
    while True:
        ready, _, _ = select.select([leader], [], [], 120)
        if not ready:
            process.kill()
            raise AssertionError(f"kdissect {args} printed nothing for 120 s")
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the follower side is closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert process.wait(60) == 0
    return b"".join(chunks).decode("utf-8").replace("\r\n", "\n")


def on_pipe(args: list[str]) -> str:
    result = subprocess.run([sys.executable, "-m", "kdissect", *args], cwd=REPO, env=_environment(),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout


def header_of(text: str, title: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    return lines[start + 1].split()


# command -> (table title, the columns that answer its question, its DISPLAY name)
KEY_COLUMNS = {
    "topics": ("topics:", ["topic", "partition", "direction", "lag", "errors"], "topics"),
    "groups": ("group generations", ["group_id", "generation_id", "rebalance_ms", "errors", "committed_lag"],
               "groups"),
    "clients": ("clients", ["client_id", "errors", "throttled", "reconnects"], "clients"),
    "stats": ("latency (ms) by API", ["api", "version", "count", "svc_p50", "svc_p99", "svc_max", "waits"], None),
}


@pytest.mark.parametrize("command", sorted(KEY_COLUMNS))
def test_tables_fit_a_terminal_of_120_columns(command: str) -> None:
    text = on_terminal([command, str(CAPTURE)])
    wide = [line for line in text.splitlines() if len(line) > 120]
    assert not wide, f"{len(wide)} lines wider than 120 columns, e.g. {wide[0]!r}"
    title, keys, name = KEY_COLUMNS[command]
    header = header_of(text, title)
    assert header[:len(keys)] == keys, header
    if name is not None:  # the columns left out are counted under the table
        from kdissect.forensics.render import DISPLAY

        table = text.split(title, 1)[1].split("\n\n")[0]
        assert header == DISPLAY[name][:len(header)]
        if len(header) < len(DISPLAY[name]):
            assert f"({len(DISPLAY[name]) - len(header)} more columns with --wide: " in table


@pytest.mark.parametrize("command", ["topics", "groups", "clients"])
def test_wide_and_a_pipe_show_every_column(command: str) -> None:
    from kdissect.forensics.render import DISPLAY

    title, _, name = KEY_COLUMNS[command]
    wide = on_terminal([command, str(CAPTURE), "--wide"])
    piped = on_pipe([command, str(CAPTURE)])
    for text in (wide, piped):
        assert header_of(text, title) == DISPLAY[name]
        assert "more columns with --wide" not in text


def test_a_narrow_terminal_keeps_the_leading_columns() -> None:
    text = on_terminal(["topics", str(CAPTURE)], columns=60)
    assert max(len(line) for line in text.splitlines()) <= 60
    assert header_of(text, "topics:")[:3] == ["topic", "partition", "direction"]


def test_forensic_output_help_says_what_happens_without_it() -> None:
    text = on_pipe(["topics", "--help"])
    assert "Default: JSONL on stdout" not in text
    assert "Without it, text tables on stdout" in " ".join(text.split())


def test_records_write_times_as_epoch_seconds_like_export(tmp_path: Path) -> None:
    """The manifest's consumed records carry Kafka's milliseconds (the
    consumer's own view); the file gives seconds, as export's times are."""
    manifest = json.loads(MANIFEST.read_text())
    expected = {(e["topic"], e["partition"], e["offset"]): e["timestamp"] for e in manifest["consumed"]
                if e.get("timestamp") is not None}
    rows = [json.loads(line) for line in on_pipe(["records", str(CAPTURE), "-q"]).splitlines()]
    fetched = {(r["topic"], r["partition"], r["offset"]): r["timestamp"] for r in rows if r["direction"] == "fetch"}
    assert expected and all(round(fetched[where] * 1000) == millis for where, millis in expected.items())
    exchanges = [json.loads(line) for line in on_pipe(["export", str(CAPTURE)]).splitlines()[:1]]
    # both within the capture's day, in the same unit
    assert abs(exchanges[0]["request_ts"] - min(fetched.values())) < 3600


def test_dir_lists_the_public_api_only() -> None:
    import kdissect

    assert dir(kdissect) == sorted(kdissect.__all__)
