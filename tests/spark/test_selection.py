"""The Spark job with a selection keeps the rows the CLI keeps, and its
summary tables are `kdissect stats`'s over the same selection (real
captures; the CLI's export without a filter is the reference for the rows,
checked by a hand-written predicate)."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kdissect.spark.job import JobOptions, run_job
from tests.support.pcaps import epoch_ns, tshark_output
from tests.support.spark import canonical, export_rows, table_rows
from tests.support.paths import REPO

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

CAPTURES = [REPO / "captures" / "consume_group_kafka.pcap", REPO / "captures" / "admin_kafka.pcap"]
FILTER = 'service_ms > 3 or error_codes contains "MEMBER_ID_REQUIRED" or status == "no_response"'


def _kept(row: dict) -> bool:
    service = row["service_ms"]
    return (service is not None and service > 3) or 79 in (row["error_codes"] or ()) or row["status"] == "no_response"


def _ns(when: dt.datetime) -> int:
    return (when - dt.datetime(1970, 1, 1, tzinfo=when.tzinfo)) // dt.timedelta(microseconds=1) * 1000


def test_spark_keeps_the_rows_and_stats_of_the_cli(spark, tmp_path) -> None:
    outdir = tmp_path / "out"
    result = run_job(JobOptions(inputs=[str(p) for p in CAPTURES], outdir=str(outdir), master=None,
                                display_filter=FILTER, time_from="+0.2s"), spark=spark)
    everything = export_rows(CAPTURES, tmp_path / "all.parquet")
    # the capture set's first packet, as tshark times it; +0.2 s after it
    start = min(epoch_ns(tshark_output(p, ["-c", "1", "-T", "fields", "-e", "frame.time_epoch"]).strip())
                for p in CAPTURES)
    wanted = [r for r in everything if _kept(r) and _ns(r["request_ts"] or r["response_ts"]) >= start + 200_000_000]
    cli = subprocess.run([sys.executable, "-m", "kdissect", "export", *map(str, CAPTURES), "-o",
                          str(tmp_path / "kept.parquet"), "-q", "-Y", FILTER, "--from", "+0.2s"], cwd=REPO)
    assert cli.returncode == 0
    import pyarrow.parquet as pq

    kept_cli = pq.read_table(tmp_path / "kept.parquet").to_pylist()
    assert 0 < len(kept_cli) < len(everything)
    # the Spark rows are the CLI's (stream numbers are the capture set's in both)
    assert canonical(table_rows(outdir, "exchanges")) == canonical(kept_cli)
    assert canonical(wanted) == canonical(kept_cli)
    assert result.manifest["selection"]["filter"] == FILTER
    assert result.manifest["accounting"]["exchanges"] == len(everything)
    assert f"selection: {len(kept_cli)} of {len(everything)} exchanges kept" in result.summary

    stats = json.loads(subprocess.run([sys.executable, "-m", "kdissect", "stats", "--json", *map(str, CAPTURES),
                                       "-Y", FILTER, "--from", "+0.2s"], cwd=REPO, capture_output=True,
                                      text=True).stdout)
    latency = {(r["api_name"], r["api_version"]): r for r in table_rows(outdir, "latency") if r["dimension"] == "api"}
    assert set(latency) == {(r["api"], r["version"]) for r in stats["latency_by_api"]}
    for row in stats["latency_by_api"]:
        spark_row = latency[(row["api"], row["version"])]
        for name in ("count", "p50", "p90", "p99", "max", "waits", "service_count", "service_p50"):
            assert spark_row[name] == pytest.approx(row[name], rel=1e-12, nan_ok=True), name
    assert {(r["client_id"], r["error_name"]): r["exchanges"] for r in table_rows(outdir, "errors_by_client")} == \
        {(r["client_id"], r["error"]): r["exchanges"] for r in stats["errors_by_client"]}
    normal = {r["error_name"]: r["normal_flow"] for r in table_rows(outdir, "errors")}
    assert normal == {r["error"]: r["normal_flow"] for r in stats["error_codes"]}

    # the report of this OUTDIR says, at its top, what the job selected and how many rows of how many it kept
    from kdissect.cli import main as cli_main

    page_path = tmp_path / "report.html"
    assert cli_main(["report", str(outdir), "-q", "-o", str(page_path)]) == 0
    page = page_path.read_text(encoding="utf-8")
    head = page[page.index('<section id="selection"'):page.index("<nav>")]
    assert f'data-kept="{len(kept_cli)}" data-of="{len(everything)}"' in head
    assert f"This page shows {len(kept_cli)} of {len(everything)} exchanges" in head
    start_text = dt.datetime.fromtimestamp((start + 200_000_000) // 10**9, dt.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S") + f".{(start + 200_000_000) % 10**9:09d}Z"
    assert f'<code class="value">{start_text}</code>' in head
    assert '<code class="value">service_ms &gt; 3 or error_codes contains &quot;MEMBER_ID_REQUIRED&quot; or ' \
           'status == &quot;no_response&quot;</code>' in head


def test_spark_group_selection_keeps_the_cli_rows(spark, tmp_path) -> None:
    outdir = tmp_path / "out"
    run_job(JobOptions(inputs=[str(CAPTURES[0])], outdir=str(outdir), master=None, groups=("lab-group-ck",)),
            spark=spark)
    cli = subprocess.run([sys.executable, "-m", "kdissect", "export", str(CAPTURES[0]), "-o",
                          str(tmp_path / "kept.parquet"), "-q", "--group", "lab-group-ck"], cwd=REPO)
    assert cli.returncode == 0
    import pyarrow.parquet as pq

    kept = pq.read_table(tmp_path / "kept.parquet").to_pylist()
    assert kept and {r["api_name"] for r in kept} >= {"JoinGroup", "SyncGroup", "OffsetCommit"}
    assert canonical(table_rows(outdir, "exchanges")) == canonical(kept)
    from kdissect.report import from_spark_outdir

    said = from_spark_outdir(outdir)["selection"]
    assert said["applied"] == [{"option": "--group", "what": "groups", "value": "lab-group-ck"}]
    assert said["exchanges"] == len(kept)


TOPIC_BY_ID = [(REPO / "captures" / "java_clients_4_4_kafka.pcap", "java-orders"),
               (REPO / "captures" / "go_clients_kafka.pcap", "go-orders")]


@pytest.mark.parametrize("capture,topic", TOPIC_BY_ID, ids=[c.stem for c, _ in TOPIC_BY_ID])
def test_spark_topic_selection_keeps_the_cli_rows(spark, tmp_path, capture, topic) -> None:
    """Kafka 4.4 captures whose Fetch (v17+) names topics by id only: the
    Spark rows of --topic are the CLI's, the fetches by id among them, and
    the forensic tables of the selection are the CLI's."""
    outdir = tmp_path / "out"
    result = run_job(JobOptions(inputs=[str(capture)], outdir=str(outdir), master=None, topics=(topic,)), spark=spark)
    cli = subprocess.run([sys.executable, "-m", "kdissect", "export", str(capture), "-o",
                          str(tmp_path / "kept.parquet"), "-q", "--topic", topic], cwd=REPO)
    assert cli.returncode == 0
    import pyarrow.parquet as pq

    kept = pq.read_table(tmp_path / "kept.parquet").to_pylist()
    everything = export_rows([capture], tmp_path / "all.parquet")
    fetches = [r for r in kept if r["api_name"] == "Fetch" and r["api_version"] >= 17]
    assert fetches and 0 < len(kept) < len(everything)
    # (Fetch v13+ names topics by id only, per the spec: kept because the id was named capture-wide)
    assert canonical(table_rows(outdir, "exchanges")) == canonical(kept)
    assert result.manifest["selection"]["topics"] == [topic]
    groups = json.loads(subprocess.run([sys.executable, "-m", "kdissect", "stats", "--json", str(capture), "--topic",
                                        topic], cwd=REPO, capture_output=True, text=True).stdout)
    assert [(r["group_id"], r["topic"], r["partition"], r["committed_offset"]) for r in table_rows(outdir, "group_lag")] \
        == [(r["group_id"], r["topic"], r["partition"], r["committed_offset"]) for r in groups["group_lag"]]
