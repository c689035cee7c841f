"""The transactions tables against what the producers and consumers reported
(captures/*.manifest.json, written from the clients' own APIs):

- java_transactions_kafka: kafka-clients 4.4.0 on Apache Kafka 4.4.0
  (transactions of KIP-890: partitions added by the Produce requests
  themselves, offsets sent with TxnOffsetCommit alone), commit with offsets,
  abort, commit, a zombie producer fenced by its successor, a read_committed
  consumer;
- transactions_kafka: librdkafka (AddPartitionsToTxn) commit, abort, commit.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from kdissect.forensics import forensic_tables
from tests.support.paths import REPO

CAPTURES = REPO / "captures"


def _manifest(name: str) -> dict:
    return json.loads((CAPTURES / f"{name}.manifest.json").read_text())


@pytest.fixture(scope="module")
def java():
    return forensic_tables([CAPTURES / "java_transactions_kafka.pcap"])[0]


def test_java_transactions_are_those_the_producers_reported(java) -> None:
    reported = [op["result"] for op in _manifest("java_transactions_kafka")["operations"]
                if op["operation"].startswith("transaction ")]
    assert len(reported) == 5
    rows = java.transactions
    # per transactional id, in order: the producers' own accounts
    got = [(r["transactional_id"], r["partitions"], r["records"], r["result"]) for r in rows]
    want = [(t["transactional_id"], t["partitions"], t["records"],
             {"commit": "committed", "abort": "aborted", "fenced": "fenced"}[t["result"]]) for t in reported]
    assert got == want
    offsets = [sorted(f"{k}={v}" for k, v in t["offsets"].items()) for t in reported]
    assert [r["offsets_committed"] for r in rows] == offsets
    assert [r["group_id"] for r in rows] == [t["group"] for t in reported]
    # the zombie: its client saw ProducerFencedException, the broker's EndTxn answer says PRODUCER_FENCED
    zombie = next(t for t in reported if t["result"] == "fenced")
    assert zombie["error"] == "ProducerFencedException"
    fenced = [r for r in rows if r["fenced"]]
    assert len(fenced) == 1 and fenced[0]["end_error"] == "PRODUCER_FENCED" and fenced[0]["client_ids"] == [
        "lab-java-txn-zombie"]
    # KIP-890 producers add partitions implicitly: no AddPartitionsToTxn on the wire
    assert all(r["partitions_added"] == 0 and r["produce_batches"] == r["records"] for r in rows)
    for row in rows:
        assert row["end_ts"] > row["first_ts"] and row["duration_ms"] == (row["end_ts"] - row["first_ts"]) / 1e6
    # the successor took the zombie's producer id with a newer epoch
    by_client = {r["client_ids"][0]: r for r in rows}
    assert by_client["lab-java-txn-successor"]["producer_id"] == by_client["lab-java-txn-zombie"]["producer_id"]
    assert by_client["lab-java-txn-successor"]["producer_epoch"] > by_client["lab-java-txn-zombie"]["producer_epoch"]


def test_java_aborted_batches_are_the_records_the_producers_aborted(java) -> None:
    manifest = _manifest("java_transactions_kafka")
    produced = manifest["produced"]
    aborted = Counter((e["topic"], e["partition"]) for e in produced if e["transaction"] == "aborted")
    committed = Counter((e["topic"], e["partition"]) for e in produced if e["transaction"] == "committed")
    rows = java.transaction_markers
    got_aborted, got_committed, markers = Counter(), Counter(), Counter()
    for row in rows:
        place = (row["topic"], row["partition"])
        got_aborted[place] += row["aborted_records"]
        got_committed[place] += row["committed_records"]
        markers[place, "abort"] += row["abort_markers"]
        markers[place, "commit"] += row["commit_markers"]
        assert row["undecided_batches"] == 0 and row["client_ids"] == ["lab-java-txn-reader"]
        # read_committed answers list each aborted transaction of the producer on that partition
        assert row["aborted_listed"] == row["abort_markers"]
    assert got_aborted == aborted and got_committed == committed
    # one marker per transaction on each partition it wrote to
    transactions = [op["result"] for op in manifest["operations"] if op["operation"].startswith("transaction ")]
    want = Counter()
    for txn in transactions:
        for part in txn["partitions"]:
            topic, _, partition = part.rpartition("-")
            want[(topic, int(partition)), "commit" if txn["result"] == "commit" else "abort"] += 1
    assert markers == want
    # the read_committed consumer received exactly the committed records
    reader = next(op["result"] for op in manifest["operations"] if "read_committed" in op["operation"])
    assert reader["received"] == sum(committed.values()) == len(manifest["consumed"])


def test_librdkafka_transactions_add_partitions_explicitly() -> None:
    tables = forensic_tables([CAPTURES / "transactions_kafka.pcap"])[0]
    produced = [e for e in _manifest("transactions_kafka")["produced"] if e.get("transaction")]
    # the producer's transactions in order: consecutive records of one outcome (commit 4, abort 3, commit 2)
    runs: list[list] = []
    for entry in produced:
        if runs and runs[-1][0] == entry["transaction"]:
            runs[-1][1] += 1
        else:
            runs.append([entry["transaction"], 1])
    rows = tables.transactions
    assert [(r["result"], r["records"]) for r in rows] == [(kind, n) for kind, n in runs]
    assert all(r["partitions_added"] == 1 and not r["fenced"] and r["end_error"] is None for r in rows)
    aborted = sum(1 for e in produced if e["transaction"] == "aborted")
    assert sum(r["aborted_records"] for r in tables.transaction_markers) == aborted
