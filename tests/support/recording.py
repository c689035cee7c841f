"""Recording sinks: what a stream layer delivers, kept for tests to look at.

Every layer of the byte path speaks one interface, `reassembly.DirectionSink`
(`data`, `gap`, `truncated`, each with a stream offset and a stamp). A test
that wants to see what a layer delivers gives it recording sinks:

    calls = []
    sink = RecordingSink(calls.append)   # each call heard, as a Call
    listener = RecordingListener()       # a Reassembler's listener
    Reassembler(listener=listener)       # ... listener.take(): Opened / Delivered / Closed, in order
    call.replay(reader)                  # hand a recorded call on to another sink
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple


class Stamp(NamedTuple):
    """A stamp of one's own (where bytes became deliverable), for hand-made calls."""

    ts: int
    capture_index: int = 0
    frame_number: int = 0


class Call(NamedTuple):
    """One DirectionSink call as heard. `kind` is the method: "data" (`data`
    all the payload, `length` its length), "gap" (`data` empty) or
    "truncated" (`data` the captured prefix of `length` bytes)."""

    kind: str
    offset: int
    length: int
    data: bytes
    stamp: Any

    @property
    def ts(self) -> int:
        return self.stamp.ts

    @property
    def capture_index(self) -> int:
        return self.stamp.capture_index

    @property
    def frame_number(self) -> int:
        return self.stamp.frame_number

    def replay(self, sink: Any) -> None:
        """Make the same call on `sink`."""
        if self.kind == "data":
            sink.data(self.offset, self.data, self.stamp)
        elif self.kind == "gap":
            sink.gap(self.offset, self.length, self.stamp)
        else:
            sink.truncated(self.offset, self.length, self.data, self.stamp)


class RecordingSink:
    """A DirectionSink handing each call it hears, as a Call, to `keep`."""

    def __init__(self, keep: Callable[[Call], None]) -> None:
        self.keep = keep

    def data(self, offset: int, payload: bytes, stamp: Any) -> None:
        self.keep(Call("data", offset, len(payload), payload, stamp))

    def gap(self, offset: int, length: int, stamp: Any) -> None:
        self.keep(Call("gap", offset, length, b"", stamp))

    def truncated(self, offset: int, length: int, prefix: bytes, stamp: Any) -> None:
        self.keep(Call("truncated", offset, length, prefix, stamp))


class Opened(NamedTuple):
    conn: Any


class Delivered(NamedTuple):
    """A call on one of a connection's sinks (direction 0: initiator -> responder)."""

    conn: Any
    direction: int
    call: Call


class Closed(NamedTuple):
    conn: Any
    reason: str


class RecordingListener:
    """A reassembly ConnectionListener recording what it hears, in order:
    each connection's opening, the calls on its two sinks, its close."""

    def __init__(self) -> None:
        self.events: list[Opened | Delivered | Closed] = []

    def opened(self, conn: Any) -> None:
        events = self.events
        events.append(Opened(conn))
        conn.sinks = (RecordingSink(lambda call: events.append(Delivered(conn, 0, call))),
                      RecordingSink(lambda call: events.append(Delivered(conn, 1, call))))

    def closed(self, conn: Any, reason: str) -> None:
        self.events.append(Closed(conn, reason))

    def take(self) -> list[Opened | Delivered | Closed]:
        """The events recorded since the last take."""
        taken = self.events[:]
        self.events.clear()
        return taken


def reassembled(segments: Any, **options: Any) -> list[Opened | Delivered | Closed]:
    """Every event of a Reassembler (built with `options`) fed `segments`, then finished."""
    from kdissect.wire.reassembly import Reassembler

    listener = RecordingListener()
    r = Reassembler(listener=listener, **options)
    for seg in segments:
        r.feed(seg)
    r.finish()
    return listener.take()
