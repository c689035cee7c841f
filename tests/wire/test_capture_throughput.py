"""Throughput of capture reading and reassembly (a measurement, not a timed
assertion: the machine is shared).

It records a chatty loopback exchange (small framed requests and replies),
repeats it into a larger capture with the impairment tool, and times kdissect's
reader, reader + reassembler, and tshark printing per-frame TCP fields, on the
same file. The test runs a small repeat (what it asserts is that every segment
is read and reassembled without a gap); for figures worth quoting, run the
full-size measurement alone (1,500 exchanges repeated 40 times):

    python3 -m tests.wire.test_capture_throughput
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from kdissect.wire.capture import ReadStats, read_segments
from kdissect.wire.reassembly import Reassembler
from tests.support import impair
from tests.support.pcaps import record_loopback
from tests.support.recording import RecordingListener


def measure(path: Path) -> dict[str, float]:
    t0 = time.perf_counter()
    stats = ReadStats()
    segments = sum(1 for _ in read_segments([path], stats))
    t1 = time.perf_counter()
    listener = RecordingListener()
    r = Reassembler(listener)
    for seg in read_segments([path]):
        r.feed(seg)
        listener.take()  # (what it delivered, let go)
    r.finish()
    t2 = time.perf_counter()
    subprocess.run(
        ["tshark", "-n", "-r", str(path), "-T", "fields", "-e", "frame.number", "-e", "tcp.seq", "-e", "tcp.len"],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    t3 = time.perf_counter()
    return {
        "megabytes": path.stat().st_size / 1e6,
        "segments": segments,
        "read_seg_per_s": segments / (t1 - t0),
        "reassemble_seg_per_s": segments / (t2 - t1),
        "read_mb_per_s": path.stat().st_size / 1e6 / (t1 - t0),
        "tshark_frames_per_s": stats.packets / (t3 - t2),
        "delivered_bytes": r.stats.delivered_bytes,
        "gap_bytes": r.stats.gap_bytes,
    }


def chatty_figures(exchanges: int, copies: int) -> dict[str, float]:
    """Record `exchanges` small exchanges, repeat them `copies` times, measure."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        small = record_loopback(directory, "chatty", chatty=exchanges)
        trace = impair.load_pcap(small)
        big = impair.write_pcap(impair.repeat(trace, copies, 3), directory / "big.pcap")
        figures = measure(big)
    print("\n" + "  ".join(f"{k}={v:,.0f}" for k, v in figures.items()))
    return figures


@pytest.mark.slow
def test_throughput_on_a_chatty_capture() -> None:
    exchanges, copies = 300, 8
    figures = chatty_figures(exchanges, copies)
    # each exchange is at least a request and a reply segment
    assert figures["segments"] >= copies * 2 * exchanges and figures["gap_bytes"] == 0


if __name__ == "__main__":
    chatty_figures(1500, 40)
