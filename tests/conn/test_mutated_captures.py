"""A seeded mutation campaign over real captures (issue #12, section 3).

As Wireshark's fuzz testing corrupts captures with `editcap -E`, each round
here damages a real capture's bytes (bit flips, zeroed runs, a run copied
elsewhere, a cut and a splice) and runs export, records, show -v and stats
on it in-process. Every command must print what it can: exit 0, or 2 with
one `kdissect: error:` line, never an internal error; and the exchange
table's accounting must still add up.

Each round also writes hostile strings (terminal escapes, bidi controls,
NUL, CR/LF, CSV formulas, HTML, bytes that are not UTF-8) over some of the
capture's text (client ids, topics, hosts: runs of name characters), length
for length, so they reach the decoders as Kafka strings: no raw control or
format character may reach the text output or stderr.
"""

from __future__ import annotations

import random
import re
import struct
from pathlib import Path

import pytest

from kdissect.cli import main
from kdissect.conn.pipeline import analyze
from tests.support.pcaps import lab_captures

CAPTURES = lab_captures()
ROUNDS = 6
# Each round runs five commands over the whole damaged file, so the few big
# captures (up to 890 KB, most of this campaign's time) are damaged as their
# first packets up to this many bytes: the same traffic shapes (the floods'
# hundreds of pipelined frames per segment, forensics' many connections)
# with a capture cut at a record boundary, as a rotated file is.
MAX_CAMPAIGN_BYTES = 256 * 1024


def _campaign_bytes(capture: Path) -> bytes:
    """The capture, or its first whole records within MAX_CAMPAIGN_BYTES."""
    data = capture.read_bytes()
    if len(data) <= MAX_CAMPAIGN_BYTES:
        return data
    order = {b"\xd4\xc3\xb2\xa1": "<", b"\x4d\x3c\xb2\xa1": "<",
             b"\xa1\xb2\xc3\xd4": ">", b"\xa1\xb2\x3c\x4d": ">"}[data[:4]]  # classic pcap only
    end = 24
    while end + 16 <= len(data):
        (captured,) = struct.unpack_from(order + "I", data, end + 8)
        if end + 16 + captured > MAX_CAMPAIGN_BYTES:
            break
        end += 16 + captured
    return data[:end]


def _mutate(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    body = range(24, len(out))  # the file header is damaged by another test (one-line errors)
    kind = rng.randrange(5)
    if kind == 0:  # bit flips
        for _ in range(rng.randint(1, 40)):
            out[rng.choice(body)] ^= 1 << rng.randrange(8)
    elif kind == 1:  # a zeroed run
        at = rng.choice(body)
        out[at : at + rng.randint(1, 300)] = bytes(min(300, len(out) - at))
    elif kind == 2:  # a run copied over another place
        a, b = rng.choice(body), rng.choice(body)
        n = rng.randint(1, 400)
        out[b : b + n] = out[a : a + n]
    elif kind == 3:  # cut short
        del out[rng.choice(body):]
    else:  # a piece removed (the rest spliced on)
        a = rng.choice(body)
        del out[a : a + rng.randint(1, 2000)]
    return bytes(out)


HOSTILE_STRINGS = (b"\x1b]0;owned\x07", b"\x1b[2J", b"\x1b]8;;http://x/\x1b\\", b"ok\rforged", b"two\nrows",
                   b"nul\x00", "\u202e".encode(), "\u2066\u200f".encode(), "\u2028\u2029".encode(), b"=1+1",
                   b"@SUM(A1)", b"+cmd", b"-2+3", b"\tlead", b"<!--<script>", b"back\\slash", b"\xff\xfe",
                   b"\xc3(", b"\x7f\x9b", "\x9b31m".encode())
_NAME_RUN = re.compile(rb"[A-Za-z0-9._-]{6,}")


def _plant_hostile_strings(data: bytes, rng: random.Random) -> bytes:
    """Up to 12 runs of name characters after the file header overwritten,
    from their start, by hostile strings (cut to the run's length)."""
    out = bytearray(data)
    runs = list(_NAME_RUN.finditer(data, 24))
    for run in rng.sample(runs, min(len(runs), 12)):
        token = rng.choice(HOSTILE_STRINGS)[: run.end() - run.start()]
        out[run.start() : run.start() + len(token)] = token
    return bytes(out)


def _shows_no_raw_control(text: str) -> bool:
    return all(ch == "\n" or ch.isprintable() for ch in text)


def _run(capsys, argv: list[str]) -> tuple[int, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    if argv[0] in ("show", "stats"):  # text faces
        assert _shows_no_raw_control(out), (argv[0], [c for c in out if c != "\n" and not c.isprintable()][:5])
    assert _shows_no_raw_control(err), (argv[0], err[-500:])
    return code, err


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.name)
def test_damaged_captures_never_crash_a_command(capture: Path, tmp_path: Path, capsys) -> None:
    rng = random.Random(capture.name)
    original = _campaign_bytes(capture)
    for round_number in range(ROUNDS):
        damaged = tmp_path / f"{round_number}.pcap"
        hostile = random.Random(f"{capture.name} hostile {round_number}")
        damaged.write_bytes(_plant_hostile_strings(_mutate(original, rng), hostile))
        for argv in (["export", str(damaged), "-o", str(tmp_path / "out.jsonl")],
                     ["records", str(damaged), "-o", str(tmp_path / "records.jsonl")],
                     ["show", "-v", str(damaged)],
                     ["stats", "--json", str(damaged)]):
            code, err = _run(capsys, argv)
            assert "internal error" not in err, (argv[0], round_number, err[-500:])
            errors = [line for line in err.splitlines() if line.startswith("kdissect: error:")]
            assert code == 0 or (code == 2 and len(errors) == 1), (argv[0], round_number, code, err[-500:])
        try:
            exchanges, accounting = analyze([str(damaged)])
            list(exchanges)
        except Exception as problem:  # only a one-line input error is allowed (a header made unreadable)
            from kdissect.failures import InputError

            assert isinstance(problem, InputError), problem
            continue
        assert accounting.balance() == [], round_number


def test_a_timestamp_outside_the_calendar_prints_as_epoch_seconds(tmp_path: Path, capsys) -> None:
    """One packet of a pcapng (64-bit times) set to the year 36827, as a
    damaged timestamp can be: show -v still prints every line."""
    from tests.support import impair

    trace = impair.load_pcap(CAPTURES[0])
    packets = list(trace.packets)
    first = packets[3]
    packets[3] = impair.Packet(1_100_000_000_000 * 10**9, first.data, first.wire_len, first.linktype)  # year 36827
    path = impair.write_pcapng(impair.Trace(tuple(packets), trace.snaplen), tmp_path / "far.pcapng", tsresol=6)
    code = main(["show", "-v", str(path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "internal error" not in err
    assert "1100000000000." in out and "(time outside the calendar: epoch seconds shown)" in out
