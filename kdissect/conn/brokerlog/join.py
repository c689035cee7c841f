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
spread go into the accounting.

Memory: log entries wait in an index only while they are within `window`
(default 60 s, capture clock) of the latest exchange seen; older ones leave
it as logged-but-not-captured. The log is read ahead only as far as the
current exchange's time plus the tolerance. The sets of client endpoints seen
on either side (for the reasons) grow with the connections, not the lines.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Any, Iterable, Iterator, Sequence

from kdissect.conn.brokerlog.parse import LogEntry, LogReadStats, read_entries, request_log_files
from kdissect.model.exchange import INEXACT, OK

DEFAULT_TOLERANCE_S = 5.0
DEFAULT_WINDOW_S = 60.0
_BOOTSTRAP_EXCHANGES = 256  # answered exchanges held to estimate the clock offset first
_OFFSET_SAMPLES = 4096  # the joined pairs' offsets kept: an evenly spaced sample of 4096 to 8191

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
        self.offsets: list[float] = []  # ms, an evenly spaced sample of the joined pairs
        self.offset_pairs = 0
        self.offset_start_ms = 0.0  # the first estimate (from the first exchanges)
        self.tolerance_s = DEFAULT_TOLERANCE_S
        self.window_s = DEFAULT_WINDOW_S

    def offset_figures(self) -> dict[str, Any]:
        """Log clock minus capture clock over the joined pairs, ms (log time
        vs response time: includes the network's last leg, at ms resolution)."""
        from kdissect.ranks import percentile

        values = sorted(self.offsets)
        if not values:
            return {"pairs": 0, "median_ms": None, "p5_ms": None, "p95_ms": None, "min_ms": None,
                    "max_ms": None, "spread_ms": None}
        p5, p95 = percentile(values, 5), percentile(values, 95)
        return {"pairs": self.offset_pairs, "median_ms": percentile(values, 50), "p5_ms": p5, "p95_ms": p95,
                "min_ms": values[0], "max_ms": values[-1], "spread_ms": p95 - p5}

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


def apply_entry(exchange: Any, entry: LogEntry | None, status: str) -> None:
    """Set the exchange's broker-log columns from `entry` (None: unmatched, `status` says why)."""
    exchange.broker_log = status
    if entry is None:
        return
    exchange.broker_total_ms = total = entry.total_ms
    exchange.broker_request_queue_ms = entry.request_queue_ms
    exchange.broker_local_ms = entry.local_ms
    exchange.broker_remote_ms = entry.remote_ms
    exchange.broker_throttle_ms = entry.throttle_ms
    exchange.broker_response_queue_ms = entry.response_queue_ms
    exchange.broker_send_ms = entry.send_ms
    exchange.principal = entry.principal
    exchange.security_protocol = entry.security_protocol
    exchange.listener = entry.listener
    request_ts, response_ts = exchange.request_ts, exchange.response_ts
    if total is not None and request_ts is not None and response_ts is not None:
        exchange.network_ms = (response_ts - request_ts) / 1_000_000 - total


class BrokerLogJoin:
    """Join request-log files to an exchange stream: `join(exchanges)` yields
    the same exchanges with their broker-log columns set; `accounting` holds
    the counts once the stream is exhausted; `observer` (optional) gets each
    exchange and each logged-only entry (the tables' collector)."""

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
        self._stride = 1

    # -- the log side ----------------------------------------------------------

    def _start(self) -> None:
        self._entries = read_entries(self.paths, self.read_stats)
        self._next: LogEntry | None = next(self._entries, None)
        self._index: dict[tuple, list[LogEntry]] = {}
        self._queue: deque[LogEntry] = deque()
        self._log_clients: dict[str, str] = {}  # client endpoint -> its security protocol
        self._captured_clients: set[str] = set()
        self._first_log_ts: int | None = None if self._next is None else self._next.ts
        self._last_log_ts: int | None = None
        self._first_ts: int | None = None  # capture clock: the first and latest exchange times
        self._latest_ts: int | None = None
        self.offset = 0  # ns, log minus capture

    def _take(self) -> LogEntry:
        entry = self._next
        assert entry is not None
        self._next = next(self._entries, None)
        self._last_log_ts = entry.ts
        self._log_clients[entry.client] = entry.security_protocol or ""
        self._index.setdefault((entry.client, entry.correlation_id, entry.api_key), []).append(entry)
        queue = self._queue
        queue.append(entry)
        if len(queue) > self.peak_pending:
            self.peak_pending = len(queue)
        return entry

    def _read_until(self, ts: int) -> None:
        """Index the log up to log time `ts`."""
        while self._next is not None and self._next.ts <= ts:
            self._take()

    def _evict(self, before: int) -> None:
        """Entries logged before log time `before` leave the index, unjoined."""
        queue = self._queue
        while queue and queue[0].ts < before:
            entry = queue.popleft()
            if entry.matched:
                continue
            key = (entry.client, entry.correlation_id, entry.api_key)
            bucket = self._index.get(key)
            if bucket is not None:
                bucket.remove(entry)
                if not bucket:
                    del self._index[key]
            self._log_only(entry, at_end=False)

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
            self._next = next(self._entries, None)
            self._last_log_ts = entry.ts
            self._log_clients[entry.client] = entry.security_protocol or ""
            self._log_only(entry, at_end=False)
        self._read_until(high)
        differences = []
        for ex in held:
            t = self._time(ex)
            bucket = self._index.get((ex.client, ex.correlation_id, ex.api_key))
            if t is not None and bucket is not None and len(bucket) == 1:
                differences.append(bucket[0].ts - t)
        if differences:
            differences.sort()
            self.offset = differences[len(differences) // 2]
        self.accounting.offset_start_ms = self.offset / 1e6

    def _match(self, exchange: Any) -> None:
        accounting = self.accounting
        accounting.exchanges += 1
        client = exchange.client
        self._captured_clients.add(client)
        t = exchange.response_ts
        if t is None:
            t = exchange.request_ts
        offset = self.offset
        if t is not None:
            if self._first_ts is None or t < self._first_ts:
                self._first_ts = t
            if self._latest_ts is None or t > self._latest_ts:
                self._latest_ts = t
                queue = self._queue
                if queue and queue[0].ts < t + offset - self.window:
                    self._evict(t + offset - self.window)
            limit = t + offset + self.tolerance
            following = self._next
            while following is not None and following.ts <= limit:
                self._take()
                following = self._next
        key = (client, exchange.correlation_id, exchange.api_key)
        index = self._index
        bucket = index.get(key)
        chosen = None
        if bucket:
            if len(bucket) == 1:  # the usual case
                entry = bucket[0]
                if t is None or abs(entry.ts - offset - t) <= self.tolerance:
                    chosen = entry
                    del index[key]
            else:
                if t is None:
                    candidates: list[LogEntry] = []
                else:
                    candidates = [e for e in bucket if abs(e.ts - offset - t) <= self.tolerance]
                if candidates:
                    chosen = min(candidates, key=lambda e: abs(e.ts - offset - t))  # type: ignore[operator]
                    if len(candidates) > 1:
                        accounting.ambiguous += 1
                    bucket.remove(chosen)
                    if not bucket:
                        del index[key]
        if chosen is not None:
            chosen.matched = True
            accounting.joined += 1
            apply_entry(exchange, chosen, JOINED)
            if t is not None:
                accounting.offset_pairs += 1
                # a sample of the pairs' offsets: every `stride`-th, thinned by half when full
                if accounting.offset_pairs % self._stride == 0:
                    offsets = accounting.offsets
                    offsets.append((chosen.ts - t) / 1e6)
                    if len(offsets) >= 2 * _OFFSET_SAMPLES:
                        del offsets[1::2]
                        self._stride *= 2
            return
        reason = self._capture_only_reason(exchange, t)
        accounting.capture_only[reason] += 1
        apply_entry(exchange, None, reason)

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
        """The exchanges, in their order, with their broker-log columns set."""
        self._start()
        observer = self.observer
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
        for exchange in held:
            self._match(exchange)
            if observer is not None:
                observer.exchange(exchange)
            yield exchange
        del held
        for exchange in iterator:
            self._match(exchange)
            if observer is not None:
                observer.exchange(exchange)
            yield exchange
        # what is left in the index, then the rest of the log (counted, not kept)
        for entry in self._queue:
            if not entry.matched:
                self._log_only(entry, at_end=True)
        self._queue.clear()
        self._index.clear()
        while self._next is not None:
            entry = self._next
            self._next = next(self._entries, None)
            self._last_log_ts = entry.ts
            self._log_only(entry, at_end=True)
