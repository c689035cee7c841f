"""The summary tables' two steps (per-task contributions, merge by group),
without Spark, on crafted exchanges whose expected values numpy computes.

The exchanges are cut into several pieces as the job's tasks would hold them,
so every group is merged from several contributions. (tests/spark/test_job.py
checks the tables of a whole job against `kdissect export`'s exchanges.)
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from kdissect.spark.part_files import EXCHANGE_WORK_SCHEMA
from kdissect.spark.summaries import (
    GROUP_COLUMNS,
    contributions,
    merged_rows,
    split_merged,
)


def _summaries(rows: list[dict], pieces: int, written: dict[str, int] | None = None):
    table = pa.Table.from_pylist(rows, schema=EXCHANGE_WORK_SCHEMA)  # times: int ns, as the tasks hold them
    size = -(-len(rows) // pieces)
    parts = [contributions(table.slice(i * size, size), written or {}) for i in range(pieces)]
    everything = pa.concat_tables(parts)
    ordered = everything.take(pc.sort_indices(everything, [(name, "ascending") for name in GROUP_COLUMNS]))
    return split_merged(merged_rows(pa.Table.from_batches(ordered.to_batches(max_chunksize=97))))


def test_throttle_percentiles_over_the_throttled_responses_equal_numpys():
    rng = np.random.default_rng(7)
    waits = [int(v) for v in rng.integers(1, 5000, size=997)]
    rows = [{"client_id": "busy", "broker": "b:9092", "throttle_time_ms": w} for w in waits]
    rows += [{"client_id": "busy", "broker": "b:9092", "throttle_time_ms": 0}] * 50
    rows += [{"client_id": "calm", "broker": "b:9092", "throttle_time_ms": 0}] * 3
    rows += [{"client_id": "one", "broker": "b:9092", "throttle_time_ms": 42}]
    rows += [{"client_id": None, "broker": None, "throttle_time_ms": 7}]
    order = rng.permutation(len(rows))
    tables, _written = _summaries([rows[i] for i in order], pieces=5)
    got = {row["client_id"]: row for row in tables["throttle"]}
    busy = got["busy"]
    assert (busy["responses"], busy["throttled"], busy["max_ms"], busy["total_ms"]) == (1047, 997, max(waits), sum(waits))
    for column, q in (("p50_ms", 50), ("p90_ms", 90), ("p99_ms", 99)):
        assert busy[column] == pytest.approx(float(np.percentile(waits, q)), rel=1e-12)
        assert got["one"][column] == 42.0
        assert got["calm"][column] is None
    assert (got["calm"]["throttled"], got["calm"]["total_ms"]) == (0, 0)
    assert (got["(none)"]["broker"], got["(none)"]["throttled"]) == ("?", 1)  # as `kdissect stats` labels them


def test_latency_errors_and_minutes_merged_from_several_pieces():
    rng = np.random.default_rng(11)
    rows = []
    for i in range(3000):
        api = ["Produce", "Fetch", "Metadata"][i % 3]
        latency = None if i % 17 == 0 else float(rng.exponential(3.0))
        rows.append({
            "api_key": [0, 1, 3][i % 3], "api_name": api, "api_version": 9 if api != "Metadata" else 12,
            "client_id": f"client-{i % 4}", "broker": f"10.0.0.{i % 2}:9092",
            "request_ts": 1_700_000_000 * 10**9 + i * 10**8,
            "response_ts": None if latency is None else 1_700_000_000 * 10**9,
            "latency_ms": latency, "request_bytes": 100, "response_bytes": None if latency is None else 50,
            "error_code": 3 if i % 50 == 0 else 0, "error_codes": [3, 3] if i % 50 == 0 else ([6] if i % 70 == 0 else []),
        })
    tables, written = _summaries(rows, pieces=7, written={"exchanges": 3000})
    assert written == {"exchanges": 3000 * 7}  # each piece reported the count it was given
    latency = {(r["dimension"], r["api_name"] or r["client_id"] or r["broker"]): r for r in tables["latency"]}
    for api in ("Produce", "Fetch", "Metadata"):
        values = [r["latency_ms"] for r in rows if r["api_name"] == api and r["latency_ms"] is not None]
        row = latency[("api", api)]
        assert row["count"] == len(values)
        assert row["p50"] == pytest.approx(float(np.percentile(values, 50)), rel=1e-12)
        assert row["p99"] == pytest.approx(float(np.percentile(values, 99)), rel=1e-12)
        assert (row["max"], row["mean"]) == (max(values), pytest.approx(float(np.mean(values)), rel=1e-12))
    client = latency[("client_id", "client-1")]
    assert client["count"] == sum(1 for r in rows if r["client_id"] == "client-1" and r["latency_ms"] is not None)
    errors = {(r["api_name"], r["error_name"]): r for r in tables["errors"]}
    top = sum(1 for r in rows if r["error_code"] == 3 and r["api_name"] == "Produce")
    assert errors[("Produce", "UNKNOWN_TOPIC_OR_PARTITION")]["top_level"] == top
    # anywhere: once per exchange however often the code appears in it
    assert errors[("Produce", "UNKNOWN_TOPIC_OR_PARTITION")]["anywhere"] == top
    fetch_6 = sum(1 for r in rows if r["api_name"] == "Fetch" and 6 in r["error_codes"])
    assert errors[("Fetch", "NOT_LEADER_OR_FOLLOWER")] == {
        "api_name": "Fetch", "error_code": 6, "error_name": "NOT_LEADER_OR_FOLLOWER", "top_level": 0, "anywhere": fetch_6,
        "normal_flow": False}
    # errors by client: exchanges per client id and code anywhere (top level or inside)
    by_client = {}
    for r in rows:
        for code in (set(r["error_codes"] or ()) | {r["error_code"] or 0}) - {0}:
            key = (r["client_id"] or "(none)", code)
            by_client[key] = by_client.get(key, 0) + 1
    assert {(r["client_id"], r["error_code"]): r["exchanges"] for r in tables["errors_by_client"]} == by_client
    minutes = {}
    for r in rows:
        minutes.setdefault((r["request_ts"] // 10**9 // 60 * 60, r["api_name"]), []).append(r)
    assert len(tables["timeseries"]) == len(minutes)
    for row in tables["timeseries"]:
        group = minutes[(row["minute"], row["api_name"])]
        assert row["exchanges"] == len(group)
        assert row["bytes"] == sum(100 + (r["response_bytes"] or 0) for r in group)
        assert row["errors"] == sum(1 for r in group if r["error_code"] or r["error_codes"])
        values = [r["latency_ms"] for r in group if r["latency_ms"] is not None]
        assert row["p99_latency_ms"] == pytest.approx(float(np.percentile(values, 99)), rel=1e-12)
    json.dumps(tables)  # plain values only


def test_requests_sent_while_muted_counted_once_per_exchange():
    """`sent_while_muted` counts the exchanges whose problem codes name it
    (once, however often), per client and broker; other codes, empty and
    missing lists count nothing; a client or broker without a response
    throttle time still gets its row."""
    muted, other = "sent-while-muted", "no-response"
    rows = [{"client_id": "a", "broker": "b:1", "problem_codes": [muted]}] * 3
    rows += [{"client_id": "a", "broker": "b:1", "problem_codes": [other, muted, muted]}]
    rows += [{"client_id": "a", "broker": "b:2", "problem_codes": [muted], "throttle_time_ms": 5}]
    rows += [{"client_id": None, "broker": None, "problem_codes": [muted]}] * 2
    rows += [{"client_id": "c", "broker": "b:1", "problem_codes": [other]}]
    rows += [{"client_id": "d", "broker": "b:1", "problem_codes": []}, {"client_id": "d", "broker": "b:1"}]
    for pieces in (1, 3):
        tables, _written = _summaries(rows, pieces=pieces)
        got = {(row["client_id"], row["broker"]): (row["sent_while_muted"], row["responses"])
               for row in tables["throttle"]}
        assert got == {("a", "b:1"): (4, 0), ("a", "b:2"): (1, 1), ("(none)", "?"): (2, 0)}


@pytest.mark.parametrize("name", ["pareto heavy tail", "two modes nine decades apart", "all equal",
                                  "zeros and values", "on bucket edges", "tiny and huge",
                                  "negative (reordered clocks)", "mixed signs and zeros", "zeros first",
                                  "past the limit", "at the limit", "a few"])
def test_sketch_counted_by_numpy_equals_the_plain_sketch(name):
    """The finishing tasks and the driver sketch many values with numpy
    (`_sketch_of`): the same sketch (sum, buckets, min, max, kept values)
    as `QuantileSketch.of` one value at a time, bit for bit, values on the
    buckets' edges included (where numpy's and math's logarithms may round apart)."""
    import math

    from kdissect.forensics.sketch import EXACT_LIMIT, RELATIVE_ACCURACY, QuantileSketch
    from kdissect.spark.summaries import _sketch_of

    rng = np.random.default_rng(29)
    gamma = (1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY)
    values = {
        "pareto heavy tail": (rng.pareto(0.7, 20_000) + 1e-3).tolist(),
        "two modes nine decades apart": np.concatenate([rng.normal(1e-3, 1e-5, 8_000),
                                                        rng.normal(1e6, 1e3, 2_000)]).tolist(),
        "all equal": [3.25] * 5_000,
        "zeros and values": [0.0] * 3_000 + rng.exponential(2.0, 3_000).tolist(),
        # every power of gamma: the bucket edges, where one ulp of the logarithm moves a value
        "on bucket edges": [gamma ** k for k in range(-300, 300)] * 5 + [math.exp(k * math.log(gamma))
                                                                          for k in range(-300, 300)],
        "tiny and huge": [1e-300, 1e300] * 1_000 + [1.0],
        "negative (reordered clocks)": (-rng.exponential(5.0, 4_000)).tolist(),
        "mixed signs and zeros": [0.0, -0.0, 3.0, -7.0, *rng.normal(0, 50, 3_000).tolist(), -0.0, 12.0],
        "zeros first": [-0.0, 0.0] * 600 + rng.exponential(1.0, 600).tolist(),
        "past the limit": rng.exponential(4.0, EXACT_LIMIT + 1).tolist(),
        "at the limit": rng.exponential(4.0, EXACT_LIMIT).tolist(),
        "a few": [3.0, 0.5, -1.0, 0.0],
    }[name]
    counted = _sketch_of(np.array(values, dtype=np.float64))
    plain = QuantileSketch.of(values)
    assert counted.state() == plain.state()
    assert math.copysign(1.0, counted.min) == math.copysign(1.0, plain.min)  # (-0.0 == 0.0 otherwise)
    assert math.copysign(1.0, counted.total) == math.copysign(1.0, plain.total)


def test_sketch_counted_by_numpy_refuses_what_adding_refuses():
    from kdissect.forensics.sketch import EXACT_LIMIT
    from kdissect.spark.summaries import _sketch_of

    for bad, error in ((float("nan"), ValueError), (float("inf"), OverflowError)):
        with pytest.raises(error):
            _sketch_of(np.array([1.0] * EXACT_LIMIT + [bad]))


def test_a_large_groups_mean_is_the_same_however_its_exchanges_were_spread_over_tasks():
    """More values than a contribution keeps (EXACT_LIMIT) are sketched in a
    task; a group may be sketched in one task and kept in another. Its mean is
    the exact sum of its values rounded once, divided by the count, whatever the cut."""
    from fractions import Fraction

    from kdissect.sketch import EXACT_LIMIT

    rng = np.random.default_rng(5)
    # latencies of very different sizes: a float sum's rounding depends on its order
    latencies = [float(v) for v in rng.exponential(50.0, size=3 * EXACT_LIMIT) * 10.0 ** rng.integers(-6, 6, 3 * EXACT_LIMIT)]
    rows = [{"api_key": 0, "api_name": "Produce", "api_version": 9, "client_id": "c", "broker": "b:9092",
             "request_ts": 1_700_000_000 * 10**9 + i, "response_ts": 1_700_000_000 * 10**9 + i, "latency_ms": value}
            for i, value in enumerate(latencies)]
    exact = float(sum((Fraction(v) for v in latencies), Fraction(0)) / len(latencies))
    means = set()
    for pieces in (1, 2, 3, 5, 7):  # pieces of 3072, 1536, 1024 (kept), 615 and 439 values
        tables, _ = _summaries(rows, pieces)
        [row] = [r for r in tables["latency"] if r["dimension"] == "api"]
        assert row["count"] == len(latencies)
        means.add(row["mean"])
    assert means == {exact}
