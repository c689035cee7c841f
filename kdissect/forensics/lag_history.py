"""Group lag in time and over time: record timestamps by offset, and the
committed offsets and high watermarks of the capture, interval by interval.

Lag in time (`lag_ms`) says how far behind, in milliseconds, a committed
offset is: the newest record timestamp of the last batch seen below the
high watermark minus the first record's timestamp of the batch seen holding
the committed offset, or else the first one after it (the oldest data the
group has not committed), never negative (CreateTime stamps need not grow
with offsets). Batches, not records: a batch's records were made within the
producer's linger time, and a commit usually falls on a batch's first
record; one entry per batch keeps the memory off the record count. It is 0
when the lag in records is 0 and null when no batch was seen on either
side. Record timestamps come from the record batches of Fetch responses (as the broker stored them)
and of Produce requests the broker answered with a base offset (a fetched
record's timestamp wins over the produced one: LogAppendTime topics
restamp records).

Lag over time: the capture's span is cut into aligned intervals of 2^k
seconds, the smallest with at most MAX_INTERVALS intervals over the span;
each group and partition gets a row per interval from its first commit to
the capture's last interval, with the last committed offset and the last
high watermark (of any fetching client) as of the interval's end. The
interval only ever widens as the span grows (buckets merge in twos), so the
tallies of parts merge into the tally of the whole, whatever the order.

Memory: per partition one entry per distinct batch seen (offsets and two
timestamps), per partition and per group and partition at most
MAX_INTERVALS + 1 interval values; none per exchange.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Any, Iterator

from kdissect.records.quick_spans import SetFigures

SECOND_NS = 1_000_000_000
MAX_INTERVALS = 60


class RecordTimes:
    """Record timestamps by offset for one partition, a batch at a time:
    first offset -> (last offset, first record's timestamp, newest record's
    timestamp, fetched)."""

    __slots__ = ("batches",)

    def __init__(self) -> None:
        self.batches: dict[int, tuple[int, int, int, bool]] = {}

    def add(self, first: int, last: int, first_ts: int, max_ts: int, fetched: bool) -> None:
        known = self.batches.get(first)
        if known is None or (fetched and not known[3]):
            self.batches[first] = (last, first_ts, max_ts, fetched)

    def merge(self, other: RecordTimes) -> None:
        for first, (last, first_ts, max_ts, fetched) in other.batches.items():
            self.add(first, last, first_ts, max_ts, fetched)


class Sorted:
    """A partition's seen batches in offset order (for the lookups)."""

    def __init__(self, times: RecordTimes) -> None:
        self.firsts: list[int] = []
        self.lasts: list[int] = []
        self.first_ts: list[int] = []
        self.max_ts: list[int] = []
        for first in sorted(times.batches):
            last, first_ts, max_ts, _fetched = times.batches[first]
            if self.lasts and first <= self.lasts[-1]:  # overlapping batches: the first one seen wins
                continue
            self.firsts.append(first)
            self.lasts.append(last)
            self.first_ts.append(first_ts)
            self.max_ts.append(max_ts)

    def lag_ms(self, committed: int, high_watermark: int) -> float | None:
        """The newest timestamp of the last batch below `high_watermark` minus
        the first record's timestamp of the batch holding `committed` (or the
        first one after it), in ms, never negative."""
        oldest = bisect_left(self.lasts, committed)
        newest = bisect_left(self.firsts, high_watermark) - 1
        if oldest >= len(self.firsts) or newest < oldest:
            return None
        return float(max(0, self.max_ts[newest] - self.first_ts[oldest]))


def lag_ms(found: Sorted | None, lag: int | None, committed: int | None, high_watermark: int | None) -> float | None:
    """A group's lag in time on a partition (see the module docstring)."""
    if lag is None or committed is None or high_watermark is None:
        return None
    if lag == 0:
        return 0.0
    return found.lag_ms(committed, high_watermark) if found is not None else None


class LagHistory:
    """Record timestamps, and committed offsets and high watermarks per interval."""

    def __init__(self) -> None:
        self.times: dict[tuple[str | None, int], RecordTimes] = {}
        self.interval_ns = SECOND_NS
        self.first_ts: int | None = None
        self.last_ts: int | None = None
        # (label, partition) -> {interval: (order, high watermark)}
        self.watermarks: dict[tuple[Any, ...], dict[int, tuple[tuple[Any, ...], int]]] = {}
        # (group, label, partition) -> {interval: (order, committed offset)}
        self.commits: dict[tuple[Any, ...], dict[int, tuple[tuple[Any, ...], int]]] = {}

    # -- feeding ----------------------------------------------------------------

    def add_records(self, label: str | None, partition: int, figures: SetFigures, base: int | None,
                    fetched: bool) -> None:
        """The data records of a fetched set (`base` None: wire offsets) or of
        a produced one (`base`: the offset the broker gave its first record)."""
        key = (label, partition)
        shift = base if base is not None else 0
        for span in figures.spans:
            first_stamp: int | None = span.first_stamp
            newest_stamp: int | None = span.newest_stamp
            if first_stamp is None or newest_stamp is None:
                continue
            times = self.times.get(key)
            if times is None:
                times = self.times[key] = RecordTimes()
            times.add(span.first + shift, span.last + shift, first_stamp, newest_stamp, fetched)

    def add_watermark(self, label: str | None, partition: int, order: tuple[Any, ...], ts: int, high_watermark: int) -> None:
        self._put(self.watermarks, (label, partition), order, ts, high_watermark)

    def add_commit(self, group: str, label: str | None, partition: int, order: tuple[Any, ...], ts: int, offset: int) -> None:
        self._put(self.commits, (group, label, partition), order, ts, offset)

    def _put(self, series: dict[tuple[Any, ...], dict[int, tuple[tuple[Any, ...], int]]], key: tuple[Any, ...],
             order: tuple[Any, ...], ts: int, value: int) -> None:
        first_ts, last_ts = self.first_ts, self.last_ts
        if first_ts is None or last_ts is None or ts < first_ts or ts > last_ts:
            self.first_ts = ts if first_ts is None or ts < first_ts else first_ts
            self.last_ts = ts if last_ts is None or ts > last_ts else last_ts
            # (only a wider span can widen the interval: every change of the
            # span is followed by _widen, so within it the interval fits)
            self._widen()
        buckets = series.get(key)
        if buckets is None:
            buckets = series[key] = {}
        at = ts // self.interval_ns
        known = buckets.get(at)
        if known is None or order > known[0]:
            buckets[at] = (order, value)

    def _widen(self, floor_ns: int = SECOND_NS) -> None:
        """Double the interval until the span fits MAX_INTERVALS of them (and at least `floor_ns`)."""
        width = self.interval_ns
        while width < floor_ns or (self.first_ts is not None and self.last_ts is not None
                                   and self.last_ts // width - self.first_ts // width + 1 > MAX_INTERVALS):
            width *= 2
        old = self.interval_ns
        if width == old:
            return
        self.interval_ns = width
        for series in (self.watermarks, self.commits):
            for key, buckets in series.items():
                series[key] = _rebucket(buckets, old, width)

    # -- merging ----------------------------------------------------------------

    def merge(self, other: LagHistory) -> None:
        for key, times in other.times.items():
            mine = self.times.get(key)
            if mine is None:
                self.times[key] = mine = RecordTimes()
            mine.merge(times)
        for ts in (other.first_ts, other.last_ts):
            if ts is not None:
                self.first_ts = ts if self.first_ts is None else min(self.first_ts, ts)
                self.last_ts = ts if self.last_ts is None else max(self.last_ts, ts)
        self._widen(other.interval_ns)
        for mine_series, theirs in ((self.watermarks, other.watermarks), (self.commits, other.commits)):
            for series_key, buckets in theirs.items():
                target = mine_series.setdefault(series_key, {})
                for at, (order, value) in _rebucket(buckets, other.interval_ns, self.interval_ns).items():
                    known = target.get(at)
                    if known is None or order > known[0]:
                        target[at] = (order, value)

    # -- tables -------------------------------------------------------------------

    def sorted_times(self, names: Any) -> dict[tuple[str | None, int], Sorted]:
        """(topic, partition) -> its seen records in offset order, ids resolved."""
        merged: dict[tuple[Any, ...], RecordTimes] = {}
        for (label, partition), times in self.times.items():
            key = (names.name(label), partition)
            found = merged.get(key)
            if found is None:
                merged[key] = found = RecordTimes()
            found.merge(times)
        return {key: Sorted(times) for key, times in merged.items()}

    def rows(self, names: Any, times: dict[tuple[Any, ...], Sorted], markers: dict[tuple[Any, ...], set[int]]) -> list[dict[str, Any]]:
        """group_lag_over_time: per group and partition, one row per interval
        from its first commit to the capture's last interval."""
        if self.last_ts is None:
            return []
        width = self.interval_ns
        last = self.last_ts // width
        watermarks = _resolved(self.watermarks, names, lambda key: (names.name(key[0]), key[1]))
        commits = _resolved(self.commits, names, lambda key: (key[0], names.name(key[1]), key[2]))
        rows = []
        for key in sorted(commits, key=lambda k: (k[0], k[1] or "", k[2])):
            group, topic, partition = key
            committed = commits[key]
            marks = sorted(markers.get((topic, partition), ()))
            high = watermarks.get((topic, partition), {})
            found = times.get((topic, partition))
            for at, offset, high_watermark in _carried(committed, high, min(committed), last):
                lag = None
                if offset is not None and high_watermark is not None and offset >= 0:
                    within = bisect_left(marks, high_watermark) - bisect_left(marks, offset) if marks else 0
                    lag = max(0, high_watermark - offset - max(0, within))
                rows.append({
                    "group_id": group, "topic": topic, "partition": partition,
                    "window_start": at * width, "window_end": (at + 1) * width,
                    "lag": lag, "lag_ms": lag_ms(found, lag, offset, high_watermark),
                    "committed_offset": offset, "high_watermark": high_watermark,
                })
        return rows


def _rebucket(buckets: dict[int, tuple[tuple[Any, ...], int]], old: int, width: int) -> dict[int, tuple[tuple[Any, ...], int]]:
    """Buckets `old` ns wide regrouped `width` ns wide (a power-of-two
    multiple: aligned buckets nest), the latest value of each kept."""
    out: dict[int, tuple[tuple[Any, ...], int]] = {}
    for at, (order, value) in buckets.items():
        wide = at * old // width
        known = out.get(wide)
        if known is None or order > known[0]:
            out[wide] = (order, value)
    return out


def _resolved(series: dict[tuple[Any, ...], dict[int, tuple[tuple[Any, ...], int]]], names: Any,
              resolve: Any) -> dict[tuple[Any, ...], dict[int, tuple[tuple[Any, ...], int]]]:
    out: dict[tuple[Any, ...], dict[int, tuple[tuple[Any, ...], int]]] = {}
    for key, buckets in series.items():
        target = out.setdefault(resolve(key), {})
        for at, (order, value) in buckets.items():
            known = target.get(at)
            if known is None or order > known[0]:
                target[at] = (order, value)
    return out


def _carried(committed: dict[int, tuple[tuple[Any, ...], int]], high: dict[int, tuple[tuple[Any, ...], int]], first: int,
             last: int) -> Iterator[tuple[int, int | None, int | None]]:
    """(interval, committed offset, high watermark) as of each interval's end,
    the last values carried forward."""
    high_points = sorted(high)
    offset = None
    for at in range(first, last + 1):
        if at in committed:
            offset = committed[at][1]
        before = bisect_right(high_points, at) - 1
        yield at, offset, high[high_points[before]][1] if before >= 0 else None
