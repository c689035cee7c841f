"""The run's accounting adds up and names what happened (issue #12, sections 3 and 4).

* Every TCP payload byte of a capture is in exactly one bucket, and the
  buckets sum to what tshark counts (`tcp.len` over every TCP packet), on
  the lab captures and on impaired variants of them (loss, reordering,
  duplicates, snaplen cuts, a mid-stream start, a capture that ends inside
  a transfer).
* A request still waiting when the capture ends says so; connections that
  carry no payload are not Kafka connections and take no stream number.
* Times are exact: latencies computed from integer nanoseconds equal
  tshark's frame times subtracted as exact decimals, on microsecond and
  nanosecond captures.
"""

from __future__ import annotations

import subprocess
from decimal import Decimal
from pathlib import Path

import pytest

from tests.support import impair
from kdissect.model.packet import ACK, RST, SYN
from kdissect.conn.pipeline import analyze
from tests.support.pcaps import lab_captures
from tests.support.pipeline import Conversation, dissect, heartbeat_request, heartbeat_response, ports_of

CAPTURES = lab_captures()


def _variants(trace: impair.Trace) -> dict[str, impair.Trace]:
    n = len(trace.packets)
    return {
        "lossy": impair.drop_random(trace, seed=3, count=max(1, n // 12))[0],
        "messy": impair.duplicate(impair.reorder(trace, seed=5), seed=5),
        "snap": impair.with_snaplen(trace, 80),
        "late": impair.cut_head(trace, n // 3),
        "early-end": impair.Trace(trace.packets[: n // 2], trace.snaplen),
    }


def _tshark_payloads(traces: list[impair.Trace], directory: Path) -> list[int]:
    """tshark's `tcp.len` summed over each trace's TCP packets. The traces'
    packets go into one file, one after another, so tshark starts once for
    all of them; `tcp.len` is a packet's own (IP length less headers), so a
    packet's neighbours do not change it."""
    merged = impair.Trace(tuple(p for t in traces for p in t.packets), max(t.snaplen for t in traces))
    path = impair.write_pcap(merged, directory / "all-variants.pcap")
    out = subprocess.run(["tshark", "-n", "-r", str(path), "-T", "fields", "-e", "tcp.len"],
                         capture_output=True, text=True, check=True).stdout
    per_packet = [sum(int(v) for v in line.split(",") if v) for line in out.splitlines()]
    assert len(per_packet) == len(merged.packets)
    sums, start = [], 0
    for t in traces:
        sums.append(sum(per_packet[start : start + len(t.packets)]))
        start += len(t.packets)
    return sums


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.name)
def test_every_payload_byte_is_in_one_bucket(capture: Path, tmp_path: Path) -> None:
    clean = impair.load_pcap(capture)
    variants = _variants(clean)
    paths = [capture] + [impair.write_pcap(t, tmp_path / f"{name}.pcap") for name, t in variants.items()]
    expected = _tshark_payloads([clean, *variants.values()], tmp_path)
    for path, payload_bytes in zip(paths, expected):
        exchanges, accounting = analyze([str(path)], ports_of(capture))
        rows = list(exchanges)
        assert accounting.balance() == [], path.name
        assert accounting.payload_bytes == payload_bytes, path.name
        assert accounting.exchanges == len(rows)


def test_a_capture_that_ends_mid_transfer_says_where_the_bytes_went(tmp_path: Path) -> None:
    """The client has sent more than the capture shows (the broker acknowledged
    it): those bytes are "never captured, acknowledged at the end", not silence."""
    conv = Conversation().handshake()
    conv.send(heartbeat_request(1))
    conv.lose(True, 5000)  # sent, acknowledged below, never captured
    conv.reply(heartbeat_response(1))  # its ACK covers the lost bytes
    exchanges, acc = dissect(conv.segments)
    assert acc.tail_gap_bytes == acc.gap_bytes == 5000
    assert any("5000 bytes never captured (5000 acknowledged" in line for line in acc.summary_lines())
    assert acc.balance() == []


def test_waiting_at_the_end_of_the_capture_is_not_a_connection_close() -> None:
    conv = Conversation().handshake()
    conv.send(heartbeat_request(1))
    conv.reply(heartbeat_response(1))
    conv.send(heartbeat_request(2))  # the capture stops here
    exchanges, _ = dissect(conv.segments)
    waiting = [ex for ex in exchanges if ex.correlation_id == 2]
    assert [ex.problems for ex in waiting] == [["no response before end of capture"]]

    closed = Conversation().handshake()
    closed.send(heartbeat_request(2))
    closed.close()
    exchanges, _ = dissect(closed.segments)
    assert exchanges[0].problems == ["no response before connection close"]


def test_connections_without_payload_are_not_kafka_and_take_no_stream_number() -> None:
    scan = Conversation(client=("10.0.0.7", 50000))
    scan._segment(True, SYN)
    scan._segment(False, RST | ACK)
    talk = Conversation(client=("10.0.0.8", 50001)).handshake()
    talk.send(heartbeat_request(1))
    talk.reply(heartbeat_response(1))
    talk.close()
    exchanges, acc = dissect(scan.segments + talk.segments)
    assert [(ex.client, ex.stream) for ex in exchanges] == [("10.0.0.8:50001", 0)]
    assert (acc.connections, acc.kafka_connections, acc.empty_connections) == (2, 1, 1)
    assert acc.balance() == []


def _tshark_times(path: Path) -> dict[int, Decimal]:
    out = subprocess.run(["tshark", "-n", "-r", str(path), "-T", "fields", "-e", "frame.number",
                          "-e", "frame.time_epoch"], capture_output=True, text=True, check=True).stdout
    return {int(n): Decimal(t) for n, t in (line.split("\t") for line in out.splitlines())}


@pytest.mark.parametrize("nanosecond", [False, True], ids=["us", "ns"])
def test_latency_is_exact_to_the_capture_resolution(nanosecond: bool, tmp_path: Path) -> None:
    capture = CAPTURES[0]
    trace = impair.load_pcap(capture)
    if nanosecond:  # sub-microsecond digits, as a nanosecond capture has them
        packets = tuple(impair.Packet(p.ts_ns + 7 * i % 1000, p.data, p.wire_len, p.linktype)
                        for i, p in enumerate(trace.packets))
        trace = impair.Trace(packets, trace.snaplen)
    path = impair.write_pcap(trace, tmp_path / "t.pcap", nanosecond=nanosecond)
    times = _tshark_times(path)
    exchanges, _ = analyze([str(path)], ports_of(capture))
    checked = 0
    for ex in exchanges:
        if ex.latency_ms is None:
            continue
        exact = (times[ex.response_frame] - times[ex.request_frame]) * 1000
        assert Decimal(repr(ex.latency_ms)) == exact, (ex.latency_ms, exact)
        checked += 1
    assert checked > 5
