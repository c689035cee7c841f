"""kdissect.conn.arrivals: the pieces of the rule for long polls that data ends.

The lab capture test (test_longpoll_data_lab.py) checks the whole rule
against tshark and the clients' manifest; here: the Produce answer reader
against the full decoder on every Produce answer of the lab's captures, the
timestamp rule's tolerance at its edges (the README's numbers), and the
capture-wide step's order and window.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kdissect.conn.arrivals import (BY_APPEND_TIME, BY_CREATE_TIME, CLOCK_SKEW_NS, LONG_POLL_UNKNOWN, PRODUCE_WINDOW_NS,
                               ArrivalResolver, FetchArrival, ProduceArrival, produce_bases, produce_ranges, read_produce_bases,
                               timestamp_arrival)
from kdissect.model.exchange import Exchange
from kdissect.protocol.codec import DecodeError, decode_response
from tests.support.pipeline import ports_of
from tests.support.skim import capture_frames
from tests.support.paths import REPO

CAPTURES = sorted((REPO / "captures").glob("*.pcap"))


def test_the_produce_answer_reader_agrees_with_the_decoder() -> None:
    checked, versions = 0, set()
    for capture in CAPTURES:
        for direction, data, api_key, api_version in capture_frames(capture, ports_of(capture)):
            if direction != "response" or api_key != 0:
                continue
            try:
                body = decode_response(data, api_key, api_version).body
            except DecodeError:
                continue
            assert read_produce_bases(data, api_version) == produce_bases(body), (capture.name, api_version)
            checked += 1
            versions.add(api_version)
    assert checked > 500 and len(versions) >= 6, versions


def test_a_cut_produce_answer_places_nothing() -> None:
    for capture in CAPTURES[:8]:
        for direction, data, api_key, api_version in capture_frames(capture, ports_of(capture)):
            if direction == "response" and api_key == 0:
                assert read_produce_bases(data[:12], api_version) in (None, {})


MS = 1_000_000
START, END = 1_000_000 * MS, 1_000_000 * MS + 1500 * MS  # a fetch held 1.5 s


@pytest.mark.parametrize("kind, how", [(0, BY_CREATE_TIME), (1, BY_APPEND_TIME)])
def test_timestamps_are_read_within_the_skew_tolerance(kind: int, how: str) -> None:
    at = START // MS
    assert CLOCK_SKEW_NS == 100 * MS  # the README's tolerance
    assert timestamp_arrival(START, END, kind, at + 700) == (how, START + 700 * MS)  # during the hold
    assert timestamp_arrival(START, END, kind, at - 100) == (how, START - 100 * MS)  # just before: clamped later
    assert timestamp_arrival(START, END, kind, at - 101) == (how, None)  # there before the request: no wait
    assert timestamp_arrival(START, END, kind, at + 1600) == (how, START + 1600 * MS)  # within 100 ms after
    assert timestamp_arrival(START, END, kind, at + 1601) is None  # after the answer: tells nothing
    assert timestamp_arrival(START, END, None, None) is None  # magic 0: no time


def _fetch(request_ts: int, response_ts: int, label: str = "t", offset: int = 5) -> Exchange:
    ex = Exchange(api_key=1, api_name="Fetch", request_ts=request_ts, response_ts=response_ts,
                  response_first_ts=response_ts, wait_reason=LONG_POLL_UNKNOWN)
    ex.arrival = FetchArrival(((label, 0, offset),), request_ts, response_ts, 0, None, None)
    return ex


def _produce(response_ts: int, first: int, last: int, label: str = "t") -> Exchange:
    ex = Exchange(api_key=0, api_name="Produce", request_ts=response_ts - MS, response_ts=response_ts)
    ex.arrival = ProduceArrival(((label, 0, first, last),))
    return ex


def test_a_produce_answered_after_the_fetch_still_ends_its_wait_and_order_is_kept() -> None:
    fetch = _fetch(START, END)
    late = _produce(END + 2 * MS, 5, 5)  # its answer reached the capture point after the fetch's
    other = Exchange(api_key=3, api_name="Metadata", request_ts=END + MS, response_ts=END + MS)
    resolver = ArrivalResolver()
    out = list(resolver.add(fetch)) + list(resolver.add(other)) + list(resolver.add(late))
    assert out == []  # held: the Produce may still come
    out += list(resolver.finish())
    assert out == [fetch, other, late]
    # clamped to the hold: the whole latency was the wait
    assert fetch.wait_reason == "long_poll" and fetch.wait_ns == END - START and fetch.service_ms is None


def test_a_produce_outside_the_window_or_of_other_offsets_is_not_used() -> None:
    resolver = ArrivalResolver()
    fetch = _fetch(START, END)
    early = _produce(START - PRODUCE_WINDOW_NS - 1, 5, 5)  # answered long before the fetch started
    other = _produce(START + 700 * MS, 6, 9)  # other offsets
    out = [*resolver.add(early), *resolver.add(other), *resolver.add(fetch), *resolver.finish()]
    assert out == [early, other, fetch]
    assert (fetch.wait_reason, fetch.wait_ns, fetch.service_ms) == (LONG_POLL_UNKNOWN, None, None)


def test_the_earliest_qualifying_answer_wins_and_rows_pass_once_the_window_is_over() -> None:
    resolver = ArrivalResolver()
    first, second = _produce(START + 600 * MS, 0, 9), _produce(START + 800 * MS, 5, 5)
    fetch = _fetch(START, END)
    out = [*resolver.add(first), *resolver.add(second), *resolver.add(fetch)]
    after = Exchange(api_key=3, api_name="Metadata", request_ts=END + PRODUCE_WINDOW_NS + MS,
                     response_ts=END + PRODUCE_WINDOW_NS + MS)
    out += list(resolver.add(after))  # the capture's clock passed the window: the fetch goes out
    assert out == [first, second, fetch, after]
    assert fetch.wait_ns == 600 * MS and fetch.service_ms == 900.0


def _eager_answer(spans: tuple, frame: bytes, version: int) -> ProduceArrival | None:
    """What pairing made of a Produce answer before ProduceAnswer: its ranges
    placed at once (None when the frame does not read or places nothing)."""
    bases = read_produce_bases(frame, version)
    return None if bases is None else produce_ranges(spans, bases)


def compare_late_and_at_once() -> None:
    """The comparison below, in this process (on the plain Python modules:
    a compiled pairing calls ProduceAnswer directly, past any patch)."""
    import kdissect.conn.pairing as pairing
    from kdissect.conn.pipeline import Analysis

    def rows() -> dict[str, list[dict]]:
        return {capture.name: [ex.to_row() for ex in Analysis([capture], ports_of(capture), True, False)]
                for capture in CAPTURES}

    late = rows()
    made = []

    def eager(spans: tuple, frame: bytes, version: int) -> ProduceArrival | None:
        made.append(spans)
        return _eager_answer(spans, frame, version)

    kept = pairing.ProduceAnswer
    pairing.ProduceAnswer = eager  # type: ignore[assignment,misc]
    try:
        at_once = rows()
    finally:
        pairing.ProduceAnswer = kept  # type: ignore[misc]
    assert made  # the patch was what ran
    assert late == at_once
    by_produce = sum(1 for name in late for row in late[name] if row["wait_reason"] == "long_poll")
    assert by_produce > 0  # the captures hold waits the rule ends


def test_produce_bases_read_late_give_the_rows_of_bases_read_at_once() -> None:
    """The resolver places a Produce's offsets only when a fetch looks for
    them (ProduceAnswer): every row of every capture is the same as with the
    offsets placed as the answer is paired, the waits the Produce rule ends
    among them. Run on the plain Python modules, in a fresh interpreter
    (tests/package/test_native.py: the compiled build gives the same rows)."""
    import os
    import subprocess
    import sys

    code = "from tests.conn.test_arrivals import compare_late_and_at_once; compare_late_and_at_once()"
    env = dict(os.environ, KDISSECT_PURE_PYTHON="1")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]


def test_the_frame_readers_varint_equals_the_message_reader() -> None:
    """uvarint_at (its one- and two-byte cases inline) against read_uvarint
    on every one-, two- and three-byte encoding, non-minimal ones and ones
    cut short included: the same value and offset, or the same exception."""
    from kdissect.conn.arrivals import uvarint_at
    from kdissect.protocol.primitives import read_uvarint

    def outcome(reader, data: bytes):
        try:
            return reader(b"\x01" + data, 1)
        except Exception as error:  # the exception's type is the outcome
            return type(error)

    encodings = [bytes([a]) for a in range(256)] + [bytes([a, b]) for a in range(128, 256) for b in range(256)]
    encodings += [bytes([a, b, c]) for a in (0x80, 0xFF) for b in (0x80, 0x81, 0xFF) for c in (0, 1, 0x7F, 0x80)]
    for data in encodings:
        assert outcome(uvarint_at, data) == outcome(read_uvarint, data), data.hex()
