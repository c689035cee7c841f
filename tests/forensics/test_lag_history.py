"""group_lag_over_time's intervals: parts merge into the tally of the whole
(the Spark job merges per-task tallies), and the interval is the shortest
power-of-two seconds that cuts the span into at most 60."""

from __future__ import annotations

import random

from kdissect.forensics.lag_history import MAX_INTERVALS, SECOND_NS, LagHistory
from kdissect.protocol.topics import TopicNames
from kdissect.conn.pipeline import analyze
from kdissect.forensics import FORENSIC_APIS, Forensics
from tests.support.paths import REPO

START = 1_795_000_000 * SECOND_NS


def _events(seconds: int, count: int, seed: int) -> list[tuple]:
    rng = random.Random(seed)
    events = []
    for n in range(count):
        ts = START + rng.randrange(seconds * SECOND_NS)
        order = (ts, ("c", 0, n % 3), n)
        if rng.random() < 0.5:
            events.append(("commit", "g", "t", n % 2, order, ts, rng.randrange(1000)))
        else:
            events.append(("watermark", "t", n % 2, order, ts, rng.randrange(1000, 2000)))
    return events


def _fed(events: list[tuple]) -> LagHistory:
    history = LagHistory()
    for event in events:
        if event[0] == "commit":
            history.add_commit(*event[1:])
        else:
            history.add_watermark(*event[1:])
    return history


def test_parts_merge_into_the_whole_whatever_the_order() -> None:
    names = TopicNames()
    for seconds in (20, 61, 600, 7200):
        events = _events(seconds, 400, seconds)
        whole = _fed(events).rows(names, {}, {})
        for seed in range(3):
            shuffled = events[:]
            random.Random(seed).shuffle(shuffled)
            cut = len(shuffled) // 3
            parts = [_fed(shuffled[:cut]), _fed(shuffled[cut:2 * cut]), _fed(shuffled[2 * cut:])]
            merged = parts[seed % 3]
            for part in parts:
                if part is not merged:
                    merged.merge(part)
            assert merged.rows(names, {}, {}) == whole, (seconds, seed)


def test_the_interval_fits_the_span() -> None:
    for seconds, width in ((20, 1), (59, 1), (61, 2), (600, 16), (3600, 64)):
        history = _fed([("watermark", "t", 0, (START, (), 0), START, 1),
                        ("watermark", "t", 0, (START + seconds * SECOND_NS, (), 1), START + seconds * SECOND_NS, 2)])
        assert history.interval_ns == width * SECOND_NS, seconds
        first, last = START // history.interval_ns, (START + seconds * SECOND_NS) // history.interval_ns
        assert last - first + 1 <= MAX_INTERVALS
        if width > 1:  # the next shorter one would not fit
            half = history.interval_ns // 2
            assert (START + seconds * SECOND_NS) // half - START // half + 1 > MAX_INTERVALS


def _shortest_fitting(first_ts: int, last_ts: int) -> int:
    """The rule by hand: the shortest power-of-two seconds cutting [first, last] into at most 60 intervals."""
    width = SECOND_NS
    while last_ts // width - first_ts // width + 1 > MAX_INTERVALS:
        width *= 2
    return width


def test_the_interval_after_every_event() -> None:
    """Events in any order, times inside the span seen so far among them
    (the tally widens only when the span grows), merges in between: after
    each, the interval is the rule's for the times seen."""
    for seed in range(20):
        rng = random.Random(seed)
        history, seen = LagHistory(), []
        for n in range(300):
            if seen and rng.random() < 0.5:  # within the span so far
                ts = rng.randrange(min(seen), max(seen) + 1)
            else:
                ts = START + rng.randrange(rng.choice((30, 600, 86_400)) * SECOND_NS)
            if rng.random() < 0.05:
                other = LagHistory()
                other.add_watermark("t", 1, (ts, (), n), ts, n)
                history.merge(other)
            elif rng.random() < 0.5:
                history.add_commit("g", "t", 0, (ts, (), n), ts, n)
            else:
                history.add_watermark("t", 0, (ts, (), n), ts, n)
            seen.append(ts)
            assert (history.first_ts, history.last_ts) == (min(seen), max(seen))
            assert history.interval_ns == _shortest_fitting(min(seen), max(seen)), (seed, n)


def test_connections_tallied_apart_merge_into_the_capture_s_tables() -> None:
    """The lab capture's exchanges split by connection (as Spark tasks hold them) give the CLI's group lag tables."""
    exchanges, _ = analyze([str(REPO / "captures" / "group_lag_kafka.pcap")], keep_apis=FORENSIC_APIS)
    exchanges = list(exchanges)
    whole = Forensics()
    parts = [Forensics(), Forensics()]
    for ex in exchanges:
        whole.add(ex)
        parts[hash(ex.stream_key) % 2].add(ex)
    whole.finish()
    for part in parts:
        part.finish()
    merged = Forensics.from_state(parts[1].state())
    merged.merge(Forensics.from_state(parts[0].state()))
    mine, theirs = whole.tables(), merged.tables()
    assert mine.group_lag_over_time and mine.group_lag
    assert theirs.group_lag_over_time == mine.group_lag_over_time
    assert theirs.group_lag == mine.group_lag
