"""match_span against the rule applied offset by offset (the module docstring's
rule written out here, independently of the function's paths)."""

from __future__ import annotations

import random

from kdissect.forensics.latency import PartitionIndex, match_span

HORIZON = 1_000
SLACK = 50


def by_offset(ranges: list[tuple[int, int, int, int]], offsets: list[int], fetched_ts: int) -> tuple[list, int]:
    """For each offset, the earliest request among the produced ranges holding
    it, sent at most HORIZON before the fetch and answered no later than SLACK
    after it."""
    found: dict[int, int] = {}
    unmatched = 0
    for offset in offsets:
        sent = [request for first, last, request, response in ranges
                if first <= offset <= last and 0 <= fetched_ts - request <= HORIZON and response <= fetched_ts + SLACK]
        if sent:
            latency = fetched_ts - min(sent)
            found[latency] = found.get(latency, 0) + 1
        else:
            unmatched += 1
    return sorted(found.items()), unmatched


def index_of(ranges: list[tuple[int, int, int, int]]) -> PartitionIndex:
    index = PartitionIndex()
    for r in ranges:
        index.add(*r)
    return index


def test_overlapping_ranges_match_as_offset_by_offset() -> None:
    rng = random.Random(29)
    for _ in range(3_000):
        ranges = []
        for _ in range(rng.randint(1, 9)):
            first = rng.randint(0, 40)
            request = rng.randint(0, 1_500)
            ranges.append((first, first + rng.randint(0, 15), request, request + rng.randint(0, 200)))
        first = rng.randint(0, 50)
        offsets = range(first, first + rng.randint(1, 20))
        fetched_ts = rng.randint(0, 2_000)
        expected = by_offset(ranges, list(offsets), fetched_ts)
        assert match_span(index_of(ranges), offsets, fetched_ts, HORIZON, SLACK) == expected
        # the same offsets as a list (a fetched batch with holes takes this form)
        assert match_span(index_of(ranges), list(offsets), fetched_ts, HORIZON, SLACK) == expected


def test_ranges_holding_every_offset_match_as_offset_by_offset() -> None:
    rng = random.Random(8)
    for _ in range(2_000):
        first = rng.randint(10, 40)
        offsets = range(first, first + rng.randint(1, 10))
        ranges = []
        for _ in range(rng.randint(1, 9)):  # each holds all of the fetched offsets (but the last, at times)
            request = rng.randint(0, 1_500)
            ranges.append((first - rng.randint(0, 5), offsets[-1] + rng.randint(0, 5), request,
                           request + rng.randint(0, 200)))
        if rng.random() < 0.3:
            ranges.append((first + 1, first + 3, rng.randint(0, 1_500), 0))
        fetched_ts = rng.randint(0, 2_000)
        expected = by_offset(ranges, list(offsets), fetched_ts)
        assert match_span(index_of(ranges), offsets, fetched_ts, HORIZON, SLACK) == expected


def test_replayed_offsets_take_the_earliest_request() -> None:
    # the same offsets produced three times (replays): the earliest qualifying request wins
    ranges = [(0, 9, 100, 110), (0, 9, 300, 310), (0, 9, 200, 210), (5, 14, 50, 60)]
    matches, unmatched = match_span(index_of(ranges), range(0, 15), 400, HORIZON, SLACK)
    assert matches == [(300, 5), (350, 10)]  # 0-4 sent at 100; 5-14 at 50
    assert unmatched == 0
    # a request after the fetch does not qualify; offsets past every range are unmatched
    matches, unmatched = match_span(index_of(ranges), range(8, 20), 150, HORIZON, SLACK)
    assert matches == [(100, 7)]  # 8-14 sent at 50 (8-9 also at 100)
    assert unmatched == 5
