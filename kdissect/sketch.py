"""Mergeable latency sketches with bounded memory: `LatencyHistogram` (integer
nanoseconds, nearest-rank percentiles: the end-to-end table) and
`QuantileSketch` (float milliseconds, exact up to EXACT_LIMIT values, then
the same buckets: the latency, wait and throttle tables of `stats`, the
report and Spark's summaries).

Values (nanoseconds) fall into logarithmic buckets 2% wide, so a percentile
read from the buckets is within 1% of the exact value (the representative
of a bucket is its centre, relative to its width); count, sum, minimum and
maximum are kept exactly. Merging two histograms is adding their buckets,
so one computed in pieces (Spark tasks) equals one computed in a single
pass (the CLI), bucket for bucket. Memory: one counter per occupied bucket,
about 115 per decade (under 1,500 from a microsecond to a day).

Compiled with mypyc (kdissect/native.py): the end-to-end matching adds every
matched record's latency, a read task sketches its latencies. Both classes
pickle as a dict of their attributes (`__getstate__`), the same from the
compiled and the plain class, so either reads the other's (a driver with the
build and workers without it): left to themselves, a plain slotted class
pickles as (None, slots) and the compiled one as a dict, and the compiled
class read the former as an empty sketch.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter
from typing import Any, Callable

RELATIVE_ACCURACY = 0.01
_GAMMA = (1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY)
_LOG_GAMMA = math.log(_GAMMA)
_FLOOR_NS = 1_000  # values below a microsecond share the lowest bucket
_EXACT_INT = 1 << 53  # integers up to this are doubles exactly


def _quotient(numerator: int, denominator: int) -> float:
    """`numerator / denominator`, rounded as Python rounds it: compiled, the
    quotient of two machine-size ints is taken from their doubles, which for
    a numerator past 2**53 (a sum of latencies past 104 days) can differ in
    the last bit from Python's correctly rounded one."""
    if -_EXACT_INT <= numerator <= _EXACT_INT:
        return numerator / denominator
    exact: Any = numerator  # (an object: Python's own division)
    return float(exact / denominator)


class LatencyHistogram:
    __slots__ = ("buckets", "count", "total_ns", "min_ns", "max_ns")

    def __init__(self) -> None:
        self.buckets: dict[int, int] = {}
        self.count = 0
        self.total_ns = 0
        self.min_ns: int | None = None
        self.max_ns: int | None = None

    def add(self, value_ns: int, weight: int = 1) -> None:
        """`weight` values of `value_ns` (>= 0)."""
        if weight <= 0:
            return
        index = bucket_of(value_ns)
        self.buckets[index] = self.buckets.get(index, 0) + weight
        self.count += weight
        self.total_ns += value_ns * weight
        if self.min_ns is None or value_ns < self.min_ns:
            self.min_ns = value_ns
        if self.max_ns is None or value_ns > self.max_ns:
            self.max_ns = value_ns

    def merge(self, other: LatencyHistogram) -> None:
        for index, weight in other.buckets.items():
            self.buckets[index] = self.buckets.get(index, 0) + weight
        self.count += other.count
        self.total_ns += other.total_ns
        if other.min_ns is not None and (self.min_ns is None or other.min_ns < self.min_ns):
            self.min_ns = other.min_ns
        if other.max_ns is not None and (self.max_ns is None or other.max_ns > self.max_ns):
            self.max_ns = other.max_ns

    def __getstate__(self) -> dict[str, Any]:
        return {"buckets": self.buckets, "count": self.count, "total_ns": self.total_ns, "min_ns": self.min_ns,
                "max_ns": self.max_ns}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.buckets, self.count, self.total_ns = state["buckets"], state["count"], state["total_ns"]
        self.min_ns, self.max_ns = state["min_ns"], state["max_ns"]

    def percentile_ms(self, q: float) -> float | None:
        """The q-th percentile (q in [0, 100]) in ms: the value of rank
        ceil(q/100 * count) (nearest rank), as its bucket's centre, clamped
        to the exact minimum and maximum."""
        if not self.count:
            return None
        rank = max(1, math.ceil(q / 100 * self.count))
        low, high = self.min_ns or 0, self.max_ns or 0
        seen = 0
        buckets = self.buckets
        for index in sorted(buckets):
            seen += buckets[index]
            if seen >= rank:
                centre = bucket_centre(index)  # clamped to [low, high], as min(max(centre, low), high)
                if low > centre:
                    return _quotient(low, 1_000_000)
                if high < centre:
                    return _quotient(high, 1_000_000)
                return centre / 1_000_000
        return _quotient(high, 1_000_000)  # pragma: no cover - counts always add up

    def summary(self) -> dict[str, Any]:
        """count, min/mean/max (exact) and p50/p90/p99 (within 1%), in ms."""
        count = self.count
        return {
            "count": count,
            "min_ms": None if self.min_ns is None else _quotient(self.min_ns, 1_000_000),
            "mean_ms": _quotient(self.total_ns, count) / 1_000_000 if count else None,
            "p50_ms": self.percentile_ms(50),
            "p90_ms": self.percentile_ms(90),
            "p99_ms": self.percentile_ms(99),
            "max_ms": None if self.max_ns is None else _quotient(self.max_ns, 1_000_000),
        }


def bucket_of(value_ns: int) -> int:
    """The bucket holding `value_ns`: (gamma^(i-1), gamma^i] microseconds."""
    if value_ns <= _FLOOR_NS:
        return 0
    return max(0, math.ceil(math.log(_quotient(value_ns, _FLOOR_NS)) / _LOG_GAMMA))


def bucket_centre(index: int) -> float:
    """The value (ns) a bucket stands for: within RELATIVE_ACCURACY of all its values."""
    if index <= 0:
        return float(_FLOOR_NS)
    return 2 * _FLOOR_NS * _GAMMA ** index / (_GAMMA + 1)


EXACT_LIMIT = 1024  # a QuantileSketch keeps up to this many values as they are


class QuantileSketch:
    """Percentiles of a stream of floats (latencies in ms) in bounded memory,
    mergeable, the same in one pass (the CLI) and in pieces (Spark tasks).

    Up to EXACT_LIMIT values are kept as they are, and percentiles are exact:
    linear interpolation between the closest ranks (numpy's default method,
    `kdissect.ranks.percentile`). Past that, the values go into the
    logarithmic buckets of `LatencyHistogram` (a DDSketch: bucket i holds
    (gamma^(i-1), gamma^i], its representative is within RELATIVE_ACCURACY of
    every value in it; zero and negative values have their own buckets), so
    every order statistic is within 1% of the exact one, and so is a
    percentile interpolated between two of the same sign. Count, sum, min
    and max stay exact. Memory: at most EXACT_LIMIT floats, then one counter
    per occupied bucket (about 115 per decade of values).

    Merging adds the buckets (or joins the kept values while they fit), and
    a sketch switches to buckets exactly when its count passes EXACT_LIMIT,
    so a merged sketch equals the one-pass sketch of the same values."""

    __slots__ = ("values", "buckets", "count", "total", "min", "max")

    def __init__(self) -> None:
        self.values: list[float] | None = []  # None once the values are in buckets
        self.buckets: dict[int, int] = {}  # positive values by index; negative ones by ~index; zero at ZERO
        self.count = 0
        self.total = 0.0
        self.min = math.inf
        self.max = -math.inf

    def add(self, value: float) -> None:
        self.count += 1
        self.total += value
        if value < self.min:
            self.min = value
        if value > self.max:
            self.max = value
        values = self.values
        if values is not None:
            values.append(value)
            if len(values) > EXACT_LIMIT:
                self._to_buckets()
        else:
            index = _float_bucket(value)
            self.buckets[index] = self.buckets.get(index, 0) + 1

    def add_repeated(self, value: float, times: int) -> None:
        """`times` values of `value` at once: the same sketch as `times` calls
        of `add(value)` (its total up to float rounding)."""
        if times <= 0:
            return
        self.count += times
        self.total += value * times
        if value < self.min:
            self.min = value
        if value > self.max:
            self.max = value
        values = self.values
        if values is not None:
            values.extend([value] * times)
            if len(values) > EXACT_LIMIT:
                self._to_buckets()
        else:
            index = _float_bucket(value)
            self.buckets[index] = self.buckets.get(index, 0) + times

    def _to_buckets(self) -> None:
        values, self.values = self.values or [], None
        buckets = self.buckets
        for value in values:
            index = _float_bucket(value)
            buckets[index] = buckets.get(index, 0) + 1

    def merge(self, other: QuantileSketch) -> None:
        self.count += other.count
        self.total += other.total
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)
        if self.values is not None and other.values is not None and self.count <= EXACT_LIMIT:
            self.values.extend(other.values)
            return
        if self.values is not None:
            self._to_buckets()
        buckets = self.buckets
        for value in other.values or ():
            index = _float_bucket(value)
            buckets[index] = buckets.get(index, 0) + 1
        for index, n in other.buckets.items():
            buckets[index] = buckets.get(index, 0) + n

    def __getstate__(self) -> dict[str, Any]:
        return {"values": self.values, "buckets": self.buckets, "count": self.count, "total": self.total,
                "min": self.min, "max": self.max}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.values, self.buckets, self.count = state["values"], state["buckets"], state["count"]
        self.total, self.min, self.max = state["total"], state["min"], state["max"]

    @property
    def exact(self) -> bool:
        return self.values is not None

    def percentiles(self, *qs: float) -> list[float]:
        """The q-th percentiles (q in [0, 100]); NaN for no values."""
        if not self.count:
            return [math.nan for _ in qs]
        if self.values is not None:
            ordered = sorted(self.values)
            return [_interpolated(ordered.__getitem__, self.count, q) for q in qs]
        ranked = self._ranked()
        return [_interpolated(ranked, self.count, q) for q in qs]

    def _ranked(self) -> Callable[[int], float]:
        """rank (0-based) -> the estimate of that order statistic."""
        ordered = sorted(self.buckets.items(), key=lambda item: _bucket_value(item[0]))
        ends: list[int] = []
        seen = 0
        for _, n in ordered:
            seen += n
            ends.append(seen)
        low, high, last = self.min, self.max, self.count - 1

        def value(rank: int) -> float:
            if rank == 0:
                return low
            if rank == last:
                return high
            position = bisect_right(ends, rank)
            return min(max(_bucket_value(ordered[position][0]), low), high)
        return value

    def mean(self) -> float:
        return self.total / self.count if self.count else math.nan

    def state(self) -> dict[str, Any]:
        """A JSON-able form (`from_state` rebuilds it)."""
        return {"values": self.values, "buckets": sorted(self.buckets.items()), "count": self.count,
                "total": self.total, "min": self.min if self.count else None,
                "max": self.max if self.count else None}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> QuantileSketch:
        made = cls()
        made.values = None if state["values"] is None else list(state["values"])
        made.buckets = {int(i): int(n) for i, n in state["buckets"]}
        made.count, made.total = state["count"], state["total"]
        if made.count:
            made.min, made.max = state["min"], state["max"]
        return made

    @classmethod
    def of(cls, values: Any) -> QuantileSketch:
        """The sketch of `values`: the one `add` makes of them one by one
        (same count, sum in the same order, min, max, kept values or
        buckets), with the buckets of many values counted at C speed: a
        Spark task sketches some 400,000 latencies of a 100k-exchange
        archive, 0.6 s one by one."""
        values = list(values)
        made = cls()
        if not values:
            return made
        total = 0.0
        for value in values:
            total += value
        if len(values) <= EXACT_LIMIT:  # kept as they are
            made.count, made.total, made.values = len(values), total, values
            # (min and max compare as `add` does: `<` against the best so far, from infinity)
            made.min, made.max = min(math.inf, *values), max(-math.inf, *values)
            return made
        zero = values.count(0)
        positive = [value for value in values if value > 0]
        negative = [-value for value in values if value < 0]
        if zero + len(positive) + len(negative) != len(values):
            for value in values:  # a NaN: it raises in `add`, as it does one by one
                made.add(value)
            return made
        made.count, made.total, made.values = len(values), total, None
        made.min, made.max = min(math.inf, *values), max(-math.inf, *values)
        index = _LOG_GAMMA.__rtruediv__  # x -> x / _LOG_GAMMA, as in _float_bucket
        buckets = made.buckets
        for sign, magnitudes in ((1, positive), (-1, negative)):
            for key, n in Counter(map(math.ceil, map(index, map(math.log, magnitudes)))).items():
                buckets[sign * (_POSITIVE + key)] = n
        if zero:
            buckets[_ZERO] = zero
        return made


_ZERO = 0
_POSITIVE = 1 << 40  # bucket keys: positive values at _POSITIVE + i, negative ones at -(_POSITIVE + i)


def _float_bucket(value: float) -> int:
    if value == 0:
        return _ZERO
    index = math.ceil(math.log(abs(value)) / _LOG_GAMMA)
    return _POSITIVE + index if value > 0 else -(_POSITIVE + index)


def _bucket_value(key: int) -> float:
    """The representative of a bucket key: within RELATIVE_ACCURACY of its values."""
    if key == _ZERO:
        return 0.0
    index = abs(key) - _POSITIVE
    centre = 2 * _GAMMA ** index / (_GAMMA + 1)
    return centre if key > 0 else -centre


def _interpolated(value_at: Callable[[int], float], count: int, q: float) -> float:
    """Linear interpolation between the closest ranks (as `kdissect.ranks.percentile`)."""
    position = (count - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, count - 1)
    below = value_at(low)
    return below + (value_at(high) - below) * (position - low)
