"""Share groups (issue 28, section 2) on Apache Kafka 4.4.0 with the Java
KafkaShareConsumer of kafka-clients 4.4.0 (`share_acks_kafka`,
tools/lab/sharegroups.py): a consumer releases every third record and
accepts the rest, another gets the released records again and rejects the
even offsets.

Expected values come from the consumers' manifest (every delivery with its
delivery count and how it was acknowledged) and from tshark (heartbeat
requests per client id), never from kdissect; the faces (the command's
Parquet, `stats --json`, the Python API, the Spark job) must give the same
rows.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kdissect.forensics import forensic_tables

CAPTURES = Path(__file__).resolve().parent.parent / "captures"
NAME = "share_acks_kafka"
PCAP = CAPTURES / f"{NAME}.pcap"
ACKS = {"accept": "accepted", "release": "released", "reject": "rejected"}


def _manifest() -> dict:
    return json.loads((CAPTURES / f"{NAME}.manifest.json").read_text())


def _tables():
    tables, accounting = forensic_tables([PCAP])
    assert accounting.balance() == []
    return tables


def test_the_partition_row_agrees_with_what_the_consumers_received_and_acknowledged() -> None:
    deliveries = _manifest()["consumed"]
    assert len(deliveries) == 16
    (row,) = _tables().share_groups
    assert (row["group_id"], row["topic"], row["partition"]) == ("lab-share-acks", "share-acks", 0)
    assert row["acquired"] == len(deliveries)
    assert row["redelivered"] == sum(d["delivery_count"] > 1 for d in deliveries)
    counts = Counter(ACKS[d["acknowledged"]] for d in deliveries)
    assert counts["released"] and counts["rejected"]  # the lab did release and reject
    for column in ("accepted", "released", "rejected", "renewed"):
        assert row[column] == counts.get(column, 0), column
    assert row["members"] == len({d["client_id"] for d in deliveries})
    # every redelivery follows a release the capture holds: no lock expired
    assert row["lock_timeouts"] == 0 and row["ack_errors"] == []


def _tshark_heartbeats() -> Counter:
    out = subprocess.run(["tshark", "-n", "-r", str(PCAP), "-d", "tcp.port==9092,kafka", "-Y",
                          "kafka.api_key == 76", "-T", "fields", "-e", "kafka.client_id"],
                         capture_output=True, text=True, check=True).stdout
    return Counter(line for line in out.splitlines() if line)


def test_member_rows_agree_with_each_consumer() -> None:
    deliveries = _manifest()["consumed"]
    operations = {op["result"]["client_id"]: op["result"] for op in _manifest()["operations"]
                  if isinstance(op["result"], dict) and "client_id" in op["result"]}
    members = {tuple(row["client_ids"]): row for row in _tables().share_group_members}
    heartbeats = _tshark_heartbeats()
    assert set(members) == {(client_id,) for client_id in operations}
    for client_id, reported in operations.items():
        row = members[(client_id,)]
        mine = [d for d in deliveries if d["client_id"] == client_id]
        assert row["acquired"] == len(mine) == reported["received"]
        assert (row["accepted"], row["released"], row["rejected"]) == \
            (reported["accepted"], reported["released"], reported["rejected"])
        assert row["partitions"] == sorted({f"{d['topic']}-{d['partition']}" for d in mine})
        assert row["heartbeats"] == heartbeats[client_id] and row["leaves"] == 1  # each closed its consumer
        assert row["heartbeat_gap_min_ms"] <= row["heartbeat_gap_mean_ms"] <= row["heartbeat_gap_max_ms"]
        assert row["heartbeat_interval_ms"] == 5000  # Kafka's group.share.heartbeat.interval.ms default
        assert row["session_opens"] >= 1 and row["session_resets"] == 0 and row["session_errors"] == []


def _run(args: list[str]) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "kdissect", *args], capture_output=True, text=True,
                          cwd=CAPTURES.parent)
    assert done.returncode == 0, done.stderr
    return done


def _plain(rows: list[dict]) -> list[dict]:
    return json.loads(json.dumps(rows, default=str))


def test_every_face_gives_the_same_rows(tmp_path) -> None:
    tables = _tables()
    stats = json.loads(_run(["stats", "--json", str(PCAP)]).stdout)
    for table in ("share_groups", "share_group_members"):
        expected = tables.table(table)
        assert expected
        assert stats[table] == _plain(expected), table
        target = tmp_path / f"{table}.parquet"
        _run(["groups", str(PCAP), "--table", table, "-o", str(target), "-q"])
        written = pq.read_table(target).to_pylist()
        assert len(written) == len(expected)
        assert [row["acquired"] for row in written] == [row["acquired"] for row in expected]
    text = _run(["groups", str(PCAP), "--table", "share_groups"]).stdout
    assert "share-acks" in text and "lab-share-acks" in text


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")
def test_spark_writes_the_same_share_tables(tmp_path) -> None:
    from kdissect.cli import main
    from kdissect.spark.job import JobOptions, run_job
    from tests.support.spark import local_session, table_rows

    with local_session(cores=2, shuffle_partitions=4) as spark:
        run_job(JobOptions(inputs=[str(PCAP)], outdir=str(tmp_path / "spark"), master=None), spark=spark)
    for table in ("share_groups", "share_group_members"):
        target = tmp_path / f"{table}.parquet"
        assert main(["groups", str(PCAP), "--table", table, "-o", str(target), "-q"]) == 0
        assert table_rows(tmp_path / "spark", table) == pq.read_table(target).to_pylist(), table
