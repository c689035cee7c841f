"""`kdissect report OUTDIR` on the tables of the Spark job (local mode) over
the bundled captures: the page draws from the tables alone, its numbers equal
`kdissect stats --json` for the same captures, and its data equals the
capture path's wherever the tables can give the same thing."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from kdissect.cli import main as cli_main
from tests.support.chromium import chromium_path, visit
from tests.support.spark import local_session
from tests.report.test_report import (ALL_CHARTS, CAPTURES, DONE, KEYLOGS, PORTS, assert_clean_visit,
                               assert_numbers_equal_stats, assert_self_contained, assert_time_labels, kdissect,
                               numbers_of)

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]


@pytest.fixture(scope="module")
def spark_outdir(tmp_path_factory) -> Path:
    from kdissect.spark.job import JobOptions, run_job

    outdir = tmp_path_factory.mktemp("spark-report") / "tables"
    keylogs = tuple(KEYLOGS[1::2])
    with local_session(cores=2, shuffle_partitions=4) as spark:
        run_job(JobOptions(inputs=[str(CAPTURES)], outdir=str(outdir), master=None, ports=(9092, 19092),
                           tls_keylogs=keylogs), spark=spark)
    return outdir


def test_page_from_spark_tables(spark_outdir, tmp_path):
    if chromium_path() is None:
        pytest.fail("chromium is not installed: run tools/setup.sh (it installs Debian's chromium)")
    out = tmp_path / "report.html"
    assert cli_main(["report", str(spark_outdir), "-q", "-o", str(out)]) == 0
    result = visit(out.as_uri(), tmp_path, done_js=DONE, width=1200, timeout=90)
    page = numbers_of(result.dom)
    assert_clean_visit(result, out.as_uri(), page, ALL_CHARTS)
    assert_self_contained(out.read_text(encoding="utf-8"))
    assert_time_labels(result.dom)  # 24-hour labels of one format (no `11 AM` among them)
    stats = kdissect("stats", str(CAPTURES), *PORTS, *KEYLOGS, "--json")
    assert stats.returncode == 0, stats.stderr
    assert_numbers_equal_stats(page, json.loads(stats.stdout), len(list(CAPTURES.rglob("*.pcap"))))


def test_same_data_as_the_capture_path(spark_outdir):
    """With one-minute buckets (the Spark tables' grain) the capture path and
    the Spark path give the same report data, but for the latency time
    series' p50 and max, which the timeseries table does not hold."""
    from kdissect.shared.inputs import expand_inputs
    from kdissect.report import from_captures, from_spark_outdir

    paths, _skipped = expand_inputs([str(CAPTURES)])
    keylogs = KEYLOGS[1::2]
    direct = from_captures(paths, (9092, 19092), tls_keylogs=keylogs, min_width=60)
    tables = from_spark_outdir(spark_outdir)
    assert tables["source"]["kind"] == "spark" and direct["source"]["kind"] == "captures"
    for key, value in direct["stats"].items():
        other = tables["stats"][key]
        if key == "partition_errors":  # same rows; ties in the counts may come in another order
            value, other = (Counter(json.dumps(r, sort_keys=True) for r in v) for v in (value, other))
        assert other == value, key
    for key, value in direct["report"].items():
        other = tables["report"][key]
        if key == "timeline":
            assert other["latency_basis"] != value["latency_basis"]
            # p99 of a wider bucket: the capture path's is exact, the tables' is the highest minute p99 in
            # it, which cannot exceed the bucket's largest latency
            for mine, theirs in zip(value["rows"], other["rows"]):
                if "p99" in theirs:
                    assert theirs["p99"] <= mine["max"]
            drop = ("p50", "max") if direct["report"]["bucket_seconds"] == 60 else ("p50", "p99", "max")
            value = {**value, "latency_basis": None,
                     "rows": [{k: v for k, v in r.items() if k not in drop} for r in value["rows"]]}
            other = {**other, "latency_basis": None,
                     "rows": [{k: v for k, v in r.items() if k not in drop} for r in other["rows"]]}
        assert other == value, key
    assert direct["report"]["bucket_seconds"] >= 60
