"""End-to-end latency: from the Produce request that wrote a record to the
Fetch response that delivered it.

A produced record's offset is the partition's `base_offset` in the
ProduceResponse plus its position in the request's record set (as `kdissect
records` numbers it). A fetched data record at offset O of topic-partition
TP, delivered by a response at time F, is matched when a captured Produce
request wrote O to TP:

    the rule: among the Produce requests whose answered offsets include O,
    sent at P with 0 <= F - P <= horizon and answered no later than F + slack,
    take the earliest P; the record's latency is F - P.

Records fetched again (another consumer, a re-read) are measured again: the
tables count deliveries. Fetched records with no such Produce are counted as
unmatched.

`StreamMatcher` (the CLI) applies the rule in one pass with bounded memory:
a fetched batch waits `slack` of capture time (Produce answers may come
after the Fetch that already delivered their records), and produced ranges
are forgotten `horizon + 2 * slack` after their request. `match_partition`
applies the same rule to all of one partition's ranges at once (Spark); the
two give the same histograms. Latencies go into `LatencyHistogram`s per
(topic, consumer client id).
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections import deque
from typing import Any, Iterable, Sequence

from kdissect.forensics.sketch import LatencyHistogram

DEFAULT_HORIZON_NS = 15 * 60 * 1_000_000_000
DEFAULT_SLACK_NS = 30 * 1_000_000_000

# a produced range: (first offset, last offset, request time, response time)
Produced = tuple[Any, ...]  # (first, last, request ts, response ts): ints


class PartitionIndex:
    """The produced ranges of one topic-partition, ordered by first offset."""

    __slots__ = ("ranges", "longest")

    def __init__(self) -> None:
        self.ranges: list[Produced] = []
        self.longest = 0  # the longest range's span, to bound the search

    def add(self, first: int, last: int, request_ts: int, response_ts: int) -> None:
        insort(self.ranges, (first, last, request_ts, response_ts))
        self.longest = max(self.longest, last - first)

    def overlapping(self, first: int, last: int) -> list[Produced]:
        """The ranges sharing an offset with [first, last]."""
        ranges = self.ranges
        at = bisect_right(ranges, (last, float("inf")))
        found = []
        floor = first - self.longest
        while at > 0:
            at -= 1
            candidate = ranges[at]
            if candidate[0] < floor:
                break
            if candidate[1] >= first:
                found.append(candidate)
        return found

    def forget_before(self, request_ts: int) -> None:
        """Drop the oldest ranges (by offset) sent before `request_ts`; ranges
        are in offset order, which follows time closely enough for memory."""
        ranges = self.ranges
        cut = 0
        while cut < len(ranges) and ranges[cut][2] < request_ts:
            cut += 1
        if cut:
            del ranges[:cut]


def match_span(index: PartitionIndex | None, offsets: Sequence[int] | range, fetched_ts: int, horizon_ns: int,
               slack_ns: int) -> tuple[list[tuple[int, int]], int]:
    """([(latency_ns, records)], unmatched records) for fetched offsets
    delivered at `fetched_ts`, by the rule of the module docstring."""
    count = len(offsets)
    if index is None or not count:
        return [], count
    first, last = offsets[0], offsets[-1]
    qualifying = [r for r in index.overlapping(first, last)
                  if 0 <= fetched_ts - r[2] <= horizon_ns and r[3] <= fetched_ts + slack_ns]
    if not qualifying:
        return [], count
    found: dict[int, int] = {}
    qualifying.sort()
    disjoint = all(a[1] < b[0] for a, b in zip(qualifying, qualifying[1:]))
    if disjoint and isinstance(offsets, range):
        matched = 0
        for r in qualifying:
            n = min(r[1], last) - max(r[0], first) + 1
            latency = fetched_ts - r[2]
            found[latency] = found.get(latency, 0) + n
            matched += n
        return sorted(found.items()), count - matched
    if isinstance(offsets, range) and offsets.step == 1:
        return _stretches(qualifying, first, last, fetched_ts, count)
    matched = 0
    for offset in offsets:
        best = None
        for r in qualifying:
            if r[0] <= offset <= r[1] and (best is None or r[2] < best):
                best = r[2]
        if best is not None:
            latency = fetched_ts - best
            found[latency] = found.get(latency, 0) + 1
            matched += 1
    return sorted(found.items()), count - matched


def _stretches(qualifying: list[Produced], first: int, last: int, fetched_ts: int,
               count: int) -> tuple[list[tuple[int, int]], int]:
    """match_span's rule for the contiguous offsets first..last and
    overlapping ranges: cut at every range's ends, each stretch between two
    cuts lies wholly inside or outside each range, so the earliest request
    covering its first offset covers all of it (one pass a stretch, not one
    an offset: fetches of records produced again under the same offsets,
    e.g. replays, meet many ranges)."""
    best = None
    for r in qualifying:
        if r[0] > first or r[1] < last:
            break
        if best is None or r[2] < best:
            best = r[2]
    else:  # every range holds all of first..last (offsets produced again, e.g. replays): one stretch
        return ([(fetched_ts - best, count)] if best is not None else []), (0 if best is not None else count)
    cuts = {first, last + 1}
    for r in qualifying:  # (each overlaps first..last: its ends fall within first..last + 1 once clipped)
        cuts.add(max(r[0], first))
        cuts.add(min(r[1], last) + 1)
    bounds = sorted(cuts)
    found: dict[int, int] = {}
    matched = 0
    for at in range(len(bounds) - 1):
        start = bounds[at]
        best = None
        for r in qualifying:
            if r[0] <= start <= r[1] and (best is None or r[2] < best):
                best = r[2]
        if best is not None:
            n = bounds[at + 1] - start
            latency = fetched_ts - best
            found[latency] = found.get(latency, 0) + n
            matched += n
    return sorted(found.items()), count - matched


class LatencyTally:
    """Histograms and unmatched counts per (topic label, consumer client id)."""

    def __init__(self) -> None:
        self.histograms: dict[tuple[str | None, str | None], LatencyHistogram] = {}
        self.unmatched: dict[tuple[str | None, str | None], int] = {}

    def add(self, label: str | None, client_id: str | None, matches: Iterable[tuple[int, int]], unmatched: int) -> None:
        key = (label, client_id)
        histogram = self.histograms.get(key)
        if histogram is None:
            histogram = self.histograms[key] = LatencyHistogram()
        for latency, n in matches:
            histogram.add(latency, n)
        if unmatched:
            self.unmatched[key] = self.unmatched.get(key, 0) + unmatched

    def merge(self, other: LatencyTally) -> None:
        for key, histogram in other.histograms.items():
            mine = self.histograms.get(key)
            if mine is None:
                self.histograms[key] = mine = LatencyHistogram()
            mine.merge(histogram)
        for key, n in other.unmatched.items():
            self.unmatched[key] = self.unmatched.get(key, 0) + n

    def rows(self, names: Any) -> list[dict[str, Any]]:
        """Per (topic, client_id), then per topic (client_id null) and per
        client (topic null): delivered records matched to their produce,
        latency min/mean/max (exact) and p50/p90/p99 (within 1%), unmatched."""
        groups: dict[tuple[str, str | None, str | None], list[Any]] = {}
        for (label, client_id), histogram in self.histograms.items():
            topic = names.name(label)
            unmatched = self.unmatched.get((label, client_id), 0)
            for key in (("topic_client", topic, client_id), ("topic", topic, None), ("client", None, client_id)):
                entry = groups.get(key)
                if entry is None:
                    entry = groups[key] = [LatencyHistogram(), 0]
                entry[0].merge(histogram)
                entry[1] += unmatched
        rows = []
        order = {"topic_client": 0, "topic": 1, "client": 2}
        for key in sorted(groups, key=lambda k: (order[k[0]], k[1] is not None, k[1] or "", k[2] is not None,
                                                 k[2] or "")):
            histogram, unmatched = groups[key]
            summary = histogram.summary()
            rows.append({"dimension": key[0], "topic": key[1], "client_id": key[2],
                         "records": summary.pop("count"), **summary, "unmatched": unmatched})
        return rows


class StreamMatcher:
    """The rule in one pass over exchanges in capture order (see module doc)."""

    def __init__(self, tally: LatencyTally, horizon_ns: int = DEFAULT_HORIZON_NS,
                 slack_ns: int = DEFAULT_SLACK_NS) -> None:
        self.tally = tally
        self.horizon_ns = horizon_ns
        self.slack_ns = slack_ns
        self.index: dict[tuple[str | None, int], PartitionIndex] = {}
        # fetched data waiting for late produce answers, oldest first:
        # (due time, label, partition, client_id, offsets, fetched time)
        self.waiting: deque[tuple[Any, ...]] = deque()
        self.now = 0
        self.next_sweep = 0

    def produced(self, label: str | None, partition: int, first: int, last: int, request_ts: int,
                 response_ts: int) -> None:
        key = (label, partition)
        index = self.index.get(key)
        if index is None:
            index = self.index[key] = PartitionIndex()
        index.add(first, last, request_ts, response_ts)
        self._advance(response_ts)

    def fetched(self, label: str | None, partition: int, client_id: str | None, offsets: Sequence[int] | range,
                fetched_ts: int) -> None:
        self.waiting.append((fetched_ts + self.slack_ns, label, partition, client_id, offsets, fetched_ts))
        self._advance(fetched_ts)

    def rename(self, old: str, new: str) -> None:
        """A topic id was named: its ranges and waiting data join the name's."""
        for (label, partition) in [key for key in self.index if key[0] == old]:
            moved = self.index.pop((label, partition))
            target = self.index.get((new, partition))
            if target is None:
                self.index[(new, partition)] = moved
            else:
                for r in moved.ranges:
                    target.add(*r)
        if any(item[1] == old for item in self.waiting):
            self.waiting = deque(item if item[1] != old else (item[0], new, *item[2:]) for item in self.waiting)

    def _advance(self, ts: int | None) -> None:
        if ts is None or ts <= self.now:
            return
        self.now = ts
        waiting = self.waiting
        while waiting and waiting[0][0] < ts:
            self._match(waiting.popleft())
        if ts >= self.next_sweep:
            self.next_sweep = ts + self.slack_ns
            cutoff = ts - self.horizon_ns - 2 * self.slack_ns
            for index in self.index.values():
                index.forget_before(cutoff)

    def _match(self, item: tuple[Any, ...]) -> None:
        _due, label, partition, client_id, offsets, fetched_ts = item
        matches, unmatched = match_span(self.index.get((label, partition)), offsets, fetched_ts, self.horizon_ns,
                                        self.slack_ns)
        self.tally.add(label, client_id, matches, unmatched)

    def finish(self) -> None:
        """Match everything still waiting (the end of the capture)."""
        waiting = sorted(self.waiting, key=lambda item: item[0])
        self.waiting.clear()
        for item in waiting:
            self._match(item)


def match_partition(produced: Iterable[Produced], fetched: Iterable[tuple[Any, ...]], horizon_ns: int, slack_ns: int,
                    tally: LatencyTally, label: str | None) -> None:
    """The rule over all of one partition's ranges: `fetched` holds
    (client_id, offsets, fetched time)."""
    index = PartitionIndex()
    # (all ranges known at once: sorted once, the order `add`'s insertions keep)
    index.ranges = sorted(tuple(r) for r in produced)
    index.longest = max(0, max((r[1] - r[0] for r in index.ranges), default=0))
    for client_id, offsets, fetched_ts in fetched:
        matches, unmatched = match_span(index, offsets, fetched_ts, horizon_ns, slack_ns)
        tally.add(label, client_id, matches, unmatched)
