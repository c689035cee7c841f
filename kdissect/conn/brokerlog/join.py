"""Joining the broker's request log to the captured exchanges, streaming.

Identity first: a log entry joins the exchange with the same client endpoint
(ip:port of the connection's client side), correlation id and api key. Time
only chooses between several entries with that identity (a client port
reused by a later connection, a correlation id that wrapped): the nearest,
after the clock offset is taken out, within `tolerance` (default 5 s).

The log line's time is when the broker completed the request (the response
sent); it is compared with the exchange's response time (its request time
when there is no response). The clock offset (log clock minus capture clock)
is first estimated from the identity matches between the first exchanges and
the log around them, then measured on every joined pair: its median and
spread go into the accounting, from a QuantileSketch (bounded memory).

Memory: log entries wait in an index only while they are within `window`
(default 60 s, capture clock) of the latest exchange seen; older ones leave
it as logged-but-not-captured; a joined entry leaves the index at once and
the eviction queue at its next sweep (`_drop_joined`, once the joined are
half of it), so it is freed as the join goes. The log is read ahead only as far as the
current exchange's time plus the tolerance (a batch of lines indexed at
once when all of it is within that). The exchanges are joined a chunk at a
time, by a few calls over the chunk when nothing in it depends on their
order (`_joined`). The sets of client endpoints seen
on either side (for the reasons) grow with the connections, not the lines;
the clock offsets cost at most 4,096 pending counts plus the sketch.

`network_ms` (see `network_ms` below): the time to the first response byte
that no broker time covers.
"""

from __future__ import annotations

from collections import Counter, deque
from itertools import chain, islice, repeat
from operator import attrgetter, sub
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

from kdissect.conn.brokerlog import parse
from kdissect.conn.brokerlog.parse import ENTRY_TYPES, LogReadStats, read_batches, request_log_files
from kdissect.sketch import QuantileSketch
from kdissect.model.exchange import INEXACT, OK

if TYPE_CHECKING:
    from kdissect.conn.brokerlog.decoder import LogEntry

DEFAULT_TOLERANCE_S = 5.0
DEFAULT_WINDOW_S = 60.0
_BOOTSTRAP_EXCHANGES = 256  # answered exchanges held to estimate the clock offset first
_OFFSET_PENDING = 4096  # distinct offsets counted before they go into the sketch
_NO_CLIENT = object()
_ts_of, _key_of, _client_of = attrgetter("ts"), attrgetter("key"), attrgetter("client")
_protocol_of = attrgetter("security_protocol")
_response_ts_of = attrgetter("response_ts")
_correlation_id_of, _api_key_of = attrgetter("correlation_id"), attrgetter("api_key")
_CHUNK = 256  # exchanges joined at a time
_DROP_FROM = 2048  # a shorter eviction queue keeps its joined entries (see BrokerLogJoin._drop_joined)
_CHUNK_TYPES = ENTRY_TYPES  # (the entries' classes, as they are loaded: msgspec's and the native one)
_drain: Any = deque(maxlen=0).extend  # consumes an iterator in C

# why a log entry has no exchange
BEFORE_CAPTURE = "before_capture"  # logged before the capture's first exchange
AFTER_CAPTURE = "after_capture"  # logged after its last
CONNECTION_NOT_CAPTURED = "connection_not_captured"  # other listener, port or host; TLS not decrypted
EXCHANGE_NOT_CAPTURED = "exchange_not_captured"  # connection captured, this exchange not (lost packets, mid-way)
# why an exchange has no log entry
OUTSIDE_LOG_TIME = "outside_log_time"  # before the log's first line or after its last
CONNECTION_NOT_LOGGED = "connection_not_logged"  # no line of its connection (another broker, log not given)
# SASL handshakes and authentication, and the ApiVersions before them, are
# answered by the broker's authenticator and never reach the request log
PRE_AUTHENTICATION = "pre_authentication"
UNANSWERED = "unanswered"  # no response, orphan, malformed or truncated: the broker may not have completed it
NOT_LOGGED = "not_logged"  # connection logged, this request not (lost lines, a rotation gap, level changed)
JOINED = "joined"

LOG_ONLY_REASONS = (BEFORE_CAPTURE, AFTER_CAPTURE, CONNECTION_NOT_CAPTURED, EXCHANGE_NOT_CAPTURED)
CAPTURE_ONLY_REASONS = (OUTSIDE_LOG_TIME, CONNECTION_NOT_LOGGED, PRE_AUTHENTICATION, UNANSWERED, NOT_LOGGED)
_SASL_APIS = (17, 36)  # SaslHandshake, SaslAuthenticate
_API_VERSIONS = 18


class BrokerLogAccounting:
    """The join's counts: request lines = joined + logged-only (by reason);
    exchanges = joined + captured-only (by reason); lines = request + other + bad."""

    def __init__(self, read: LogReadStats) -> None:
        self.read = read
        self.exchanges = 0
        self.joined = 0
        self.ambiguous = 0  # joined exchanges that had several candidate lines (the nearest was taken)
        self.log_only: Counter[str] = Counter()
        self.capture_only: Counter[str] = Counter()
        # log time minus capture time of every joined pair: ns -> pairs, then
        # into the sketch (ms) every _OFFSET_PENDING distinct values
        self.offset_counts: Counter[int] = Counter()
        self.offset_sketch = QuantileSketch()
        self.offset_pairs = 0
        self.offset_start_ms = 0.0  # the first estimate (from the first exchanges)
        self.tolerance_s = DEFAULT_TOLERANCE_S
        self.window_s = DEFAULT_WINDOW_S

    def flush_offsets(self) -> None:
        """The counted offsets into the sketch."""
        sketch = self.offset_sketch
        for difference, pairs in self.offset_counts.items():
            sketch.add_repeated(difference / 1e6, pairs)
        self.offset_counts.clear()

    def offset_figures(self) -> dict[str, Any]:
        """Log clock minus capture clock over the joined pairs, ms (log time
        vs response time: includes the network's last leg, at ms resolution).
        From a QuantileSketch: exact up to its EXACT_LIMIT pairs, then each
        percentile within its RELATIVE_ACCURACY (1%) of the exact one; the
        minimum and maximum are exact."""
        self.flush_offsets()
        sketch = self.offset_sketch
        if not sketch.count:
            return {"pairs": 0, "median_ms": None, "p5_ms": None, "p95_ms": None, "min_ms": None,
                    "max_ms": None, "spread_ms": None}
        p5, median, p95 = sketch.percentiles(5, 50, 95)
        return {"pairs": self.offset_pairs, "median_ms": median, "p5_ms": p5, "p95_ms": p95,
                "min_ms": sketch.min, "max_ms": sketch.max, "spread_ms": p95 - p5}

    def balance(self) -> list[str]:
        wrong = []
        read = self.read
        if read.lines != read.request_lines + read.other_lines + read.bad_lines:
            wrong.append(f"log lines {read.lines} != request {read.request_lines} + other {read.other_lines}"
                         f" + bad {read.bad_lines}")
        if read.request_lines != self.joined + sum(self.log_only.values()):
            wrong.append(f"request lines {read.request_lines} != joined {self.joined} + logged only "
                         f"{sum(self.log_only.values())}")
        if self.exchanges != self.joined + sum(self.capture_only.values()):
            wrong.append(f"exchanges {self.exchanges} != joined {self.joined} + captured only "
                         f"{sum(self.capture_only.values())}")
        return wrong

    def to_dict(self) -> dict[str, Any]:
        return {**self.read.to_dict(), "exchanges": self.exchanges, "joined": self.joined,
                "ambiguous": self.ambiguous,
                "log_only": {r: self.log_only.get(r, 0) for r in LOG_ONLY_REASONS},
                "capture_only": {r: self.capture_only.get(r, 0) for r in CAPTURE_ONLY_REASONS},
                "clock_offset": self.offset_figures(), "tolerance_s": self.tolerance_s,
                "window_s": self.window_s}

    def summary_lines(self) -> list[str]:
        read = self.read
        figures = self.offset_figures()
        offset = ("no joined pairs" if figures["median_ms"] is None else
                  f"median {figures['median_ms']:.3f} ms, p5..p95 {figures['p5_ms']:.3f}..{figures['p95_ms']:.3f}"
                  f" ms (spread {figures['spread_ms']:.3f}), over {figures['pairs']} pairs")
        return [
            f"broker log: {read.files} files, {read.lines} lines = {read.request_lines} requests + "
            f"{read.other_lines} other + {read.bad_lines} unreadable ({read.cut_lines} cut mid-line)",
            f"broker log join: {self.joined} joined ({self.ambiguous} chosen by time among several); logged only "
            + ", ".join(f"{self.log_only.get(r, 0)} {r}" for r in LOG_ONLY_REASONS) + "; captured only "
            + ", ".join(f"{self.capture_only.get(r, 0)} {r}" for r in CAPTURE_ONLY_REASONS),
            f"broker log clock offset (log - capture): {offset}",
        ]


def network_ms(request_ts: int | None, response_first_ts: int | None, socket_wait_ns: int | None,
               total_ms: float | None, send_ms: float | None) -> float | None:
    """The time to the first response byte that the broker's account does not
    cover, ms: ttfb - socket wait - (broker total - broker send).

    Kafka's totalTimeMs runs from when its processor thread has read the
    whole request to when it notices the response's last byte written; its
    sendTimeMs from when that thread took the response off its queue. So the
    broker's time before sending (total - send) starts after the request's
    last byte reached the broker and, once it ends, the response's first byte
    is still to be written. What is left of the time to the first byte, once
    the time the request sat unread (socket_wait_ns: behind the previous
    answer, a quota's mute) is taken out, is the network both ways between
    the capture point and the broker plus the processor thread's own lag in
    reading the request and writing the response (the kernel and its poll
    loop, which no broker time covers). Captured at the broker it is that lag
    alone, and never negative (up to the log's microsecond truncation).
    Computed in integer ns (the log's times are whole microseconds), so the
    Spark job's rows, made from the same columns, are the same floats."""
    if request_ts is None or response_first_ts is None or total_ms is None or send_ms is None:
        return None
    before_send = (total_ms - send_ms) * 1_000_000
    if before_send - before_send != 0:  # a log's NaN or infinity (the json path reads them)
        return None
    ns = response_first_ts - request_ts - (socket_wait_ns or 0) - round(before_send)
    return ns / 1_000_000


def _take(exchange: Any, entry: LogEntry) -> None:
    """Give the exchange the joined log entry's columns and its network_ms
    (the entry marked as matched). network_ms is `network_ms`'s arithmetic
    written out (the same integer ns, the same float; the Spark test
    compares the two): a call of it per exchange cost 5% of the join."""
    entry.matched = True
    exchange.broker_log = JOINED
    exchange.broker_total_ms = total = entry.total_ms
    exchange.broker_request_queue_ms = entry.request_queue_ms
    exchange.broker_local_ms = entry.local_ms
    exchange.broker_remote_ms = entry.remote_ms
    exchange.broker_throttle_ms = entry.throttle_ms
    exchange.broker_response_queue_ms = entry.response_queue_ms
    exchange.broker_send_ms = send = entry.send_ms
    exchange.principal = entry.principal
    exchange.security_protocol = entry.security_protocol
    exchange.listener = entry.listener
    request_ts = exchange.request_ts
    first_ts = exchange.response_first_ts
    if request_ts is None or first_ts is None or total is None or send is None:
        exchange.network_ms = None
        return
    before_send = (total - send) * 1_000_000
    if before_send - before_send != 0:  # (NaN or infinity)
        exchange.network_ms = None
        return
    exchange.network_ms = (first_ts - request_ts - (exchange.socket_wait_ns or 0) - round(before_send)) / 1_000_000


_take_python = _take
if parse._native_lines is not None:  # the native reader's take: its entries' columns set in C, others by _take
    parse._native_lines.configure(_take_python, JOINED)
    _take = parse._native_lines.take  # type: ignore[assignment]  # noqa: F811


class BrokerLogJoin:
    """Join request-log files to an exchange stream: `join(exchanges)` yields
    the same exchanges with their broker-log columns set; `accounting` holds
    the counts once the stream is exhausted; `observer` (optional) gets each
    exchange and each logged-only entry (the tables' collector).

    The index maps an identity (`LogEntry.key`: client endpoint, correlation
    id, api key) to its one waiting entry, or to a list of them in log order
    when several wait (a reused port, a wrapped correlation id)."""

    def __init__(self, inputs: Sequence[str], tolerance_s: float = DEFAULT_TOLERANCE_S,
                 window_s: float = DEFAULT_WINDOW_S) -> None:
        self.paths = request_log_files(inputs)
        self.read_stats = LogReadStats()
        self.accounting = BrokerLogAccounting(self.read_stats)
        self.accounting.tolerance_s = tolerance_s
        self.accounting.window_s = window_s
        self.tolerance = int(tolerance_s * 1e9)
        self.window = int(window_s * 1e9)
        self.observer: Any = None
        self.peak_pending = 0  # the most log entries held at once (bounded by the window, not the log)

    # -- the log side ----------------------------------------------------------

    def _start(self) -> None:
        self._batches = read_batches(self.paths, self.read_stats)
        # the log is read a batch at a time: `_next` is the first entry not
        # indexed yet, at `_at` in `_batch` (None at the log's end)
        self._batch: list[LogEntry] = []
        self._at = 0
        self._batch_last = 0  # the latest log time in `_batch`
        self._next: LogEntry | None = None
        self._load_batch()
        self._index: dict[tuple, Any] = {}  # identity -> LogEntry | list[LogEntry]
        self._queue: deque[LogEntry] = deque()
        self._log_clients: dict[str, str] = {}  # client endpoint -> its security protocol
        self._captured_clients: set[str] = set()
        self._first_log_ts: int | None = None if self._next is None else self._next.ts
        self._last_log_ts: int | None = None
        self._first_ts: int | None = None  # capture clock: the first and latest exchange times
        self._latest_ts: int | None = None
        self.offset = 0  # ns, log minus capture

    def _load_batch(self) -> None:
        """The next batch of the log (or its end) as `_batch`, from its start."""
        batch = next(self._batches, None)
        self._batch = batch = [] if batch is None else batch
        self._at = 0
        self._next = batch[0] if batch else None
        self._batch_last = max(map(_ts_of, batch)) if batch else 0

    def _step(self) -> None:
        """`_next` read (and not indexed): the one after it becomes `_next`."""
        self._at += 1
        if self._at < len(self._batch):
            self._next = self._batch[self._at]
        else:
            self._load_batch()

    def _read_until(self, ts: int) -> None:
        """Index the log up to log time `ts` (up to the first entry after it).
        A whole batch whose entries are all at `ts` or before is indexed by a
        few calls over the batch (`_index_batch`), any other entry by entry."""
        queue = self._queue
        read_ts = None
        while self._next is not None and self._next.ts <= ts:
            batch, at = self._batch, self._at
            if at == 0 and self._batch_last <= ts:
                self._index_batch(batch)
                read_ts = batch[-1].ts
                self._load_batch()
                continue
            clients, index = self._log_clients, self._index
            add = index.setdefault
            end = len(batch)
            entry = batch[at]
            while True:
                clients[entry.client] = entry.security_protocol or ""
                waiting = add(entry.key, entry)
                if waiting is not entry:
                    if waiting.__class__ is list:
                        waiting.append(entry)
                    else:
                        index[entry.key] = [waiting, entry]
                queue.append(entry)
                read_ts = entry.ts
                at += 1
                if at == end:
                    break
                entry = batch[at]
                if entry.ts > ts:
                    break
            if at == end:
                self._load_batch()
            else:
                self._at = at
                self._next = entry
        if read_ts is not None:
            self._last_log_ts = read_ts
        if len(queue) > self.peak_pending:
            self.peak_pending = len(queue)

    def _index_batch(self, batch: list[LogEntry]) -> None:
        """The batch's entries into the index, the queue and the log's
        clients, as `_read_until` puts them one by one: in one update of the
        index when none of their identities is waiting already nor repeats
        in the batch (the usual case), else one by one."""
        index = self._index
        keys = list(map(_key_of, batch))
        fresh = dict(zip(keys, batch))
        if len(fresh) == len(batch) and index.keys().isdisjoint(fresh.keys()):
            index.update(fresh)
        else:
            add = index.setdefault
            for key, entry in zip(keys, batch):
                waiting = add(key, entry)
                if waiting is not entry:
                    if waiting.__class__ is list:
                        waiting.append(entry)
                    else:
                        index[key] = [waiting, entry]
        protocols = list(map(_protocol_of, batch))
        if None in protocols:
            protocols = [protocol or "" for protocol in protocols]
        # (a call per pair: update() takes each pair as a sequence, 5 times the work)
        _drain(map(self._log_clients.__setitem__, map(_client_of, batch), protocols))
        self._queue.extend(batch)

    def _unindex(self, entry: LogEntry) -> None:
        index = self._index
        key = entry.key
        waiting = index.get(key)
        if waiting is entry:
            del index[key]
        elif waiting.__class__ is list:
            waiting.remove(entry)
            if len(waiting) == 1:
                index[key] = waiting[0]

    def _evict(self, before: int) -> None:
        """Entries logged before log time `before` leave the index, unjoined."""
        queue = self._queue
        while queue and queue[0].ts < before:
            entry = queue.popleft()
            if entry.matched:
                continue
            self._unindex(entry)
            self._log_only(entry, at_end=False)

    def _drop_joined(self) -> None:
        """The joined entries out of the eviction queue (it keeps the
        unjoined in log order), so that each is freed once joined instead of
        when the window passes it: the memory the pipeline allocates next
        reuses theirs, where it would take new pages from the system (a
        page fault each: 1,000 of the benchmark's 13,000, 7 ms of system
        CPU). Eviction and the end see the same unjoined entries in the same
        order (both skip the joined ones)."""
        queue = self._queue
        kept = [entry for entry in queue if not entry.matched]
        queue.clear()
        queue.extend(kept)

    def _log_only(self, entry: LogEntry, at_end: bool) -> None:
        capture_ts = entry.ts - self.offset
        if self._first_ts is None or capture_ts < self._first_ts - self.tolerance:
            reason = BEFORE_CAPTURE
        elif at_end and self._latest_ts is not None and capture_ts > self._latest_ts + self.tolerance:
            reason = AFTER_CAPTURE
        elif entry.client not in self._captured_clients:
            reason = CONNECTION_NOT_CAPTURED
        else:
            reason = EXCHANGE_NOT_CAPTURED
        self.accounting.log_only[reason] += 1
        if self.observer is not None:
            self.observer.log_only(entry, reason)

    # -- the capture side ------------------------------------------------------

    @staticmethod
    def _time(exchange: Any) -> int | None:
        return exchange.response_ts if exchange.response_ts is not None else exchange.request_ts

    def _estimate_offset(self, held: list[Any]) -> None:
        """The first clock offset: identity matches between the held exchanges
        and the log around them (offset 0 assumed only to bound that look)."""
        times = [t for t in (self._time(ex) for ex in held) if t is not None]
        if not times:
            return
        low, high = min(times) - self.window, max(times) + self.window
        # lines logged a window before the first exchange can join nothing
        # (this look assumes the clocks are within the window of each other)
        while self._next is not None and self._next.ts < low:
            entry = self._next
            self._step()
            self._last_log_ts = entry.ts
            self._log_clients[entry.client] = entry.security_protocol or ""
            self._log_only(entry, at_end=False)
        self._read_until(high)
        differences = []
        for ex in held:
            t = self._time(ex)
            waiting = self._index.get((ex.client, ex.correlation_id, ex.api_key))
            if t is not None and waiting is not None and waiting.__class__ is not list:
                differences.append(waiting.ts - t)
        if differences:
            differences.sort()
            self.offset = differences[len(differences) // 2]
        self.accounting.offset_start_ms = self.offset / 1e6

    def _choose(self, key: tuple, waiting: list[LogEntry], t: int | None) -> LogEntry | None:
        """Of several entries with one identity, the nearest in time within
        the tolerance (the first of equals, in log order); out of the index."""
        if t is None:
            return None
        offset, tolerance = self.offset, self.tolerance
        candidates = [e for e in waiting if abs(e.ts - offset - t) <= tolerance]
        if not candidates:
            return None
        chosen = min(candidates, key=lambda e: abs(e.ts - offset - t))
        if len(candidates) > 1:
            self.accounting.ambiguous += 1
        self._unindex(chosen)
        return chosen

    def _joined(self, exchanges: Iterable[Any]) -> Iterator[list[Any]]:
        """The exchanges in lists of up to `_CHUNK` (in order), each joined
        to its entry or given its reason.

        A chunk is joined by a few calls over it (`fast` below) when nothing
        in it can depend on the order within it: every exchange has a time,
        none reads the log ahead or evicts, and every identity finds one
        waiting entry within the tolerance. Otherwise (the entries taken out
        of the index put back first) the chunk goes exchange by exchange.

        The per-exchange path, written out over locals: the log is read
        ahead (`_read_until`) once an exchange's time reaches `read_at`, the
        capture time at which the next unread entry comes within the
        tolerance; the index is evicted once a new latest time passes
        `evict_at`, the capture time at which the oldest waiting entry
        leaves the window. Both are worked out once per entry, not per
        exchange, and decide exactly as the comparisons they stand for. An
        entry is within the tolerance when its log time minus the exchange's
        time (`difference`, what the offsets count) lies in [low, high]; the
        latest time is kept in a local and stored when the loop stops (the
        methods called from the loop read the first time, never the latest)."""
        accounting = self.accounting
        observer = self.observer
        index, queue = self._index, self._queue
        pop = index.pop
        captured_clients = self._captured_clients
        captured = captured_clients.add
        offset, tolerance, window = self.offset, self.tolerance, self.window
        counts = accounting.offset_counts
        capture_only = accounting.capture_only
        latest = started = -1 if self._latest_ts is None else self._latest_ts
        # -tolerance <= entry.ts - offset - t <= tolerance  <=>  low <= entry.ts - t <= high
        low, high = offset - tolerance, offset + tolerance
        difference = 0
        never = float("inf")
        following = self._next
        # t >= read_at  <=>  following.ts <= t + offset + tolerance
        read_at = never if following is None else following.ts - offset - tolerance
        # t > evict_at  <=>  queue[0].ts < t + offset - window
        evict_at = queue[0].ts - offset + window if queue else never
        last_client: object = _NO_CLIENT
        total = joined = pairs = 0
        # exchanges joined since the queue was last rid of its joined entries:
        # once they are half of it, it is (each entry copied about twice in all)
        since = 0
        iterator = iter(exchanges)
        try:
            while True:
                chunk: list[Any] = []
                failure = None
                try:
                    _drain(map(chunk.append, islice(iterator, _CHUNK)))
                except Exception as problem:  # (what came before it is joined and handed on first)
                    failure = problem
                if not chunk:
                    if failure is not None:
                        raise failure
                    break
                total += len(chunk)
                fast = False
                times = list(map(_response_ts_of, chunk))
                if None in times:
                    times = [t if t is not None else ex.request_ts for t, ex in zip(times, chunk)]
                if None not in times:
                    newest = max(times)
                    # (t > latest and t > evict_at for some t  <=>  newest > max(latest, evict_at))
                    if newest < read_at and not (newest > latest and newest > evict_at):
                        clients = list(map(_client_of, chunk))
                        keys = list(zip(clients, map(_correlation_id_of, chunk), map(_api_key_of, chunk)))
                        chosen = list(map(pop, keys, repeat(None)))
                        if _CHUNK_TYPES.issuperset(map(type, chosen)):  # (no None, no list)
                            differences = list(map(sub, map(_ts_of, chosen), times))
                            fast = low <= min(differences) and max(differences) <= high
                        if not fast:  # the chunk exchange by exchange, from the index as it was
                            index.update((key, entry) for key, entry in zip(keys, chosen) if entry is not None)
                if fast:
                    captured_clients.update(clients)
                    last_client = clients[-1]
                    oldest = min(times)
                    if newest > latest:
                        latest = newest
                    if self._first_ts is None or oldest < self._first_ts:
                        self._first_ts = oldest
                    joined += len(chunk)
                    pairs += len(chunk)
                    if len(counts) + len(chunk) < _OFFSET_PENDING:  # (no flush can fall within the chunk)
                        counts.update(differences)  # (counts[d] = counts.get(d, 0) + 1 in order, in C)
                        _drain(map(_take, chunk, chosen))
                    else:
                        for exchange, chosen_entry, difference in zip(chunk, chosen, differences):
                            _take(exchange, chosen_entry)
                            counts[difference] = counts.get(difference, 0) + 1
                            if len(counts) >= _OFFSET_PENDING:
                                accounting.flush_offsets()
                    if observer is not None:
                        for exchange in chunk:
                            observer.exchange(exchange)
                else:
                    for exchange in chunk:
                        client = exchange.client
                        if client is not last_client:  # (a connection's exchanges share one endpoint string)
                            captured(client)
                            last_client = client
                        t = exchange.response_ts
                        if t is None:
                            t = exchange.request_ts
                        if t is not None:
                            if t > latest:
                                latest = t
                                if self._first_ts is None:
                                    self._first_ts = t
                                if t > evict_at:
                                    self._evict(t + offset - window)
                                    evict_at = queue[0].ts - offset + window if queue else never
                            elif t < self._first_ts:  # type: ignore[operator]
                                self._first_ts = t
                            if t >= read_at:  # index the log up to t + offset + tolerance (once per batch of lines)
                                was_empty = not queue
                                self._read_until(t + offset + tolerance)
                                following = self._next
                                read_at = never if following is None else following.ts - offset - tolerance
                                if was_empty and queue:
                                    evict_at = queue[0].ts - offset + window
                        key = (client, exchange.correlation_id, exchange.api_key)
                        chosen_one = pop(key, None)  # the usual case: the one entry with that identity
                        if chosen_one is not None:
                            if chosen_one.__class__ is list:
                                index[key] = chosen_one
                                chosen_one = self._choose(key, chosen_one, t)
                                if chosen_one is not None and t is not None:
                                    difference = chosen_one.ts - t
                            elif t is not None:
                                difference = chosen_one.ts - t
                                if not low <= difference <= high:
                                    index[key] = chosen_one
                                    chosen_one = None
                        if chosen_one is None:
                            reason = self._capture_only_reason(exchange, t)
                            capture_only[reason] += 1
                            exchange.broker_log = reason
                        else:
                            joined += 1
                            _take(exchange, chosen_one)
                            if t is not None:
                                pairs += 1
                                counts[difference] = counts.get(difference, 0) + 1
                                if len(counts) >= _OFFSET_PENDING:
                                    accounting.flush_offsets()
                        if observer is not None:
                            observer.exchange(exchange)
                since += len(chunk)
                if since * 2 > len(queue) > _DROP_FROM:
                    self._drop_joined()
                    evict_at = queue[0].ts - offset + window if queue else never
                    since = 0
                yield chunk
                if failure is not None:
                    raise failure
        finally:
            if latest != started:
                self._latest_ts = latest
            accounting.exchanges += total
            accounting.joined += joined
            accounting.offset_pairs += pairs

    def _capture_only_reason(self, exchange: Any, t: int | None) -> str:
        if t is None or self._first_log_ts is None:
            return OUTSIDE_LOG_TIME if self._first_log_ts is None else UNANSWERED
        log_t = t + self.offset
        if log_t < self._first_log_ts - self.tolerance:
            return OUTSIDE_LOG_TIME
        if self._next is None and self._last_log_ts is not None and log_t > self._last_log_ts + self.tolerance:
            return OUTSIDE_LOG_TIME
        protocol = self._log_clients.get(exchange.client)
        if exchange.api_key in _SASL_APIS or (exchange.api_key == _API_VERSIONS and protocol is not None
                                              and protocol.startswith("SASL")):
            return PRE_AUTHENTICATION
        if protocol is None:
            return CONNECTION_NOT_LOGGED
        if exchange.status not in (OK, INEXACT):  # (inexact: answered, decoded at an assumed version)
            return UNANSWERED
        return NOT_LOGGED

    def join(self, exchanges: Iterable[Any]) -> Iterator[Any]:
        """The exchanges, in their order, with their broker-log columns set
        (nothing is read before the first is asked for). Each exchange is
        handed on by chains, in C: no generator is resumed for each."""
        return chain.from_iterable(self._stages(exchanges))

    def _stages(self, exchanges: Iterable[Any]) -> Iterator[Iterable[Any]]:
        """`join`'s exchanges as one iterable (chunks joined as they are
        asked for); once they are all through, the end of the log counted."""
        self._start()
        iterator = iter(exchanges)
        held: list[Any] = []
        answered = 0
        first = None
        for exchange in iterator:  # (at most a window's worth: the log is indexed over their span)
            held.append(exchange)
            t = self._time(exchange)
            if first is None:
                first = t
            answered += exchange.response_ts is not None
            if answered >= _BOOTSTRAP_EXCHANGES or (t is not None and first is not None and abs(t - first) > self.window):
                break
        self._estimate_offset(held)
        yield chain.from_iterable(self._joined(chain(held, iterator)))
        # what is left in the index, then the rest of the log (counted, not kept)
        for entry in self._queue:
            if not entry.matched:
                self._log_only(entry, at_end=True)
        self._queue.clear()
        self._index.clear()
        while self._next is not None:
            entry = self._next
            self._step()
            self._last_log_ts = entry.ts
            self._log_only(entry, at_end=True)
