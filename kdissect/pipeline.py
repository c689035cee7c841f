"""Wire reassembly, detection, framing and pairing into one streaming dissector.

    d = Dissector(ports=(9092,), capture_names=["a.pcap"])
    for segment in read_segments(paths):
        for exchange in d.feed(segment):
            ...
    rest = d.finish()
    d.accounting

The dissector holds only open connections (their undelivered bytes and the
requests still waiting for a response), so memory follows the number of open
exchanges, not the size of the capture. Fed only the segments of one TCP
4-tuple it yields exactly that connection's exchanges (the Spark job relies on
this). Stream numbers are given in the order connections are classified as
Kafka; the classifying segment's `(capture_index, frame_number)` is kept on
every exchange as `stream_key` so a distributed run can rank them the same way.
"""

from __future__ import annotations

from pathlib import Path
from struct import Struct
from typing import Any, Iterable, Iterator, Sequence

from kdissect import protocol
from kdissect.accounting import Accounting
from kdissect.detect import (
    DEFAULT_PORTS,
    MIN_REQUEST_SIZE,
    client_direction_by_port,
    starts_like_request,
)
from kdissect.exchange import Exchange, endpoint
from kdissect.framing import HUNT_PREFIX, FrameReader
from kdissect.pairing import Pairer

_INT32 = Struct(">i")

_UNDECIDED, _KAFKA, _IGNORED = 0, 1, 2
# bytes held while deciding whether a connection on another port is Kafka
_MAX_HELD_BYTES = 1 << 20


def _starts_aligned(conn: Any, direction: int) -> bool:
    """Whether a direction's first byte is the first byte after its SYN (so a
    frame starts there), rather than somewhere inside a running stream."""
    if getattr(conn, "saw_syn", False):
        return True
    halves = getattr(conn, "halves", None)  # the reassembler knows each side's ISN
    if halves is not None:
        return getattr(halves[direction], "syn_seq", None) is not None
    return False


def _starts_like_tls(data: bytes) -> bool:
    """A TLS handshake record header (content type 22, version 3.x). As a Kafka
    size field these bytes would announce a frame of over 360 MB."""
    return len(data) >= 3 and data[0] == 0x16 and data[1] == 0x03 and data[2] <= 0x04


class _Conn:
    """Per-connection state."""

    __slots__ = ("conn", "state", "client_dir", "readers", "pairer", "held", "held_bytes",
                 "verdicts", "closed", "fresh", "hot")

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.state = _UNDECIDED
        self.client_dir = 0
        self.readers: list[FrameReader] | None = None
        self.pairer: Pairer | None = None
        self.held: list[tuple[int, Any]] = []
        self.held_bytes = 0
        self.verdicts: list[bool | None] = [None, None]
        self.closed = False
        self.fresh = [True, True]  # no chunk yet in this direction
        # per direction, once it is Kafka and started (not fresh): the
        # (reader.push_data, pairer.on_request/on_response) of feed_many's
        # hot path, bound once; None otherwise (reset when ignored or closed)
        self.hot: list[tuple[Any, Any] | None] = [None, None]


class Dissector:
    """Segments in capture order -> Exchanges, with an Accounting of everything seen."""

    def __init__(
        self,
        ports: Iterable[int] = DEFAULT_PORTS,
        detect: bool = True,
        capture_names: Sequence[str] | None = None,
        keep_messages: bool = True,
        reassembler: Any = None,
    ) -> None:
        self.ports = frozenset(int(p) for p in ports)
        self.detect = detect
        self.capture_names = list(capture_names or [])
        self.keep_messages = keep_messages
        if reassembler is None:
            from kdissect.reassembly import Reassembler

            reassembler = Reassembler()
        self._reassembler = reassembler
        # the reassembler's event-free short cut for in-order segments, if it has one
        self._in_order = getattr(reassembler, "feed_in_order", None)
        self.accounting = Accounting()
        self._conns: dict[int, _Conn] = {}
        self._next_stream = 0
        self._key: tuple[int, int] | None = (0, 0)  # segment being fed (None in finish)
        # (capture_index, frame_number) at which each Kafka connection was
        # classified, in stream-number order (also for connections without exchanges)
        self.classification_keys: list[tuple[int, int]] = []

    # -- public --------------------------------------------------------------

    def feed(self, segment: Any) -> list[Exchange]:
        self.accounting.segments += 1
        if self._in_order is not None:
            hit = self._in_order(segment)
            if hit is not None:
                # the fused fast path: an in-order segment of an open connection
                if not hit:
                    return []  # no payload: no event
                return self._in_order_data(segment, *hit)
        return self._feed_events(segment)

    def feed_many(self, segments: Iterable[Any]) -> Iterator[Exchange]:
        """The exchanges of `feed(s)` for each of `segments` in turn (not
        those of `finish()`); the hot path inlined into one loop."""
        acc = self.accounting
        in_order = self._in_order
        if in_order is None:
            for segment in segments:
                out = self.feed(segment)
                if out:
                    yield from out
            return
        conns = self._conns
        feed_events = self._feed_events
        in_order_data = self._in_order_data
        for segment in segments:
            acc.segments += 1
            hit = in_order(segment)
            if hit is None:
                out = feed_events(segment)
            elif not hit:
                continue  # no payload: no event
            else:
                conn, direction, offset = hit
                state = conns.get(conn.id)
                hot = None if state is None else state.hot[direction]
                if hot is None:
                    if state is None or state.state != _KAFKA or state.fresh[direction]:
                        hot = None
                    else:
                        pairer = state.pairer
                        hot = state.hot[direction] = (
                            state.readers[direction].push_data,  # type: ignore[index]
                            pairer.on_request if direction == state.client_dir else pairer.on_response)  # type: ignore[union-attr]
                if hot is None:
                    out = in_order_data(segment, conn, direction, offset)
                else:
                    # (as in _in_order_data)
                    payload = segment.payload
                    acc.stream_bytes += len(payload)
                    push, handle = hot
                    frames = push(offset, payload, segment)
                    if not frames:
                        continue
                    out = []
                    for frame in frames:
                        handle(frame, out)
            if out:
                yield from out

    def _feed_events(self, segment: Any) -> list[Exchange]:
        """feed() through the reassembler's events (the general path)."""
        events = self._reassembler.feed(segment)
        if not events:
            return []
        self._key = (segment.capture_index, segment.frame_number)
        out: list[Exchange] = []
        conns = self._conns
        for event in events:
            if event.__class__.__name__ == "Data":
                state = conns.get(event.conn.id)
                if state is not None and state.state == _KAFKA:
                    # bytes of a known Kafka connection
                    chunk = event.chunk
                    direction = event.direction
                    if state.fresh[direction] and not self._start_direction(state, direction, chunk):
                        continue  # not Kafka after all (TLS)
                    self.accounting.stream_bytes += chunk.length
                    reader = state.readers[direction]  # type: ignore[index]
                    frames = reader.push(chunk)
                    if frames:
                        pairer = state.pairer
                        handle = pairer.on_request if direction == state.client_dir else pairer.on_response  # type: ignore[union-attr]
                        for frame in frames:
                            handle(frame, out)
                    continue
            self._event(event, out)
        return out

    def _in_order_data(self, segment: Any, conn: Any, direction: int, offset: int) -> list[Exchange]:
        """What feed does with the one Data event the reassembler would have
        made for this segment (see Reassembler.feed_in_order), without it."""
        out: list[Exchange] = []
        state = self._conns.get(conn.id)
        if state is None or state.state != _KAFKA or state.fresh[direction]:
            # not the hot path: the general handling of that event
            from kdissect.reassembly import Chunk, Data

            self._key = (segment.capture_index, segment.frame_number)
            payload = segment.payload
            chunk = Chunk("data", offset, len(payload), payload, segment.ts, segment.capture_index,
                          segment.frame_number)
            self._event(Data(conn, direction, chunk), out)
            return out
        # (the _key of the segment is only read while classifying: not here)
        payload = segment.payload
        self.accounting.stream_bytes += len(payload)
        frames = state.readers[direction].push_data(offset, payload, segment)  # type: ignore[index]
        if frames:
            pairer = state.pairer
            handle = pairer.on_request if direction == state.client_dir else pairer.on_response  # type: ignore[union-attr]
            for frame in frames:
                handle(frame, out)
        return out

    def finish(self) -> list[Exchange]:
        out: list[Exchange] = []
        self._key = None  # type: ignore[assignment]
        for event in self._reassembler.finish():
            self._event(event, out)
        for state in list(self._conns.values()):
            self._close(state, "end of capture", out)
        self._conns.clear()
        return out

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    # -- events --------------------------------------------------------------

    def _event(self, event: Any, out: list[Exchange]) -> None:
        kind = event.__class__.__name__
        if kind == "Data":
            state = self._conns.get(event.conn.id)
            if state is None:  # data without an Opened event: open it now
                state = self._open(event.conn)
            self._data(state, event.direction, event.chunk, out)
        elif kind == "Opened":
            if event.conn.id not in self._conns:
                self._open(event.conn)
        elif kind == "Closed":
            state = self._conns.pop(event.conn.id, None)
            if state is not None:
                self._close(state, "connection close", out)

    def _open(self, conn: Any) -> _Conn:
        state = _Conn(conn)
        self._conns[conn.id] = state
        self.accounting.connections += 1
        client_dir = client_direction_by_port(conn.initiator, conn.responder, self.ports)
        if client_dir is not None:
            self._classify(state, client_dir, tuple(conn.first_segment))
        elif not self.detect:
            self._ignore(state)
        return state

    def _data(self, state: _Conn, direction: int, chunk: Any, out: list[Exchange]) -> None:
        if state.state == _KAFKA:
            if state.fresh[direction] and not self._start_direction(state, direction, chunk):
                return  # not Kafka after all (TLS)
            self.accounting.stream_bytes += chunk.length
            reader = state.readers[direction]  # type: ignore[index]
            frames = reader.push(chunk)
            if frames:
                pairer = state.pairer
                if direction == state.client_dir:
                    for frame in frames:
                        pairer.on_request(frame, out)  # type: ignore[union-attr]
                else:
                    for frame in frames:
                        pairer.on_response(frame, out)  # type: ignore[union-attr]
            return
        if state.state == _IGNORED:
            self.accounting.non_kafka_bytes += chunk.length
            return
        # undecided: judge the first captured bytes of each direction
        state.held.append((direction, chunk))
        state.held_bytes += chunk.length
        verdicts = state.verdicts
        if verdicts[direction] is None:
            # the direction's first captured bytes, up to the first hole
            start = bytearray()
            complete = False  # no more contiguous bytes can be added to `start`
            for d, c in state.held:
                if d != direction:
                    continue
                start += c.data
                if c.kind != "data" or len(start) >= 4 + HUNT_PREFIX:
                    complete = True
                    break
            if complete or len(start) >= 4 + MIN_REQUEST_SIZE:
                # (a direction that starts with lost bytes cannot be judged: False)
                verdicts[direction] = bool(start) and starts_like_request(bytes(start))
        if verdicts[direction]:
            held = state.held
            state.held = []
            # the segment being fed; during finish() (no segment), the chunk's own
            key = (chunk.capture_index, chunk.frame_number) if self._key is None else self._key
            self._classify(state, direction, key)
            for d, c in held:
                self._data(state, d, c, out)
        elif (verdicts[0] is False and verdicts[1] is False) or state.held_bytes > _MAX_HELD_BYTES:
            held_bytes = state.held_bytes
            self._ignore(state)
            self.accounting.non_kafka_bytes += held_bytes

    def _classify(self, state: _Conn, client_dir: int, key: tuple[int, int]) -> None:
        conn = state.conn
        state.state = _KAFKA
        state.client_dir = client_dir
        self.accounting.kafka_connections += 1
        ends = (conn.initiator, conn.responder)
        client = endpoint(*ends[client_dir])
        broker = endpoint(*ends[1 - client_dir])
        key = (int(key[0]), int(key[1]))
        self.classification_keys.append(key)
        pairer = Pairer(self.accounting, self.capture_names, self._next_stream, client, broker,
                        key, self.keep_messages)
        self._next_stream += 1
        aligned = True  # decided per direction at its first chunk
        acc = self.accounting

        def lost_request_step() -> None:
            acc.gaps += 1

        def lost_response_step() -> None:
            acc.gaps += 1
            pairer.note_response_gap()

        looks_like_request = protocol.looks_like_request

        def plausible_request(prefix: bytes, size: int) -> bool:
            return bool(looks_like_request(prefix, size))

        def plausible_response(prefix: bytes, size: int) -> bool:
            return len(prefix) >= 4 and pairer.expects(_INT32.unpack_from(prefix, 0)[0])

        def response_ending_at_packet_end(prefix: bytes, size: int) -> bool:
            # a response whose request is not in the capture (it may have been
            # sent before the capture started): accepted only when its size
            # lands exactly on the end of the captured bytes
            return len(prefix) >= 4 and _INT32.unpack_from(prefix, 0)[0] >= 0

        requests = FrameReader(client_dir, plausible_request, aligned, MIN_REQUEST_SIZE)
        responses = FrameReader(1 - client_dir, plausible_response, aligned, 4)
        responses.plausible_exact = response_ending_at_packet_end
        requests.on_hunt = lost_request_step
        responses.on_hunt = lost_response_step
        readers = [requests, responses] if client_dir == 0 else [responses, requests]
        state.readers = readers
        state.pairer = pairer

    def _start_direction(self, state: _Conn, direction: int, chunk: Any) -> bool:
        """First chunk of a direction of a Kafka connection: set the framing's
        alignment; False (and the connection dropped) if the client opens with
        a TLS record, i.e. this is encrypted Kafka (or TLS) on a Kafka port."""
        state.fresh[direction] = False
        aligned = _starts_aligned(state.conn, direction)
        state.readers[direction].set_aligned(aligned)  # type: ignore[index]
        if aligned and direction == state.client_dir and _starts_like_tls(chunk.data):
            acc = self.accounting
            acc.kafka_connections -= 1
            acc.tls_connections += 1
            self._ignore(state)
            acc.non_kafka_bytes += chunk.length
            return False
        return True

    def _ignore(self, state: _Conn) -> None:
        state.state = _IGNORED
        state.hot = [None, None]
        state.held = []
        state.held_bytes = 0
        self.accounting.non_kafka_connections += 1

    def _close(self, state: _Conn, reason: str, out: list[Exchange]) -> None:
        if state.closed:
            return
        state.closed = True
        state.hot = [None, None]
        if state.state == _UNDECIDED:
            # never showed a request: not Kafka
            held_bytes = state.held_bytes
            self._ignore(state)
            self.accounting.non_kafka_bytes += held_bytes
            return
        if state.state != _KAFKA:
            return
        pairer = state.pairer
        acc = self.accounting
        for direction, reader in enumerate(state.readers):  # type: ignore[arg-type]
            for frame in reader.finish():
                if direction == state.client_dir:
                    pairer.on_request(frame, out)  # type: ignore[union-attr]
                else:
                    pairer.on_response(frame, out)  # type: ignore[union-attr]
            stats = reader.stats
            acc.framed_bytes += stats.framed_bytes
            acc.gap_bytes += stats.gap_bytes
            acc.snaplen_bytes += stats.snaplen_bytes
            acc.skipped_bytes += stats.skipped_bytes
            acc.resyncs += stats.resyncs
        pairer.flush(reason, out)  # type: ignore[union-attr]


class Analysis:
    """Iterate the exchanges of a capture set; `accounting` fills in as you go
    (and includes the capture reader's counts once the iteration is over)."""

    def __init__(self, paths: Sequence[str | Path], ports: Iterable[int] = DEFAULT_PORTS,
                 detect: bool = True, keep_messages: bool = False, progress: bool = False) -> None:
        from kdissect.capture import CaptureSet, ReadStats

        self.read_stats = ReadStats()
        self.capture_set = CaptureSet([str(p) for p in paths], self.read_stats)
        names = [Path(p).name for p in self.capture_set.paths]
        self.dissector = Dissector(ports, detect, names, keep_messages)
        self.accounting = self.dissector.accounting
        self.progress = progress

    def __iter__(self) -> Iterator[Exchange]:
        dissector = self.dissector
        segments: Iterable[Any] = self.capture_set.segments()
        bar = None
        if self.progress:
            from tqdm import tqdm

            bar = tqdm(segments, unit=" packets", unit_scale=True, leave=False, mininterval=0.5)
            segments = bar
        try:
            yield from dissector.feed_many(segments)
        finally:
            if bar is not None:
                bar.close()
        yield from dissector.finish()
        self.accounting.add_read_stats(self.read_stats)


def analyze(
    paths: Sequence[str | Path],
    ports: Iterable[int] = DEFAULT_PORTS,
    detect: bool = True,
    keep_messages: bool = False,
    progress: bool = False,
) -> tuple[Iterator[Exchange], Accounting]:
    """(exchanges, accounting) for a capture set; the accounting is complete
    once the iterator is exhausted."""
    run = Analysis(paths, ports, detect, keep_messages, progress)
    return iter(run), run.accounting
