"""Captured strings are hostile: on captures/hostile_strings_kafka.pcap
(kafka-python client ids, record keys and a group id carrying terminal
escapes, bidi controls, NUL, CR/LF, CSV formulas and HTML; raw Metadata v1
requests with client ids and topics that are not UTF-8), every text face
escapes them (checked through a real pseudo-terminal), every CSV reads back
to the JSONL rows, and undecodable bytes are stored one lossless way in
JSONL, CSV and Parquet.

Expected strings come from the capture's manifest (the exact bytes the
clients sent), turned into text by the README's rules written here with
the standard library (codecs' backslashreplace, unicodedata categories),
not by kdissect.text_escape.
"""

from __future__ import annotations

import csv
import json
import os
import pty
import random
import select
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kdissect.text_escape import escape_text, lossless_text, original_bytes, terminal_text
from tests.support.text_rules import shown, stored
from tests.support.paths import REPO

CAPTURE = REPO / "captures" / "hostile_strings_kafka.pcap"
MANIFEST = json.loads((REPO / "captures" / "hostile_strings_kafka.manifest.json").read_text())
HOSTILE = MANIFEST["hostile"]

def _strings(where: str, client: str | None = None) -> list[bytes]:
    return [bytes.fromhex(e["hex"]) for e in HOSTILE if e["where"] == where and client in (None, e["client"])]


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kdissect", *args], cwd=REPO, capture_output=True,
                          timeout=timeout)


# ------------------------------------------------------------------ rules --

def test_the_manifest_holds_every_kind_of_hostile_string() -> None:
    raw = b"".join(_strings("client_id"))
    for needle in (b"\x1b]0;", b"\x07", b"\x1b[2J", b"\x1b]8;;", b"\r", b"\n", b"\x00", "\u202e".encode(),
                   "\u2028".encode(), b"=HYPERLINK", b"+1", b"-2", b"@SUM", b"\tTAB", b"<!--<script>", b"\\",
                   b"\xff", b"\xfe"):
        assert needle in raw, needle


def test_escape_and_store_follow_the_documented_rules() -> None:
    rng = random.Random(23)
    pool = [b"\\", b"x", b"\x1b", b"\r", b"\n", b"\x00", b"\x7f", b"\xff", b"\xfe", b"\xc3", b"\xc3\xa9",
            "\u202e".encode(), "\u2028".encode(), "\u00a0".encode(), b"'", b'"', b"=", "\U0001f600".encode(),
            "\u009b".encode(), b"\\x41"]
    seen: dict[str, bytes] = {}
    for _ in range(3000):
        raw = b"".join(rng.choice(pool) for _ in range(rng.randint(0, 6)))
        text = raw.decode("utf-8", "surrogateescape")  # how kdissect decodes Kafka strings
        assert lossless_text(text) == stored(raw)
        assert escape_text(text) == shown(raw)
        assert original_bytes(lossless_text(text)) == raw
        assert seen.setdefault(lossless_text(text), raw) == raw  # distinct bytes stay distinct
        assert seen.setdefault("shown:" + escape_text(text), raw) == raw
        assert all(ch.isprintable() for ch in escape_text(text))
    assert escape_text("lab-kafka-python é中 'x'") == "lab-kafka-python é中 'x'"  # printable text unchanged
    assert terminal_text("a\\b\nc\x1bd") == "a\\b\nc\\x1bd"  # the last guard keeps lines, not backslashes


def test_a_column_is_stored_by_the_rule_a_row_is() -> None:
    """output.lossless_column (the Spark tasks' exchange rows, a column at a
    time) stores each value as output.lossless_row does in its row, whatever
    else the column holds: the documented rule, from the raw bytes."""
    from kdissect.shared.output import lossless_column, lossless_row

    rng = random.Random(29)
    pool = [b"\\", b"x", b"\x1b", b"\xff", b"\xc3\xa9", "\u202e".encode(), b"\\x41", b"ok"]

    def value() -> object:
        raw = b"".join(rng.choice(pool) for _ in range(rng.randint(0, 3)))
        text = raw.decode("utf-8", "surrogateescape")
        kind = rng.randrange(6)
        return (None, 7, text, [text, "plain"], [[text], 3], [])[kind]

    for _ in range(300):
        column = [value() for _ in range(rng.randint(1, 8))]
        if rng.random() < 0.3:  # columns of plain text: nothing to do
            column = [v if not isinstance(v, str) else "plain" for v in column]
        expected = [lossless_row({"v": v})["v"] for v in column]
        assert list(lossless_column(column)) == expected
        for v, got in zip(column, lossless_column(column)):
            if isinstance(v, str):
                raw = v.encode("utf-8", "surrogateescape")
                assert got == stored(raw) and original_bytes(got) == raw


# ------------------------------------------------------------ text faces --

def _printable(text: str) -> bool:
    return all(ch == "\n" or ch.isprintable() for ch in text)


@pytest.mark.parametrize("verb", [["show"], ["show", "-v"], ["stats"], ["stats", "--json"], ["topics"],
                                  ["groups"], ["clients"], ["records"], ["export"]])
def test_no_raw_control_reaches_text_output(verb: list[str]) -> None:
    result = run(*verb, str(CAPTURE))
    assert result.returncode == 0, result.stderr
    for stream in (result.stdout, result.stderr):
        text = stream.decode("utf-8")
        assert _printable(text), [ch for ch in text if ch != "\n" and not ch.isprintable()][:5]


def _through_a_terminal(*args: str, timeout: float = 120) -> bytes:
    """What `kdissect ARGS` writes to a real pseudo-terminal (stdout and stderr)."""
    master, slave = pty.openpty()
    env = dict(os.environ, COLUMNS="200", LINES="50", TERM="xterm-256color")
    process = subprocess.Popen([sys.executable, "-m", "kdissect", *args], cwd=REPO, stdin=slave, stdout=slave,
                               stderr=slave, env=env, close_fds=True)
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
        process.wait(timeout=30)
    assert process.returncode == 0, b"".join(chunks)[-2000:]
    return b"".join(chunks)


def _exchange_count() -> int:
    return len(run("export", "-q", str(CAPTURE)).stdout.splitlines())


def test_show_on_a_terminal_escapes_everything_and_forges_no_rows() -> None:
    raw = _through_a_terminal("show", str(CAPTURE))
    # the terminal's line discipline writes each newline as CR LF: no other CR, no escape, no BEL, no NUL
    assert b"\r" not in raw.replace(b"\r\n", b"")
    for byte in (b"\x1b", b"\x07", b"\x00", b"\x08", b"\x7f", b"\x9b"):
        assert byte not in raw
    for char in ("\u202e", "\u2066", "\u2067", "\u2068", "\u2069", "\u200e", "\u200f", "\u2028", "\u2029",
                 "\u009b"):
        assert char.encode() not in raw
    text = raw.decode("utf-8").replace("\r\n", "\n")
    lines = text.splitlines()
    summary = [line for line in lines if " -> " in line and " corr=" in line]
    assert len(summary) == _exchange_count()  # one line per exchange: no row forged by a newline or CR
    assert all(line[:2].isdigit() for line in summary)  # every row starts with its time
    for client_id in _strings("client_id", "kafka-python"):
        assert f"client_id={shown(client_id)}  " in text or text.count(f"client_id={shown(client_id)}\n"), \
            shown(client_id)
    for client_id in _strings("client_id", "raw-socket"):
        assert f"client_id={shown(client_id)}" in text


@pytest.mark.parametrize("verb", [["show", "-v"], ["stats"], ["topics"], ["groups"], ["clients"]])
def test_every_text_face_on_a_terminal(verb: list[str]) -> None:
    raw = _through_a_terminal(*verb, str(CAPTURE))
    assert b"\r" not in raw.replace(b"\r\n", b"")
    for byte in (b"\x1b", b"\x07", b"\x00"):
        assert byte not in raw
    for char in ("\u202e", "\u2028", "\u2029"):
        assert char.encode() not in raw
    text = raw.decode("utf-8").replace("\r\n", "\n")
    if verb[0] == "clients":
        # the first table, "clients" (errors_by_client and the others follow it after a blank line)
        clients_table = text.split("\n\n", 1)[0].splitlines()
        for client_id in _strings("client_id"):
            # one row each, and its cell is the escaped id (the table cuts cells at 60 characters)
            cell = shown(client_id)
            cell = cell if len(cell) <= 60 else cell[:57] + "..."
            assert sum(line.startswith("  " + cell + " ") for line in clients_table) == 1, cell
    if verb[0] == "groups":
        assert shown(_strings("group")[0]) in text
    if verb == ["show", "-v"]:
        assert f"records {shown(b'hostile')} partition 0:" in text
        for topic in _strings("topic"):
            assert f"'{shown(topic)}'" in text or f'"{shown(topic)}"' in text


def test_stderr_names_hostile_file_names_escaped(tmp_path: Path) -> None:
    folder = tmp_path / "evidence"
    folder.mkdir()
    (folder / "a.pcap").write_bytes(CAPTURE.read_bytes())
    hostile = "notes\x1b]0;owned\x07\r\n\u202e.txt"
    (folder / hostile).write_text("not a capture")
    os.mkfifo(folder / "pipe\x1b[2J")
    result = run("export", str(folder), "-o", str(tmp_path / "out.jsonl"), timeout=60)
    assert result.returncode == 0, result.stderr
    err = result.stderr.decode("utf-8")
    assert _printable(err)
    skipped = [line for line in err.splitlines() if "not captures, skipped" in line]
    assert len(skipped) == 1
    assert shown(hostile.encode()) in skipped[0]
    assert shown("pipe\x1b[2J".encode()) + " (a FIFO)" in skipped[0]


# -------------------------------------------------------- FIFOs, devices --

def test_a_fifo_or_device_as_capture_is_named_not_opened(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for path, kind in ((fifo, "a FIFO"), (Path("/dev/zero"), "a character device")):
        result = run("export", str(path), "-o", str(tmp_path / "x.jsonl"), timeout=30)
        assert result.returncode == 2
        assert result.stderr.decode() == f"kdissect: error: {path}: not a regular file ({kind}), not read\n"


# ---------------------------------------------------------- the CSV rule --

def _jsonl_rows(path: Path) -> list[dict]:
    return [json.loads(line, parse_float=str) for line in path.read_text(encoding="utf-8").splitlines()]


def _as_csv_text(value: object) -> str:
    """A JSONL value as the README says CSV writes it (before the formula rule)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, list):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return str(value)


def _read_back(cell: str) -> str:
    """README: a text cell that starts with an apostrophe had one added."""
    return cell[1:] if cell.startswith("'") else cell


_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _plain_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return cell.strip() == cell and cell.lower() not in ("nan", "inf", "-inf", "+inf", "infinity")


CSV_VERBS = [["export"], ["records"], ["topics"], ["groups"], ["clients"], ["topics", "--table", "end_to_end"],
             ["groups", "--table", "group_commits"], ["topics", "--table", "topic_lag"]]


@pytest.mark.parametrize("verb", CSV_VERBS, ids=lambda v: "-".join(v))
def test_csv_reads_back_to_the_jsonl_rows(tmp_path: Path, verb: list[str]) -> None:
    jsonl, table = tmp_path / "t.jsonl", tmp_path / "t.csv"
    for target in (jsonl, table):
        result = run(*verb, "-q", str(CAPTURE), "-o", str(target))
        assert result.returncode == 0, result.stderr
    expected = _jsonl_rows(jsonl)
    assert expected
    with table.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    header, rows = rows[0], rows[1:]
    assert len(rows) == len(expected)  # no row split by a CR or LF
    for row, want in zip(rows, expected):
        assert header == list(want)
        for cell in row:
            if cell.startswith(_FORMULA):
                assert _plain_number(cell), cell  # a formula-like text cell always has its apostrophe
        assert [_read_back(c) for c in row] == [_as_csv_text(v) for v in want.values()]
    raw = table.read_bytes()
    assert raw.count(b"\n") >= len(rows) + 1
    if verb == ["records"]:
        keys = {row[header.index("key")] for row in rows}
        assert "'=HYPERLINK(\"http://evil.example\",\"x\")" in keys and "'\tTAB-lead" in keys
        assert "12:00:00.000000\rforged" in keys


def test_a_bare_cr_is_quoted_in_csv(tmp_path: Path) -> None:
    table = tmp_path / "e.csv"
    assert run("export", "-q", str(CAPTURE), "-o", str(table)).returncode == 0
    raw = table.read_bytes()
    assert b'"12:00:00.000000\rforged"' in raw
    assert raw.replace(b'"12:00:00.000000\rforged"', b"").count(b"\r") == 0


# --------------------------------------------------- the invalid UTF-8 rule --

def _client_ids_written(verb: str, target: Path) -> list[str | None]:
    """The client_id column of the table `kdissect VERB` writes to `target`
    (its format by the suffix: jsonl, csv or parquet), read back."""
    assert run(verb, "-q", str(CAPTURE), "-o", str(target)).returncode == 0
    if target.suffix == ".jsonl":
        return [row["client_id"] for row in _jsonl_rows(target)]
    if target.suffix == ".csv":
        with target.open(newline="", encoding="utf-8") as handle:
            return [_read_back(row["client_id"]) for row in csv.DictReader(handle)]
    return pq.read_table(target, columns=["client_id"]).column("client_id").to_pylist()


def test_undecodable_bytes_stay_distinct_and_equal_across_formats(tmp_path: Path) -> None:
    found = {ext: _client_ids_written("export", tmp_path / f"e.{ext}") for ext in ("jsonl", "csv", "parquet")}
    assert found["jsonl"] == found["csv"] == found["parquet"]
    ids = set(found["jsonl"])
    raw_ids = _strings("client_id", "raw-socket")
    assert [stored(raw) for raw in raw_ids] == ["bad-\\xff-id", "bad-\\xfe-id", "bad-\\\\xff-id",
                                                "esc-\\xc3(-\x1b[2J"]
    for raw in raw_ids:
        assert stored(raw) in ids
        assert original_bytes(stored(raw)) == raw
    for raw in _strings("client_id", "kafka-python"):
        assert stored(raw) in ids


def test_the_clients_table_keeps_undecodable_ids_apart_in_every_format(tmp_path: Path) -> None:
    want = {stored(raw) for raw in _strings("client_id")}
    got = {}
    for ext in ("jsonl", "csv", "parquet"):
        ids = _client_ids_written("clients", tmp_path / f"c.{ext}")
        assert len(ids) == len(set(ids))  # one row per distinct id: nothing merged
        got[ext] = ids
    assert got["jsonl"] == got["csv"] == got["parquet"]
    assert want <= set(got["jsonl"]), want - set(got["jsonl"])


def test_show_selects_a_client_id_by_its_escaped_form() -> None:
    exported = [json.loads(line) for line in run("export", "-q", str(CAPTURE)).stdout.splitlines()]
    for raw in _strings("client_id")[:1] + _strings("client_id", "raw-socket")[:1]:
        want = sum(row["client_id"] == stored(raw) for row in exported)
        assert want > 0
        result = run("show", str(CAPTURE), "--client-id", shown(raw))
        assert result.returncode == 0, result.stderr
        assert len(result.stdout.splitlines()) == want


def test_an_error_quoting_a_hostile_file_name_is_one_escaped_line(tmp_path: Path) -> None:
    name = "evidence\x1b]0;owned\x07\n\u202etxt.pcap"
    (tmp_path / name).write_text("not a capture")
    for target in (tmp_path / name, tmp_path / ("missing" + name)):
        result = run("export", str(target), "-o", str(tmp_path / "out.jsonl"), timeout=60)
        assert result.returncode == 2
        err = result.stderr.decode("utf-8")
        assert err.count("\n") == 1 and err.startswith("kdissect: error: ") and _printable(err), err
        assert "\\x1b]0;owned\\a\\n\\u202etxt.pcap" in err


def test_the_report_page_holds_no_raw_control(tmp_path: Path) -> None:
    import html

    page = tmp_path / "report.html"
    result = run("report", "-q", str(CAPTURE), "-o", str(page), timeout=300)
    assert result.returncode == 0, result.stderr
    text = page.read_text(encoding="utf-8")
    assert [ch for ch in text if ch not in "\n\t" and not ch.isprintable()] == []
    for raw in _strings("client_id"):
        assert html.escape(shown(raw), quote=True) in text, shown(raw)  # a table cell shows the escaped id


def test_show_v_escapes_a_hostile_topic_in_the_records_line(tmp_path: Path) -> None:
    """produce_acks1_kafka.pcap with its topic name replaced, byte for byte
    (13 bytes: frame and TCP lengths stay right), by a hostile one."""
    topic = b"produce-acks1"
    hostile = b"\x1b[2J\r\n\xe2\x80\xae=x\xff\x07"
    assert len(hostile) == len(topic)
    data = (REPO / "captures" / "produce_acks1_kafka.pcap").read_bytes()
    path = tmp_path / "hostile_topic.pcap"
    path.write_bytes(data.replace(topic, hostile))
    raw = _through_a_terminal("show", "-v", str(path))
    assert b"\x1b" not in raw and b"\x07" not in raw and b"\r" not in raw.replace(b"\r\n", b"")
    text = raw.decode("utf-8").replace("\r\n", "\n")
    assert text.count(f"records {shown(hostile)} partition ") == 10  # as many as with the real name
    assert f"name: '{shown(hostile)}'" in text or f"topic: '{shown(hostile)}'" in text
