"""Percentiles of a sorted list, interpolated linearly between the closest
ranks (numpy's default method): the one definition the summaries, the Spark
job, the report and the broker-log join use."""

from __future__ import annotations

import math


def percentile(sorted_values: list[float], q: float) -> float:
    """q in [0, 100] of an ascending list, linear interpolation between ranks."""
    if not sorted_values:
        return math.nan
    position = (len(sorted_values) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    fraction = position - low
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * fraction
