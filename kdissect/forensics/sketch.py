"""A mergeable latency histogram with bounded memory.

Values (nanoseconds) fall into logarithmic buckets 2% wide, so a percentile
read from the buckets is within 1% of the exact value (the representative
of a bucket is its centre, relative to its width); count, sum, minimum and
maximum are kept exactly. Merging two histograms is adding their buckets,
so one computed in pieces (Spark tasks) equals one computed in a single
pass (the CLI), bucket for bucket. Memory: one counter per occupied bucket,
about 115 per decade (under 1,500 from a microsecond to a day).
"""

from __future__ import annotations

import math
from typing import Any

RELATIVE_ACCURACY = 0.01
_GAMMA = (1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY)
_LOG_GAMMA = math.log(_GAMMA)
_FLOOR_NS = 1_000  # values below a microsecond share the lowest bucket


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

    def percentile_ms(self, q: float) -> float | None:
        """The q-th percentile (q in [0, 100]) in ms: the value of rank
        ceil(q/100 * count) (nearest rank), as its bucket's centre, clamped
        to the exact minimum and maximum."""
        if not self.count:
            return None
        rank = max(1, math.ceil(q / 100 * self.count))
        seen = 0
        for index in sorted(self.buckets):
            seen += self.buckets[index]
            if seen >= rank:
                value = min(max(bucket_centre(index), self.min_ns or 0), self.max_ns or 0)
                return value / 1_000_000
        return (self.max_ns or 0) / 1_000_000  # pragma: no cover - counts always add up

    def summary(self) -> dict[str, Any]:
        """count, min/mean/max (exact) and p50/p90/p99 (within 1%), in ms."""
        count = self.count
        return {
            "count": count,
            "min_ms": None if self.min_ns is None else self.min_ns / 1_000_000,
            "mean_ms": self.total_ns / count / 1_000_000 if count else None,
            "p50_ms": self.percentile_ms(50),
            "p90_ms": self.percentile_ms(90),
            "p99_ms": self.percentile_ms(99),
            "max_ms": None if self.max_ns is None else self.max_ns / 1_000_000,
        }


def bucket_of(value_ns: int) -> int:
    """The bucket holding `value_ns`: (gamma^(i-1), gamma^i] microseconds."""
    if value_ns <= _FLOOR_NS:
        return 0
    return max(0, math.ceil(math.log(value_ns / _FLOOR_NS) / _LOG_GAMMA))


def bucket_centre(index: int) -> float:
    """The value (ns) a bucket stands for: within RELATIVE_ACCURACY of all its values."""
    if index <= 0:
        return float(_FLOOR_NS)
    return 2 * _FLOOR_NS * _GAMMA ** index / (_GAMMA + 1)
