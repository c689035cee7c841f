"""`kdissect report OUTDIR` on the tables of the Spark job (local mode) over
the bundled captures: the page draws from the tables alone, its numbers equal
`kdissect stats --json` for the same captures, and its data equals the
capture path's wherever the tables can give the same thing."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from kdissect.cli import main as cli_main
from tests.support.chromium import chromium_path, visit
from tests.support.spark import local_session
from tests.report.test_report import (ALL_CHARTS, CAPTURES, DONE, KEYLOGS, PORTS, assert_clean_visit,
                               assert_numbers_equal_stats, assert_self_contained, assert_time_labels, chart_text,
                               kdissect, numbers_of)

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
    """The capture path and the Spark path give the same report data: the
    same time buckets (the same bucket rule, kdissect.report.collect) and the
    same latency percentiles per bucket, read from the exchanges table."""
    from kdissect.shared.inputs import expand_inputs
    from kdissect.report import from_captures, from_spark_outdir

    paths, _skipped = expand_inputs([str(CAPTURES)])
    keylogs = KEYLOGS[1::2]
    direct = from_captures(paths, (9092, 19092), tls_keylogs=keylogs)
    tables = from_spark_outdir(spark_outdir)
    assert tables["source"]["kind"] == "spark" and direct["source"]["kind"] == "captures"
    for key, value in direct["stats"].items():
        other = tables["stats"][key]
        if key == "partition_errors":  # same rows; ties in the counts may come in another order
            value, other = (Counter(json.dumps(r, sort_keys=True) for r in v) for v in (value, other))
        assert other == value, key
    for key, value in direct["report"].items():
        assert tables["report"][key] == value, key


# -- a 20 s capture: one-second buckets from either path ---------------------------------

SHORT = CAPTURES / "forensics_kafka.pcap"  # 20.47 s between its first and last packet (capinfos)


@pytest.fixture(scope="module")
def short_outdir(tmp_path_factory) -> Path:
    from kdissect.spark.job import JobOptions, run_job

    outdir = tmp_path_factory.mktemp("spark-short") / "tables"
    with local_session(cores=2, shuffle_partitions=4) as spark:
        run_job(JobOptions(inputs=[str(SHORT)], outdir=str(outdir), master=None), spark=spark)
    return outdir


def _marks_x(dom: str, chart: str) -> set[float]:
    """The x positions of the symbols Chromium drew in one chart's SVG."""
    import re

    figure = re.search(rf'<figure[^>]*data-chart="{chart}".*?</figure>', dom, re.S)
    assert figure, chart
    symbols = re.findall(r'<g[^>]*class="mark-symbol role-mark[^"]*"[^>]*>(.*?)</g>', figure.group(0), re.S)
    return {round(float(x), 1) for group in symbols for x in re.findall(r'translate\(([-\d.]+),', group)}


def test_a_short_capture_is_charted_per_second_from_both_paths(short_outdir, tmp_path):
    """forensics_kafka.pcap spans 20 s: from the capture and from the Spark
    OUTDIR of it the latency over time has one-second buckets, a point per
    second with answered exchanges of the charted APIs (counted here from
    the export's rows),
    drawn at as many places in Chromium, with 24-hour HH:MM:SS labels."""
    if chromium_path() is None:
        pytest.fail("chromium is not installed: run tools/setup.sh (it installs Debian's chromium)")
    import datetime as dt

    export = kdissect("export", str(SHORT), "-q")
    assert export.returncode == 0, export.stderr
    rows = [json.loads(line) for line in export.stdout.splitlines()]
    # the chart draws the 8 busiest APIs (kdissect.report.collect.TOP_APIS), the rest summed without latency
    busiest = Counter(row["api_name"] or "unknown" for row in rows)
    shown = {api for api, _n in sorted(busiest.items(), key=lambda item: (-item[1], item[0]))[:8]}
    seconds = set()
    for row in rows:
        when = row["request_ts"] if row["request_ts"] is not None else row["response_ts"]
        if row["api_name"] in shown and row["latency_ms"] is not None and row["latency_ms"] > 0:
            seconds.add(int(when // 1) if isinstance(when, (int, float)) else
                        int(dt.datetime.fromisoformat(when.replace("Z", "+00:00")).timestamp()))
    assert len(seconds) > 10  # the capture's exchanges spread over many seconds
    for name, source in (("captures", str(SHORT)), ("spark", str(short_outdir))):
        out = tmp_path / f"{name}.html"
        assert cli_main(["report", source, "-q", "-o", str(out)]) == 0
        result = visit(out.as_uri(), tmp_path, done_js=DONE, width=1200, timeout=90)
        page = numbers_of(result.dom)
        assert page.figures["latency_over_time"].get("data-rendered") == "true", name
        assert_time_labels(result.dom)
        labels = [label for axis, found in chart_text(result.dom).axes["latency_over_time"].items()
                  if axis.startswith("X-axis") for label in found]
        assert labels and all(re.fullmatch(r"\d\d:\d\d:\d\d", label) for label in labels), (name, labels)
        assert len(_marks_x(result.dom, "latency_over_time")) == len(seconds), name
    from kdissect.report import from_captures, from_spark_outdir

    direct, tables = from_captures([SHORT]), from_spark_outdir(short_outdir)
    assert direct["report"]["bucket_seconds"] == tables["report"]["bucket_seconds"] == 1
    assert tables["report"]["timeline"] == direct["report"]["timeline"]


def test_an_outdir_without_the_forensic_tables(tmp_path):
    """A job run with --no-forensic-tables: the report reads it, with empty
    topic, group and client tables, and its other data is the capture
    path's (a 20 s capture with producers, consumers and groups)."""
    from kdissect.forensics.tables import STATS_TABLES, TABLE_COLUMNS
    from kdissect.report import from_captures, from_spark_outdir
    from kdissect.spark.job import JobOptions, run_job

    outdir = tmp_path / "tables"
    with local_session(cores=1, shuffle_partitions=2) as spark:
        run_job(JobOptions(inputs=[str(SHORT)], outdir=str(outdir), master=None, forensic_tables=False), spark=spark)
    tables = from_spark_outdir(outdir)
    direct = from_captures([str(SHORT)], (9092,))
    forensic = set(TABLE_COLUMNS) - set(STATS_TABLES)
    assert any(direct["stats"][name] for name in forensic)  # the capture has rows the job left out
    for key, value in direct["stats"].items():
        if key in forensic:
            assert tables["stats"][key] == [], key
        elif key == "partition_errors":
            assert Counter(json.dumps(r, sort_keys=True) for r in tables["stats"][key]) == \
                Counter(json.dumps(r, sort_keys=True) for r in value)
        elif key not in ("rebalance_storms", "member_rejoins", "metadata_storms", "unresolved_topic_ids",
                         "topic_id_conflicts"):  # the forensic tables' flags
            assert tables["stats"][key] == value, key
    out = tmp_path / "report.html"
    assert cli_main(["report", str(outdir), "-q", "-o", str(out)]) == 0
