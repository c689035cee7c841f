"""QuantileSketch against numpy's exact percentiles (linear interpolation, its
default method): exact up to EXACT_LIMIT values, within RELATIVE_ACCURACY
past it, on the latencies of the bundled captures (as `kdissect export`
measures them) and on adversarial distributions; merged pieces equal one
pass; and `stats` on a capture with more exchanges than EXACT_LIMIT agrees
with the Spark summaries' two steps on the same exchange rows."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kdissect.forensics import sketch as sketch_module
from kdissect.forensics.sketch import EXACT_LIMIT, RELATIVE_ACCURACY, QuantileSketch
from tests.support.paths import REPO

CAPTURES = REPO / "captures"
QS = (0, 1, 5, 25, 50, 75, 90, 95, 99, 99.9, 100)
TOLERANCE = RELATIVE_ACCURACY * (1 + 1e-9)  # float rounding at a bucket's edge


def kdissect(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kdissect", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def real_latencies() -> list[float]:
    """Every answered exchange's latency in the bundled captures (export's rows)."""
    export = kdissect("export", str(CAPTURES), "-p", "9092", "-p", "19092", "-q")
    assert export.returncode == 0, export.stderr
    values = [row["latency_ms"] for row in map(json.loads, export.stdout.splitlines())
              if row.get("latency_ms") is not None]
    assert len(values) > 600
    return values


def assert_within(sketch: QuantileSketch, values: list[float]) -> None:
    exact = np.percentile(np.array(values, dtype=float), QS)
    for q, got, want in zip(QS, sketch.percentiles(*QS), exact):
        assert abs(got - want) <= TOLERANCE * abs(want) + 1e-300, (q, got, want)
    assert (sketch.count, sketch.min, sketch.max) == (len(values), min(values), max(values))


def adversarial() -> dict[str, list[float]]:
    rng = np.random.default_rng(23)
    gamma = (1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY)
    return {
        "pareto heavy tail": (rng.pareto(0.7, 20_000) + 1e-3).tolist(),
        "two modes nine decades apart": np.concatenate([rng.normal(1e-3, 1e-5, 8_000),
                                                        rng.normal(1e6, 1e3, 2_000)]).tolist(),
        "all equal": [3.25] * 5_000,
        "zeros and values": [0.0] * 3_000 + rng.exponential(2.0, 3_000).tolist(),
        "ascending": np.linspace(1e-6, 1e4, 10_000).tolist(),
        "descending": np.linspace(1e4, 1e-6, 10_000).tolist(),
        "on bucket edges": [gamma ** k for k in range(-300, 300)] * 5,
        "tiny and huge": [1e-300, 1e300] * 1_000 + [1.0],
        "negative (reordered clocks)": (-rng.exponential(5.0, 4_000)).tolist(),
        "one outlier": [1.0] * 9_999 + [1e9],
    }


def test_exact_up_to_the_limit(real_latencies):
    for values in (real_latencies[:EXACT_LIMIT], [5.0], [0.0, -1.0, 2.5], adversarial()["pareto heavy tail"][:999]):
        sketch = QuantileSketch.of(values)
        assert sketch.exact
        got = sketch.percentiles(*QS)
        want = np.percentile(np.array(values, dtype=float), QS)
        assert [math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-300) for a, b in zip(got, want)] == [True] * len(QS)
    assert not QuantileSketch.of([1.0] * (EXACT_LIMIT + 1)).exact
    assert math.isnan(QuantileSketch().percentiles(50)[0])  # no values


def test_real_latencies_within_the_stated_error(real_latencies, monkeypatch):
    # the bundled captures hold fewer answered exchanges than a busy capture:
    # a small limit puts them into buckets, as a large capture's would be
    monkeypatch.setattr(sketch_module, "EXACT_LIMIT", 16)
    sketch = QuantileSketch.of(real_latencies)
    assert not sketch.exact
    assert_within(sketch, real_latencies)


@pytest.mark.parametrize("name", sorted(adversarial()))
def test_adversarial_within_the_stated_error(name):
    values = adversarial()[name]
    sketch = QuantileSketch.of(values)
    assert not sketch.exact
    assert_within(sketch, values)
    assert len(sketch.buckets) <= 12_000  # bounded by the decades spanned, not the count


def test_memory_does_not_grow_with_the_count():
    rng = np.random.default_rng(5)
    sketch = QuantileSketch.of(rng.lognormal(1.0, 1.0, 200_000).tolist())
    assert sketch.values is None and len(sketch.buckets) < 1_500


@pytest.mark.parametrize("pieces", [2, 7, 50])
def test_merge_equals_one_pass(pieces):
    rng = np.random.default_rng(pieces)
    values = np.concatenate([rng.exponential(3.0, 3_000), [0.0] * 10, -rng.exponential(1.0, 20)]).tolist()
    rng.shuffle(values)
    for data in (values, values[:EXACT_LIMIT - 5]):  # past the limit, and within it
        one = QuantileSketch.of(data)
        cuts = sorted(rng.choice(len(data), pieces - 1, replace=False).tolist())
        parts = [QuantileSketch.of(part) for part in np.split(np.array(data), cuts)]
        order = rng.permutation(len(parts))
        merged = QuantileSketch()
        for i in order:  # any order, through the JSON state the Spark tasks send
            merged.merge(QuantileSketch.from_state(json.loads(json.dumps(parts[i].state()))))
        assert merged.exact == one.exact
        assert merged.buckets == one.buckets
        assert sorted(merged.values or []) == sorted(one.values or [])
        assert (merged.count, merged.min, merged.max) == (one.count, one.min, one.max)
        assert merged.percentiles(*QS) == one.percentiles(*QS)
        assert math.isclose(merged.total, one.total, rel_tol=1e-12)


def test_stats_agrees_with_spark_summaries_past_the_limit(tmp_path):
    """`stats --json` on a generated capture (3,000 exchanges, 3 client ids:
    past EXACT_LIMIT for every group) and the Spark summaries' two steps
    over `export`'s rows of it, in 5 pieces: the same sketch, the same
    figures; both within 1% of numpy's exact percentiles."""
    import pyarrow as pa
    import pyarrow.compute as pc

    sys.path.insert(0, str(REPO / "benchmarks"))
    from manyclients import write_capture

    from kdissect.spark.part_files import EXCHANGE_WORK_SCHEMA
    from kdissect.spark.summaries import GROUP_COLUMNS, contributions, merged_rows, split_merged

    capture = tmp_path / "three.pcap"
    write_capture(capture, 3, each=1_200, connections=3, batch=7)
    stats = kdissect("stats", str(capture), "--json")
    assert stats.returncode == 0, stats.stderr
    cli = {row["client_id"]: row for row in json.loads(stats.stdout)["latency_by_client"]}
    export = kdissect("export", str(capture), "-q")
    rows = [json.loads(line) for line in export.stdout.splitlines()]
    assert len(rows) == 3_600
    names = set(EXCHANGE_WORK_SCHEMA.names)
    table = pa.Table.from_pylist([{k: v for k, v in row.items() if k in names and k not in ("request_ts", "response_ts")}
                                  for row in rows], schema=EXCHANGE_WORK_SCHEMA)
    size = -(-len(rows) // 5)
    everything = pa.concat_tables([contributions(table.slice(i * size, size), {}) for i in range(5)])
    assert pc.sum(pc.is_valid(everything["sketch"])).as_py() == 0  # 720 a piece: values travel as they are
    ordered = everything.take(pc.sort_indices(everything, [(name, "ascending") for name in GROUP_COLUMNS]))
    tables, _ = split_merged(merged_rows(ordered))
    spark = {row["client_id"]: row for row in tables["latency"] if row["dimension"] == "client_id"}
    assert set(spark) == set(cli) == {"client-0", "client-1", "client-2"}
    for client, row in cli.items():
        values = [r["latency_ms"] for r in rows if r["client_id"] == client]
        assert row["count"] == spark[client]["count"] == len(values) == 1_200
        for column, q in (("p50", 50), ("p90", 90), ("p99", 99)):
            assert row[column] == spark[client][column]
            exact = float(np.percentile(values, q))
            assert abs(row[column] - exact) <= TOLERANCE * exact
        assert row["max"] == spark[client]["max"] == max(values)
    # and when each piece holds more than EXACT_LIMIT values, they travel as sketches, with the same result
    big = pa.concat_tables([contributions(table, {})] * 2)
    assert pc.sum(pc.is_valid(big["sketch"])).as_py() > 0
    ordered = big.take(pc.sort_indices(big, [(name, "ascending") for name in GROUP_COLUMNS]))
    tables, _ = split_merged(merged_rows(ordered))
    doubled = {row["client_id"]: row for row in tables["latency"] if row["dimension"] == "client_id"}
    for client in cli:
        values = [r["latency_ms"] for r in rows if r["client_id"] == client] * 2
        assert doubled[client]["p99"] == QuantileSketch.of(values).percentiles(99)[0]


def _one_by_one(values: list) -> QuantileSketch:
    sketch = QuantileSketch()
    for value in values:
        sketch.add(value)
    return sketch


@pytest.mark.parametrize("name", [*adversarial(), "mixed signs, ints and zeros", "at the limit", "past the limit",
                                  "a few", "one", "none"])
def test_of_equals_adding_one_by_one(name):
    """`of` counts many values' buckets at once: the same sketch, sum and
    all, as `add` makes one value at a time."""
    rng = np.random.default_rng(5)
    values = {
        "mixed signs, ints and zeros": [0, -0.0, 3, -7, 0.0, *rng.normal(0, 50, 3_000).tolist(), 12, -2],
        "at the limit": rng.exponential(4.0, EXACT_LIMIT).tolist(),
        "past the limit": rng.exponential(4.0, EXACT_LIMIT + 1).tolist(),
        "a few": [3, 0.5, -1.0, 0.0, 2.5],
        "one": [7.25],
        "none": [],
    }.get(name, adversarial().get(name))
    assert QuantileSketch.of(values).state() == _one_by_one(values).state()
    assert QuantileSketch.of(iter(values)).state() == _one_by_one(values).state()


def test_of_refuses_nan_as_adding_does():
    kept = [2.0, math.nan, 1.0]  # under the limit a NaN is kept as it is, one by one or not
    assert repr(QuantileSketch.of(kept).state()) == repr(_one_by_one(kept).state())  # (nan != nan)
    values = [1.0] * EXACT_LIMIT + [math.nan]
    with pytest.raises(ValueError):
        _one_by_one(values)
    with pytest.raises(ValueError):
        QuantileSketch.of(values)


def test_of_refuses_infinity_as_adding_does():
    values = [1.0] * EXACT_LIMIT + [math.inf]
    with pytest.raises(OverflowError):
        _one_by_one(values)
    with pytest.raises(OverflowError):
        QuantileSketch.of(values)
