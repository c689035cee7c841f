"""Read one split into Arrow batches of rows of TCP segments.

A row is a run of `TcpSegment`s of one connection, keyed for the hand-off
to its dissecting task (kdissect.spark.handoff) by the connection's
canonical 4-tuple (lower endpoint first); each packed
segment carries its direction along that tuple. Reading is the capture
reader's own (its record and block loops, `kdissect.wire.capture.read_range`), so
the rows hold exactly the segments `kdissect export` reads, with the same
capture index, frame numbers, times and feed times.
"""

from __future__ import annotations

import struct
from typing import Any, Iterator

import pyarrow as pa

from kdissect.wire.capture import ReadStats, Walk, read_file, read_range
from kdissect.model.packet import TcpSegment
from kdissect.spark.plan import RANGE_KINDS, RangeEnd, file_range

RUN_COLUMNS: list[tuple[str, pa.DataType]] = [
    ("addr_a", pa.string()),  # canonical key: (addr_a, port_a) <= (addr_b, port_b)
    ("port_a", pa.int32()),
    ("addr_b", pa.string()),
    ("port_b", pa.int32()),
    ("order_ts", pa.int64()),  # feed time (ns, see kdissect.wire.captureset) of the run's first segment
    ("capture_index", pa.int32()),  # file of the run (a run never leaves its split)
    ("frame_number", pa.int64()),  # frame number of the run's first segment
    ("segments", pa.binary()),  # the run's segments, packed with SEGMENT_HEADER
]
RUN_SCHEMA = pa.schema(RUN_COLUMNS)
KEY_COLUMNS = ["addr_a", "port_a", "addr_b", "port_b"]
# a connection's runs sorted by these come in the order of their first
# segments in the capture set's feed order
ORDER_COLUMNS = ["order_ts", "capture_index", "frame_number"]

# One packed segment: frame number, ts (int ns), feed time (ns), direction
# (0: a -> b, 1: b -> a), seq, ack, TCP flags, payload length on the wire,
# captured payload length; the captured payload bytes follow.
SEGMENT_HEADER = struct.Struct("<qqqBIIHII")
# A split is read in chunks of consecutive packets; each chunk becomes one row
# per connection seen in it. The bounds keep rows and Arrow batches small.
CHUNK_SEGMENTS = 4096
CHUNK_PAYLOAD_BYTES = 1 << 20


def split_segments(split: dict[str, Any], stats: ReadStats, watch: RangeWatch | None = None
                   ) -> Iterator[TcpSegment]:
    """TCP segments of one split (a plan.Split row), counted into `stats` as
    the capture reader counts them: the same loops as `kdissect export`;
    `watch` notes how a checked range's read ended."""
    if watch is not None:
        return watch.segments(read_range(file_range(split), stats, walk=watch.walk))
    if split["kind"] in RANGE_KINDS:
        return read_range(file_range(split), stats)
    return read_file(split["path"], split["capture_index"], stats)


class RangeWatch:
    """What the driver's check after the job needs of a checked range's read
    (kdissect.spark.plan.RangeEnd)."""

    def __init__(self, split: dict[str, Any]) -> None:
        self.split_id = split["split_id"]
        self.first_frame = split["first_frame"]
        self.walk = Walk()
        self.first_order: int | None = None

    def segments(self, items: Iterator[TcpSegment]) -> Iterator[TcpSegment]:
        for segment in items:
            self.first_order = segment.order_ts
            yield segment
            break
        yield from items

    def end(self) -> dict[str, Any]:
        walk = self.walk
        last_block = max((event[1] for event in walk.events), default=-1)
        return RangeEnd(self.split_id, walk.number - self.first_frame + 1, walk.stop, walk.order_ts,
                        self.first_order, last_block).as_dict()


def split_runs(split: dict[str, Any], stats: ReadStats) -> Iterator[pa.RecordBatch]:
    """Arrow batches (RUN_SCHEMA) of one split's TCP segments, one row per run,
    every 4-tuple shipped (kdissect.spark.inrange decides which to keep).

    A run is the segments of one connection within one chunk of consecutive
    packets of the split, in file order. Shuffling runs instead of single
    segments keeps the JVM's per-row work (serialising, sorting, Arrow
    conversion) small. Sorted by key and ORDER_COLUMNS, one file's runs of a
    connection come back in file order (chunks never overlap); runs of
    several files are merged segment by segment when dissected
    (captureset.ConnectionMerge).
    """
    from kdissect.spark.inrange import SplitReader

    return SplitReader(split, stats, in_place=False).shipped_runs()


def run_segments(capture_index: int, addr_a: str, port_a: int, addr_b: str, port_b: int,
                 packed: bytes) -> Iterator[TcpSegment]:
    """The TcpSegments of one run, in capture order."""
    unpack = SEGMENT_HEADER.unpack_from
    header_size = SEGMENT_HEADER.size
    pos = 0
    end = len(packed)
    while pos < end:
        frame_number, ts, order_ts, direction, seq, ack, flags, payload_len, captured = unpack(packed, pos)
        pos += header_size
        payload = packed[pos : pos + captured]
        pos += captured
        if direction == 0:
            yield TcpSegment(capture_index, frame_number, ts, addr_a, port_a, addr_b, port_b, seq, ack, flags,
                             payload, payload_len, order_ts)
        else:
            yield TcpSegment(capture_index, frame_number, ts, addr_b, port_b, addr_a, port_a, seq, ack, flags,
                             payload, payload_len, order_ts)


# The read counts of a split travel in its accounting row (not an
# accumulator, which would count a re-run read task twice).
RANGES_KEY = "ranges"  # the checked ranges' RangeEnd dicts, summed up as a list (never capped)
_MAX_PROBLEMS = 100


def read_stats_values(stats: ReadStats, watch: RangeWatch | None = None) -> dict[str, Any]:
    """A split's ReadStats as a JSON-ready dict (and, for a checked range,
    how its read ended: under "ranges")."""
    values = stats.to_dict()
    if watch is not None:
        values[RANGES_KEY] = [watch.end()]
    return values


def add_read_stats(total: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    """Sum ReadStats dicts into `total` (problem texts kept up to a cap)."""
    for key, value in more.items():
        if key == RANGES_KEY:
            total.setdefault(RANGES_KEY, []).extend(value)
        elif key == "problems":
            kept = total.setdefault("problems", [])
            kept.extend(value[: max(0, _MAX_PROBLEMS - len(kept))])
        else:
            total[key] = total.get(key, 0) + value
    return total
