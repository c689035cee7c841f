"""`--broker-log` in the Spark job: the same per-exchange columns as the
single process (the CLI's values are themselves checked against the log and
tshark in test_brokerlog.py), the same accounting, the broker_* tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kdissect.spark.job import JobOptions, run_job
from tests.support.spark import local_session, table_rows
from tests.conn.test_brokerlog_join import PLAIN, export_rows, kdissect, manifest

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

COLUMNS = ("broker_log", "broker_total_ms", "broker_request_queue_ms", "broker_local_ms", "broker_remote_ms",
           "broker_throttle_ms", "broker_response_queue_ms", "broker_send_ms", "network_ms", "principal",
           "security_protocol", "listener")


def test_spark_join_matches_the_cli(tmp_path: Path) -> None:
    port = manifest(PLAIN)["port"]
    outdir = tmp_path / "out"
    with local_session(cores=2, shuffle_partitions=4) as spark:
        result = run_job(JobOptions(inputs=[str(PLAIN / "capture.pcap")], outdir=str(outdir), master=None,
                                    ports=(port,), broker_logs=(str(PLAIN),)), spark=spark)
    cli_rows, _ = export_rows(PLAIN, PLAIN, tmp_path=tmp_path)
    spark_rows = table_rows(outdir, "exchanges")
    key = lambda r: (r["client"], r["correlation_id"], r["api_key"])  # noqa: E731
    cli = {key(r): r for r in cli_rows}
    assert len(spark_rows) == len(cli_rows)
    for row in spark_rows:
        expected = cli[key(row)]
        for column in COLUMNS:
            if isinstance(expected[column], float):
                assert row[column] == pytest.approx(expected[column], abs=1e-9), (key(row), column)
            else:
                assert row[column] == expected[column], (key(row), column)
    accounting = result.manifest["broker_log"]
    cli_accounting = json.loads(kdissect("stats", str(PLAIN / "capture.pcap"), "-p", str(port), "--broker-log",
                                         str(PLAIN), "--json").stdout)["broker_log"]["accounting"]
    for name in ("lines", "request_lines", "other_lines", "bad_lines", "exchanges", "joined", "log_only",
                 "capture_only"):
        assert accounting[name] == cli_accounting[name], name
    latency = table_rows(outdir, "broker_latency")
    assert {r["by"] for r in latency} == {"api", "client", "broker"}
    principals = table_rows(outdir, "broker_principals")
    assert any(r["client_id"] == "bl-librdkafka" and r["principal"] == "User:ANONYMOUS" for r in principals)
    unmatched = table_rows(outdir, "broker_unmatched")
    assert sum(r["count"] for r in unmatched if r["side"] == "log_only") == sum(accounting["log_only"].values())
    # the report drawn from the OUTDIR has the same tables
    from kdissect.report.page import render
    from kdissect.report.spark_tables import read_outdir

    data = read_outdir(outdir)
    assert data["stats"]["broker_log"]["accounting"]["joined"] == accounting["joined"]
    page = render(data, javascript="")
    for name in ("latency_decomposition", "principals", "unmatched"):
        assert f'data-table="broker_log.{name}"' in page
