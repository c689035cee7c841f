"""Read one split and sort its connections: dissected where they were read,
or shipped to a dissecting task by 4-tuple (kdissect.spark.handoff). (A
read stage of one task sorts nothing: it reads the whole capture set and
dissects every connection as read, kdissect.spark.dissect.read_capture_set.)

Almost every connection of an archive lives inside one byte range: moving
its bytes through Spark's shuffle (Python -> JVM -> disk -> sort -> JVM ->
Python) costs several times its dissection. A read task therefore keeps the
segments of each 4-tuple whose opening it saw (the first segment of the
4-tuple in the range is a SYN without ACK) and that closed (RST, or FIN in
both directions) at least CLOSE_GRACE_NS before the range's last packet;
those are dissected in the task itself, all of them in capture order through
one Dissector, as `kdissect export` feeds the whole capture set. Every other
4-tuple (open at the range's start or end) is shipped: its segments become
runs (see segments.py) and go to the same dissecting task as the same
4-tuple's runs from the other ranges. In
the capture set's last range, "open at the end" is no reason to ship: no
later range exists.

The rule only guesses which connections continue elsewhere. What makes the
rows exact is a check: each task writes the 4-tuples it saw, with how it
handled them, to `_work/tuples/`; after the job the driver looks for a
4-tuple dissected in place in one range and seen in any other (a SYN
retransmitted across a cut, a 4-tuple reused in two ranges, a copy of the
capture among the inputs). If there is one, the run is discarded and done
again with every connection shipped, which is the path whose rows equal
`kdissect export` by construction (job.py).

Shipping is always correct, so a task that holds too many bytes of
undecided connections (BUFFER_BUDGET, e.g. a large gzip file read whole)
ships the open ones among them instead of holding more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import pyarrow as pa

from kdissect.model.packet import TcpSegment
from kdissect.spark import segments as _segments
from kdissect.spark.segments import KEY_COLUMNS, RUN_SCHEMA, SEGMENT_HEADER, split_segments

_FIN, _SYN, _RST, _ACK = 0x01, 0x02, 0x04, 0x10
# a closed connection's last segment must lie this far before the range's
# last packet to be taken as wholly inside the range: a cut between a FIN and
# its final ACK (or a FIN retransmitted after an initial RTO of 1 s) ships it
CLOSE_GRACE_NS = 2 * 10**9
BUFFER_BUDGET = 256 << 20  # bytes of undecided connections one task holds at most
# what a held segment costs beyond its payload: the TcpSegment and its payload's
# bytes object (measured with tracemalloc on the benchmark archive: ~300 bytes)
HELD_SEGMENT_BYTES = 320

Key = tuple[str, int, str, int]
TUPLES_DIR = "tuples"  # under _work: one file per read task, for the driver's check
TUPLE_SCHEMA = pa.schema([("addr_a", pa.string()), ("port_a", pa.int32()), ("addr_b", pa.string()),
                          ("port_b", pa.int32()), ("in_place", pa.bool_()),
                          # in place only: the capture times of its first and last segments, and
                          # whether the reassembler closed every connection on it before the range ended
                          ("first_ts", pa.int64()), ("last_ts", pa.int64()), ("closed", pa.bool_()),
                          # and its opening SYN: sent from the a end (else b), its sequence number
                          ("syn_from_a", pa.bool_()), ("syn_seq", pa.int64())])


class _Candidate:
    """A 4-tuple whose opening the range holds: what its held segments add
    up to (the segments themselves are in the reader's one list, as read: a
    connection dissected in place is never packed), and whether it closed."""

    __slots__ = ("order_ts", "frame_number", "first_ts", "last_ts", "syn", "segments", "payload_bytes", "fins",
                 "closed")

    def __init__(self, order_ts: int, frame_number: int, ts: int, syn: tuple[bool, int]) -> None:
        self.order_ts = order_ts
        self.first_ts = ts
        self.last_ts = ts  # the capture time of its latest segment
        self.syn = syn
        self.frame_number = frame_number
        self.segments = 0
        self.payload_bytes = 0  # the captured payload bytes of its segments
        self.fins = 0  # directions that sent a FIN (bit 0: a -> b, bit 1: b -> a)
        self.closed = False

    @property
    def packed_size(self) -> int:
        """The bytes its segments would take packed (the manifest's counts)."""
        return SEGMENT_HEADER.size * self.segments + self.payload_bytes

    @property
    def held_bytes(self) -> int:
        """What holding its segments costs (BUFFER_BUDGET's count)."""
        return HELD_SEGMENT_BYTES * self.segments + self.payload_bytes

    def follow(self, flags: int, direction: int) -> None:
        """A segment with SYN, RST or FIN (no other flag changes what it follows)."""
        if flags & _SYN and not flags & _ACK and self.closed:  # the 4-tuple reused: a new connection
            self.closed, self.fins = False, 0
        if flags & _RST:
            self.closed = True
        if flags & _FIN:
            self.fins |= 1 << direction
            if self.fins == 3:
                self.closed = True


def canonical(a: str, port_a: int, b: str, port_b: int) -> Key:
    """A 4-tuple with the lower endpoint first, as (address, port) pairs order."""
    return (a, port_a, b, port_b) if (a, port_a) <= (b, port_b) else (b, port_b, a, port_a)


def canonical_key(segment: TcpSegment) -> Key:
    """A segment's canonical 4-tuple."""
    return canonical(segment.src, segment.sport, segment.dst, segment.dport)


@dataclass
class InRangeCounts:
    """How a split's 4-tuples were handled (the manifest's `in_range`)."""

    tuples_in_place: int = 0
    tuples_shipped: int = 0
    bytes_in_place: int = 0  # segment bytes as packed (headers and captured payload)
    bytes_shipped: int = 0

    def to_dict(self) -> dict[str, int]:
        return dict(vars(self))


class SplitReader:
    """One split's segments: shipped runs as they are read (`shipped_runs`),
    then the segments to dissect in place (`in_place_segments`)."""

    def __init__(self, split: dict[str, Any], stats: Any, in_place: bool = True, last_range: bool = False,
                 watch: Any = None) -> None:
        self.split = split
        self.watch = watch  # a checked range's segments.RangeWatch, or None
        self.stats = stats
        self.in_place = in_place
        self.last_range = last_range
        self.capture_index = split["capture_index"]
        self.shipped: set[Key] = set()
        self.candidates: dict[Key, _Candidate] = {}
        self.held: list[TcpSegment] = []  # the candidates' segments, in the order read
        self.counts = InRangeCounts()
        self.in_place_keys: list[Key] = []
        self._spans: list[tuple[int, int, tuple[bool, int]]] = []  # (first, last ts, SYN) of each in-place 4-tuple
        self._buffered = 0
        self._latest_ts = 0

    def shipped_runs(self) -> Iterator[pa.RecordBatch]:
        """RUN_SCHEMA batches of the shipped 4-tuples, one row per run: a run
        is one 4-tuple's segments within a chunk of consecutive packets."""
        pack = SEGMENT_HEADER.pack
        header_size = SEGMENT_HEADER.size
        runs: dict[Key, tuple[int, int, bytearray]] = {}
        segments = payload_bytes = 0
        shipped, candidates = self.shipped, self.candidates
        hold = self.held.append
        in_place = self.in_place
        chunk_segments, chunk_bytes = _segments.CHUNK_SEGMENTS, _segments.CHUNK_PAYLOAD_BYTES
        buffered = self._buffered  # (kept in self._buffered around a _ship_some)
        bytes_shipped = 0
        latest = 0
        segment: TcpSegment
        for segment in split_segments(self.split, self.stats, self.watch):
            src, sport, dst, dport = segment.src, segment.sport, segment.dst, segment.dport
            # the canonical 4-tuple: lower endpoint first, as (src, sport) <= (dst, dport) orders them
            if src < dst or (src == dst and sport <= dport):
                key, direction = (src, sport, dst, dport), 0
            else:
                key, direction = (dst, dport, src, sport), 1
            payload = segment.payload
            flags = segment.flags
            ts = segment.ts
            if ts > latest:
                latest = ts
            if in_place:
                candidate = candidates.get(key)
                if candidate is None and key not in shipped:
                    if flags & (_SYN | _ACK) == _SYN:
                        candidate = candidates[key] = _Candidate(segment.order_ts, segment.frame_number, ts,
                                                                  (direction == 0, segment.seq))
                    else:
                        shipped.add(key)
                if candidate is not None:
                    hold(segment)
                    size = len(payload)
                    candidate.segments += 1
                    candidate.payload_bytes += size
                    candidate.last_ts = ts
                    if flags & (_SYN | _RST | _FIN):
                        candidate.follow(flags, direction)
                    buffered += HELD_SEGMENT_BYTES + size
                    if buffered > BUFFER_BUDGET:
                        self._buffered = buffered
                        yield from self._ship_some()
                        buffered = self._buffered
                        hold = self.held.append  # (the list was rebuilt without the shipped ones)
                    continue
            else:
                shipped.add(key)
            header = pack(segment.frame_number, ts, segment.order_ts, direction, segment.seq, segment.ack,
                          flags, segment.payload_len, len(payload))
            run = runs.get(key)
            if run is None:
                run = runs[key] = (segment.order_ts, segment.frame_number, bytearray())
            buffer = run[2]
            buffer += header
            buffer += payload
            bytes_shipped += header_size + len(payload)
            segments += 1
            payload_bytes += len(payload)
            if segments >= chunk_segments or payload_bytes >= chunk_bytes:
                yield self._batch(runs)
                runs = {}
                segments = payload_bytes = 0
        if runs:
            yield self._batch(runs)
        self._buffered = buffered
        self.counts.bytes_shipped += bytes_shipped
        self._latest_ts = latest
        # the candidates still open at the range's end (or closed just before it) go too
        leaving = [key for key, candidate in candidates.items() if not self._stays(candidate)]
        yield from self._ship(leaving)

    def _stays(self, candidate: _Candidate) -> bool:
        if self.last_range:
            return True
        return candidate.closed and candidate.last_ts + CLOSE_GRACE_NS <= self._latest_ts

    def _ship_some(self) -> Iterator[pa.RecordBatch]:
        """Over the budget: ship the open candidates, then, if that is not
        enough, the closed ones too."""
        yield from self._ship([key for key, candidate in self.candidates.items() if not candidate.closed])
        if self._buffered > BUFFER_BUDGET // 2:
            yield from self._ship(list(self.candidates))

    def _ship(self, keys: list[Key]) -> Iterator[pa.RecordBatch]:
        """Candidates shipped after all: their segments taken out of the held
        list and cut into runs of at most a chunk's payload, in segment order."""
        if not keys:
            return
        leaving: dict[Key, list[TcpSegment]] = {}
        sizes: dict[Key, int] = {}
        for key in keys:
            candidate = self.candidates.pop(key)
            self.shipped.add(key)
            self._buffered -= candidate.held_bytes
            sizes[key] = candidate.packed_size
            self.counts.bytes_shipped += sizes[key]
            leaving[key] = []
        staying: list[TcpSegment] = []
        for segment in self.held:
            mine = leaving.get(canonical_key(segment))
            if mine is None:
                staying.append(segment)
            else:
                mine.append(segment)
        self.held = staying
        rows: dict[Key, list[tuple[int, int, bytes]]] = {}
        held = 0
        for key, segments in leaving.items():
            rows[key] = list(_cut_runs(segments))
            held += sizes[key]
            if held >= _segments.CHUNK_PAYLOAD_BYTES * 8:
                yield from _run_batches(rows, self.capture_index)
                rows, held = {}, 0
        if rows:
            yield from _run_batches(rows, self.capture_index)

    def in_place_segments(self) -> list[TcpSegment]:
        """The segments of every 4-tuple dissected in place, in the order
        read (capture order), once `shipped_runs` is exhausted; the reader
        lets go of them."""
        self.counts.tuples_shipped = len(self.shipped)
        for key, candidate in self.candidates.items():
            self.in_place_keys.append(key)
            self._spans.append((candidate.first_ts, candidate.last_ts, candidate.syn))
            self.counts.tuples_in_place += 1
            self.counts.bytes_in_place += candidate.packed_size
        self.candidates = {}
        held, self.held = self.held, []
        return held

    def tuple_table(self, left_open: set[Key] | frozenset = frozenset()) -> pa.Table:
        """Every 4-tuple of the split and whether it was dissected in place
        (for the driver's check), once `in_place_segments` has been taken;
        `left_open`: in-place 4-tuples the reassembler had not closed by the
        range's end."""
        keys = [*self.in_place_keys, *self.shipped]
        in_place = len(self.in_place_keys)
        flags = [True] * in_place + [False] * len(self.shipped)
        columns = [pa.array([key[i] for key in keys], field.type) for i, field in enumerate(list(TUPLE_SCHEMA)[:4])]
        nothing = [None] * len(self.shipped)
        return pa.Table.from_arrays([
            *columns, pa.array(flags, pa.bool_()),
            pa.array([span[0] for span in self._spans] + nothing, pa.int64()),
            pa.array([span[1] for span in self._spans] + nothing, pa.int64()),
            pa.array([key not in left_open for key in self.in_place_keys] + nothing, pa.bool_()),
            pa.array([span[2][0] for span in self._spans] + nothing, pa.bool_()),
            pa.array([span[2][1] for span in self._spans] + nothing, pa.int64()),
        ], schema=TUPLE_SCHEMA)

    def _batch(self, runs: dict[Key, tuple[int, int, bytearray]]) -> pa.RecordBatch:
        return _run_batch(list(runs), [value[0] for value in runs.values()], [value[1] for value in runs.values()],
                          [bytes(value[2]) for value in runs.values()], self.capture_index)


def _cut_runs(segments: list[TcpSegment]) -> Iterator[tuple[int, int, bytes]]:
    """(order_ts, frame number of its first segment, packed) of runs of at most
    CHUNK_SEGMENTS segments or CHUNK_PAYLOAD_BYTES of one 4-tuple's segments,
    packed as `shipped_runs` packs them (the direction along the canonical 4-tuple)."""
    pack = SEGMENT_HEADER.pack
    packed = bytearray()
    count = 0
    first: tuple[int, int] | None = None
    for segment in segments:
        if first is None:
            first = (segment.order_ts, segment.frame_number)
        payload = segment.payload
        direction = 0 if (segment.src, segment.sport) <= (segment.dst, segment.dport) else 1
        packed += pack(segment.frame_number, segment.ts, segment.order_ts, direction, segment.seq, segment.ack,
                       segment.flags, segment.payload_len, len(payload))
        packed += payload
        count += 1
        if count >= _segments.CHUNK_SEGMENTS or len(packed) >= _segments.CHUNK_PAYLOAD_BYTES:
            yield first[0], first[1], bytes(packed)
            packed, count, first = bytearray(), 0, None
    if first is not None:
        yield first[0], first[1], bytes(packed)


def _run_batches(rows: dict[Key, list[tuple[int, int, bytes]]], capture_index: int) -> Iterator[pa.RecordBatch]:
    keys, order, frames, packed = [], [], [], []
    for key, runs in rows.items():
        for order_ts, frame_number, data in runs:
            keys.append(key)
            order.append(order_ts)
            frames.append(frame_number)
            packed.append(data)
    if keys:
        yield _run_batch(keys, order, frames, packed, capture_index)


def _run_batch(keys: list[Key], order: list[int], frames: list[int], packed: list[bytes],
               capture_index: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([
        pa.array([key[0] for key in keys], pa.string()),
        pa.array([key[1] for key in keys], pa.int32()),
        pa.array([key[2] for key in keys], pa.string()),
        pa.array([key[3] for key in keys], pa.int32()),
        pa.array(order, pa.int64()),
        pa.array([capture_index] * len(keys), pa.int32()),
        pa.array(frames, pa.int64()),
        pa.array(packed, pa.binary()),
    ], schema=RUN_SCHEMA)


def conflicts(tables: list[pa.Table]) -> int:
    """4-tuples dissected in place in one range and seen in another, where
    that can change their rows: each one makes the run's in-place rows unsafe.

    A 4-tuple reused in several ranges (a client port reused later) is safe
    when every use was dissected in place, each closed by the reassembler
    within its range, and each later use either starts more than the
    reassembler's after-close window after the earlier one ended, or opens
    with a SYN from the same end with another sequence number (which the
    reassembler takes for a new connection, not a straggler of the closed
    one: kdissect.wire.reassembly `_belongs_to_closed`). `kdissect export`
    then meets each use with no state left on the 4-tuple, as a fresh
    `Dissector` does.
    """
    import pyarrow.compute as pc

    if not tables:
        return 0
    every = pa.concat_tables(tables)
    grouped = every.group_by(KEY_COLUMNS).aggregate([("in_place", "any"), ("in_place", "count")])
    suspects = grouped.filter(pc.and_(grouped.column("in_place_any"), pc.greater(grouped.column("in_place_count"), 1)))
    if suspects.num_rows == 0:
        return 0
    uses = every.join(suspects.select(KEY_COLUMNS), KEY_COLUMNS, join_type="inner").to_pylist()
    by_key: dict[tuple, list[dict]] = {}
    for use in uses:
        by_key.setdefault(tuple(use[name] for name in KEY_COLUMNS), []).append(use)
    unsafe = 0
    for found in by_key.values():
        if not all(use["in_place"] and use["closed"] for use in found):
            unsafe += 1
            continue
        found.sort(key=lambda use: use["first_ts"])
        if not all(_apart(earlier, later) for earlier, later in zip(found, found[1:])):
            unsafe += 1
    return unsafe


def _apart(earlier: dict, later: dict) -> bool:
    """Does the reassembler meet `later` as a new connection after `earlier` closed?"""
    from kdissect.wire.reassembly import _AFTER_CLOSE_NS

    if later["first_ts"] <= earlier["last_ts"]:
        return False  # they overlap in time
    if later["first_ts"] - earlier["last_ts"] > _AFTER_CLOSE_NS:
        return True
    return later["syn_from_a"] == earlier["syn_from_a"] and later["syn_seq"] != earlier["syn_seq"]
