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
from typing import Any, Callable, Iterable, Sequence

from kdissect.forensics.sketch import LatencyHistogram

DEFAULT_HORIZON_NS = 15 * 60 * 1_000_000_000
DEFAULT_SLACK_NS = 30 * 1_000_000_000

# a produced range: (first offset, last offset, request time, response time)
Produced = tuple[Any, ...]  # (first, last, request ts, response ts): ints


class PartitionIndex:
    """The produced ranges of one topic-partition, ordered by first offset."""

    __slots__ = ("ranges", "longest", "reach")

    def __init__(self) -> None:
        self.ranges: list[Produced] = []
        self.longest = 0  # the longest range's span, to bound the search
        # when the ranges are all known (`settle`): reach[i] is the highest
        # last offset of ranges[:i + 1], where the search can stop exactly
        self.reach: list[int] | None = None

    def settle(self, produced: Iterable[Produced]) -> None:
        """All the ranges at once (none added after): sorted once, the order
        `add`'s insertions keep, with their reach."""
        ranges = self.ranges = sorted(tuple(r) for r in produced)
        reach: list[int] = []
        highest = 0
        longest = 0
        for r in ranges:
            if not reach or r[1] > highest:
                highest = r[1]
            reach.append(highest)
            longest = max(longest, r[1] - r[0])
        self.reach = reach
        self.longest = longest

    def add(self, first: int, last: int, request_ts: int, response_ts: int) -> None:
        insort(self.ranges, (first, last, request_ts, response_ts))
        self.longest = max(self.longest, last - first)

    def overlapping(self, first: int, last: int) -> list[Produced]:
        """The ranges sharing an offset with [first, last]."""
        ranges = self.ranges
        at = bisect_right(ranges, (last, float("inf")))
        found = []
        floor = first - self.longest
        reach = self.reach
        while at > 0:
            at -= 1
            candidate = ranges[at]
            if candidate[0] < floor:
                break
            if reach is not None and reach[at] < first:
                break  # no range from here down reaches `first`
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
    if isinstance(offsets, range) and offsets.step == 1:
        earliest = qualifying[0]
        for r in qualifying:
            if r[2] < earliest[2]:
                earliest = r
        if earliest[0] <= first and last <= earliest[1]:
            # the earliest request's range holds every offset, so each offset
            # goes to it (the usual case, one range or a replay of the same offsets)
            return [(fetched_ts - earliest[2], count)], 0
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
        # overlapping ranges (a replay, a retry), offsets without holes: each
        # offset goes to the earliest request among the ranges holding it, so
        # the ranges take, earliest request first, the offsets still free
        # (the loop below, a run of offsets at a time instead of one by one)
        free: list[tuple[int, int]] = [(first, last)]
        matched = 0
        for r in sorted(qualifying, key=_request_ts):
            low, high = r[0], r[1]
            latency = fetched_ts - r[2]
            rest: list[tuple[int, int]] = []
            for start, end in free:
                taken_first, taken_last = max(start, low), min(end, high)
                if taken_first > taken_last:
                    rest.append((start, end))
                    continue
                n = taken_last - taken_first + 1
                found[latency] = found.get(latency, 0) + n
                matched += n
                if start < taken_first:
                    rest.append((start, taken_first - 1))
                if taken_last < end:
                    rest.append((taken_last + 1, end))
            free = rest
            if not free:
                break
        return sorted(found.items()), count - matched
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


def _request_ts(produced: Produced) -> Any:
    return produced[2]


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


# a RangeRows row's kind
PRODUCED, FETCHED = 0, 1


class RangeRows:
    """A `latency_sink` that keeps the ranges as rows, for the Spark tasks
    (kdissect.spark.forensics writes them out and matches them after the
    shuffle): (kind, label, partition, first, last, ts, response_ts,
    client_id), PRODUCED rows with the request's and the answer's times,
    FETCHED ones with the response's time and the consumer. Compiled, as
    the tallies call it once per produced or fetched span (thousands a
    task); `full` is called whenever `limit` rows have gathered (it takes
    them: `take`)."""

    def __init__(self, full: Callable[[], None], limit: int) -> None:
        self.rows: list[tuple[Any, ...]] = []
        self.full = full
        self.limit = limit

    def produced(self, label: str | None, partition: int, first: int, last: int, request_ts: int,
                 response_ts: int) -> None:
        rows = self.rows
        rows.append((PRODUCED, label, partition, first, last, request_ts, response_ts, None))
        if len(rows) >= self.limit:
            self.full()

    def fetched(self, label: str | None, partition: int, client_id: str | None, offsets: Sequence[int] | range,
                fetched_ts: int) -> None:
        rows = self.rows
        rows.append((FETCHED, label, partition, offsets[0], offsets[-1], fetched_ts, None, client_id))
        if len(rows) >= self.limit:
            self.full()

    def rename(self, old: str, new: str) -> None:
        pass  # the rows keep the label they were made with (resolved later, with every name)

    def take(self) -> list[tuple[Any, ...]]:
        """The rows gathered, handed over (the sink starts empty again)."""
        rows = self.rows
        self.rows = []
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
    index.settle(produced)  # (all ranges known at once)
    for client_id, offsets, fetched_ts in fetched:
        matches, unmatched = match_span(index, offsets, fetched_ts, horizon_ns, slack_ns)
        tally.add(label, client_id, matches, unmatched)
