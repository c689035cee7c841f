"""Share groups (issue 28, section 2) on Apache Kafka 4.4.0 with the Java
KafkaShareConsumer of kafka-clients 4.4.0 (`share_acks_kafka`,
tools/lab/sharegroups.py): a consumer releases every third record and
accepts the rest, another gets the released records again and rejects the
even offsets; and `share_timeout_kafka`: with 2 s acquisition locks, a
consumer holds its records unacknowledged until their locks expire and
another gets them again; and `share_acks_franz_go_kafka`, the same
release-then-reject acknowledgements from franz-go v1.22.3's share consumer
(tools/lab/go/share.go), so the tables are checked on a second, non-Java
client.

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
from tests.support.paths import REPO

CAPTURES = REPO / "captures"
NAME = "share_acks_kafka"
PCAP = CAPTURES / f"{NAME}.pcap"
NAMES = ("share_acks_kafka", "share_timeout_kafka", "share_acks_franz_go_kafka")
ACKS = {"accept": "accepted", "release": "released", "reject": "rejected"}


def _manifest(name: str = NAME) -> dict:
    return json.loads((CAPTURES / f"{name}.manifest.json").read_text())


def _tables(name: str = NAME):
    tables, accounting = forensic_tables([CAPTURES / f"{name}.pcap"])
    assert accounting.balance() == []
    return tables


def _expected_lock_timeouts(deliveries: list[dict]) -> int:
    """Deliveries of an offset after its first, less the releases of it the
    consumers report: deliveries the broker made because a lock expired."""
    by_offset: dict[tuple, list[dict]] = {}
    for d in deliveries:
        by_offset.setdefault((d["topic"], d["partition"], d["offset"]), []).append(d)
    return sum(max(0, len(ds) - 1 - sum(d["acknowledged"] == "release" for d in ds)) for ds in by_offset.values())


@pytest.mark.parametrize("name", NAMES)
def test_the_partition_row_agrees_with_what_the_consumers_received_and_acknowledged(name: str) -> None:
    manifest = _manifest(name)
    deliveries = manifest["consumed"]
    (row,) = _tables(name).share_groups
    (topic,) = {(d["group"], d["topic"], d["partition"]) for d in deliveries}
    assert (row["group_id"], row["topic"], row["partition"]) == topic
    assert row["acquired"] == len(deliveries)
    assert row["redelivered"] == sum(d["delivery_count"] > 1 for d in deliveries)
    counts = Counter(ACKS[d["acknowledged"]] for d in deliveries)
    for column in ("accepted", "released", "rejected", "renewed"):
        assert row[column] == counts.get(column, 0), column
    assert row["members"] == len({d["client_id"] for d in deliveries})
    assert row["lock_timeouts"] == _expected_lock_timeouts(deliveries)
    # the consumers' commitSync saw no refusal
    commits = [op["result"]["commit"] for op in manifest["operations"] if "commit" in op.get("result", {})]
    assert all("acknowledged" in c if isinstance(c, str) else all(a.endswith("=ok") for a in c) for c in commits)
    assert row["ack_errors"] == []
    if name.startswith("share_acks_"):  # the lab did release and reject, and no lock expired
        assert counts["released"] and counts["rejected"] and row["lock_timeouts"] == 0
    else:  # every record's lock expired once in the holder's hands
        assert row["lock_timeouts"] == row["redelivered"] == len(deliveries) // 2 > 0


def _tshark_heartbeats(name: str) -> Counter:
    out = subprocess.run(["tshark", "-n", "-r", str(CAPTURES / f"{name}.pcap"), "-d", "tcp.port==9092,kafka", "-Y",
                          "kafka.api_key == 76", "-T", "fields", "-e", "kafka.client_id"],
                         capture_output=True, text=True, check=True).stdout
    return Counter(line for line in out.splitlines() if line)


@pytest.mark.parametrize("name", NAMES)
def test_member_rows_agree_with_each_consumer(name: str) -> None:
    deliveries = _manifest(name)["consumed"]
    operations = {op["result"]["client_id"]: op["result"] for op in _manifest(name)["operations"]
                  if isinstance(op["result"], dict) and "client_id" in op["result"]}
    members = {tuple(row["client_ids"]): row for row in _tables(name).share_group_members}
    heartbeats = _tshark_heartbeats(name)
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
