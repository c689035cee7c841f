"""Pairing when a capture shows one direction of a connection ahead of the
other: real captures with a few packets moved by hand (timestamps travel
with their packets, as when a capture is written out of order). tshark's
dissection of the clean capture says which packets carry which frames; the
expected table is the clean capture's.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

import pytest

from tests.support import impair
from tests.support.pipeline import CAPTURES, content_untimed, run

_FIELDS = ("frame.number", "frame.time_epoch", "tcp.stream", "tcp.srcport", "tcp.len", "kafka.api_key",
           "kafka.api_version", "kafka.request_frame")


def _kafka_packets(path: Path) -> list[dict]:
    """tshark's view of the payload packets: frame, time (s), stream, source
    port, payload length, and the Kafka fields it read in them ('' if none)."""
    cmd = ["tshark", "-n", "-r", str(path), "-Y", "tcp.len > 0", "-T", "fields", "-E", "occurrence=f"]
    for name in _FIELDS:
        cmd += ["-e", name]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        frame, ts, stream, sport, length, api_key, api_version, request_frame = line.split("\t")
        rows.append({"frame": int(frame), "ts": float(ts), "stream": int(stream), "sport": int(sport),
                     "len": int(length), "api_key": api_key, "api_version": api_version,
                     "request_frame": request_frame})
    return rows


def _move(trace: impair.Trace, frame: int, after: int) -> impair.Trace:
    """The trace with packet `frame` shown right after packet `after` (1-based, as tshark numbers them)."""
    order = [i for i in range(len(trace.packets)) if i != frame - 1]
    order.insert(order.index(after - 1) + 1, frame - 1)
    return impair.Trace(tuple(trace.packets[i] for i in order), trace.snaplen)


def _same_table(clean: Path, messy: impair.Trace, tmp_path: Path):
    ports = (9092,)
    expected, clean_accounting = run([clean], ports)
    got, accounting = run([impair.write_pcap(messy, tmp_path / "moved.pcap")], ports)
    assert Counter(map(content_untimed, got)) == Counter(map(content_untimed, expected))
    assert accounting.gap_bytes == 0
    return clean_accounting, accounting


def _sasl_v0_handshake(rows: list[dict]) -> tuple[dict, dict, dict, dict]:
    """The first SaslHandshake v0 followed by raw tokens: its request, its
    response, the client's first token and the broker's first token."""
    for request in rows:
        if request["api_key"] != "17" or request["api_version"] != "0" or request["sport"] == 9092:
            continue
        stream = [r for r in rows if r["stream"] == request["stream"] and r["frame"] > request["frame"]]
        response = next(r for r in stream if r["request_frame"] == str(request["frame"]))
        after = [r for r in stream if r["frame"] > response["frame"]]
        client = next((r for r in after if r["sport"] != 9092), None)
        broker = next((r for r in after if r["sport"] == 9092), None)
        if client is not None and broker is not None and client["api_key"] != "17":
            return request, response, client, broker
    raise AssertionError("no SaslHandshake v0 with raw tokens in the capture")


@pytest.fixture(scope="module")
def sasl() -> tuple[Path, impair.Trace, list[dict]]:
    path = CAPTURES / "sasl.pcap"
    return path, impair.load_pcap(path), _kafka_packets(path)


def test_client_token_shown_before_the_handshake_response(sasl, tmp_path: Path) -> None:
    """The client sent its first raw SASL token after the SaslHandshake v0
    response; the capture shows the token first. It is a raw token, not a
    malformed request."""
    path, trace, rows = sasl
    _request, response, client_token, _ = _sasl_v0_handshake(rows)
    clean, moved = _same_table(path, _move(trace, response["frame"], after=client_token["frame"]), tmp_path)
    assert moved.raw_sasl_frames == clean.raw_sasl_frames > 0
    assert moved.malformed_frames == clean.malformed_frames


def test_broker_token_shown_before_the_handshake_request(sasl, tmp_path: Path) -> None:
    """The capture shows the SaslHandshake v0 request after the broker's
    response and its first raw token: the response waits for its request, and
    the token held with it is a raw token once the handshake is known to have
    succeeded, not an orphan response."""
    path, trace, rows = sasl
    request, _response, _client, broker_token = _sasl_v0_handshake(rows)
    clean, moved = _same_table(path, _move(trace, request["frame"], after=broker_token["frame"]), tmp_path)
    assert moved.raw_sasl_frames == clean.raw_sasl_frames > 0
    assert moved.orphan_responses == clean.orphan_responses


def test_response_completed_by_an_older_packet_still_meets_its_request(tmp_path: Path) -> None:
    """A response packet shown before the previous response (which it then
    waits behind) is delivered with that packet's time; its request, sent more
    than the early-response window later than that time, still pairs with it."""
    path = CAPTURES / "quota_kafka.pcap"
    rows = [r for r in _kafka_packets(path) if r["api_key"]]
    for first, request, second in zip(rows, rows[1:], rows[2:]):
        if (first["stream"] == request["stream"] == second["stream"] and first["request_frame"]
                and second["request_frame"] == str(request["frame"]) and request["ts"] - first["ts"] > 1.5):
            break
    else:
        raise AssertionError("no response followed by a request more than 1.5 s later")
    trace = impair.load_pcap(path)
    before_first = max(r["frame"] for r in _kafka_packets(path) if r["frame"] < first["frame"])
    _same_table(path, _move(trace, second["frame"], after=before_first), tmp_path)
