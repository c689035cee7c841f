"""Exchange rows are the same whether pairing skims frames (keep_messages=False:
export, stats, Spark) or decodes them fully (keep_messages=True: show -v,
notebooks): every column, every problem text, and the accounting."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from kdissect import DecodeError, decode_request, decode_response
from kdissect.model.exchange import MALFORMED
from kdissect.conn.pipeline import Dissector, analyze
from tests.support import impair
from tests.support.pipeline import Conversation, ports_of, sized
from tests.support.skim import capture_frames
from tests.support.paths import REPO

CAPTURES = sorted((REPO / "captures").glob("*.pcap"))
SASL_HANDSHAKE = 17


def _rows_and_accounting(paths: list[str], ports: tuple[int, ...], keep: bool) -> tuple[list[dict], dict]:
    exchanges, accounting = analyze(paths, ports, keep_messages=keep)
    rows = [ex.to_row() for ex in exchanges]
    return rows, accounting.to_dict()


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.stem)
def test_lab_capture_rows_identical_either_way(capture: Path) -> None:
    skimmed = _rows_and_accounting([str(capture)], ports_of(capture), keep=False)
    full = _rows_and_accounting([str(capture)], ports_of(capture), keep=True)
    assert skimmed[0] and skimmed == full


def test_impaired_capture_rows_identical_either_way(tmp_path: Path) -> None:
    capture = next(p for p in CAPTURES if p.stem == "produce_pipelined")
    trace = impair.load_pcap(capture)
    dropped, _lost = impair.drop_random(trace, seed=5, count=12)
    variants = [impair.write_pcap(dropped, tmp_path / "dropped.pcap"),
                impair.write_pcap(impair.with_snaplen(trace, 300), tmp_path / "snap.pcap")]
    for path in variants:
        skimmed = _rows_and_accounting([str(path)], ports_of(capture), keep=False)
        full = _rows_and_accounting([str(path)], ports_of(capture), keep=True)
        assert skimmed == full


def _pairs() -> list[tuple[bytes, bytes, int, int]]:
    """(request, response, api_key, api_version) of the lab captures, paired by correlation id."""
    pairs = []
    for capture in CAPTURES:
        waiting: dict[bytes, bytes] = {}
        for direction, data, api_key, api_version in capture_frames(capture, ports_of(capture)):
            if direction == "request":
                waiting[data[4:8]] = data
            elif data[:4] in waiting and api_key != SASL_HANDSHAKE:
                pairs.append((waiting.pop(data[:4]), data, api_key, api_version))
    return pairs


def _damage(rng: random.Random, frame: bytes, keep: int) -> bytes:
    """The frame with its first `keep` bytes (api key, version, correlation id)
    intact: cut, one byte changed, or one byte appended (which brokers accept
    and kdissect notes as a trailing byte)."""
    data = bytearray(frame)
    action = rng.randrange(4)
    if action == 0 and len(data) > keep:
        del data[rng.randrange(keep, len(data)):]
    elif action == 1 and len(data) > keep:
        pos = rng.randrange(keep, len(data))
        data[pos] = rng.randrange(256)
    elif action == 2:
        data += b"\x00"
    return bytes(data)


def _left_over(error: DecodeError) -> bool:
    """Bytes after a whole top-level body (the pipeline keeps such a message
    and notes the bytes as trailing; brokers accept them)."""
    return "left over after the last field" in str(error) and not error.path


def _expected_problem(side: str, error: DecodeError) -> str:
    where = [f"offset {error.offset}"] + ([f"at {error.path}"] if error.path else [])
    return f"{side} malformed: {error} ({', '.join(where)})"


def test_damaged_frames_give_the_full_decoders_problems() -> None:
    rng = random.Random(77)
    pairs = _pairs()
    assert len(pairs) > 400
    conversation = Conversation().handshake()
    expected: dict[tuple[bytes, str], str] = {}  # (correlation id, side) -> problem text
    trailing: dict[tuple[bytes, str], str] = {}  # frames with one byte appended to a whole body
    for request, response, api_key, api_version in pairs:
        original_request, original_response = request, response
        request = _damage(rng, request, 8) if rng.random() < 0.3 else request
        response = _damage(rng, response, 4) if rng.random() < 0.3 else response
        if request == original_request + b"\x00":
            trailing[(request[4:8], "request")] = "request: 1 trailing bytes ignored"
            request_ok = True
        else:
            try:
                decode_request(request)
                request_ok = True
            except DecodeError as error:
                if _left_over(error):  # a changed length ended the body early: the rest is trailing bytes
                    trailing[(request[4:8], "request")] = f"request: {len(request) - error.offset} trailing bytes ignored"
                    request_ok = True
                else:
                    expected[(request[4:8], "request")] = _expected_problem("request", error)
                    request_ok = False
        if request_ok:
            if response == original_response + b"\x00":
                trailing[(response[:4], "response")] = "response: 1 trailing bytes ignored"
            else:
                try:
                    decode_response(response, api_key, api_version)
                except DecodeError as error:
                    if _left_over(error):
                        trailing[(response[:4], "response")] = \
                            f"response: {len(response) - error.offset} trailing bytes ignored"
                    else:
                        expected[(response[:4], "response")] = _expected_problem("response", error)
        conversation.send(sized(request))
        conversation.reply(sized(response))
    conversation.close()
    outcomes = {}
    for keep in (False, True):
        dissector = Dissector((9092,), True, ["damaged.pcap"], keep_messages=keep)
        exchanges = []
        for segment in conversation.segments:
            exchanges += dissector.feed(segment)
        exchanges += dissector.finish()
        outcomes[keep] = ([ex.to_row() for ex in exchanges], dissector.accounting.to_dict())
    assert outcomes[False] == outcomes[True]
    rows, accounting = outcomes[False]
    malformed = [row for row in rows if row["status"] == MALFORMED]
    assert len(expected) + len(trailing) > 50
    assert accounting["malformed_frames"] >= len(malformed) >= len(expected) > 30
    found = {problem for row in malformed for problem in row["problems"]}
    missing = [text for text in expected.values() if text not in found]
    assert not missing, missing[:3]
    noted = {problem for row in rows for problem in row["problems"]}
    assert len(trailing) > 10 and set(trailing.values()) <= noted
