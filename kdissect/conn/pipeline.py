"""Wire reassembly, detection, framing and pairing into one streaming dissector.

    d = Dissector(ports=(9092,), capture_names=["a.pcap"])
    for segment in read_segments(paths):
        for exchange in d.feed(segment):
            ...
    rest = d.finish()
    d.accounting

The path of a byte: the `Reassembler` hands each direction's ordered bytes to
that direction's sink (`reassembly.DirectionSink`). A connection's sinks
start as `_Pending` (holding the first bytes until the connection is known
to be Kafka or not); a Kafka connection's sinks become `FrameReader`s whose
frames go to the connection's `Pairer`, whose exchanges come out of `feed`;
a TLS connection's become its `TlsConnection`'s ciphertext sinks, which
drive the decrypted streams' sinks (undecided, then FrameReaders) through
the same interface; another connection's sinks only count its bytes. There is one path for
every segment; per-connection state is created when it is needed (a
direction's reader at its first byte, the pairer at the first frame).

The dissector holds only open connections (their undelivered bytes and the
requests still waiting for a response), so memory follows the number of open
exchanges, not the size of the capture. Fed only the segments of one TCP
4-tuple it yields exactly that connection's exchanges (the Spark job relies on
this). A connection becomes Kafka at its first payload byte (by port, or by
the shape of its first bytes); one that never carries payload is not counted
as Kafka and takes no stream number. Stream numbers follow the order of
classification; the classifying segment's `(capture_index, frame_number)`
is kept on every exchange as `stream_key`, and with the packet's feed time
(`order_ts`, kdissect.wire.captureset) in `classification_keys`, so a
distributed run can rank them the same way.
"""

from __future__ import annotations

import gc
from array import array
from contextlib import contextmanager
from pathlib import Path
from struct import Struct
from typing import Any, Callable, Final, Iterable, Iterator, Sequence

from kdissect.model.accounting import Accounting
from kdissect.conn.connection_stats import ConnectionStats
from kdissect.conn.detect import (
    DEFAULT_PORTS,
    MIN_REQUEST_SIZE,
    client_direction_by_port,
    confirm_request,
    hunted_request,
    plausible_response,
    starts_like_request,
    starts_like_tls,
    sure_request,
)
from kdissect.model.exchange import Exchange, endpoint
from kdissect.model.packet import TcpSegment
from kdissect.conn.framing import HUNT_PREFIX, Frame, FrameReader, FramingStats, opens_partial_frame
from kdissect.conn.framing import _BIG_FRAME as BIG_FRAME  # (the size from which a reader collects in pieces)
from kdissect.conn.pairing import ConnectionInfo, PairedFrame, Pairer, lone_request
from kdissect.conn.pairing_stats import PairingStats
from kdissect.wire.reassembly import Reassembler, TcpConnection

_INT32 = Struct(">i")

# bytes held while deciding whether a connection on another port is Kafka
_MAX_HELD_BYTES = 1 << 20
# open connections before the least recently active are closed early
MAX_OPEN_CONNECTIONS = 500_000

# a connection's phase (Final: the compiled build reads them as constants)
_EMPTY: Final = 0
_UNDECIDED: Final = 1
_KAFKA: Final = 2
_IGNORED: Final = 3
_TLS: Final = 4

_CLOSE_REASONS = {"end-of-capture": "end of capture", "evicted": "the connection was evicted (too many open)"}


# a held piece (see _replay): (direction, kind, offset, length, captured bytes, stamp)
Piece = tuple[Any, ...]


def _replay(layer: Any, piece: Piece) -> None:
    """Hand one held piece to its direction's sink in `layer.sinks`. A held
    piece is a `reassembly.DirectionSink` call kept while its connection has
    no sink for it yet: one flat tuple (direction, kind: "data", "gap" or
    "truncated", offset, length, captured bytes, stamp), the least memory."""
    direction, kind, offset, length, data, stamp = piece
    sink = layer.sinks[direction]
    if kind == "data":
        sink.data(offset, data, stamp)
    elif kind == "gap":
        sink.gap(offset, length, stamp)
    else:
        sink.truncated(offset, length, data, stamp)


class _Ignored:
    """The sink of a connection that is not Kafka: its bytes are only counted
    (in `counter`, a ConnectionStats field)."""

    __slots__ = ("stats", "counter")

    def __init__(self, stats: ConnectionStats, counter: str = "non_kafka_bytes") -> None:
        self.stats = stats
        self.counter = counter

    def data(self, offset: int, payload: bytes, stamp: Any) -> None:
        setattr(self.stats, self.counter, getattr(self.stats, self.counter) + len(payload))

    def gap(self, offset: int, length: int, stamp: Any) -> None:
        pass

    def truncated(self, offset: int, length: int, prefix: bytes, stamp: Any) -> None:
        setattr(self.stats, self.counter, getattr(self.stats, self.counter) + length)


class _Plaintext:
    """The decrypted streams of a TLS connection: what its inner _Connection
    reads (the sinks it sets), in place of the TcpConnection's."""

    __slots__ = ("sinks",)

    def __init__(self) -> None:
        self.sinks: tuple[Any, Any] = (None, None)

    @staticmethod
    def saw_start(direction: int) -> bool:
        return True  # plaintext starts with the first application byte


class _Pending:
    """The sink of one direction before its handler is made: while the
    connection is not known to be Kafka, its bytes go to the connection's
    decision; once it is Kafka, to `_Connection.kafka`, which makes the
    direction's FrameReader (it takes this sink's place)."""

    __slots__ = ("state", "direction")

    def __init__(self, state: _Connection, direction: int) -> None:
        self.state = state
        self.direction = direction

    def data(self, offset: int, payload: bytes, stamp: Any) -> None:
        self.state.piece((self.direction, "data", offset, len(payload), payload, stamp))

    def gap(self, offset: int, length: int, stamp: Any) -> None:
        self.state.piece((self.direction, "gap", offset, length, b"", stamp))

    def truncated(self, offset: int, length: int, prefix: bytes, stamp: Any) -> None:
        self.state.piece((self.direction, "truncated", offset, length, prefix, stamp))


class _Connection:
    """One TCP connection's Kafka-level state (`TcpConnection.user`)."""

    __slots__ = ("dissector", "conn", "layer", "phase", "port_client", "client_dir", "pairer", "held", "held_bytes",
                 "verdicts", "stream", "tls", "inner")

    def __init__(self, dissector: Dissector, conn: TcpConnection, layer: Any = None) -> None:
        self.dissector = dissector
        self.conn = conn
        # whose sinks this state sets: the TcpConnection's, or for the
        # plaintext inside TLS the _Plaintext's
        self.layer = conn if layer is None else layer
        self.phase = _EMPTY
        # the rest is set when it is needed (a connection costs what it carries)
        self.tls: Any = None  # a TlsConnection, when this connection is TLS
        self.inner: _Connection | None = None  # the state of its plaintext
        self.port_client: int | None = None  # the client's side, when a Kafka port names it
        self.client_dir = 0
        self.pairer: Pairer | None = None  # made at the first frame
        # (a Kafka direction's FrameReader, made at its first byte, is its sink in layer.sinks)
        # while undecided: [held piece] (see _replay); then the one piece `kafka` holds, or ()
        self.held: Any = None
        self.held_bytes = 0
        self.verdicts: list[bool | None] | None = None  # first-bytes verdicts, when no port decides
        self.stream = -1  # once Kafka: its stream number (its classification key's index)

    def saw_start(self, direction: int) -> bool:
        """The layer's `saw_start`: the TcpConnection's (a call to compiled
        code), or for the plaintext inside TLS, always."""
        conn = self.conn
        return conn.saw_start(direction) if self.layer is conn else True

    def piece(self, piece: Piece) -> None:
        """A piece of a direction that has no sink of its own yet (a held
        piece: see _replay)."""
        if self.phase == _KAFKA:
            self.kafka(piece)
        else:
            self.undecided(piece)

    # the initiator's side's sink until its reader is made: what a
    # _Pending(self, 0) would do (a TCP connection's state is that sink
    # itself, one object less a connection)

    def data(self, offset: int, payload: bytes, stamp: Any) -> None:
        self.piece((0, "data", offset, len(payload), payload, stamp))

    def gap(self, offset: int, length: int, stamp: Any) -> None:
        self.piece((0, "gap", offset, length, b"", stamp))

    def truncated(self, offset: int, length: int, prefix: bytes, stamp: Any) -> None:
        self.piece((0, "truncated", offset, length, prefix, stamp))

    # -- before the connection is known ------------------------------------

    def undecided(self, piece: Piece) -> None:
        """A direction's bytes before the connection is known to be Kafka or not."""
        direction, stamp = piece[0], piece[5]
        d = self.dissector
        if self.phase == _EMPTY:
            self.phase = _UNDECIDED
            conn = self.conn
            self.port_client = client_direction_by_port(conn.initiator, conn.responder, d.ports)
            if self.port_client is None and not d.detect:
                self.ignore([piece])
                return
            if direction == self.port_client:
                # a Kafka port and its client speaks first: decided at once
                self.settle(direction, stamp, [piece])
                return
        held = self.held
        if held is None:
            held = self.held = []
        held.append(piece)
        self.held_bytes += piece[3]
        if self.port_client is not None:
            # a Kafka port: decided when the client shows its first bytes
            if direction == self.port_client or self.held_bytes > _MAX_HELD_BYTES:
                self.held = None
                self.settle(self.port_client, stamp, held)
            return
        verdicts = self.verdicts
        if verdicts is None:
            verdicts = self.verdicts = [None, None]
        if verdicts[direction] is None:
            # the direction's first captured bytes, up to the first hole
            start = bytearray()
            complete = False  # no more contiguous bytes can be added to `start`
            for dd, kind, _, _, data, _ in held:
                if dd != direction:
                    continue
                start += data
                if kind != "data" or len(start) >= 4 + HUNT_PREFIX:
                    complete = True
                    break
            if complete or len(start) >= 4 + MIN_REQUEST_SIZE:
                # (a direction that starts with lost bytes cannot be judged: False)
                verdicts[direction] = bool(start) and starts_like_request(bytes(start))
            if not verdicts[direction] and self.layer is self.conn and d.detect_tls(bytes(start), complete):
                # a ClientHello on any port: TLS, its client this side
                self.held = None
                self.start_tls(direction, held)
                return
        if verdicts[direction]:
            self.held = None
            self.settle(direction, stamp, held)
        elif (verdicts[0] is False and verdicts[1] is False) or self.held_bytes > _MAX_HELD_BYTES:
            self.held = None
            self.ignore(held)

    def settle(self, client_dir: int, stamp: Any, held: list[Piece]) -> None:
        """Kafka with the client on side `client_dir`, unless the client opens
        with TLS; then the `held` pieces go on to their sinks."""
        first = None
        for piece in held:
            if piece[0] == client_dir:
                first = piece
                break
        if (first is not None and first[1] != "gap" and self.saw_start(client_dir)
                and self.layer is self.conn and starts_like_tls(first[4])):
            self.start_tls(client_dir, held)
            return
        self.classify(client_dir, stamp)
        if len(held) == 1:  # (the usual: the client's first piece) what replaying it to its pending sink does
            self.kafka(held[0])
            return
        self.replay(held)

    def start_tls(self, client_dir: int, held: list[Piece]) -> None:
        """A TLS connection: its bytes go through the TLS layer; the plaintext,
        if keys decrypt it, gets a state of its own (Kafka or not, as any stream)."""
        from kdissect.conn.tls import TlsConnection

        d = self.dissector
        d.stats.tls_connections += 1
        self.phase = _TLS
        self.client_dir = client_dir
        plain = _Plaintext()
        inner = self.inner = _Connection(d, self.conn, plain)
        plain.sinks = (_Pending(inner, 0), _Pending(inner, 1))
        # the TLS connection is the TCP connection's sink and drives the plaintext's
        self.tls = TlsConnection(d.keylog, plain, client_dir)
        self.layer.sinks = self.tls.ciphertext_sinks()
        self.replay(held)

    def replay(self, held: list[Piece]) -> None:
        layer = self.layer
        for piece in held:
            _replay(layer, piece)  # (a sink may replace itself on its first bytes)

    def held_piece(self, held: Any) -> Piece:
        """The one piece `kafka` held, as a held piece (see _replay): it
        keeps the tuple, or the segment alone when the piece is that
        segment's whole payload at the start of its sender's stream."""
        if held.__class__ is TcpSegment:
            key = self.conn.key
            payload = held.payload
            return (0 if held.sport == key[1] and held.src == key[0] else 1), "data", 0, len(payload), payload, held
        piece: Piece = held
        return piece

    def replay_held(self, held: Any) -> None:
        """Hear the one piece `kafka` held."""
        held = self.held_piece(held)
        self.reader(held[0], True)  # (it started the stream: see `kafka`)
        _replay(self.layer, held)

    def ignore(self, held: list[Piece]) -> None:
        d = self.dissector
        self.phase = _IGNORED
        d.stats.non_kafka_connections += 1
        if self.layer is self.conn:  # (for the hint of a run that decoded nothing: kdissect.shared.hints)
            ports = d.other_ports
            port = self.conn.responder[1]
            ports[port] = ports.get(port, 0) + 1
        ignored = d.ignored if self.layer is self.conn else d.ignored_plaintext
        self.layer.sinks = (ignored, ignored)
        self.replay(held)

    def classify(self, client_dir: int, stamp: Any) -> None:
        """The connection is Kafka, with its client on side `client_dir`."""
        d = self.dissector
        conn = self.conn
        self.phase = _KAFKA
        self.client_dir = client_dir
        d.stats.kafka_connections += 1
        # (the plaintext inside TLS is keyed by its packet's time, not its feed time)
        order_ts = getattr(stamp, "order_ts", stamp.ts) if self.layer is self.conn else stamp.ts
        d.classification_keys.append((order_ts, int(stamp.capture_index), int(stamp.frame_number)))
        self.stream = d.next_stream
        d.next_stream += 1
        # the sinks stay: from now on they make the readers (_Pending)

    # -- a Kafka connection -------------------------------------------------

    def kafka(self, piece: Piece) -> None:
        """A piece of a Kafka direction that has no reader yet. When the
        connection's first such piece starts its stream and holds only part
        of the frame it opens, it is held instead: a reader would only keep
        it (no frame, nothing else happens), and a connection that sends no
        more (a scan, a reconnect storm) then costs no reader until it
        closes. Any later piece makes the readers as their pieces come, the
        held one first, so every reader hears the same pieces in the same
        order, and does the same, as without holding."""
        direction = piece[0]
        held = self.held
        if held is None:
            if (piece[1] == "data" and self.dissector.hold_first_pieces and self.saw_start(direction)
                    and opens_partial_frame(piece[4])):
                # the segment alone when it tells the whole piece (no memory of
                # its own: the reassembler keeps it as the connection's last)
                stamp = piece[5]
                if (not piece[2] and stamp.__class__ is TcpSegment and piece[4] is stamp.payload
                        and self.layer is self.conn and direction == (0 if stamp.sport == self.conn.key[1]
                                                                      and stamp.src == self.conn.key[0] else 1)):
                    self.held = stamp
                else:
                    self.held = piece
                return
            held = ()
        self.held = ()  # from now on every piece goes to its direction's reader
        if held:
            self.replay_held(held)
        sink = self.layer.sinks[direction]
        if type(sink) is _Pending or sink is self:
            self.reader(direction)
        _replay(self.layer, piece)

    def reader(self, direction: int, aligned: bool | None = None) -> FrameReader:
        """The FrameReader of a direction, made at its first bytes (it takes
        the place of the direction's _Pending sink). `aligned`: whether
        those bytes start the stream (default: as the connection says now)."""
        if aligned is None:
            aligned = self.saw_start(direction)
        if direction == self.client_dir:
            reader = FrameReader(direction, hunted_request, aligned, MIN_REQUEST_SIZE,
                                 self.frame_sink(direction), confirm_request, sure_request)
        else:
            reader = FrameReader(direction, plausible_response, aligned, 4,
                                 self.frame_sink(direction), self.confirm_response, self.sure_response)
        reader.on_hunt = self.lost_step
        sinks = list(self.layer.sinks)
        sinks[direction] = reader
        self.layer.sinks = (sinks[0], sinks[1])
        return reader

    def frame_sink(self, direction: int) -> Any:
        """Where a direction's reader hands its frames: the pairer (made at
        the first frame), through `heard` when the dissector has a frame hook."""
        pairer = self.pairer
        if pairer is None:
            return self.first_frame
        if self.dissector.frame_hook is not None:
            return self.heard
        return pairer.on_request if direction == self.client_dir else pairer.on_response

    def heard(self, frame: Frame) -> None:
        """A frame to the pairer, then to the dissector's frame hook with what
        pairing made of it."""
        pairer = self.pairer
        from_client = frame.direction == self.client_dir
        outcome = pairer.on_request(frame) if from_client else pairer.on_response(frame)  # type: ignore[union-attr]
        self.dissector.frame_hook(PairedFrame(frame, from_client, outcome, pairer.conn,  # type: ignore[union-attr,misc]
                                              self.layer is not self.conn))

    def first_frame(self, frame: Frame) -> None:
        """A frame before the pairer exists: make it and bind the readers to it
        (a reader may hand over more frames of the same piece here)."""
        pairer = self.pairer
        if pairer is None:
            d = self.dissector
            pairer = self.pairer = Pairer(d.pairing_stats, self.connection_info(), d.out.append, d.keep_messages,
                                          d.keep_error_responses, d.keep_apis)
            for direction, reader in enumerate(self.layer.sinks):
                if type(reader) is FrameReader:
                    reader.on_frame = self.frame_sink(direction)
        if self.dissector.frame_hook is not None:
            self.heard(frame)
        elif frame.direction == self.client_dir:
            pairer.on_request(frame)
        else:
            pairer.on_response(frame)

    def connection_info(self) -> ConnectionInfo:
        """What every exchange of the connection shares (its pairer's)."""
        d = self.dissector
        conn, client_dir = self.conn, self.client_dir
        ends = (conn.initiator, conn.responder)
        _, capture_index, frame_number = d.classification_keys[self.stream]
        # the broker's text is remembered: the same few brokers serve every connection
        broker = ends[1 - client_dir]
        known = d.broker_endpoints
        broker_text = known.get(broker)
        if broker_text is None:
            if len(known) >= 4096:
                known.clear()
            broker_text = known[broker] = endpoint(*broker)
        return ConnectionInfo(d.capture_names, self.stream, endpoint(*ends[client_dir]), broker_text,
                              (capture_index, frame_number), conn, client_dir)

    def lost_step(self) -> None:
        self.dissector.stats.gaps += 1
        if self.pairer is not None:
            self.pairer.response_bytes_lost()

    # hunting for a frame boundary after a loss or a mid-stream start

    def sure_response(self, prefix: bytes, size: int, at_packet_start: bool) -> bool:
        pairer = self.pairer
        return pairer is not None and len(prefix) >= 4 and pairer.expects(_INT32.unpack_from(prefix, 0)[0])

    def confirm_response(self, body: bytes, at_packet_end: bool) -> bool:
        """A response whose request is not in the capture: it must end where
        a packet ended and decode with some response layout."""
        if not at_packet_end:
            return False
        from kdissect.conn.trial import identify

        used = self.pairer.recent_apis() if self.pairer is not None else ()
        return identify(body, used).verdict != "unknown"

    def close_lone_request(self, held: Piece, reason: str) -> bool:
        """Close a connection whose one piece, held by `kafka`, opens a
        request it never finishes (a scan, a reconnect storm): what its reader
        and pairer would do, without making them (no reader heard anything,
        so only this piece counts). False, nothing done, when the piece is
        not of that plain kind; the general close then runs.
        tests/conn/test_pipeline_fast_paths.py compares the two."""
        direction, kind, offset, length, data, stamp = held
        if (direction != self.client_dir or offset or len(data) < 4 or self.layer is not self.conn
                or self.dissector.frame_hook is not None or not self.dissector.close_lone_requests):
            return False
        size = _INT32.unpack_from(data, 0)[0]
        if size >= BIG_FRAME:  # (the reader collects a big frame in pieces)
            return False
        # the in-step reader keeps the bytes (`opens_partial_frame`), then at
        # the end reports them as an incomplete frame
        d = self.dissector
        seen = len(data)
        stats = d.lone_framing  # (folded into the accounting at the end, with the other layers' counts)
        stats.seen_bytes += seen
        stats.incomplete_frames += 1
        stats.incomplete_frame_bytes += seen
        ts = stamp.ts
        frame = Frame(direction, 0, size, bytes(data[4:]), False, ts, stamp.capture_index, stamp.frame_number,
                      "end", ts)
        # and its pairer: the exchange of that request, without a response
        d.lone_closes += 1
        d.out.append(lone_request(d.pairing_stats, self.connection_info(), frame,
                                  _CLOSE_REASONS.get(reason, "connection close")))
        return True

    def release(self) -> None:
        """Drop what refers back to this state (after `close`)."""
        self.pairer = self.held = None
        if self.layer is not self.conn:
            self.layer.sinks = (None, None)
        if self.inner is not None:
            self.inner.release()
            self.inner = None
        self.tls = None

    def close(self, reason: str) -> None:
        d = self.dissector
        counts = d.stats
        if self.phase == _TLS:
            self.tls.finish()  # (its last plaintext goes on to the inner connection's sinks)
            counts.tls_bytes += self.tls.ciphertext_bytes
            d.tls_stats.add(self.tls.stats)
            if self.inner.phase == _EMPTY:  # type: ignore[union-attr]
                counts.encrypted_connections += 1  # nothing decrypted: its content is unknown
                key = self.conn.key
                d.encrypted_clients.add(endpoint(key[0], key[1]) if self.client_dir == 0 else endpoint(key[2], key[3]))
            self.inner.close(reason)  # type: ignore[union-attr]
            return
        if self.phase == _EMPTY:
            if self.layer is self.conn:
                counts.empty_connections += 1
            return
        if self.phase == _UNDECIDED:
            held = self.held or []
            self.held = None
            if self.port_client is None:  # never showed a request: not Kafka
                self.ignore(held)
                return
            self.settle(self.port_client, held[0][5], held)  # the client never spoke
        if self.phase != _KAFKA:
            return
        if self.held:  # the connection's one piece: its reader hears it now
            held = self.held_piece(self.held)
            self.held = ()
            if self.close_lone_request(held, reason):
                return
            self.replay_held(held)
        for reader in self.layer.sinks:
            if type(reader) is FrameReader:
                reader.finish()
                d.accounting.add_framing_stats(reader.stats)  # (the framing layer's counts)
                if self.layer is not self.conn:
                    counts.tls_plaintext_bytes += reader.stats.seen_bytes
        if self.pairer is not None:
            self.pairer.flush(_CLOSE_REASONS.get(reason, "connection close"))


class ClassificationKeys:
    """A list of (order_ts, capture_index, frame_number), one per Kafka
    connection, held as three arrays of 64-bit integers: a tuple each would
    cost about 70 bytes a connection. Values an array cannot hold turn it
    into a plain list of tuples."""

    __slots__ = ("_columns", "_rows")

    def __init__(self) -> None:
        self._columns = (array("q"), array("q"), array("q"))
        self._rows: list[tuple[int, int, int]] | None = None

    def append(self, key: tuple[int, int, int]) -> None:
        if self._rows is None:
            ts, capture_index, frame_number = self._columns
            n = len(ts)
            try:
                ts.append(key[0])
                capture_index.append(key[1])
                frame_number.append(key[2])
                return
            except (OverflowError, TypeError):
                del ts[n:], capture_index[n:], frame_number[n:]
                self._rows = list(zip(*self._columns))
        self._rows.append(key)  # type: ignore[union-attr]

    def __getitem__(self, index: int) -> tuple[int, int, int]:
        if self._rows is not None:
            return self._rows[index]
        ts, capture_index, frame_number = self._columns
        return ts[index], capture_index[index], frame_number[index]

    def __len__(self) -> int:
        return len(self._rows) if self._rows is not None else len(self._columns[0])

    def __iter__(self) -> Iterator[tuple[int, int, int]]:
        return iter(self._rows) if self._rows is not None else zip(*self._columns)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (ClassificationKeys, list)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ClassificationKeys({list(self)!r})"


class Dissector:
    """Segments in capture order -> Exchanges, with an Accounting of everything seen.

    The reassembler's `ConnectionListener`."""

    def __init__(
        self,
        ports: Iterable[int] = DEFAULT_PORTS,
        detect: bool = True,
        capture_names: Sequence[str] | None = None,
        keep_messages: bool = True,
        keep_error_responses: bool = False,
        accounting: Accounting | None = None,
        max_open_connections: int = MAX_OPEN_CONNECTIONS,
        keylog: Any = None,
        keep_apis: Iterable[int] = (),
        frame_hook: Callable[[PairedFrame], None] | None = None,
    ) -> None:
        self.ports = frozenset(int(p) for p in ports)
        self.detect = detect
        self.capture_names = list(capture_names or [])
        self.keep_messages = keep_messages
        # without kept messages, still keep the decoded response of exchanges
        # with error codes (for per-partition error tables: Spark, stats)
        self.keep_error_responses = keep_error_responses
        # keep both decoded messages of these api keys (tables that read them;
        # a Produce's as frames, an ApiVersions' request only: conn.pairing)
        self.keep_apis = frozenset(int(key) for key in keep_apis)
        # filled in by finish(): the layers' counts below, the reassembler's,
        # each framing reader's (at its connection's close)
        self.accounting = accounting if accounting is not None else Accounting()
        self.stats = ConnectionStats()
        self.pairing_stats = PairingStats()  # shared by the connections' pairers
        self.max_open_connections = max_open_connections
        self.ignored = _Ignored(self.stats)
        self.ignored_plaintext = _Ignored(self.stats, "tls_other_bytes")  # decrypted, not Kafka
        # client endpoints of TLS connections none of whose bytes were decrypted
        # (the broker-log tables name their principals: kdissect.stats.brokerlog)
        self.encrypted_clients: set[str] = set()
        # TLS: the secrets (a kdissect.conn.tls.KeyLog; none: TLS is found and
        # counted, not decrypted) and what the TLS layer did
        self._keylog = keylog
        self._tls_stats: Any = None
        self.out: list[Exchange] = []  # exchanges completed by the segment being fed
        # hears every Kafka frame (after TLS) as it is cut, with what pairing
        # made of it, after the pairer (the Scapy face's captures read this)
        self.frame_hook = frame_hook
        self.next_stream = 0
        self.other_ports: dict[int, int] = {}  # responder port -> connections not taken for Kafka
        # (order_ts, capture_index, frame_number) of the packet at which each
        # Kafka connection was classified, in stream-number order (also for
        # connections without exchanges; a distributed run ranks them)
        self.classification_keys = ClassificationKeys()
        self._reassembler = Reassembler(listener=self)
        # what the readers of the connections closed by `close_lone_request`
        # would have counted, summed (no reader is made for them)
        self.lone_framing = FramingStats()
        self.lone_closes = 0  # connections closed by `close_lone_request`
        self.broker_endpoints: dict[tuple[str, int], str] = {}  # (address, port) -> "address:port"
        # the short cuts of a connection whose first piece only opens a frame
        # (`_Connection.kafka` holds the piece, `close_lone_request` closes the
        # connection with it); off, the general path runs (tests compare the
        # two: the compiled build calls its functions past any patch)
        self.hold_first_pieces = True
        self.close_lone_requests = True

    @property
    def keylog(self) -> Any:
        if self._keylog is None:
            from kdissect.conn.tls import EMPTY_KEYLOG

            self._keylog = EMPTY_KEYLOG
        return self._keylog

    @property
    def tls_stats(self) -> Any:
        """The TLS layer's counts (kdissect.conn.tls.TlsStats), summed over closed connections."""
        if self._tls_stats is None:
            from kdissect.conn.tls import TlsStats

            self._tls_stats = TlsStats()
        return self._tls_stats

    @property
    def has_keylog(self) -> bool:
        """Whether a key log was given or met in the files (no TLS import)."""
        return self._keylog is not None

    def add_keylog(self, keylog: Any) -> None:
        """More secrets (a key log given later, a pcapng's Decryption Secrets Block)."""
        self._keylog = keylog if self._keylog is None else self._keylog.merged(keylog)

    @staticmethod
    def detect_tls(first_bytes: bytes, complete: bool) -> bool:
        """Whether a direction's first bytes are a TLS ClientHello."""
        if len(first_bytes) < 3 or first_bytes[0] != 0x16:
            return False
        from kdissect.conn.tls import client_hello_verdict

        return bool(client_hello_verdict(first_bytes))

    # -- the ConnectionListener ---------------------------------------------

    def opened(self, conn: TcpConnection) -> None:
        state = _Connection(self, conn)
        conn.user = state
        conn.sinks = (state, _Pending(state, 1))  # (the state is its initiator's side's pending sink)
        self.stats.connections += 1
        if self._reassembler.open_connection_count > self.max_open_connections:
            self.stats.evicted_connections += self._reassembler.evict(self.max_open_connections // 8)

    def closed(self, conn: TcpConnection, reason: str) -> None:
        state = conn.user
        state.close(reason)
        # nothing of it is needed any more: break the references between the
        # connection and its state (reader callbacks, the pairer's timing), so
        # it is freed as soon as the reassembler lets it go, not by a later
        # pass of the cyclic collector
        conn.user = None
        conn.sinks = (None, None)
        state.release()

    # -- public --------------------------------------------------------------

    def feed(self, segment: Any) -> list[Exchange]:
        """The exchanges this segment completed."""
        stats = self.stats
        stats.segments += 1
        stats.payload_bytes += segment.payload_len
        self._reassembler.feed(segment)
        out = self.out
        if not out:
            return []
        done = out[:]
        out.clear()
        return done

    def feed_many(self, segments: Iterable[Any]) -> Iterator[Exchange]:
        """The exchanges of `feed(s)` for each of `segments` in turn (not
        those of `finish()`)."""
        stats = self.stats
        feed = self._reassembler.feed
        out = self.out
        segment_count = payload = 0
        try:
            for segment in segments:
                segment_count += 1
                payload += segment.payload_len
                feed(segment)
                if out:
                    yield from out
                    out.clear()
        finally:
            stats.segments += segment_count
            stats.payload_bytes += payload

    def finish(self) -> list[Exchange]:
        """Close every open connection; the exchanges that completes."""
        return list(self.finishing())

    def finishing(self) -> Iterator[Exchange]:
        """`finish()` as an iterator: the connections close one at a time, in
        the order they opened, each freed before the next closes, so memory
        does not hold every open connection's exchanges at once."""
        out = self.out
        for _ in self._reassembler.closing():
            if out:
                yield from out
                out.clear()
        acc = self.accounting
        acc.add_framing_stats(self.lone_framing)
        self.lone_framing = FramingStats()
        acc.add_reassembly_stats(self._reassembler.stats)
        acc.add_counts(self.stats)
        acc.add_counts(self.pairing_stats)
        if out:  # (nothing is left here: every close above was drained)
            yield from out
            out.clear()

    def end_connections(self) -> Iterator[Exchange]:
        """Close every open connection as `finishing` does, without adding
        the counts to the accounting (`finishing` adds them, once, at the
        end: they are sums). With `start_afresh` after it, a Spark task
        dissects 4-tuple after 4-tuple with one Dissector instead of a new
        one each: on a capture of 50,000 two-packet connections a new one and
        its own additions to the accounting cost about as much again as the
        connection's dissection."""
        out = self.out
        for _ in self._reassembler.closing():
            if out:
                yield from out
                out.clear()

    def start_afresh(self) -> ClassificationKeys:
        """After `end_connections`: the segments fed next (another 4-tuple's)
        meet the state of a new Dissector, counts apart. Returns the
        classification keys of the connections since the last start (a
        connection's `stream` indexes them, so they start again too)."""
        self._reassembler.start_afresh()
        self.next_stream = 0
        keys, self.classification_keys = self.classification_keys, ClassificationKeys()
        return keys

    @property
    def open_connections(self) -> int:
        return self._reassembler.open_connection_count

    def open_four_tuples(self) -> list[tuple[Any, Any, Any, Any]]:
        """The 4-tuples (initiator first) of the connections still open."""
        return [conn.key for conn in self._reassembler.open_connections]

    def release(self) -> None:
        """Done with this dissector (after `finish()`): its reassembler lets
        go of it (the dissector is the reassembler's listener, the one
        reference cycle between them), so it is freed by its reference count
        as soon as its user drops it, not by a pass of the cyclic collector
        (a Spark task makes one for its 4-tuples). It takes no more segments."""
        self._reassembler.listener = _RELEASED


class _Released:
    """The listener of a released dissector's reassembler: nothing more may come."""

    def opened(self, conn: TcpConnection) -> None:
        raise RuntimeError("a released Dissector was fed a segment")

    def closed(self, conn: TcpConnection, reason: str) -> None:
        raise RuntimeError("a released Dissector was fed a segment")


_RELEASED: Final = _Released()


class _SecretsToKeys:
    """Where the capture set puts the decryption secrets it meets
    (kdissect.wire.capture.SecretSink): each one is kept and handed to the
    dissector's TLS layer (a TLS key log)."""

    def __init__(self, dissector: Dissector) -> None:
        self.secrets: list[Any] = []
        self.dissector = dissector

    def append(self, secret: Any) -> None:
        self.secrets.append(secret)
        from kdissect.conn.tls import parse_decryption_secrets

        self.dissector.add_keylog(parse_decryption_secrets(secret.data, secret.kind))


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Python's cyclic collector runs every 700 new containers and, with the
    many long-lived objects of open connections, its full passes make a run
    slower than linear in connections (50k -> 200k open connections: 4.5x
    the time, 4.0x without it). Kdissect's state has few reference cycles
    (a run of any benchmark shape frees none by the collector); while a
    capture is dissected the collector runs 100x less often, and its second
    generation 10x less often than that (each of its passes walks every
    object that survived one pass: on 200,000 open connections, 0.1 s of
    CPU of the 0.2 s the collector took)."""
    old = gc.get_threshold()
    gc.set_threshold(max(old[0], 70_000), max(old[1], 100), old[2])
    try:
        yield
    finally:
        gc.set_threshold(*old)


class Analysis:
    """Iterate the exchanges of a capture set; `accounting` is complete once
    the iteration is over (the layers' counts fold into it at the end).
    `keep_messages`, `keep_apis`: as for `analyze`; `keep_error_responses`:
    without `keep_messages`, still keep the decoded response of an exchange
    whose response carries error codes (its per-partition errors)."""

    def __init__(self, paths: Sequence[str | Path], ports: Iterable[int] = DEFAULT_PORTS,
                 detect: bool = True, keep_messages: bool = False, progress: bool = False,
                 tls_keylogs: Sequence[str | Path] = (), keep_apis: Iterable[int] = (),
                 broker_logs: Sequence[str | Path] = (), keep_error_responses: bool = False) -> None:
        from kdissect.wire.capture import CaptureSet, ReadStats

        self.read_stats = ReadStats()
        self.capture_set = CaptureSet([str(p) for p in paths], self.read_stats)
        names = [Path(p).name for p in self.capture_set.paths]
        keylog = None
        if tls_keylogs:
            from kdissect.conn.tls import read_keylog_files

            keylog = read_keylog_files([str(p) for p in tls_keylogs])
        self.dissector = Dissector(ports, detect, names, keep_messages, keep_error_responses, keylog=keylog,
                                   keep_apis=keep_apis)
        # secrets a pcapng carries (Decryption Secrets Blocks) reach the TLS
        # layer as the reader meets them, before the packets that follow
        self.capture_set.secrets = _SecretsToKeys(self.dissector)
        self.accounting = self.dissector.accounting
        self.progress = progress
        # the broker's request log, joined as the exchanges pass (kdissect.conn.brokerlog)
        self.broker_log: Any = None
        if broker_logs:
            from kdissect.conn.brokerlog.join import BrokerLogJoin

            self.broker_log = BrokerLogJoin([str(p) for p in broker_logs])

    def summary_lines(self) -> list[str]:
        """The accounting's lines, and the TLS layer's when it met TLS."""
        lines = self.accounting.summary_lines()
        if self.accounting.tls_connections:
            lines.append(self.dissector.tls_stats.summary_line())
        # a key log given or found in the files (reading `keylog` would import the TLS layer for nothing)
        skipped = self.dissector.keylog.bad_lines if self.dissector.has_keylog else 0
        if skipped:  # cut or malformed lines of a key log that has valid ones (never their text)
            lines.append(f"tls key log: {skipped} malformed line{'s' if skipped != 1 else ''} skipped")
        if self.broker_log is not None:
            lines += self.broker_log.accounting.summary_lines()
        return lines

    @property
    def ts_unit(self) -> str:
        """The Arrow unit that holds every input file's times exactly."""
        return self.capture_set.timestamp_unit

    @contextmanager
    def _segments(self) -> Iterator[Iterable[Any]]:
        segments: Iterable[Any] = self.capture_set.segments()
        bar = None
        if self.progress:
            from tqdm import tqdm  # type: ignore[import-untyped]

            bar = tqdm(segments, unit=" packets", unit_scale=True, leave=False, mininterval=0.5)
            segments = bar
        try:
            yield segments
        finally:
            if bar is not None:
                bar.close()

    def __iter__(self) -> Iterator[Exchange]:
        if self.broker_log is not None:
            joined: Iterator[Exchange] = self.broker_log.join(self._exchanges())
            return joined
        return self._exchanges()

    def _exchanges(self) -> Iterator[Exchange]:
        from kdissect.conn.arrivals import ArrivalResolver

        dissector = self.dissector
        with fewer_collections():
            # a long poll that data ended looks for the Produce that wrote the
            # data on every connection (kdissect.conn.arrivals)
            resolver = ArrivalResolver()
            add = resolver.add
            with self._segments() as segments:
                for ex in dissector.feed_many(segments):
                    yield from add(ex)
            for ex in dissector.finishing():
                yield from add(ex)
            yield from resolver.finish()
        self.accounting.add_read_stats(self.read_stats)

    def frames(self) -> Iterator[PairedFrame]:
        """Iterate the Kafka frames instead of the exchanges: each frame (after
        TLS) as the core cuts it, with what pairing made of it, in the order
        of the packets that complete them (at the end of the capture, the
        frames completed by closing connections). The exchanges are still
        formed and counted in `accounting`, not returned. Iterate an
        Analysis once, either way."""
        dissector = self.dissector
        heard: list[PairedFrame] = []
        dissector.frame_hook = heard.append  # (readers made from now on hand frames through it)
        with fewer_collections():
            with self._segments() as segments:
                for segment in segments:
                    dissector.feed(segment)  # its exchanges are counted, not kept
                    if heard:
                        yield from heard
                        heard.clear()
            for _ in dissector.finishing():
                if heard:
                    yield from heard
                    heard.clear()
            yield from heard
            heard.clear()
        self.accounting.add_read_stats(self.read_stats)


def analyze(
    paths: Sequence[str | Path],
    ports: Iterable[int] = DEFAULT_PORTS,
    detect: bool = True,
    keep_messages: bool = False,
    progress: bool = False,
    tls_keylogs: Sequence[str | Path] = (),
    keep_apis: Iterable[int] = (),
    broker_logs: Sequence[str | Path] = (),
) -> tuple[Iterator[Exchange], Accounting]:
    """(exchanges, accounting) for a capture set; the accounting is complete
    once the iterator is exhausted. `tls_keylogs`: key log files (NSS format)
    to decrypt TLS connections with. `keep_apis`: api keys whose exchanges
    keep their messages even without `keep_messages`, decoded or, where
    pairing reads them lazily, as their frames (Produce, Fetch, Metadata,
    OffsetCommit and JoinGroup messages, CreateTopics answers, ApiVersions
    requests: kdissect.conn.kept_*; use
    `keep_messages` for every message decoded)."""
    run = Analysis(paths, ports, detect, keep_messages, progress, tls_keylogs, keep_apis, broker_logs)
    return iter(run), run.accounting
