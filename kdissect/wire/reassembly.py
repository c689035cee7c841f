"""TCP stream reassembly: TcpSegments in capture order -> per-connection,
per-direction ordered stream bytes, handed to the connection's sinks.

Each direction's bytes come out in stream order and contiguous: bytes that
were never captured are announced as a gap, bytes that were on the wire but
cut by the snaplen as a truncated piece holding the captured prefix. Every
stream byte is delivered once (the first copy wins); retransmitted copies are
counted, not delivered. Offsets are unbounded integers: sequence numbers are
unwrapped around the next expected byte, so 32-bit wraparound is invisible.

The user of a `Reassembler` is a `ConnectionListener`: it hears `opened(conn)`
(and then sets `conn.sinks`, one `DirectionSink` per direction) and
`closed(conn, reason)`. The sinks receive `data`, `gap` and `truncated`
calls in stream order: the one form a stream takes from here through TLS
to framing.

A hole in the sequence space is held open while later data waits in a bounded
buffer, and declared a gap when
  * the peer has acknowledged past the hole and `reorder_tolerance` more
    segments of the connection have passed without filling it (the bytes
    were received, the capture missed them, and reordering in the capture
    cannot explain it); the count starts when the hole is the first one and
    the ACK has passed it, so a hole met when an earlier one fills (or is
    declared) gets a whole grace period of its own; a segment that fills the
    hole within it is delivered (bytes held behind it follow), one that
    comes later is counted as a retransmitted copy of bytes counted lost,
  * the direction's held bytes exceed `max_buffered_bytes`,
  * or the connection closes (RST, port reuse, end of capture).
A RST closes its connection after `reorder_tolerance` more segments of that
connection, so data the capture shows just after the RST is still delivered.
These bounds count segments on purpose: they measure how far a capture may
reorder packets, which is a matter of packets (queues, interfaces), not of
time, and a time bound would make a slow connection wait for nothing while
a fast one gives up too early. Memory is bounded by bytes
(`max_buffered_bytes` per direction), not by counts.

These decisions depend only on the connection's own segments, so feeding one
connection's segments alone (as the Spark job does) gives the same bytes
as feeding the whole capture. In a whole run, a run-wide deadline (1024+
segments) also settles a connection that fell silent, so it does not wait
for the end of a long capture; that only differs from a lone run for data
reordered by more than that many packets.

Roles: the initiator is the SYN's sender; when the capture shows a SYN-ACK
first, its receiver; with no handshake, the source of the first segment. A
handshake segment arriving late (capture reordering) corrects the roles as
long as nothing has been delivered yet; a side that showed only its FIN
before its SYN or data (capture reordering) starts its stream at them. The
handshake's times are kept on the connection (`syn_ts`, `syn_ack_ts`,
`ack_ts`) for round-trip estimates.

Memory: open connections x held out-of-order bytes. Closed connections are
forgotten after `closed`; a bounded table of recently closed 4-tuples absorbs
their stray last ACKs and retransmissions (copies of its SYN or SYN-ACK
included) without opening phantom connections, while a SYN with a sequence
number of its own, or a segment far from where the old connection's
sequence numbers ended, starts a new one.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque
from typing import Any, Iterator, Protocol

from kdissect.model.packet import ACK, FIN, RST, SYN, SlotRecord, TcpSegment, fields_of

# A connection's 4-tuple (src, sport, dst, dport), typed as a tuple of any
# length for mypyc (kdissect/native.py): a compiled TcpConnection then holds
# a reference to the tuple the table holds; with the fixed-length type it
# would keep the four fields in itself, 64 bytes more per connection.
FourTuple = tuple[Any, ...]

_MASK = 0xFFFFFFFF
_HALF = 1 << 31
_SYN_FIN_RST = SYN | FIN | RST
# A segment of a closed 4-tuple this soon after the close belongs to the old
# connection (its last ACK, a retransmitted FIN) unless it is a new SYN.
_AFTER_CLOSE_NS = 120 * 10**9
_TOMBSTONE_LIMIT = 1 << 16
# A segment of a closed 4-tuple whose sequence number is this far from where
# the old connection ended starts a new connection (whose SYN was not captured).
_STRAGGLER_WINDOW = 1 << 22
# data segments timed per direction (the least time is kept: delayed ACKs
# and the peer's processing only ever add)
_RTT_SAMPLES = 32


class Stamp(Protocol):
    """Where bytes became deliverable: a time (integer ns) and a packet."""

    ts: int
    capture_index: int
    frame_number: int


class DirectionSink(Protocol):
    """Receives one direction's stream, in order, from offset 0."""

    def data(self, offset: int, payload: bytes, stamp: Stamp) -> None: ...

    def gap(self, offset: int, length: int, stamp: Stamp) -> None: ...

    def truncated(self, offset: int, length: int, prefix: bytes, stamp: Stamp) -> None: ...


class ConnectionListener(Protocol):
    def opened(self, conn: TcpConnection) -> None:
        """A new connection; set `conn.sinks` to its two DirectionSinks."""

    def closed(self, conn: TcpConnection, reason: str) -> None:
        """No more bytes will come; reason: fin, rst, port-reuse, end-of-capture."""


class _Half:
    """One direction of a connection."""

    __slots__ = ("base", "next", "pending", "pending_bytes", "fin", "acked", "syn_seq", "deadline", "hole", "due",
                 "probe_end", "probe_ts", "delay", "samples")

    def __init__(self) -> None:
        self.base: int | None = None  # sequence number of stream offset 0
        self.next = 0  # next stream offset to deliver
        # heap of (offset, arrival, segment) held out of order; None until the first
        self.pending: list[tuple[int, int, TcpSegment]] | None = None
        self.pending_bytes = 0
        self.fin: int | None = None  # stream offset of the FIN
        self.acked = 0  # highest offset the peer acknowledged
        self.syn_seq: int | None = None
        self.deadline: int | None = None  # segment count at which an acknowledged hole becomes a gap
        self.hole = 0  # the stream offset (then `next`) whose hole the deadline is for
        self.due = 0  # the run-wide timer of that deadline (a segment count of the whole run)
        # round-trip sampling: one data segment at a time is timed until the
        # peer acknowledges it; `delay` is the least such time (ns) seen
        self.probe_end: int | None = None  # stream offset its ACK must reach
        self.probe_ts = 0
        self.delay: int | None = None
        self.samples = 0

    def start_probe(self, end: int, ts: int) -> None:
        if self.probe_end is None and self.samples < _RTT_SAMPLES:
            self.probe_end = end
            self.probe_ts = ts

    def acked_until(self, acked: int, ts: int) -> None:
        """The peer acknowledged up to `acked` at `ts`: time the probe it covers."""
        if acked >= self.probe_end:  # type: ignore[operator]
            sample = ts - self.probe_ts
            if sample >= 0 and (self.delay is None or sample < self.delay):
                self.delay = sample
            self.samples += 1
            self.probe_end = None

    def has_hole(self) -> bool:
        return bool(self.pending) or (self.fin is not None and self.fin > self.next)


class TcpConnection:
    """One TCP connection: one SYN epoch of a 4-tuple."""

    __slots__ = ("id", "key", "reverse_key", "saw_syn", "closed", "segments", "halves", "last", "closing",
                 "sinks", "syn_ts", "syn_ack_ts", "ack_ts", "user")

    def __init__(self, conn_id: int, initiator: tuple[Any, Any], responder: tuple[Any, Any], seg: TcpSegment,
                 saw_syn: bool) -> None:
        self.id = conn_id
        # the 4-tuples of its segments, the initiator's and the responder's:
        # the reassembler's table holds these very tuples, and the two ends
        # are read from them (no tuples of its own: a connection that
        # carries nothing costs little)
        (a, p), (b, q) = initiator, responder
        self.key: FourTuple = (a, p, b, q)
        self.reverse_key: FourTuple = (b, q, a, p)
        self.saw_syn = saw_syn
        self.closed = False
        self.segments = 0  # segments of this connection fed so far
        self.halves = (_Half(), _Half())
        self.last: Stamp = seg  # the connection's latest segment
        self.closing: int | None = None  # segment count at the RST, while reordered stragglers may come
        # one DirectionSink per direction (0 = initiator -> responder), set by the listener
        self.sinks: tuple[Any, Any] = (None, None)
        # handshake times (ns): the initiator's SYN, the responder's SYN-ACK,
        # the initiator's first ACK after it; None where not captured
        self.syn_ts: int | None = None
        self.syn_ack_ts: int | None = None
        self.ack_ts: int | None = None
        self.user: Any = None  # the listener's own per-connection state

    @property
    def keys(self) -> tuple[FourTuple, FourTuple]:
        """The 4-tuples of its segments, initiator's first."""
        return self.key, self.reverse_key

    @property
    def initiator(self) -> tuple[str, int]:
        """(address, port) of the side that opened the connection."""
        key = self.key
        return key[0], key[1]

    @property
    def responder(self) -> tuple[str, int]:
        key = self.key
        return key[2], key[3]

    def path_delays(self) -> tuple[int | None, int | None]:
        """(initiator side, responder side): the time (ns) from the capture
        point to each end and back, from the handshake when it was captured
        (SYN -> SYN-ACK is the responder's side, SYN-ACK -> ACK the
        initiator's), else from the least data-to-ACK time seen each way."""
        if self.syn_ts is not None and self.syn_ack_ts is not None and self.ack_ts is not None:
            return self.ack_ts - self.syn_ack_ts, self.syn_ack_ts - self.syn_ts
        initiator_data, responder_data = self.halves
        # the initiator's data is acknowledged by the responder, and the reverse
        return responder_data.delay, initiator_data.delay

    def saw_start(self, direction: int) -> bool:
        """Whether the direction's first byte seen is its stream's first byte
        (the handshake was captured), so a frame starts there."""
        return self.saw_syn or self.halves[direction].syn_seq is not None

    @property
    def last_ts(self) -> int:
        return self.last.ts

    @property
    def last_frame(self) -> tuple[int, int]:
        return (self.last.capture_index, self.last.frame_number)

    def __repr__(self) -> str:
        i, r = self.initiator, self.responder
        return (f"TcpConnection(id={self.id}, {i[0]}:{i[1]} -> {r[0]}:{r[1]}, saw_syn={self.saw_syn}, "
                f"closed={self.closed})")


class ReassemblyStats(SlotRecord):
    """Per-run accounting; additive (sum per-connection runs)."""

    __slots__ = ("segments", "connections", "delivered_bytes", "gap_bytes", "gaps", "tail_gap_bytes", "truncated_bytes",
                 "retransmitted_bytes", "out_of_order_segments", "before_start_bytes", "after_close_segments",
                 "after_close_bytes", "stray_resets", "closed")

    def __init__(self, segments: int = 0, connections: int = 0, delivered_bytes: int = 0, gap_bytes: int = 0,
                 gaps: int = 0, tail_gap_bytes: int = 0, truncated_bytes: int = 0, retransmitted_bytes: int = 0,
                 out_of_order_segments: int = 0, before_start_bytes: int = 0, after_close_segments: int = 0,
                 after_close_bytes: int = 0, stray_resets: int = 0, closed: dict[str, int] | None = None) -> None:
        self.segments = segments
        self.connections = connections
        self.delivered_bytes = delivered_bytes  # captured stream bytes handed out in data/truncated pieces
        self.gap_bytes = gap_bytes  # stream bytes never captured
        self.gaps = gaps
        # of gap_bytes: acknowledged (or before a FIN) at the close but never captured
        self.tail_gap_bytes = tail_gap_bytes
        self.truncated_bytes = truncated_bytes  # stream bytes on the wire but cut by the snaplen
        # copies of bytes already delivered (retransmissions, duplicates, overlaps)
        self.retransmitted_bytes = retransmitted_bytes
        self.out_of_order_segments = out_of_order_segments
        # bytes older than the first byte seen in a direction (capture began mid-stream)
        self.before_start_bytes = before_start_bytes
        self.after_close_segments = after_close_segments  # stray segments of a closed connection (last ACKs)
        self.after_close_bytes = after_close_bytes
        self.stray_resets = stray_resets  # RSTs of connections never otherwise seen
        self.closed = {} if closed is None else closed  # close reason -> connections

    def add(self, other: ReassemblyStats) -> None:
        for name in fields_of(type(self)):
            if name == "closed":
                for reason, n in other.closed.items():
                    self.closed[reason] = self.closed.get(reason, 0) + n
            else:
                setattr(self, name, getattr(self, name) + getattr(other, name))


class Reassembler:
    def __init__(self, listener: ConnectionListener, max_buffered_bytes: int = 4 << 20,
                 reorder_tolerance: int = 32) -> None:
        self.max_buffered_bytes = max_buffered_bytes
        self.reorder_tolerance = reorder_tolerance
        self.stats = ReassemblyStats()
        self.listener = listener
        self._conns: dict[FourTuple, TcpConnection] = {}  # both directions' keys
        # key -> (close time, {sender: next sequence number it would send}),
        # oldest first (an OrderedDict: forgetting the oldest is O(1), where a
        # dict's first entry after many deletions takes a scan to find)
        self._recently_closed: OrderedDict[FourTuple, tuple[int, dict[Any, Any], dict[Any, Any]]] = OrderedDict()
        self._next_id = 0
        self._arrivals = 0
        # Reset connections waiting out their straggler window, and
        # acknowledged holes waiting to be declared: (deadline counted in
        # segments of the whole run, conn). The per-connection bound
        # (reorder_tolerance) decides when a connection is fed alone; this
        # one, much larger, stops a quiet connection from waiting until the
        # end of a long capture.
        # An entry names the half whose hole it is for (None: a RST's close)
        # and is obeyed only while that half still holds that same deadline.
        self._timers: deque[tuple[int, TcpConnection, _Half | None]] = deque()
        self._global_grace = max(1024, 8 * reorder_tolerance)

    @property
    def open_connections(self) -> list[TcpConnection]:
        """The open connections in the order they opened: each one's two keys
        sit side by side in the table (added together in `_open`, removed
        together in `_close`), in the order of their ids."""
        return list(self._conns.values())[::2]

    @property
    def open_connection_count(self) -> int:
        return len(self._conns) // 2

    def evict(self, count: int) -> int:
        """Close the `count` least recently active connections (reason
        "evicted"), as when too many are open at once; returns how many."""
        oldest = sorted(self.open_connections, key=lambda c: (c.last.capture_index, c.last.frame_number))
        for conn in oldest[:count]:
            self._close(conn, "evicted", None)
        return min(count, len(oldest))

    # -- public API -------------------------------------------------------------

    def feed(self, seg: TcpSegment) -> None:
        """Take one segment; the listener and the sinks hear what it causes."""
        stats = self.stats
        stats.segments += 1
        flags = seg.flags
        conn = self._conns.get((seg.src, seg.sport, seg.dst, seg.dport))
        if conn is not None and not flags & _SYN_FIN_RST and conn.closing is None:
            # The common segment, in one go: an open connection, no handshake
            # or close flags, nothing held in either direction, no timer due,
            # and its whole payload (if any) exactly at the next offset.
            timers = self._timers
            first, second = conn.halves
            if (not (timers and (timers[0][0] <= stats.segments or timers[0][1].closed))
                    and not first.pending and not second.pending and first.fin is None and second.fin is None):
                key = conn.key
                if seg.sport == key[1] and seg.src == key[0]:
                    direction, half, peer = 0, first, second
                else:
                    direction, half, peer = 1, second, first
                plen = seg.payload_len
                nxt = half.next
                base = half.base
                if not plen or (base is not None and not (seg.seq - base - nxt) & _MASK
                                and len(seg.payload) == plen):
                    conn.segments += 1
                    conn.last = seg
                    if flags & ACK:
                        pbase = peer.base
                        if pbase is not None:
                            pnext = peer.next
                            acked = pnext + (((seg.ack - pbase - pnext + _HALF) & _MASK) - _HALF)
                            if acked > peer.acked:
                                peer.acked = acked
                                if peer.probe_end is not None:
                                    peer.acked_until(acked, seg.ts)
                        if conn.ack_ts is None and direction == 0 and conn.syn_ack_ts is not None:
                            conn.ack_ts = seg.ts
                    first.deadline = second.deadline = None  # no hole is held in either direction
                    if plen:
                        stats.delivered_bytes += plen
                        half.next = nxt + plen
                        if half.probe_end is None and half.samples < _RTT_SAMPLES:
                            half.start_probe(nxt + plen, seg.ts)
                        conn.sinks[direction].data(nxt, seg.payload, seg)
                    return
        self._feed(seg, conn)

    def finish(self) -> None:
        """Flush held data (as gaps where holes remain) and close every open connection."""
        for _ in self.closing():
            pass

    def closing(self) -> Iterator[TcpConnection]:
        """`finish()` one connection at a time, in the order they opened:
        each is yielded once closed (its listener has heard everything), and
        the reassembler keeps no reference to it, so a caller that lets it go
        frees it before the next closes."""
        conns = self.open_connections
        # the table goes at once (no segment can come any more): a removal
        # of each connection's two keys would cost two hashed lookups in a
        # table as large as the open connections
        self._conns.clear()
        self._timers.clear()
        for i, conn in enumerate(conns):
            conns[i] = None  # type: ignore[call-overload]
            if conn.closing is not None:
                reason = "rst"
            elif conn.halves[0].fin is not None and conn.halves[1].fin is not None:
                reason = "fin"  # ended normally; a hole before a FIN kept it open
            else:
                reason = "end-of-capture"
            self._close(conn, reason, None, remember=False)
            yield conn

    def start_afresh(self) -> None:
        """After `closing()`: forget the closed connections as well (their
        tombstones) and number connections from 0 again, so the segments fed
        next meet what a new Reassembler would meet; the counts (`stats`)
        go on, as they are summed anyway."""
        if self._conns:
            raise RuntimeError("start_afresh with connections still open")
        self._recently_closed.clear()
        self._timers.clear()
        self._next_id = 0
        self._arrivals = 0

    def _feed(self, seg: TcpSegment, conn: TcpConnection | None) -> None:
        """Every segment the common case does not cover."""
        flags = seg.flags
        if conn is None:
            key = (seg.src, seg.sport, seg.dst, seg.dport)
            tombstone = self._recently_closed.get(key)
            if tombstone is not None:
                if self._belongs_to_closed(seg, *tombstone):
                    self.stats.after_close_segments += 1
                    self.stats.after_close_bytes += seg.payload_len
                    return
                self._forget_tombstone(key)
            if flags & RST and not seg.payload_len:
                self.stats.stray_resets += 1
                return
            conn = self._open(seg)
        elif flags & SYN and not flags & ACK and self._is_new_syn(conn, seg):
            self._close(conn, "rst" if conn.closing is not None else "port-reuse", seg)
            self._forget_tombstone((seg.src, seg.sport, seg.dst, seg.dport))
            conn = self._open(seg)

        conn.segments += 1
        conn.last = seg
        key = conn.key
        direction = 0 if seg.sport == key[1] and seg.src == key[0] else 1
        if flags & SYN and (direction == 1) == (not flags & ACK) and self._untouched(conn):
            # The capture showed a segment of the responder before the SYN:
            # the handshake tells who initiated, and nothing was delivered yet.
            conn.key, conn.reverse_key = conn.reverse_key, conn.key
            conn.halves = (conn.halves[1], conn.halves[0])
            # (the sinks stay: nothing reached them, and sinks[d] hears direction d)
            direction = 1 - direction
        half = conn.halves[direction]
        peer = conn.halves[1 - direction]

        start = seg.seq
        if flags & SYN:
            start = (start + 1) & _MASK
        if half.fin == 0 and self._fin_first(half, start) and (flags & SYN or seg.payload_len):
            # the capture showed this side's FIN before its SYN or data: the
            # stream starts at the earlier sequence number (nothing was delivered)
            behind = (half.base - start) & _MASK  # type: ignore[operator]
            half.base = start
            half.fin = behind
            if half.acked > 0:
                half.acked += behind
        if flags & SYN:
            if half.syn_seq is None:
                half.syn_seq = seg.seq
                if direction == 0 and not flags & ACK:
                    conn.saw_syn = True  # a SYN the capture showed late
            if half.base is None:
                half.base = start
            if direction == 0 and not flags & ACK:
                if conn.syn_ts is None:
                    conn.syn_ts = seg.ts
            elif direction == 1 and flags & ACK and conn.syn_ack_ts is None:
                conn.syn_ack_ts = seg.ts
        elif flags & ACK and direction == 0 and conn.ack_ts is None and conn.syn_ack_ts is not None:
            conn.ack_ts = seg.ts
        plen = seg.payload_len
        if half.base is None and (plen or flags & FIN):
            half.base = start
        if half.base is not None and (plen or flags & FIN):
            nxt = half.next
            off = nxt + (((start - half.base - nxt + _HALF) & _MASK) - _HALF)
            if plen:
                self._accept(conn, direction, half, off, seg)
            if flags & FIN and half.fin is None:
                half.fin = off + plen
        if flags & ACK and peer.base is not None:
            nxt = peer.next
            acked = nxt + (((seg.ack - peer.base - nxt + _HALF) & _MASK) - _HALF)
            if acked > peer.acked:
                peer.acked = acked
                if peer.probe_end is not None:
                    peer.acked_until(acked, seg.ts)

        if flags & RST and conn.closing is None:
            # Close a little later: a capture may show the RST before data
            # segments that preceded it.
            conn.closing = conn.segments
            self._timers.append((self.stats.segments + self._global_grace, conn, None))
        if conn.closing is not None:
            if conn.segments - conn.closing >= self.reorder_tolerance:
                self._close(conn, "rst", seg)
            if self._timers and self._timers[0][0] <= self.stats.segments:
                self._run_timers()
            return
        for d, h in enumerate(conn.halves):
            if h.acked > h.next and (h.pending or h.fin is not None):
                self._check_acked_hole(conn, d, h, seg)
            elif h.deadline is not None:
                h.deadline = None
        if self._fins_done(conn):
            self._close(conn, "fin", seg)
        timers = self._timers
        if timers and (timers[0][0] <= self.stats.segments or timers[0][1].closed):
            self._run_timers()

    def _check_acked_hole(self, conn: TcpConnection, d: int, h: _Half, seg: TcpSegment) -> None:
        """The peer acknowledged bytes past this direction's next offset."""
        if not h.has_hole():
            h.deadline = None
            return
        if h.deadline is None or h.hole != h.next:
            # a new first hole (the one the deadline was for is filled or
            # declared): its own grace period from now
            h.deadline = conn.segments + self.reorder_tolerance
            h.hole = h.next
            h.due = self.stats.segments + self._global_grace
            self._timers.append((h.due, conn, h))
        if conn.segments >= h.deadline:
            h.deadline = None
            self._declare_acked_holes(conn, d, h, seg)

    def _run_timers(self) -> None:
        """Close reset connections and declare acknowledged holes whose
        run-wide deadline has passed. The segment being fed belongs to some
        other connection, so pieces made here carry their connection's own
        last segment."""
        timers = self._timers
        now = self.stats.segments
        while timers and (timers[0][1].closed or timers[0][0] <= now):
            due, conn, half = timers.popleft()
            if conn.closed:
                continue
            if half is None:
                self._close(conn, "rst", None)
                continue
            # a timer left by a hole since filled or declared must not cut
            # short the grace period of a later one
            if conn.closing is not None or half.deadline is None or half.due != due or half.hole != half.next:
                continue
            if half.acked > half.next and half.has_hole():
                half.deadline = None
                self._declare_acked_holes(conn, conn.halves.index(half), half, None)
            if self._fins_done(conn):
                self._close(conn, "fin", None)

    @staticmethod
    def _fins_done(conn: TcpConnection) -> bool:
        a, b = conn.halves
        return a.fin is not None and b.fin is not None and a.next >= a.fin and b.next >= b.fin

    # -- connections ------------------------------------------------------------

    def _open(self, seg: TcpSegment) -> TcpConnection:
        # (address, port) as the segment's own objects, kept in the table's
        # keys: the ports are the reader's shared ints (read as ints, a
        # compiled build would keep fresh ones, four per connection)
        ends: Any = seg
        src, dst = (ends.src, ends.sport), (ends.dst, ends.dport)
        flags = seg.flags
        if flags & SYN and flags & ACK:
            # The SYN itself was not captured, but a SYN-ACK names its sender.
            initiator, responder = dst, src
        else:
            initiator, responder = src, dst
        conn = TcpConnection(self._next_id, initiator, responder, seg, bool(flags & SYN and not flags & ACK))
        self._next_id += 1
        self.stats.connections += 1
        for key in conn.keys:
            self._conns[key] = conn
        self.listener.opened(conn)
        return conn

    @staticmethod
    def _untouched(conn: TcpConnection) -> bool:
        return all(h.next == 0 and not h.pending and not h.fin for h in conn.halves)  # (a FIN alone delivers nothing)

    @staticmethod
    def _fin_first(half: _Half, start: int) -> bool:
        """Whether all this side has shown is a payload-less FIN, a little
        after sequence number `start` (its SYN or data, shown late)."""
        if half.fin != 0 or half.next or half.pending or half.syn_seq is not None or half.base is None:
            return False
        return 0 < (half.base - start) & _MASK <= _STRAGGLER_WINDOW

    @staticmethod
    def _is_new_syn(conn: TcpConnection, seg: TcpSegment) -> bool:
        """A SYN on a known 4-tuple: this connection's SYN (retransmitted, or
        late because the capture reordered it), or a new connection reusing
        the ports?"""
        direction = 0 if (seg.src, seg.sport) == conn.initiator else 1
        half = conn.halves[direction]
        if half.syn_seq is not None:
            return seg.seq != half.syn_seq
        if half.base is not None:
            return (seg.seq + 1 - half.base) & _MASK != 0 and not Reassembler._fin_first(half, seg.seq + 1)
        # This side has sent nothing with a sequence number yet: a late SYN
        # unless the other side is already past its handshake data.
        peer = conn.halves[1 - direction]
        return peer.next > 0 or bool(peer.pending) or conn.closing is not None

    def _close(self, conn: TcpConnection, reason: str, seg: TcpSegment | None, remember: bool = True) -> None:
        for direction in (0, 1):
            self._flush(conn, direction, conn.halves[direction], seg)
        conn.closed = True
        self.stats.closed[reason] = self.stats.closed.get(reason, 0) + 1
        self.listener.closed(conn, reason)
        if not remember:  # the end (`closing`, which emptied the table): no straggler can come
            return
        when = seg.ts if seg is not None else conn.last.ts
        ends, syns = {}, {}
        for sender, h in zip((conn.initiator, conn.responder), conn.halves):
            ends[sender] = None if h.base is None else (h.base + h.next) & _MASK
            syns[sender] = h.syn_seq
        for key in conn.keys:
            if self._conns.get(key) is conn:
                del self._conns[key]
            self._recently_closed[key] = (when, ends, syns)
        while len(self._recently_closed) > _TOMBSTONE_LIMIT:
            self._recently_closed.popitem(last=False)

    @staticmethod
    def _belongs_to_closed(seg: TcpSegment, closed_at: int, ends: dict[Any, Any], syns: dict[Any, Any]) -> bool:
        """A straggler of the connection that closed on this 4-tuple (its last
        ACK, a retransmission, a copy of its own SYN or SYN-ACK), rather than
        the start of a new one?"""
        if seg.ts - closed_at > _AFTER_CLOSE_NS:
            return False
        if seg.flags & SYN:  # a new connection's SYN has a sequence number of its own
            return syns.get((seg.src, seg.sport)) == seg.seq
        expected = ends.get((seg.src, seg.sport))
        if expected is None:
            return True
        distance: int = ((seg.seq - expected + _HALF) & _MASK) - _HALF
        return -_STRAGGLER_WINDOW <= distance <= _STRAGGLER_WINDOW

    def _forget_tombstone(self, key: FourTuple) -> None:
        self._recently_closed.pop(key, None)
        self._recently_closed.pop((key[2], key[3], key[0], key[1]), None)

    # -- stream bytes -------------------------------------------------------------

    def _accept(self, conn: TcpConnection, direction: int, half: _Half, off: int, seg: TcpSegment) -> None:
        plen = seg.payload_len
        nxt = half.next
        if off != nxt:  # a retransmission or a hole: no timing from here (Karn's rule)
            half.probe_end = None
        if off + plen <= nxt:
            if off < 0:
                self.stats.before_start_bytes += min(plen, -off)
                self.stats.retransmitted_bytes += max(0, off + plen)
            else:
                self.stats.retransmitted_bytes += plen
            return
        if off > nxt:
            self.stats.out_of_order_segments += 1
            if half.pending is None:
                half.pending = []
            heapq.heappush(half.pending, (off, self._arrivals, seg))
            self._arrivals += 1
            half.pending_bytes += plen
            while half.pending_bytes > self.max_buffered_bytes and half.pending:
                self._gap(conn, direction, half, half.pending[0][0], seg)
                self._drain(conn, direction, half, None)
            return
        self._deliver(conn, direction, half, off, seg, seg)
        if half.pending:
            self._drain(conn, direction, half, seg)

    def _deliver(self, conn: TcpConnection, direction: int, half: _Half, off: int, seg: TcpSegment,
                 trigger: Stamp) -> None:
        """Deliver the part of `seg` (at stream offset `off`) beyond half.next."""
        nxt = half.next
        skip = nxt - off
        payload = seg.payload
        length = seg.payload_len - skip
        stats = self.stats
        if skip > 0:
            if off < 0:
                stats.before_start_bytes += min(skip, -off)
                stats.retransmitted_bytes += max(0, skip + off)
            else:
                stats.retransmitted_bytes += skip
            payload = payload[skip:]
        captured = len(payload)
        stats.delivered_bytes += captured
        half.next = nxt + length
        if captured == length:
            conn.sinks[direction].data(nxt, payload, trigger)
        else:
            stats.truncated_bytes += length - captured
            conn.sinks[direction].truncated(nxt, length, payload, trigger)

    def _drain(self, conn: TcpConnection, direction: int, half: _Half, trigger: Stamp | None) -> None:
        """Deliver held segments that now start at or before half.next. With no
        trigger (after a gap), each carries its own time."""
        pending = half.pending
        while pending and pending[0][0] <= half.next:
            off, _, seg = heapq.heappop(pending)
            half.pending_bytes -= seg.payload_len
            if off + seg.payload_len <= half.next:
                self.stats.retransmitted_bytes += seg.payload_len
                continue
            self._deliver(conn, direction, half, off, seg, trigger or seg)

    def _gap(self, conn: TcpConnection, direction: int, half: _Half, target: int, seg: Stamp | None,
             tail: bool = False) -> None:
        nxt = half.next
        if target <= nxt:
            return
        stats = self.stats
        stats.gap_bytes += target - nxt
        stats.gaps += 1
        if tail:
            stats.tail_gap_bytes += target - nxt
        half.next = target
        conn.sinks[direction].gap(nxt, target - nxt, seg if seg is not None else conn.last)

    def _declare_acked_holes(self, conn: TcpConnection, direction: int, half: _Half, seg: TcpSegment | None) -> None:
        """Declare the first hole a gap. A later hole gets its own grace
        period: the data filling it may still be a few segments away."""
        if half.acked <= half.next:
            return
        if half.pending:
            target = half.pending[0][0]
        elif half.fin is not None and half.fin > half.next:
            target = half.fin
        else:
            return
        self._gap(conn, direction, half, target, seg)
        self._drain(conn, direction, half, None)

    def _flush(self, conn: TcpConnection, direction: int, half: _Half, seg: TcpSegment | None) -> None:
        while half.pending:
            self._gap(conn, direction, half, half.pending[0][0], seg)
            self._drain(conn, direction, half, None)
        # Bytes the peer acknowledged (or that precede the FIN) but the capture never showed.
        tail = half.fin if half.fin is not None else half.acked
        if half.base is not None:
            self._gap(conn, direction, half, tail, seg, tail=True)

