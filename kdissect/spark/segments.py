"""Read one split into Arrow batches of rows of TCP segments.

A row is a run of `TcpSegment`s of one connection, keyed for the shuffle by
the connection's canonical 4-tuple (lower endpoint first); each packed
segment carries its direction along that tuple. The link/IP/TCP decoding is
the capture reader's own (`kdissect.linklayers`), so the rows hold exactly
the segments `kdissect export` would feed its dissector, with the same
capture index and frame numbers.
"""

from __future__ import annotations

import json
import struct
from dataclasses import asdict
from typing import Any, Iterator

import pyarrow as pa

from kdissect.capture import ReadStats, decode_frames, iter_frames
from kdissect.packet import TcpSegment
from kdissect.spark import pcapsplit

RUN_COLUMNS: list[tuple[str, pa.DataType]] = [
    ("addr_a", pa.string()),  # canonical key: (addr_a, port_a) <= (addr_b, port_b)
    ("port_a", pa.int32()),
    ("addr_b", pa.string()),
    ("port_b", pa.int32()),
    ("capture_index", pa.int32()),  # file of the run (a run never leaves its split)
    ("frame_number", pa.int64()),  # frame number of the run's first segment
    ("segments", pa.binary()),  # the run's segments, packed with SEGMENT_HEADER
]
RUN_SCHEMA = pa.schema(RUN_COLUMNS)
KEY_COLUMNS = ["addr_a", "port_a", "addr_b", "port_b"]
ORDER_COLUMNS = ["capture_index", "frame_number"]

# One packed segment: frame number, ts (int ns), direction (0: a -> b, 1: b -> a), seq,
# ack, TCP flags, payload length on the wire, captured payload length; the
# captured payload bytes follow.
SEGMENT_HEADER = struct.Struct("<qqBIIHII")
# A split is read in chunks of consecutive packets; each chunk becomes one row
# per connection seen in it. The bounds keep rows and Arrow batches small.
CHUNK_SEGMENTS = 4096
CHUNK_PAYLOAD_BYTES = 1 << 20


def _frames(split: dict[str, Any], stats: ReadStats) -> Iterator[tuple[int, int, float, bytes, int]]:
    """(linktype, frame number, ts, data, wire length) of the split's records."""
    if split["kind"] == "whole":
        # pcapng / gzip: the capture reader, one task for the file
        for frame in iter_frames([split["path"]], stats):
            yield frame.linktype, frame.frame_number, frame.ts, frame.data, frame.wire_len
        return
    with open(split["path"], "rb", buffering=1 << 20) as stream:
        fmt = pcapsplit.read_format(stream)
        if fmt is None:  # the planner checked the magic; the file changed since
            stats.problems.append(f"{split['path']}: no longer a pcap file")
            return
        linktype = fmt.header.linktype
        walk = pcapsplit.WalkResult(0, 0)
        if split["start"] == 0:
            stats.files += 1
        number = split["first_frame"]
        for ts, data, wire_len in pcapsplit.walk_records(stream, fmt, split["boundary"], split["end"], walk):
            stats.packets += 1
            stats.bytes += len(data)
            yield linktype, number, ts, data, wire_len
            number += 1
        name = split["path"].rsplit("/", 1)[-1]
        if walk.damaged_at >= 0:
            rest = split["file_size"] - walk.damaged_at
            stats.damaged_files += 1
            stats.unread_bytes += rest
            stats.problems.append(f"{name}: packet {number} has an implausible length; {rest} bytes after it not read")
        elif walk.cut_bytes:
            stats.cut_records += 1
            stats.unread_bytes += walk.cut_bytes
            stats.problems.append(f"{name}: file ends inside packet {number} ({walk.cut_bytes} bytes of it dropped)")


def split_segments(split: dict[str, Any], stats: ReadStats) -> Iterator[TcpSegment]:
    """TCP segments of one split, counting everything else into `stats` as the capture reader does."""
    return decode_frames(_frames(split, stats), split["capture_index"], split["path"], stats, set())


def split_runs(split: dict[str, Any], stats: ReadStats) -> Iterator[pa.RecordBatch]:
    """Arrow batches (RUN_SCHEMA) of one split's TCP segments, one row per run.

    A run is the segments of one connection within one chunk of consecutive
    packets of the split, in capture order. Shuffling runs instead of single
    segments keeps the JVM's per-row work (serialising, sorting, Arrow
    conversion) small; sorted by key and first frame number, the runs of a
    connection come back in capture order because chunks never overlap.
    """
    pack = SEGMENT_HEADER.pack
    runs: dict[tuple[str, int, str, int], tuple[int, bytearray]] = {}
    segments = payload_bytes = 0
    capture_index = split["capture_index"]
    for segment in split_segments(split, stats):
        src, sport, dst, dport = segment.src, segment.sport, segment.dst, segment.dport
        if (src, sport) <= (dst, dport):
            key, direction = (src, sport, dst, dport), 0
        else:
            key, direction = (dst, dport, src, sport), 1
        run = runs.get(key)
        if run is None:
            run = runs[key] = (segment.frame_number, bytearray())
        payload = segment.payload
        buffer = run[1]
        buffer += pack(segment.frame_number, segment.ts, direction, segment.seq, segment.ack, segment.flags,
                       segment.payload_len, len(payload))
        buffer += payload
        segments += 1
        payload_bytes += len(payload)
        if segments >= CHUNK_SEGMENTS or payload_bytes >= CHUNK_PAYLOAD_BYTES:
            yield _run_batch(runs, capture_index)
            runs = {}
            segments = payload_bytes = 0
    if runs:
        yield _run_batch(runs, capture_index)


def _run_batch(runs: dict[tuple[str, int, str, int], tuple[int, bytearray]], capture_index: int) -> pa.RecordBatch:
    keys = list(runs)
    values = list(runs.values())
    return pa.RecordBatch.from_arrays([
        pa.array([key[0] for key in keys], pa.string()),
        pa.array([key[1] for key in keys], pa.int32()),
        pa.array([key[2] for key in keys], pa.string()),
        pa.array([key[3] for key in keys], pa.int32()),
        pa.array([capture_index] * len(keys), pa.int32()),
        pa.array([value[0] for value in values], pa.int64()),
        pa.array([bytes(value[1]) for value in values], pa.binary()),
    ], schema=RUN_SCHEMA)


def run_segments(capture_index: int, addr_a: str, port_a: int, addr_b: str, port_b: int,
                 packed: bytes) -> Iterator[TcpSegment]:
    """The TcpSegments of one run, in capture order."""
    unpack = SEGMENT_HEADER.unpack_from
    header_size = SEGMENT_HEADER.size
    pos = 0
    end = len(packed)
    while pos < end:
        frame_number, ts, direction, seq, ack, flags, payload_len, captured = unpack(packed, pos)
        pos += header_size
        payload = packed[pos : pos + captured]
        pos += captured
        if direction == 0:
            yield TcpSegment(capture_index, frame_number, ts, addr_a, port_a, addr_b, port_b, seq, ack, flags,
                             payload, payload_len)
        else:
            yield TcpSegment(capture_index, frame_number, ts, addr_b, port_b, addr_a, port_a, seq, ack, flags,
                             payload, payload_len)


# The read counts of a split travel with its rows, in one row under a key no
# connection has (an empty address), so they are counted exactly once even if
# Spark re-runs a read task (an accumulator would count a retried task twice).
READ_STATS_KEY = ("", -1, "", -1)
_MAX_PROBLEMS = 100


def read_stats_batch(stats: ReadStats, capture_index: int) -> pa.RecordBatch:
    """One RUN_SCHEMA row carrying a split's ReadStats as JSON."""
    addr_a, port_a, addr_b, port_b = READ_STATS_KEY
    return pa.RecordBatch.from_arrays([
        pa.array([addr_a], pa.string()), pa.array([port_a], pa.int32()),
        pa.array([addr_b], pa.string()), pa.array([port_b], pa.int32()),
        pa.array([capture_index], pa.int32()), pa.array([-1], pa.int64()),
        pa.array([json.dumps(asdict(stats)).encode()], pa.binary()),
    ], schema=RUN_SCHEMA)


def add_read_stats(total: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    """Sum ReadStats dicts into `total` (problem texts kept up to a cap)."""
    for key, value in more.items():
        if key == "problems":
            kept = total.setdefault("problems", [])
            kept.extend(value[: max(0, _MAX_PROBLEMS - len(kept))])
        else:
            total[key] = total.get(key, 0) + value
    return total
