"""Captures that start inside a frame (issue #12, section 2).

Real captures are cut with `editcap -r FILE OUT N-M` so they start at packet
N: just after a request, in the middle of a response that spans several
packets, and at a spread of other places. tshark on the whole capture is the
oracle: every frame kdissect reports in a cut capture must be one tshark
found in the whole capture (a resynchronisation never invents a frame), and
every whole frame tshark finds in the cut capture must be in kdissect's table
(an orphan response that spans packets is not dropped). An orphan's API,
found by trial decoding, must be the one its request named in the whole
capture.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kdissect.conn.pipeline import analyze
from kdissect.protocol.render import to_jsonable
from tests.support.pipeline import ports_of
from tests.support.tshark import kafka_pdus
from tests.support.paths import REPO

CAPTURES = REPO / "captures"
# captures with responses spread over several packets (large fetches)
NAMES = ["large_records", "consume_group", "transactions", "produce_pipelined"]


def _packets(path: Path) -> int:
    out = subprocess.run(["capinfos", "-c", "-M", str(path)], capture_output=True, text=True, check=True).stdout
    return int(out.split()[-1])


def _cut(path: Path, first: int, last: int, out: Path) -> Path:
    subprocess.run(["editcap", "-r", str(path), str(out), f"{first}-{last}"], check=True, capture_output=True)
    return out


def _frames(exchanges, shift: int) -> set[tuple]:
    """(is_request, client, correlation id, size, frame number in the whole capture) of complete frames."""
    found = set()
    for ex in exchanges:
        if ex.request_frame is not None and "request-truncated" not in ex.problem_codes:
            found.add((True, ex.client, ex.correlation_id, ex.request_bytes, ex.request_frame + shift))
        if ex.response_frame is not None and "response-truncated" not in ex.problem_codes:
            found.add((False, ex.client, ex.correlation_id, ex.response_bytes, ex.response_frame + shift))
    return found


def _pdu_keys(pdus, shift: int) -> set[tuple]:
    return {(p.is_request, p.src if p.is_request else p.dst, p.correlation_id, p.length, p.frame + shift)
            for p in pdus}


def _cut_points(pdus, packets: int) -> list[int]:
    """Packets just after a multi-packet response began (the cut lands inside
    it), just after requests, and an even spread."""
    inside = set()
    by_key: dict[tuple, list[int]] = {}
    for p in pdus:
        by_key.setdefault((p.is_request, p.correlation_id, p.src, p.dst), []).append(p.frame)
    for p in pdus:
        if not p.is_request and p.length > 1400:  # more than one loopback-sized segment? take the next packet
            inside.add(p.frame)  # the packet completing it: the cut starts at its last segment
            inside.add(max(2, p.frame - 1))
    spread = set(range(2, packets, max(1, packets // 8)))
    chosen = sorted(inside)
    return sorted(set(chosen[:: max(1, len(chosen) // 12)]) | spread)


@pytest.mark.parametrize("name", NAMES)
def test_a_capture_cut_anywhere_gives_only_real_frames_and_every_whole_one(name: str, tshark: str,
                                                                           tmp_path: Path) -> None:
    path = CAPTURES / f"{name}.pcap"
    ports = ports_of(path)
    whole = kafka_pdus(tshark, path, ports)
    real = _pdu_keys(whole, 0)
    exchanges, _ = analyze([str(path)], ports, keep_messages=True)
    true_exchange = {(ex.client, ex.correlation_id, ex.response_frame): ex for ex in exchanges}
    packets = _packets(path)
    checked_orphans = 0
    for first in _cut_points(whole, packets):
        cut = _cut(path, first, packets, tmp_path / f"from-{first}.pcap")
        shift = first - 1
        got, accounting = analyze([str(cut)], ports, keep_messages=True)
        got = list(got)
        mine = _frames(got, shift)
        assert mine <= real, f"cut at {first}: frames that are not frames: {sorted(mine - real)[:3]}"
        theirs = _pdu_keys(kafka_pdus(tshark, cut, ports), shift) & real
        assert theirs <= mine, f"cut at {first}: whole frames missed: {sorted(theirs - mine)[:3]}"
        assert accounting.balance() == [], f"cut at {first}"
        for ex in got:
            if ex.status == "orphan_response" and ex.api_key is not None:
                truth = true_exchange[(ex.client, ex.correlation_id, ex.response_frame + shift)]
                assert ex.api_key == truth.api_key, f"cut at {first}: {ex.problems}"
                # versions sharing a layout cannot be told apart: the one shown
                # must read the bytes exactly as the true one does
                assert to_jsonable(ex.response.body) == to_jsonable(truth.response.body), f"cut at {first}"
                checked_orphans += 1
        if accounting.mid_stream_starts or accounting.mid_stream_bytes:
            assert accounting.resyncs == 0  # joining mid-way is not a loss of step
    assert checked_orphans > 0
