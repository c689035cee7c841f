"""When fetched data arrived: the end of a long poll that data ended.

A Fetch (or ShareFetch) with a max wait that is answered with records after
being held may have waited for those records: the broker parks a fetch with
too little data until enough is appended or the max wait passes. The wait
ends when the fetched data was appended; what follows is the broker's
service. Where that moment comes from, best first:

1. the Produce that wrote the first fetched offset, where the capture holds
   it (on any connection): its answer's time. This needs every connection,
   so it is a capture-wide step. The rule is `earliest_produce`, the one
   both faces call: `ArrivalResolver` (the CLI's exchanges, in one pass)
   and kdissect.spark.arrivals (the rows the Spark tasks leave, grouped by
   topic-partition): among the Produce answers whose offsets include the
   first fetched offset of a fetched topic-partition, answered between
   `PRODUCE_WINDOW_NS` before the broker started on the fetch and
   `PRODUCE_WINDOW_NS` after its first response byte (`produce_wins`), the
   earliest. Fetches held longer than `MAX_HELD_NS` do not look for one.
2. the fetched batch's timestamp (the batch holding the first fetched
   offset; the earliest over the fetched partitions):
   * LogAppendTime: the broker's append time. Taken as is within
     `CLOCK_SKEW_NS` of the fetch (the broker's clock against the
     capture's); earlier than that: the data was there before the request,
     so there was no wait.
   * CreateTime: the record's create time (the batch's max timestamp: the
     producer sends a batch once its last record is in, so the append
     follows it by the producer's send time): taken within `CLOCK_SKEW_NS`
     of the fetch; earlier than that, the record is taken to have been
     appended before the request (no wait). A producer that held a record
     longer than the tolerance before sending it (retries, a long linger.ms)
     makes a wait read as service here.
3. otherwise the wait's length is unknown: `LONG_POLL_UNKNOWN`, with
   `wait_ms` and `service_ms` null (stats counts these apart).

The arrival estimate is clamped to the time the broker held the fetch (from
its start, after any queue or mute, to the first response byte). A fetch
held less than `DATA_WAIT_MIN_NS` is not looked at: its latency is service.
"""

from __future__ import annotations

import struct
from collections import deque
from typing import Any, Callable, Iterable, Iterator

from kdissect.model.exchange import LONG_POLL_UNKNOWN
from kdissect.protocol.primitives import read_uvarint
from kdissect.protocol.topics import topic_label

DATA_WAIT_MIN_NS = 10_000_000  # 10 ms: shorter holds are service
CLOCK_SKEW_NS = 100_000_000  # 100 ms between the capture's, the broker's and the producer's clocks
PRODUCE_WINDOW_NS = 1_000_000_000  # 1 s: a Produce answer this close to the hold ended it
MAX_HELD_NS = 60_000_000_000  # 60 s: longer holds do not look for a Produce

# how the end of the wait was found
BY_PRODUCE, BY_APPEND_TIME, BY_CREATE_TIME = "produce", "log_append_time", "create_time"

_V2_TIMES = struct.Struct(">qi4xb4xhiqq")  # base offset, size, magic, attributes, last delta, first/max ts
_LEGACY = struct.Struct(">qi4xbbq")  # offset, size, magic, attributes, timestamp (magic 1)
_V2_LAST = struct.Struct(">qi4xb4x2xi")  # base offset, size, magic, last offset delta
_ENTRY = struct.Struct(">qi")  # offset, size


def batch_time(raw: Any, offset: int | None) -> tuple[int, int | None, int | None] | None:
    """(first offset at or after `offset`, timestamp type (0 CreateTime, 1
    LogAppendTime, None unknown), timestamp in ms or None) of the first batch
    in a record set holding an offset at or after `offset` (any offset when
    None); None when no whole batch header does. Never raises."""
    data = raw if type(raw) is bytes else bytes(raw)
    pos, total = 0, len(data)
    try:
        while total - pos >= 17:
            base, size = struct.unpack_from(">qi", data, pos)
            if size < 0:
                return None
            magic = data[pos + 16]
            if magic == 2 and total - pos >= _V2_TIMES.size:
                base, size, _magic, attributes, last_delta, _first_ts, max_ts = _V2_TIMES.unpack_from(data, pos)
                last = base + last_delta
                kind: int | None = (attributes >> 3) & 1
                stamp: int | None = max_ts
            elif magic == 1 and total - pos >= _LEGACY.size:
                last, size, _magic, attributes, stamp = _LEGACY.unpack_from(data, pos)
                kind = (attributes >> 3) & 1
            else:  # magic 0 carries no time
                last, kind, stamp = base, None, None
            if offset is None or last >= offset:
                first = base if offset is None else max(base, offset)
                if stamp is not None and stamp < 0:
                    kind = stamp = None
                return first, kind, stamp
            pos += 12 + size
    except (struct.error, IndexError):
        return None
    return None


def timestamp_arrival(start_ns: int, end_ns: int, kind: int | None, stamp_ms: int | None
                      ) -> tuple[str, int | None] | None:
    """(how, arrival ns or None for 'before the request') from a batch
    timestamp, by the rule of the module docstring; None when it does not
    tell."""
    if kind is None or stamp_ms is None:
        return None
    stamp = stamp_ms * 1_000_000
    if stamp > end_ns + CLOCK_SKEW_NS:
        return None  # after the answer: a clock the tolerance does not cover
    # earlier than the request by more than the tolerance: there before it
    arrival = None if stamp < start_ns - CLOCK_SKEW_NS else stamp
    return (BY_APPEND_TIME if kind == 1 else BY_CREATE_TIME), arrival


def held_part(start_ns: int, end_ns: int, arrival_ns: int | None) -> int:
    """The wait (ns) from the broker's start on a fetch to the data's arrival,
    clamped to the hold; 0 when the data came before."""
    if arrival_ns is None:
        return 0
    return min(max(arrival_ns - start_ns, 0), max(end_ns - start_ns, 0))


class FetchArrival:
    """What a held fetch with records leaves for the capture-wide step: the
    fetched topic-partitions' first offsets, the hold, and the waits before it."""

    __slots__ = ("marks", "start_ns", "end_ns", "before_ns", "before_reason", "how")

    def __init__(self, marks: tuple[Any, ...], start_ns: int, end_ns: int, before_ns: int, before_reason: str | None,
                 how: str | None) -> None:
        self.marks = marks  # ((topic label, partition, first fetched offset), ...)
        self.start_ns = start_ns
        self.end_ns = end_ns
        self.before_ns = before_ns
        self.before_reason = before_reason
        self.how = how  # how the wait's end was found so far (None: unknown)


class ProduceArrival:
    """The offsets a Produce's answer gave: ((label, partition, first, last), ...)."""

    __slots__ = ("ranges",)

    def __init__(self, ranges: tuple[Any, ...]) -> None:
        self.ranges = ranges


_UNREAD: Any = object()


class ProduceAnswer(ProduceArrival):
    """A Produce whose answer's base offsets are read from its frame only
    when a fetch looks for what it wrote (most never are): its request's
    spans ((label, partition, last relative offset), ...) and the answer's
    frame. `ranges` is what `produce_ranges` makes of them."""

    __slots__ = ("spans", "frame", "version", "_bases")

    def __init__(self, spans: tuple[Any, ...], frame: bytes, version: int) -> None:
        self.spans = spans
        self.frame = frame
        self.version = version
        self._bases: Any = _UNREAD

    def base(self, label: Any, partition: Any) -> int | None:
        """The base offset the answer gave a partition; None when it gave
        none (an error, or a frame that does not read)."""
        bases = self._bases
        if bases is _UNREAD:
            bases = self._bases = read_produce_bases(self.frame, self.version)
            self.frame = b""  # read once
        return None if bases is None else bases.get((label, partition))

    @property
    def ranges(self) -> tuple[Any, ...]:  # type: ignore[override]
        self.base(None, None)  # (reads the bases, once)
        placed = None if self._bases is None else produce_ranges(self.spans, self._bases)
        return () if placed is None else placed.ranges


def produce_wins(arrival: FetchArrival, answer_ts: int) -> bool:
    """Whether a Produce answered at `answer_ts` (holding a first fetched
    offset) is in the fetch's window."""
    return (arrival.end_ns - arrival.start_ns <= MAX_HELD_NS
            and arrival.start_ns - PRODUCE_WINDOW_NS <= answer_ts <= arrival.end_ns + PRODUCE_WINDOW_NS)


def earliest_produce(arrival: FetchArrival, written: Callable[[Any, Any, int], Iterable[tuple[int, int, int]]]
                     ) -> int | None:
    """The Produce rule (1. in the module docstring): over the fetch's marks,
    the earliest answer of a Produce that wrote a mark's first fetched offset
    on its topic-partition, within the fetch's window; None when none did.
    `written(label, partition, offset)`: (first offset, last offset, answer
    ts) of the Produce answers on that topic-partition (any that may hold
    `offset`: an index may leave out the ones that cannot)."""
    best: int | None = None
    for label, partition, offset in arrival.marks:
        for first, last, answer_ts in written(label, partition, offset):
            if first <= offset <= last and produce_wins(arrival, answer_ts) and (best is None or answer_ts < best):
                best = answer_ts
    return best


def apply_wait(ex: Any, how: str | None, arrival_ns: int | None, arrival: FetchArrival) -> None:
    """Set `ex`'s wait from the data's arrival (`how` None: unknown)."""
    if how is None:
        ex.wait_reason, ex.wait_ns = LONG_POLL_UNKNOWN, None
        return
    held = held_part(arrival.start_ns, arrival.end_ns, arrival_ns)
    if held:
        ex.wait_reason = "throttle" if arrival.before_reason == "throttle" else "long_poll"
        ex.wait_ns = arrival.before_ns + held
    elif arrival.before_ns:
        ex.wait_reason, ex.wait_ns = arrival.before_reason, arrival.before_ns
    else:
        ex.wait_reason = ex.wait_ns = None
    arrival.how = how


def resolve_with_produce(ex: Any, answer_ts: int | None) -> None:
    """Apply the Produce rule to an exchange whose `arrival` is a FetchArrival
    (`answer_ts`: the earliest qualifying Produce answer, or None)."""
    arrival = ex.arrival
    if answer_ts is not None:
        apply_wait(ex, BY_PRODUCE, answer_ts, arrival)


class ArrivalResolver:
    """The Produce rule over exchanges in the order a capture set yields them
    (the CLI): an exchange whose fetch waits for a Produce answer holds the
    ones after it until the capture's time passes its window, so the order
    is kept. Produce ranges are kept for MAX_HELD_NS + 3 windows of capture
    time (what a fetch that may still look for them can reach back to)."""

    def __init__(self) -> None:
        self.held: deque[Any] = deque()
        # (label, partition) -> [(first offset, last offset, answer ts), ...]; for a
        # ProduceAnswer: (the answer, last offset relative to its base, answer ts)
        # until a fetch looks at that topic-partition (`_written`)
        self.produced: dict[tuple[Any, Any], list[tuple[Any, int, int]]] = {}
        # the topic-partitions in `produced` holding ProduceAnswer entries
        self.unread: set[tuple[Any, Any]] = set()
        # Produce answers not placed in `produced` yet, in order: (arrival,
        # answer ts). They are placed only when a fetch looks or a prune
        # runs (most captures' Produce answers are never looked for).
        self.unplaced: list[tuple[Any, int]] = []
        # the earliest answer time in `produced` (None: empty): a prune whose
        # cutoff is before it has nothing to drop and skips the walk
        self.oldest_produced: int | None = None
        self.now = 0
        self.next_prune = 0

    def feed(self, exchanges: Iterable[Any]) -> Iterator[Any]:
        for ex in exchanges:
            yield from self.add(ex)
        yield from self.finish()

    def add(self, ex: Any) -> tuple[Any, ...] | list[Any]:
        """The exchanges released by adding `ex`, in order (none while a
        fetch ahead of them is held)."""
        arrival = ex.arrival
        ts = ex.response_ts
        if arrival is not None:
            if isinstance(arrival, ProduceArrival):
                if ts is not None:
                    self.unplaced.append((arrival, ts))
                    if self.oldest_produced is None or ts < self.oldest_produced:
                        self.oldest_produced = ts
                ex.arrival = None
            # only a fetch that may still meet its Produce is held
            elif not isinstance(arrival, FetchArrival) or arrival.end_ns - arrival.start_ns > MAX_HELD_NS:
                ex.arrival = None
        if ts is not None and ts > self.now:
            self.now = ts
        held = self.held
        if held:
            held.append(ex)
            head = held[0].arrival
            # the usual case while a fetch is held: it still waits, nothing is released
            if (isinstance(head, FetchArrival) and head.end_ns + PRODUCE_WINDOW_NS >= self.now
                    and self.now < self.next_prune):
                return ()
            return self._release()
        if ex.arrival is not None:
            held.append(ex)
            return self._release()
        return (ex,)

    def _release(self) -> list[Any]:
        held, out = self.held, []
        while held:
            head = held[0]
            arrival = head.arrival
            if isinstance(arrival, FetchArrival):
                if arrival.end_ns + PRODUCE_WINDOW_NS >= self.now:
                    break
                self._resolve(head)
            out.append(held.popleft())
        if self.now >= self.next_prune:
            self._prune()
        return out

    def _place(self) -> None:
        """Put the unplaced Produce answers' entries in `produced`, in order."""
        produced = self.produced
        for arrival, ts in self.unplaced:
            # a ProduceAnswer's entries are (answer, last relative offset, ts),
            # its base read when a fetch looks (_resolve); others' (first, last, ts)
            if arrival.__class__ is ProduceAnswer:
                entries: Iterable[tuple[Any, ...]] = [(label, partition, arrival, last)
                                                      for label, partition, last in arrival.spans]
                self.unread.update((label, partition) for label, partition, _last in arrival.spans)
            else:
                entries = arrival.ranges
            for label, partition, first, last in entries:
                kept = produced.get((label, partition))
                if kept is None:
                    produced[(label, partition)] = [(first, last, ts)]
                else:
                    kept.append((first, last, ts))
        self.unplaced.clear()

    def _resolve(self, ex: Any) -> None:
        if self.unplaced:
            self._place()
        resolve_with_produce(ex, earliest_produce(ex.arrival, self._written))
        ex.arrival = None

    def _written(self, label: Any, partition: Any, offset: int) -> list[tuple[Any, int, int]]:
        """`earliest_produce`'s look-up: a topic-partition's Produce ranges,
        the ProduceAnswers' base offsets read (once) when first looked at
        (an answer that gave that partition no base is left out)."""
        key = (label, partition)
        kept = self.produced.get(key)
        if kept is None:
            return []
        if key in self.unread:
            self.unread.discard(key)
            read: list[tuple[Any, int, int]] = []
            for first, last, answer_ts in kept:
                if first.__class__ is ProduceAnswer:
                    base = first.base(label, partition)
                    if base is None:
                        continue
                    first, last = base, base + last
                read.append((first, last, answer_ts))
            kept = self.produced[key] = read
        return kept

    def _prune(self) -> None:
        self.next_prune = self.now + PRODUCE_WINDOW_NS
        # a fetch still held reaches back at most MAX_HELD_NS + a window before its end
        oldest = min((ex.arrival.start_ns for ex in self.held if isinstance(ex.arrival, FetchArrival)),
                     default=self.now)
        cutoff = min(oldest, self.now - MAX_HELD_NS) - 2 * PRODUCE_WINDOW_NS
        if self.oldest_produced is None or self.oldest_produced >= cutoff:
            return  # nothing to drop
        if self.unplaced:
            self._place()
        remaining = None
        for key in list(self.produced):
            kept = [entry for entry in self.produced[key] if entry[2] >= cutoff]
            if kept:
                self.produced[key] = kept
                earliest = min(entry[2] for entry in kept)
                if remaining is None or earliest < remaining:
                    remaining = earliest
            else:
                del self.produced[key]
                self.unread.discard(key)
        self.oldest_produced = remaining

    def finish(self) -> Iterator[Any]:
        self.now = max(self.now, max((ex.arrival.end_ns for ex in self.held if isinstance(ex.arrival, FetchArrival)),
                                     default=0) + PRODUCE_WINDOW_NS + 1)
        yield from self._release()


def produce_spans(sets: Iterable[tuple[Any, Any, Any]]) -> tuple[Any, ...] | None:
    """((label, partition, last relative offset), ...) of a Produce request's
    record sets (offsets in a produce request count from 0); None if none."""
    spans = []
    for label, partition, raw in sets:
        data = raw if type(raw) is bytes else bytes(raw)
        pos, total, last = 0, len(data), -1
        try:
            while total - pos >= 17:
                if total - pos >= _V2_LAST.size:  # (one read for the usual whole v2 header)
                    base, size, magic, last_delta = _V2_LAST.unpack_from(data, pos)
                else:
                    base, size = _ENTRY.unpack_from(data, pos)
                    magic = last_delta = -1
                if size < 0 or pos + 12 + size > total:
                    break
                if magic == 2 and total - pos >= _V2_TIMES.size:
                    last = max(last, base + last_delta)
                else:
                    last = max(last, base)
                pos += 12 + size
        except (struct.error, IndexError):
            pass
        if last >= 0:
            spans.append((label, partition, last))
    return tuple(spans) or None


def produce_bases(body: Any) -> dict[tuple[Any, Any], int]:
    """{(topic label, partition): base offset} of a decoded ProduceResponse
    body, partitions answered without error only."""
    bases: dict[tuple[Any, Any], int] = {}
    for topic in getattr(body, "responses", None) or ():
        label = getattr(topic, "name", None) or getattr(topic, "topic_id", None)
        label = None if label is None else str(label)
        for entry in getattr(topic, "partition_responses", None) or ():
            base = getattr(entry, "base_offset", None)
            if not getattr(entry, "error_code", 0) and base is not None and base >= 0:
                bases[(label, getattr(entry, "index", None))] = base
    return bases


def int16_at(b: bytes, at: int) -> int:
    """The INT16 at `at`, read in place (the compiled readers of frames
    share these: a struct call costs more than the read; IndexError past the end)."""
    value = b[at] << 8 | b[at + 1]
    return value - 0x10000 if value >= 0x8000 else value


def int32_at(b: bytes, at: int) -> int:
    """The INT32 at `at`."""
    value = b[at] << 24 | b[at + 1] << 16 | b[at + 2] << 8 | b[at + 3]
    return value - 0x100000000 if value >= 0x80000000 else value


def int64_at(b: bytes, at: int) -> int:
    """The INT64 at `at`."""
    # (a shift and an or: mypyc's fast multiplication takes small factors only)
    return int32_at(b, at) << 32 | (int32_at(b, at + 4) & 0xFFFFFFFF)


def read_produce_bases(frame: bytes, version: int) -> dict[tuple[Any, Any], int] | None:
    """`produce_bases` read straight from a ProduceResponse frame (header
    included) of `version` 0-13, without decoding the rest (the skimming
    path keeps Produce answers undecoded, and this runs on every one: hence
    the plain loop); None where the frame does not read as one (then
    nothing is placed: the timestamps decide). Never raises."""
    flexible = version >= 9
    skip = 8 if version >= 2 else 0
    skip += 8 if version >= 5 else 0
    bases: dict[tuple[Any, Any], int] = {}
    try:
        at = 4  # correlation id
        if flexible:
            at = skip_tags_at(frame, at)
            topics, at = uvarint_at(frame, at)
            topics -= 1
        else:
            topics = int32_at(frame, at)
            at += 4
        for _ in range(topics):
            if version >= 13:
                label: Any = topic_label(None, frame[at:at + 16])  # (the id's text, cached)
                at += 16
            elif flexible:
                size, at = uvarint_at(frame, at)
                label = frame[at:at + size - 1].decode("utf-8", "surrogateescape")
                at += size - 1
            else:
                size = int16_at(frame, at)
                label = frame[at + 2:at + 2 + size].decode("utf-8", "surrogateescape")
                at += 2 + size
            if flexible:
                partitions, at = uvarint_at(frame, at)
                partitions -= 1
            else:
                partitions = int32_at(frame, at)
                at += 4
            for _ in range(partitions):
                index, error, base = int32_at(frame, at), int16_at(frame, at + 4), int64_at(frame, at + 6)
                at += 14 + skip
                if version >= 8:  # record errors (batch index, message), then the error message
                    if flexible:
                        errors, at = uvarint_at(frame, at)
                        for _ in range(errors - 1):
                            size, at = uvarint_at(frame, at + 4)
                            at = skip_tags_at(frame, at + max(size - 1, 0))
                        size, at = uvarint_at(frame, at)
                        at += max(size - 1, 0)
                    else:
                        errors = int32_at(frame, at)
                        at += 4
                        for _ in range(errors):
                            at += 6 + max(int16_at(frame, at + 4), 0)
                        at += 2 + max(int16_at(frame, at), 0)
                if flexible:
                    at = skip_tags_at(frame, at)
                if not error and base >= 0:
                    bases[(label, index)] = base
            if flexible:
                at = skip_tags_at(frame, at)
    except (struct.error, IndexError, ValueError):
        return None
    return bases if at <= len(frame) else None


def uvarint_at(data: bytes, at: int) -> tuple[int, int]:
    """An unsigned varint at `at` and the offset after it (the one- and
    two-byte cases inline; compiled readers of frames share it)."""
    byte = data[at]
    if byte < 0x80:  # the usual one-byte count or length
        return byte, at + 1
    second = data[at + 1]
    if 0 < second < 0x80:  # a length up to 16 KiB (a last byte 0 is not minimal: read_uvarint refuses it)
        return (byte & 0x7F) | second << 7, at + 2
    return read_uvarint(data, at)


def skip_tags_at(data: bytes, at: int) -> int:
    """The offset after a tagged-fields section at `at`."""
    if data[at] == 0:  # no tagged fields, the usual case
        return at + 1
    count, at = read_uvarint(data, at)
    for _ in range(count):
        _tag, at = read_uvarint(data, at)
        size, at = read_uvarint(data, at)
        at += size
    return at


def produce_ranges(spans: tuple[Any, ...], bases: dict[tuple[Any, Any], int]) -> ProduceArrival | None:
    """The offsets a Produce wrote: its request's spans placed at its
    answer's base offsets (`produce_bases`); partitions answered with an
    error or no base offset are left out."""
    ranges = tuple((label, partition, bases[(label, partition)], bases[(label, partition)] + last)
                   for label, partition, last in spans if (label, partition) in bases)
    return ProduceArrival(ranges) if ranges else None


def fetch_arrival(sets: list[Any], hint: tuple[Any, ...] | None, start_ns: int, end_ns: int, before_ns: int,
                  before_reason: str | None) -> FetchArrival | None:
    """What the rules need of a held fetch with records (`sets`: its
    response's (label, partition, raw)): a FetchArrival whose marks hold,
    per fetched partition, the first fetched offset and its batch's
    timestamp type and time (`decide` reads them). None when the fetch
    asked for no wait or no whole batch header was fetched."""
    if hint is None or not hint[0] or hint[0] <= 0:
        return None
    offsets = hint[2] if len(hint) > 2 else None
    marks = []
    for label, partition, raw in sets:
        want = offsets.get((label, partition)) if offsets else None
        found = batch_time(raw, want)
        if found is not None:
            marks.append((label, partition, found[0], found[1], found[2]))
    if not marks:
        return None
    return FetchArrival(tuple(marks), start_ns, end_ns, before_ns, before_reason, None)


def decide(ex: Any, arrival: FetchArrival) -> None:
    """Set `ex`'s wait from the batch timestamps (the per-connection rule);
    the marks keep only (label, partition, first offset) afterwards, for
    the Produce rule."""
    told = [timestamp_arrival(arrival.start_ns, arrival.end_ns, kind, stamp)
            for _label, _partition, _first, kind, stamp in arrival.marks]
    arrival.marks = tuple(mark[:3] for mark in arrival.marks)
    if any(item is None for item in told):
        apply_wait(ex, None, None, arrival)
        return
    times = [item[1] for item in told]  # type: ignore[index]
    earliest = None if any(t is None for t in times) else min(times)  # type: ignore[type-var]
    hows = {item[0] for item in told}  # type: ignore[index]
    apply_wait(ex, hows.pop() if len(hows) == 1 else BY_CREATE_TIME, earliest, arrival)
