"""Read one split into Arrow batches of TCP segment rows.

A row is a `TcpSegment` keyed for the shuffle: the connection's canonical
4-tuple (lower endpoint first) plus the direction of the packet along it. The
link/IP/TCP decoding is the capture reader's own (`kdissect.linklayers`), so
the rows hold exactly the segments `kdissect export` would feed its
dissector, with the same capture index and frame numbers.
"""

from __future__ import annotations

from typing import Any, Iterator

import pyarrow as pa

from kdissect.capture import ReadStats, decode_frames, iter_frames
from kdissect.packet import TcpSegment
from kdissect.spark import pcapsplit

SEGMENT_COLUMNS: list[tuple[str, pa.DataType]] = [
    ("capture_index", pa.int32()),
    ("frame_number", pa.int64()),
    ("ts", pa.float64()),
    ("addr_a", pa.string()),  # canonical key: (addr_a, port_a) < (addr_b, port_b)
    ("port_a", pa.int32()),
    ("addr_b", pa.string()),
    ("port_b", pa.int32()),
    ("direction", pa.int8()),  # 0: a -> b, 1: b -> a
    ("seq", pa.int64()),
    ("ack", pa.int64()),
    ("flags", pa.int16()),
    ("payload", pa.binary()),
    ("payload_len", pa.int64()),
]
SEGMENT_SCHEMA = pa.schema(SEGMENT_COLUMNS)
KEY_COLUMNS = ["addr_a", "port_a", "addr_b", "port_b"]
ORDER_COLUMNS = ["capture_index", "frame_number"]

BATCH_ROWS = 4096


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


def split_batches(split: dict[str, Any], stats: ReadStats, batch_rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """Arrow batches (SEGMENT_SCHEMA) of one split's TCP segments."""
    columns: list[list[Any]] = [[] for _ in SEGMENT_COLUMNS]
    (ci, fn, ts, addr_a, port_a, addr_b, port_b, direction, seq, ack, flags, payload, payload_len) = columns
    for segment in split_segments(split, stats):
        src = (segment.src, segment.sport)
        dst = (segment.dst, segment.dport)
        if src <= dst:
            low, high, forward = src, dst, 0
        else:
            low, high, forward = dst, src, 1
        ci.append(segment.capture_index)
        fn.append(segment.frame_number)
        ts.append(segment.ts)
        addr_a.append(low[0])
        port_a.append(low[1])
        addr_b.append(high[0])
        port_b.append(high[1])
        direction.append(forward)
        seq.append(segment.seq)
        ack.append(segment.ack)
        flags.append(segment.flags)
        payload.append(segment.payload)
        payload_len.append(segment.payload_len)
        if len(ci) >= batch_rows:
            yield pa.RecordBatch.from_arrays(
                [pa.array(values, type=kind) for values, (_, kind) in zip(columns, SEGMENT_COLUMNS)],
                schema=SEGMENT_SCHEMA,
            )
            for values in columns:
                values.clear()
    if ci:
        yield pa.RecordBatch.from_arrays(
            [pa.array(values, type=kind) for values, (_, kind) in zip(columns, SEGMENT_COLUMNS)],
            schema=SEGMENT_SCHEMA,
        )


def row_segment(capture_index: int, frame_number: int, ts: float, addr_a: str, port_a: int, addr_b: str,
                port_b: int, direction: int, seq: int, ack: int, flags: int, payload: bytes,
                payload_len: int) -> TcpSegment:
    """The TcpSegment a row stands for."""
    if direction == 0:
        return TcpSegment(capture_index, frame_number, ts, addr_a, port_a, addr_b, port_b, seq, ack, flags,
                          payload, payload_len)
    return TcpSegment(capture_index, frame_number, ts, addr_b, port_b, addr_a, port_a, seq, ack, flags,
                      payload, payload_len)
