"""The request-log reader's block path (kdissect.conn.brokerlog.parse:
`_block_batches`, `_block_entries`): a plain file read in blocks of complete
lines, each block of log4j's default layout read by a few calls over all its
lines, any other block line by line.

Expected values come from the log's own lines, read here whole by the json
module and datetime (never from the reader), on the lines of a real Apache
Kafka 4.4.0 run (captures/brokerlog/plain_quota); the gzip path, which reads
line by line, must give the same entries.
"""

from __future__ import annotations

import gzip
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from kdissect.conn.brokerlog import parse
from kdissect.conn.brokerlog.parse import LogReadStats, read_batches
from tests.support.paths import REPO

RUN = REPO / "captures" / "brokerlog" / "plain_quota"
MARKER = "Completed request:"


def real_lines() -> list[str]:
    """The run's request-log lines, oldest file first."""
    return [line for name in ("request.log.2", "request.log.1", "request.log")
            for line in (RUN / name).read_text().splitlines()]


def expected_of(line: str) -> tuple[int, str, int, float]:
    """(ns, connection, correlation id, totalTimeMs) of a line, by the json module and datetime."""
    stamp = line[1:line.index("]")]
    when = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=timezone.utc)
    body = json.loads(line.split(MARKER, 1)[1].rsplit(" (kafka.request.logger)", 1)[0])
    return (round(when.timestamp() * 1000) * 1_000_000, body["connection"], body["requestHeader"]["correlationId"],
            float(body["totalTimeMs"]))


def read(path: Path) -> tuple[list[tuple], dict[str, int]]:
    stats = LogReadStats()
    entries = [(e.ts, e.connection, e.correlation_id, e.total_ms) for batch in read_batches([str(path)], stats)
               for e in batch]
    return entries, stats.to_dict()


def test_blocks_of_the_default_layout_read_every_line(tmp_path: Path) -> None:
    lines = real_lines()
    log = tmp_path / "request.log"
    log.write_text("\n".join(lines) + "\n")
    entries, stats = read(log)
    assert entries == [expected_of(line) for line in lines]
    assert stats["lines"] == stats["request_lines"] == len(lines) and stats["bad_lines"] == 0
    assert stats["bytes"] == log.stat().st_size


def test_a_refused_line_in_a_block_costs_that_line_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A damaged body (msgspec refuses the JSON, the general path finds no
    readable tail either), a line of another logger and a request line in
    another layout (an ISO "T" in its time), in the middle of blocks: every
    line but the damaged one is read, in order; it and the other logger's
    line are counted."""
    monkeypatch.setattr(parse, "_BLOCK_BYTES", 8192)  # several blocks, the odd lines in some of them
    lines = real_lines()
    damaged = lines[40].replace('"connection":', '"connection:', 1)[:-60]  # no tail, no closing braces
    odd = lines[41][:11] + "T" + lines[41][12:]
    other = "[2026-11-26 07:19:17,100] INFO [SocketServer listenerType=BROKER, nodeId=1] Stopped (kafka.network)"
    written = lines[:40] + [damaged, other] + lines[42:80] + [odd] + lines[80:]
    log = tmp_path / "request.log"
    log.write_text("\n".join(written) + "\n")
    entries, stats = read(log)
    kept = lines[:40] + lines[42:80] + [lines[41]] + lines[80:]
    assert entries == [expected_of(line) for line in kept]
    assert stats["request_lines"] == len(kept) and stats["bad_lines"] == 1 and stats["other_lines"] == 1
    assert stats["cut_lines"] == 0 and stats["lines"] == len(written)


@pytest.mark.parametrize("block", [97, 700, 4096, 1 << 16])
def test_block_boundaries_mid_line_and_a_last_line_without_newline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   block: int) -> None:
    """Blocks shorter than a line, cutting lines anywhere: the same entries;
    a complete last line without its newline is read, a cut one counted."""
    monkeypatch.setattr(parse, "_BLOCK_BYTES", block)
    lines = real_lines()
    log = tmp_path / "request.log"
    log.write_text("\n".join(lines))  # (no newline after the last line)
    entries, stats = read(log)
    assert entries == [expected_of(line) for line in lines]
    assert stats["lines"] == stats["request_lines"] == len(lines) and stats["bytes"] == log.stat().st_size
    log.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:len(lines[-1]) // 2])
    entries, stats = read(log)
    assert entries == [expected_of(line) for line in lines[:-1]]
    assert stats["bad_lines"] == stats["cut_lines"] == 1 and stats["lines"] == len(lines)


def test_block_path_and_line_path_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same lines, plain (block path) and gzipped (line by line), with
    a line holding one of the reader's own member names: the same entries
    in every field, the same counts. (The Python block path: the native
    reader's entries against it in tests/conn/test_brokerlog_native.py.)"""
    monkeypatch.setattr(parse, "_native_lines", None)
    lines = real_lines()
    lines[7] = lines[7].replace('"isForwarded":false', '"isForwarded":false,"~kdissect~matched":true', 1)
    text = "\n".join(lines) + "\n"
    plain, zipped = tmp_path / "request.log", tmp_path / "request.log.1.gz"
    plain.write_text(text)
    zipped.write_bytes(gzip.compress(text.encode()))
    import msgspec

    def everything(path: Path) -> tuple[list, dict]:
        stats = LogReadStats()
        entries = [msgspec.structs.astuple(e) for batch in read_batches([str(path)], stats) for e in batch]
        return entries, stats.to_dict()

    from_blocks, from_lines = everything(plain), everything(zipped)
    assert from_blocks[0] == from_lines[0] and len(from_blocks[0]) == len(lines)
    assert not any(e[-1] for e in from_blocks[0])  # matched: False, whatever the line held
    assert from_blocks[1] == {**from_lines[1], "bytes": len(text)}


def test_more_stamps_than_the_memo_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stamps' memo emptied when full: every line keeps its own time
    (the Python path's memo: the native reader keeps the last stamp alone)."""
    monkeypatch.setattr(parse, "_native_lines", None)
    monkeypatch.setattr(parse, "_stamp_times", parse._StampTimes())
    monkeypatch.setattr(parse, "_STAMPS_KEPT", 5)
    lines = real_lines()
    log = tmp_path / "request.log"
    log.write_text("\n".join(lines) + "\n")
    entries, _ = read(log)
    assert entries == [expected_of(line) for line in lines]
    assert 0 < len(parse._stamp_times) <= 5
