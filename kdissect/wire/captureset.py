"""The capture-set rule: the order in which several files' packets are fed,
and which packets are copies of each other. One implementation, used by
`kdissect export` (`CaptureSet.segments`) and by the Spark job (one
connection at a time, `ConnectionMerge`), so both feed every connection the
same segments in the same order.

Order. The files of a set are numbered by their first packet's time, then
path (`capture_index`). Their packets are merged by time: the next packet fed
is the one with the smallest (feed time, capture_index, frame_number) among
the files' next packets, so each file's packets keep their file order and
rotated files come out concatenated. A packet's feed time (`order_ts`) is its
own time, or, when its file's clock went backwards, the latest time of any
packet before it in its file: the feed times of one file never decrease, and a
packet stamped earlier than its predecessor stays behind it. Packets without
a time (pcapng simple packet blocks, ts 0) take the feed time of the packet
before them, 0 at the start of a file.

Duplicates. Two captures of the same traffic (a file and its rotated copy,
two capture points on one path) hold the same packets. A packet is a
duplicate when an identical packet (same 4-tuple and direction, sequence and
acknowledgement numbers, TCP flags, payload length on the wire and captured
payload bytes) was fed from another file at most DUPLICATE_WINDOW_NS of feed
time before it, and that copy was the last one of its kind kept. The first
copy in feed order is kept (on equal times, the one from the file with the
lower capture_index); duplicates are dropped and counted
(`ReadStats.duplicate_packets`). Repeats within one file (retransmissions,
duplicated packets) are never duplicates here; reassembly handles them.
Memory: the filter holds the identities of the packets kept in the last
window (payloads up to 256 bytes as they are, longer ones as a 16-byte
BLAKE2b digest), and only while files overlap: packets more than a window
away from any other file's pass it by.
"""

from __future__ import annotations

from collections import deque
from heapq import heappop, heappush, heapreplace
from typing import Any, Callable, Iterator, Sequence

from kdissect.blake2 import blake2b as _blake2b

__all__ = ["DUPLICATE_WINDOW_NS", "ConnectionMerge", "DuplicateFilter", "merge_files", "timestamp_unit"]

DUPLICATE_WINDOW_NS = 1_000_000_000  # one second of feed time
_END = 1 << 126  # later than any time in ns
_EARLIEST = -_END


class DuplicateFilter:
    """The duplicate rule, applied to segments in feed order."""

    __slots__ = ("window", "duplicates", "counts", "_last", "_recent")

    def __init__(self, window: int = DUPLICATE_WINDOW_NS, counts: Any = None) -> None:
        self.window = window
        self.duplicates = 0
        self.counts = counts  # also counted into counts.duplicate_packets (a ReadStats), if given
        # identity -> (capture_index, order_ts) of the last kept copy
        self._last: dict[tuple, tuple[int, int]] = {}
        self._recent: deque[tuple[int, tuple]] = deque()  # (order_ts, identity) of kept copies, oldest first

    def keep(self, segment: Any) -> bool:
        """False for a duplicate (counted); True otherwise (remembered for the window)."""
        now = segment.order_ts
        recent = self._recent
        last = self._last
        horizon = now - self.window
        while recent and recent[0][0] < horizon:
            when, old = recent.popleft()
            entry = last.get(old)
            if entry is not None and entry[1] == when:
                del last[old]
        payload = segment.payload
        # short payloads as they are, longer ones by a 16-byte digest
        size = len(payload)
        identity = (segment.src, segment.sport, segment.dst, segment.dport, segment.seq, segment.ack, segment.flags,
                    segment.payload_len, size, payload if size <= _RAW_PAYLOAD else _digest(payload).digest())
        entry = last.get(identity)
        if entry is not None and entry[0] != segment.capture_index:
            self.duplicates += 1
            if self.counts is not None:
                self.counts.duplicate_packets += 1
            return False
        last[identity] = (segment.capture_index, now)
        recent.append((now, identity))
        return True


_RAW_PAYLOAD = 256  # payloads up to this size are kept as they are; longer ones as a digest


def _digest(payload: bytes) -> Any:
    return _blake2b(payload, digest_size=16)


def merge_files(firsts: Sequence[int | None], open_file: Callable[[int], Iterator[Any]],
                dedup: DuplicateFilter | None) -> Iterator[Any]:
    """The items (segments or frames, with order_ts, capture_index,
    frame_number) of a capture set's files in feed order, duplicates dropped
    by `dedup` (None: keep all).

    `firsts[i]` is file i's first packet time (None: no packets), a lower
    bound of its feed times, and files are given in capture order, so the
    files are opened one by one when the merge reaches them: only files that
    overlap in time are open together. While one file runs alone (no other
    file's packets within the window before or after), its packets skip the
    duplicate filter: they cannot be duplicates, nor have any.
    """
    count = len(firsts)
    window = dedup.window if dedup is not None else 0
    # the next item of every open file, smallest key first
    heap: list[tuple[int, int, int, Any, Iterator[Any]]] = []
    opened = 0
    latest_fed = _EARLIEST  # feed time of the last item fed from a file before the current run

    def next_run() -> tuple[int, int, int, int | None] | None:
        nonlocal opened
        while True:
            if opened < count:  # the next file to open: its first key
                first = firsts[opened]
                next_key = (_END if first is None else first, opened)
                if not heap or next_key < (heap[0][0], heap[0][1]):
                    iterator = open_file(opened)
                    opened += 1
                    for item in iterator:
                        heappush(heap, (item.order_ts, item.capture_index, item.frame_number, item, iterator))
                        break
                    continue
            else:
                next_key = (_END, count)
            if not heap:
                return None
            # this file runs while its items come before every other file's next
            # one; no other file within a window after that: quiet until then
            return next_key[0], next_key[1], latest_fed + window, None

    def run_done(ci: int, fed: int, ended: bool) -> None:
        nonlocal latest_fed
        if fed > latest_fed:
            latest_fed = fed

    if dedup is None:
        return _feed_runs(heap, next_run, None, 0, None)  # (latest_fed only serves the filter)
    return _feed_runs(heap, next_run, dedup.keep, window, run_done)


def _feed_runs(heap: list[tuple[int, int, int, Any, Iterator[Any]]],
               next_run: Callable[[], tuple[int, int, int, int | None] | None],
               keep: Callable[[Any], bool] | None, window: int,
               run_done: Callable[[int, int, bool], None] | None) -> Iterator[Any]:
    """The one run-draining loop of the capture-set merges (`merge_files`,
    `ConnectionMerge`). Runs are fed one after another, each from the
    heap's smallest entry (the next item of one file or run, of capture
    index `ci`): its items are fed while they come before the limit
    `next_run` gives (the next item of any file outside the heap, or the
    caller's bound) and the heap's second smallest (another file's next);
    the first item past it goes back on the heap, or the exhausted run
    leaves it. Without `keep` all items are fed; with it, items strictly
    between quiet_from and quiet_until (None: a window before the limit),
    when no other file is within a window, skip the duplicate filter.
    `run_done(ci, feed time of the last item fed, whether the run ended)`
    follows each run, when given; `next_run` returns None to stop.
    (Written once as the generator its callers return: a helper generator
    per run would cost a delegation per item.)"""
    while True:
        limits = next_run()
        if limits is None:
            return
        limit_ts, limit_ci, quiet_from, quiet_until = limits
        for other in heap[1:3]:  # the heap's second smallest is one of these
            if (other[0], other[1]) < (limit_ts, limit_ci):
                limit_ts, limit_ci = other[0], other[1]
        if quiet_until is None:
            quiet_until = limit_ts - window
        fed, ci, _number, item, iterator = heap[0]
        if keep is None or quiet_from < fed < quiet_until or keep(item):
            yield item
        for item in iterator:
            now = item.order_ts
            if now < limit_ts or (now == limit_ts and ci < limit_ci):
                fed = now
                if keep is None or quiet_from < now < quiet_until or keep(item):
                    yield item
                continue
            heapreplace(heap, (now, ci, item.frame_number, item, iterator))
            if run_done is not None:
                run_done(ci, fed, False)
            break
        else:
            heappop(heap)
            if run_done is not None:
                run_done(ci, fed, True)


class ConnectionMerge:
    """The capture-set rule for one connection, as the Spark job sees it: its
    segments arrive in runs (consecutive segments of one file), the runs sorted
    by their first segment's (order_ts, capture_index, frame_number). Gives
    the connection's segments in feed order without duplicates: exactly the
    CLI's feed order restricted to this connection.

    With `dedup`, a segment is handed on only once every run starting up to a
    window after it has arrived (so the filter knows whether another file
    holds a copy): memory is that window of the connection's traffic.
    """

    def __init__(self, dedup: bool = True, window: int = DUPLICATE_WINDOW_NS, counts: Any = None) -> None:
        self.filter = DuplicateFilter(window, counts) if dedup else None
        self._lookahead = window if dedup else 0
        self._heap: list[tuple[int, int, int, Any, Iterator[Any]]] = []  # next segment of every run held
        self._runs_per_file: dict[int, int] = {}  # capture_index -> runs held
        self._latest_fed = _EARLIEST

    @property
    def duplicates(self) -> int:
        return self.filter.duplicates if self.filter is not None else 0

    def add_run(self, segments: Iterator[Any]) -> Iterator[Any]:
        """Take the next run; yield the segments that are now certain to come next."""
        for first in segments:
            if self.filter is None:  # exactly what precedes this run
                yield from self._emit(first.order_ts, first.capture_index)
            else:  # what lies more than a window before it: later runs cannot hold a copy
                yield from self._emit(first.order_ts - self._lookahead, -1)
            heappush(self._heap, (first.order_ts, first.capture_index, first.frame_number, first, segments))
            self._runs_per_file[first.capture_index] = self._runs_per_file.get(first.capture_index, 0) + 1
            return

    def finish(self) -> Iterator[Any]:
        """The rest, at the end of the connection's runs."""
        yield from self._emit(_END, 0)
        self._latest_fed = _EARLIEST

    def _emit(self, bound_ts: int, bound_ci: int) -> Iterator[Any]:
        """Segments whose key is below (bound_ts, bound_ci), in feed order."""
        heap = self._heap
        window = self.filter.window if self.filter is not None else 0
        runs_per_file = self._runs_per_file

        def next_run() -> tuple[int, int, int, int | None] | None:
            if not heap or (heap[0][0], heap[0][1]) >= (bound_ts, bound_ci):
                return None
            ci = heap[0][1]
            # another file's segments within a window before or after (runs
            # not yet arrived start more than a window after the bound)
            if len(runs_per_file) == 1 or all(n == 0 for index, n in runs_per_file.items() if index != ci):
                quiet_until = _END
            else:
                quiet_until = min(entry[0] for entry in heap if entry[1] != ci) - window
            return bound_ts, bound_ci, self._latest_fed + window, quiet_until

        def run_done(ci: int, fed: int, ended: bool) -> None:
            if ended:
                runs_per_file[ci] -= 1
            if fed > self._latest_fed:
                self._latest_fed = fed

        return _feed_runs(heap, next_run, self.filter.keep if self.filter is not None else None, window, run_done)


def timestamp_unit(resolutions: Sequence[int]) -> str:
    """'us' when every file's ticks (per second: 10**6, 10**9, 2**20, ...) are
    whole microseconds, so a microsecond timestamp holds every time exactly;
    else 'ns'."""
    return "us" if all(1_000_000 % resolution == 0 for resolution in resolutions) else "ns"
