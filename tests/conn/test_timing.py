"""Where the time went (issue #13): per-exchange timing against tshark and
the rules of kdissect.conn.waits on crafted conversations.

* ttfb, the response's transfer and the request's transfer: tshark's frame
  times of the packets that carried a frame's first and last bytes
  (`tcp.segment` lists a reassembled PDU's packets); ttfb + transfer is the
  latency, exactly.
* the round trip: tshark's `tcp.analysis.initial_rtt` (SYN to the ACK of the
  SYN-ACK) of the connection.
* which side the capture point is near, and waits, on conversations whose
  timing is set by the test (the rule's inputs are known exactly).
"""

from __future__ import annotations

import subprocess
from decimal import Decimal
from pathlib import Path

import pytest

from kdissect.conn.pipeline import analyze
from tests.support.pcaps import epoch_ns, lab_captures
from tests.support.pipeline import Conversation, dissect, heartbeat_request, heartbeat_response, ports_of, sized

CAPTURES = lab_captures()


def _tshark(path: Path, port: int, *fields: str, display: str = "") -> list[list[str]]:
    command = ["tshark", "-n", "-r", str(path), "-d", f"tcp.port=={port},kafka", "-T", "fields",
               "-E", "occurrence=a", "-E", "aggregator=,"]
    if display:
        command += ["-Y", display]
    for name in fields:
        command += ["-e", name]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return [line.split("\t") for line in out.splitlines()]


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.name)
def test_first_bytes_transfers_and_round_trips_equal_tsharks(capture: Path) -> None:
    port = ports_of(capture)[0]
    # one tshark run gives every field; "kafka" in frame.protocols is the
    # display filter "kafka" (the frames where tshark decoded a Kafka PDU)
    times: dict[int, int] = {}
    first_segment: dict[int, int] = {}  # frame completing a PDU -> frame with its first byte
    rtt: dict[int, Decimal] = {}
    tcp_stream: dict[int, int] = {}
    for number, epoch, protocols, segments, stream, initial in _tshark(
            capture, port, "frame.number", "frame.time_epoch", "frame.protocols", "tcp.segment", "tcp.stream",
            "tcp.analysis.initial_rtt"):
        frame = int(number)
        times[frame] = epoch_ns(epoch)
        if segments and "kafka" in protocols.split(":"):
            first_segment[frame] = min(int(s) for s in segments.split(","))
        if stream:
            tcp_stream[frame] = int(stream)
            if initial:
                rtt.setdefault(int(stream), Decimal(initial.split(",")[0]))
    exchanges = list(analyze([str(capture)], (port,))[0])
    # tshark lists the segments of the first PDU a frame completes; a later PDU
    # of the same frame (a frame holding several) starts in that frame
    first_in_frame: dict[tuple[int, int], int] = {}
    for ex in exchanges:
        for frame, offset, side in ((ex.request_frame, ex.request_offset, 0), (ex.response_frame, ex.response_offset, 1)):
            if frame is not None and offset is not None:
                first_in_frame[(side, frame)] = min(offset, first_in_frame.get((side, frame), offset))

    def start(side: int, frame: int, offset: int | None) -> int:
        if offset is not None and first_in_frame[(side, frame)] != offset:
            return times[frame]
        return times[first_segment.get(frame, frame)]

    checked = 0
    for ex in exchanges:
        if ex.latency_ms is None:
            continue
        response_start = start(1, ex.response_frame, ex.response_offset)
        assert ex.ttfb_ms == (response_start - ex.request_ts) / 1_000_000
        assert Decimal(repr(ex.ttfb_ms)) + Decimal(repr(ex.response_transfer_ms)) == Decimal(repr(ex.latency_ms))
        request_start = start(0, ex.request_frame, ex.request_offset)
        assert ex.request_transfer_ms == (ex.request_ts - request_start) / 1_000_000
        stream = tcp_stream[ex.request_frame]
        if stream in rtt:
            assert Decimal(repr(ex.rtt_ms)) == rtt[stream] * 1000
        checked += 1
    assert checked > 5


def _timed(conv: Conversation, steps: list[tuple[str, bytes | int, float]]) -> list:
    """Segments of the conversation: (who, payload or flags, seconds after the previous)."""
    for who, what, after in steps:
        if who == "client":
            conv.send(what, advance=after)  # type: ignore[arg-type]
        else:
            conv.reply(what, advance=after)  # type: ignore[arg-type]
    return conv.segments


def _handshake(conv: Conversation, syn_to_syn_ack: float, syn_ack_to_ack: float) -> Conversation:
    from kdissect.model.packet import ACK, SYN

    conv._segment(True, SYN, advance=0.001)
    conv._segment(False, SYN | ACK, advance=syn_to_syn_ack)
    conv._segment(True, ACK, advance=syn_ack_to_ack)
    return conv


@pytest.mark.parametrize("near, syn_to_syn_ack, syn_ack_to_ack", [
    ("client", 0.020, 0.0001), ("broker", 0.0001, 0.020), ("unknown", 0.010, 0.008)])
def test_the_side_the_capture_point_is_near(near: str, syn_to_syn_ack: float, syn_ack_to_ack: float) -> None:
    conv = _handshake(Conversation(), syn_to_syn_ack, syn_ack_to_ack)
    _timed(conv, [("client", heartbeat_request(1), 0.001), ("broker", heartbeat_response(1), 0.030)])
    (ex,), _ = dissect(conv.segments)
    assert ex.capture_side == near
    assert ex.rtt_ms == pytest.approx((syn_to_syn_ack + syn_ack_to_ack) * 1000, abs=1e-9)
    if near == "client":  # the broker's time: ttfb without the round trip
        assert ex.broker_ms == pytest.approx(30.0 - ex.rtt_ms, abs=1e-9)
    elif near == "broker":
        assert ex.broker_ms == ex.ttfb_ms == 30.0
    else:
        assert ex.broker_ms is None


def _fetch_v4(cid: int, max_wait_ms: int, min_bytes: int) -> bytes:
    """A Fetch v4 request for one partition (struct-built, as the spec lays it out)."""
    import struct

    body = struct.pack(">iiiib", -1, max_wait_ms, min_bytes, 1 << 20, 0)  # replica, wait, min, max bytes, isolation
    body += struct.pack(">i", 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", 1)
    body += struct.pack(">iqi", 0, 0, 1 << 20)  # partition, fetch offset, partition max bytes
    client = b"c"
    return sized(struct.pack(">hhih", 1, 4, cid, len(client)) + client + body)


def _fetch_v4_empty_response(cid: int, throttle_ms: int = 0) -> bytes:
    import struct

    body = struct.pack(">i", throttle_ms) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", 1)
    body += struct.pack(">ihqqi", 0, 0, 10, 10, 0)  # partition, error, high watermark, last stable, no aborted
    body += struct.pack(">i", 0)  # records: 0 bytes
    return sized(struct.pack(">i", cid) + body)


@pytest.mark.parametrize("waited, expected", [(0.500, "long_poll"), (0.420, None), (0.005, None)])
def test_an_empty_fetch_is_a_long_poll_only_when_it_waited_out_max_wait(waited: float, expected: str | None) -> None:
    conv = Conversation().handshake()
    _timed(conv, [("client", _fetch_v4(1, 500, 1), 0.001), ("broker", _fetch_v4_empty_response(1), waited)])
    (ex,), _ = dissect(conv.segments)
    assert ex.api_name == "Fetch" and ex.records in (0, None)
    assert ex.wait_reason == expected
    if expected:
        assert ex.wait_ms == ex.latency_ms and ex.service_ms is None
    else:
        assert ex.wait_ms is None and ex.service_ms == ex.latency_ms


def test_a_throttled_old_version_waits_and_a_new_one_mutes() -> None:
    # Fetch v4 is before KIP-219's cut-over (v8): the broker held the response 300 ms
    conv = Conversation().handshake()
    _timed(conv, [("client", _fetch_v4(1, 0, 0), 0.001), ("broker", _fetch_v4_empty_response(1, 300), 0.302)])
    (ex,), _ = dissect(conv.segments)
    assert (ex.wait_reason, ex.wait_ms) == ("throttle", 300.0)
    assert ex.service_ms == pytest.approx(2.0)
    # Heartbeat v2 is after its cut-over (v2): answered at once, the connection
    # muted for the throttle time; a request sent during the mute waits for it
    from tests.support.pipeline import kstring

    def heartbeat_v2(cid: int) -> bytes:
        import struct

        body = kstring("group") + struct.pack(">i", 1) + kstring("member")
        return sized(struct.pack(">hhi", 12, 2, cid) + kstring("c") + body)

    def heartbeat_v2_response(cid: int, throttle: int) -> bytes:
        import struct

        return sized(struct.pack(">iih", cid, throttle, 0))

    conv = Conversation().handshake()
    _timed(conv, [("client", heartbeat_v2(1), 0.001), ("broker", heartbeat_v2_response(1, 200), 0.001),
                  ("client", heartbeat_v2(2), 0.050), ("broker", heartbeat_v2_response(2, 0), 0.150),
                  ("client", heartbeat_v2(3), 0.100), ("broker", heartbeat_v2_response(3, 0), 0.001)])
    exchanges, accounting = dissect(conv.segments)
    first, second, third = sorted(exchanges, key=lambda e: e.correlation_id)
    assert first.wait_reason is None and first.throttle_time_ms == 200
    assert "sent-while-muted" in second.problem_codes and accounting.sent_while_muted == 1
    assert second.wait_reason == "throttle" and second.wait_ms == pytest.approx(150.0)
    assert "sent-while-muted" not in third.problem_codes and third.wait_reason is None
