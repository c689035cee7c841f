"""Helpers for tests/conn/test_pipeline_fast_paths.py: impaired variants of the lab captures
and flat views of segments, events, frames and exchanges, so a fast path and
the general path it short-cuts can be compared value by value."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Callable

from kdissect.model.exchange import Exchange
from tests.support import impair


def copies_past_the_run_wide_timer(packets: int) -> int:
    """Copies of a capture of `packets` packets for the "repeated-long" variant."""
    return max(2, -(-1024 // max(1, packets)) + 2)


REPEATED_COPIES = 3

# name -> how to derive the variant from a clean trace (and the file suffix)
VARIANTS: dict[str, tuple[Callable[[impair.Trace], impair.Trace], str]] = {
    "clean": (lambda t: t, ".pcap"),
    "messy": (lambda t: impair.duplicate(impair.reorder(t, seed=7), seed=7), ".pcap"),
    "reordered-wide": (lambda t: impair.reorder(t, seed=3, window=8, rate=0.5), ".pcap"),
    "lossy": (lambda t: impair.drop_random(t, seed=5, count=max(1, len(t.packets) // 15))[0], ".pcap"),
    "late": (lambda t: impair.cut_head(t, len(t.packets) // 3), ".pcap"),
    "snaplen96": (lambda t: impair.with_snaplen(t, 96), ".pcap"),
    "snaplen60": (lambda t: impair.with_snaplen(t, 60), ".pcap"),
    "repeated": (lambda t: impair.repeat(t, REPEATED_COPIES), ".pcap"),
    # long enough for the reassembler's run-wide timers (1024 segments after
    # a connection falls silent) to fire, in captures whose clients reset
    # connections: at least 1024 + 2 copies' worth of segments, so every
    # connection of the first copy (and those of the second that go silent
    # early) is settled by a timer before the end
    "repeated-long": (lambda t: impair.repeat(t, copies_past_the_run_wide_timer(len(t.packets))), ".pcap"),
    "zero-ip-length": (impair.zero_ip_lengths, ".pcap"),
    "vlan": (impair.with_vlan, ".pcap"),
    "sll2": (lambda t: impair.relink(t, "sll2"), ".pcap"),
}


def write_variant(trace: impair.Trace, name: str, directory: Path) -> Path:
    make, suffix = VARIANTS[name]
    return impair.write_pcap(make(trace), directory / f"{name}{suffix}")


def segment_values(segment: Any) -> tuple:
    """Every field of a TcpSegment, payload as bytes."""
    return (segment.capture_index, segment.frame_number, segment.ts, segment.src, segment.sport,
            segment.dst, segment.dport, segment.seq, segment.ack, segment.flags, bytes(segment.payload),
            segment.payload_len, segment.order_ts)


def event_values(event: Any) -> tuple:
    """A recorded reassembly event (tests.support.recording) with its
    connection named by id (two reassemblers fed the same segments make
    different but equivalent connection objects)."""
    kind = type(event).__name__
    if kind == "Delivered":
        c = event.call
        return (kind, event.conn.id, event.direction, c.kind, c.offset, c.length, bytes(c.data), c.ts,
                c.capture_index, c.frame_number)
    if kind == "Closed":
        return (kind, event.conn.id, event.reason)
    return (kind, event.conn.id, event.conn.initiator, event.conn.responder)


def frame_values(frame: Any) -> tuple:
    return (frame.direction, frame.offset, frame.size, bytes(frame.data), frame.complete, frame.ts,
            frame.capture_index, frame.frame_number, frame.missing)


def exchange_values(exchange: Exchange) -> tuple:
    """The table row plus what the row does not show (offsets, stream key)."""
    return (tuple(exchange.to_row().items()), exchange.request_offset, exchange.response_offset,
            exchange.request_capture_index, exchange.response_capture_index, exchange.stream_key,
            exchange.expects_response)


def split_randomly(data: bytes, rng: random.Random) -> list[bytes]:
    """`data` in pieces of random sizes (some of 1-3 bytes: a size field cut in two)."""
    pieces = []
    at = 0
    while at < len(data):
        step = rng.choice((1, 2, 3, 5, 17, 200, 1500, 70000))
        pieces.append(data[at : at + step])
        at += step
    return pieces
