"""The lake queries that kdissect/spark/README.md shows (Spark SQL and DuckDB
over the `capture_date=`-partitioned exchanges table), taken from the README
text and run against a real OUTDIR that the job wrote from bundled captures
of three days. Each answer is checked against `kdissect export` of the same
captures (the CLI path, independent of Spark and of the partitioning).

Only the store prefix and the example day are swapped for the test's OUTDIR
and one of the captures' days; the rest of each query runs as printed.
(The pyarrow dataset query is run on S3 in tests/spark/test_stores.py.)
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from pathlib import Path

import pytest

from kdissect.spark.job import JobOptions, run_job
from tests.support.spark import REPO, export_rows

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

README = REPO / "kdissect" / "spark" / "README.md"
EXAMPLE_DAY = "2026-11-20"  # the day the README's queries name
# two captures of each of three days (the first packets' UTC dates, checked below)
CAPTURES = ["admin.pcap", "consume_group.pcap", "admin_kafka.pcap", "consume_group_kafka.pcap",
            "go_clients_kafka.pcap", "java_transactions_kafka.pcap"]


def readme_query(engine: str) -> str:
    """The SQL block of the README whose first comment line names `engine`."""
    blocks = re.findall(r"```sql\n(.*?)```", README.read_text(), re.S)
    found = [block for block in blocks if block.startswith(f"-- {engine} ")]
    assert len(found) == 1, f"the README shows {len(found)} {engine} queries, expected one"
    return found[0]


def localized(query: str, lake_prefix: str, outdir: Path, day: str) -> str:
    """The query pointed at the local OUTDIR and at `day`; fails when the README
    no longer names the prefix or the day it is written for."""
    assert lake_prefix in query and EXAMPLE_DAY in query, query
    return query.replace(lake_prefix, outdir.as_uri() if "://" in lake_prefix else str(outdir)) \
        .replace(EXAMPLE_DAY, day)


@pytest.fixture(scope="module")
def lake(spark, captures_dir, tmp_path_factory):
    """OUTDIR written by the job, and `kdissect export`'s rows of the same captures."""
    work = tmp_path_factory.mktemp("lake")
    captures = [captures_dir / name for name in CAPTURES]
    outdir = work / "out"
    run_job(JobOptions(inputs=[str(p) for p in captures], outdir=str(outdir), master=None, split_size=16384),
            spark=spark)
    assert (outdir / "_SUCCESS").exists()
    return outdir, export_rows(captures, work / "export.parquet")


def _day(row: dict) -> str | None:
    """The partition rule as the README states it: the request's UTC date, else the response's."""
    when = row["request_ts"] or row["response_ts"]
    return when.strftime("%Y-%m-%d") if when else None


def _busiest_day(rows: list[dict]) -> str:
    days = defaultdict(int)
    for row in rows:
        days[_day(row)] += 1
    assert len([d for d in days if d]) >= 3, f"the captures span {sorted(filter(None, days))}, expected three days"
    return max((d for d in days if d), key=lambda d: days[d])


def _percentile(values: list[float], fraction: float) -> float:
    """Linear interpolation between the closest ranks (Spark's exact `percentile`)."""
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def test_readme_spark_sql_query_answers_as_export(spark, lake):
    outdir, exported = lake
    day = _busiest_day(exported)
    query = localized(readme_query("Spark SQL"), "s3a://bucket/kafka", outdir, day)
    got = {row[0]: row[1] for row in spark.sql(query).collect()}

    latencies: dict[str | None, list[float]] = defaultdict(list)
    for row in exported:
        if _day(row) == day:
            latencies[row["api_name"]]  # every API of the day is a group, even one without a latency
            if row["latency_ms"] is not None and not math.isnan(row["latency_ms"]):
                latencies[row["api_name"]].append(row["latency_ms"])
    expected = {api: (_percentile(values, 0.99) if values else None) for api, values in latencies.items()}
    assert len(expected) >= 3 and set(got) == set(expected)
    for api, value in expected.items():
        assert (got[api] is None) == (value is None), api
        if value is not None:
            assert got[api] == pytest.approx(value, rel=1e-9, abs=1e-9), api


def test_readme_duckdb_query_answers_as_export(lake):
    import duckdb  # the dev extra

    outdir, exported = lake
    day = _busiest_day(exported)
    query = localized(readme_query("DuckDB"), "s3://bucket/kafka", outdir, day)
    got = dict(duckdb.connect().execute(query).fetchall())

    expected: dict[str | None, int] = defaultdict(int)
    for row in exported:
        if _day(row) == day:
            expected[row["api_name"]] += 1
    assert len(expected) >= 3 and got == dict(expected)
    # the filter prunes by partition: the other days' rows are there but not counted
    everything = duckdb.connect().execute(
        f"SELECT count(*) FROM read_parquet('{outdir}/exchanges/*/*.parquet', hive_partitioning = true)").fetchone()
    assert everything[0] == len(exported) > sum(expected.values())
