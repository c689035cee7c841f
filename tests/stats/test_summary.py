"""The stats summary: percentiles against numpy, counts against the exchanges."""

from __future__ import annotations

import random

import numpy
import pytest

from kdissect.model.exchange import Exchange
from kdissect.ranks import percentile
from kdissect.stats.summary import Summary


@pytest.mark.parametrize("n", [1, 2, 3, 10, 101, 1000])
def test_percentiles_match_numpy(n):
    rng = random.Random(n)
    values = sorted(rng.expovariate(1 / 5.0) for _ in range(n))
    for q in (0, 50, 90, 99, 100):
        assert percentile(values, q) == pytest.approx(float(numpy.percentile(values, q)))


def _ex(api: str, key: int, version: int, latency: float | None, client_id="c", errors=(), top=None,
        throttle=None, status="ok") -> Exchange:
    ex = Exchange(api_name=api, api_key=key, api_version=version, client_id=client_id, broker="b:9092",
                  request_ts=100 * 10**9,
                  response_ts=None if latency is None else 100 * 10**9 + round(latency * 1_000_000),
                  error_codes=list(errors), error_code=top, throttle_time_ms=throttle, status=status)
    return ex


def test_summary_tables():
    summary = Summary()
    summary.add_all([
        _ex("Produce", 0, 9, 2.0, throttle=0),
        _ex("Produce", 0, 9, 4.0, errors=[6], throttle=30),
        _ex("Produce", 0, 7, 10.0, client_id="d"),
        _ex("Fetch", 1, 12, None, status="no_response"),
        _ex("Heartbeat", 12, 4, 1.0, errors=[27], top=27),
    ])
    d = summary.to_dict()
    rows = {(r["api"], r["version"]): r for r in d["latency_by_api"]}
    assert rows[("Produce", 9)]["count"] == 2 and rows[("Produce", 9)]["max"] == pytest.approx(4.0)
    assert rows[("Produce", 9)]["p50"] == pytest.approx(3.0)
    assert ("Fetch", 12) not in rows
    assert d["no_response"] == {"Fetch v12": 1}
    assert d["top_level_errors"] == {"REBALANCE_IN_PROGRESS": 1}
    assert d["errors_anywhere"] == {"NOT_LEADER_OR_FOLLOWER": 1, "REBALANCE_IN_PROGRESS": 1}
    assert d["throttle"] == [{"broker": "b:9092", "responses": 2, "throttled": 1, "max_ms": 30, "total_ms": 30}]
    clients = {r["client_id"]: r["count"] for r in d["latency_by_client"]}
    assert clients == {"c": 3, "d": 1}
    text = summary.render()
    assert "REBALANCE_IN_PROGRESS" in text and "Heartbeat" in text
