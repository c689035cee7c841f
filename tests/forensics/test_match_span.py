"""latency.match_span against the rule written out offset by offset
(kdissect.forensics.latency's docstring: each fetched offset's latency is
from the earliest request, within the horizon and slack, of a produced range
holding it), on random ranges: disjoint ones, and overlapping ones (a replay
of the same offsets, a retry) that take the runs-of-offsets path."""

from __future__ import annotations

import random

from kdissect.forensics.latency import PartitionIndex, match_span

HORIZON, SLACK = 1_000, 50


def _by_hand(ranges: list[tuple], offsets: range, fetched_ts: int) -> tuple[list[tuple[int, int]], int]:
    found: dict[int, int] = {}
    unmatched = 0
    for offset in offsets:
        times = [r[2] for r in ranges if r[0] <= offset <= r[1]
                 and 0 <= fetched_ts - r[2] <= HORIZON and r[3] <= fetched_ts + SLACK]
        if times:
            latency = fetched_ts - min(times)
            found[latency] = found.get(latency, 0) + 1
        else:
            unmatched += 1
    return sorted(found.items()), unmatched


def test_match_span_as_the_rule_by_offset() -> None:
    rng = random.Random(29)
    overlapping_cases = 0
    for case in range(400):
        ranges = []
        for _ in range(rng.randrange(1, 12)):
            first = rng.randrange(0, 60)
            request_ts = rng.randrange(0, 1_500)
            ranges.append((first, first + rng.randrange(0, 15), request_ts, request_ts + rng.randrange(0, 120)))
        if case % 2:  # a replay: the same offsets again, later
            shift = rng.randrange(1, 400)
            ranges += [(r[0], r[1], r[2] + shift, r[3] + shift) for r in ranges]
        index = PartitionIndex()
        if case % 3:
            index.settle(ranges)
        else:
            for r in ranges:
                index.add(*r)
        for _ in range(10):
            first = rng.randrange(0, 70)
            offsets = range(first, first + rng.randrange(1, 25))
            fetched_ts = rng.randrange(0, 2_000)
            qualifying = sorted(r for r in ranges if r[0] <= offsets[-1] and r[1] >= offsets[0]
                                and 0 <= fetched_ts - r[2] <= HORIZON and r[3] <= fetched_ts + SLACK)
            overlapping_cases += any(a[1] >= b[0] for a, b in zip(qualifying, qualifying[1:]))
            assert match_span(index, offsets, fetched_ts, HORIZON, SLACK) == _by_hand(ranges, offsets, fetched_ts)
            # the same offsets as a list (the offset-by-offset path)
            assert match_span(index, list(offsets), fetched_ts, HORIZON, SLACK) == _by_hand(ranges, offsets, fetched_ts)
    assert overlapping_cases > 200  # the runs-of-offsets path was taken


def test_overlapping_by_hand() -> None:
    """Offsets 10-19 fetched at 1000: produced at 100 (10-14), at 300 (10-19,
    a replay) and at 200 (12-16): 10-14 from 100, 15-16 from 200, 17-19 from 300."""
    index = PartitionIndex()
    index.settle([(10, 14, 100, 110), (10, 19, 300, 310), (12, 16, 200, 210)])
    assert match_span(index, range(10, 20), 1000, HORIZON, SLACK) == ([(700, 3), (800, 2), (900, 5)], 0)


def _index_of(ranges: list[tuple[int, int, int, int]]) -> PartitionIndex:
    index = PartitionIndex()
    for r in ranges:
        index.add(*r)
    return index


def test_ranges_holding_every_offset_as_the_rule_by_offset() -> None:
    """Replays: every range holds all of the fetched offsets (at times but the
    last), now and then a short one inside them."""
    rng = random.Random(8)
    for _ in range(2_000):
        first = rng.randint(10, 40)
        offsets = range(first, first + rng.randint(1, 10))
        ranges = []
        for _ in range(rng.randint(1, 9)):
            request = rng.randint(0, 1_500)
            ranges.append((first - rng.randint(0, 5), offsets[-1] + rng.randint(0, 5), request,
                           request + rng.randint(0, 200)))
        if rng.random() < 0.3:
            ranges.append((first + 1, first + 3, rng.randint(0, 1_500), 0))
        fetched_ts = rng.randint(0, 2_000)
        assert match_span(_index_of(ranges), offsets, fetched_ts, HORIZON, SLACK) == \
            _by_hand(ranges, offsets, fetched_ts)


def test_replayed_offsets_take_the_earliest_request() -> None:
    # the same offsets produced three times (replays): the earliest qualifying request wins
    ranges = [(0, 9, 100, 110), (0, 9, 300, 310), (0, 9, 200, 210), (5, 14, 50, 60)]
    matches, unmatched = match_span(_index_of(ranges), range(0, 15), 400, HORIZON, SLACK)
    assert matches == [(300, 5), (350, 10)]  # 0-4 sent at 100; 5-14 at 50
    assert unmatched == 0
    # a request after the fetch does not qualify; offsets past every range are unmatched
    matches, unmatched = match_span(_index_of(ranges), range(8, 20), 150, HORIZON, SLACK)
    assert matches == [(100, 7)]  # 8-14 sent at 50 (8-9 also at 100)
    assert unmatched == 5
