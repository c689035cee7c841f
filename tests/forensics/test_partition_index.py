"""PartitionIndex.overlapping (kdissect.forensics.latency): with the ranges
added one by one, and with them all known at once (`settle`, whose reach
stops the search early), against a plain filter over every range."""

from __future__ import annotations

import random

from kdissect.forensics.latency import PartitionIndex


def _by_hand(ranges: list[tuple], first: int, last: int) -> list[tuple]:
    return sorted(r for r in ranges if r[0] <= last and r[1] >= first)


def test_overlapping_settled_and_added() -> None:
    rng = random.Random(29)
    for _ in range(200):
        ranges = []
        for _ in range(rng.randrange(0, 40)):
            first = rng.randrange(0, 300)
            # mostly short ranges, a few long ones (a large batch), some repeated (retries)
            last = first + (rng.randrange(0, 120) if rng.random() < 0.1 else rng.randrange(0, 6))
            ranges.append((first, last, rng.randrange(10**6), rng.randrange(10**6)))
            if rng.random() < 0.1:
                ranges.append(ranges[-1])
        settled, added = PartitionIndex(), PartitionIndex()
        settled.settle(ranges)
        for r in ranges:
            added.add(*r)
        assert settled.ranges == added.ranges and settled.longest == added.longest
        for _ in range(20):
            first = rng.randrange(-10, 320)
            last = first + rng.randrange(0, 30)
            expected = _by_hand(ranges, first, last)
            assert sorted(settled.overlapping(first, last)) == expected
            assert sorted(added.overlapping(first, last)) == expected
            # the same candidates in the same order (the walk only stops sooner)
            assert settled.overlapping(first, last) == added.overlapping(first, last)


def test_reach_by_hand() -> None:
    index = PartitionIndex()
    index.settle([(10, 19, 1, 2), (0, 100, 3, 4), (20, 29, 5, 6), (120, 121, 7, 8)])
    assert index.ranges == [(0, 100, 3, 4), (10, 19, 1, 2), (20, 29, 5, 6), (120, 121, 7, 8)]
    assert index.reach == [100, 100, 100, 121] and index.longest == 100
    assert index.overlapping(101, 119) == []
    assert index.overlapping(50, 60) == [(0, 100, 3, 4)]
    assert index.overlapping(15, 25) == [(20, 29, 5, 6), (10, 19, 1, 2), (0, 100, 3, 4)]
