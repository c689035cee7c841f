"""`kdissect stats` and `report` keep only what their tables read
(kdissect.stats.tables.COLLECT_KEEPS: the decoded responses that carry error
codes, and the forensic APIs' messages, as the Spark job's read tasks do).
Their tables, `stats --json`'s whole object, are the same as with every
message decoded by the full decoder: on bundled captures with per-partition
errors (in APIs the forensic tables read and in others), throttling, transactions, share groups and records in every codec,
and on damaged copies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kdissect.conn.pipeline import Analysis
from kdissect.stats.tables import COLLECT_KEEPS, as_dict, collect
from tests.support import impair
from tests.support.paths import REPO
from tests.support.pipeline import ports_of

CAPTURES = ("partition_errors_kafka", "unknown_topic_kafka", "unknown_topic", "forensics_kafka", "quota_kafka", "throttle_old_kafka3",
            "java_transactions_kafka", "share_acks_kafka", "share_timeout_kafka", "large_records_kafka",
            "consume_group_kafka", "group_lag_kafka", "old_v0_8_2", "hostile_strings_kafka", "waits_kafka")


def stats_object(path: Path, ports: tuple[int, ...], every_message: bool) -> dict:
    analysis = Analysis([str(path)], ports, keep_messages=True) if every_message else \
        Analysis([str(path)], ports, **COLLECT_KEEPS)
    summary, tables = collect(analysis)
    return json.loads(json.dumps(as_dict(summary, tables, analysis.accounting), sort_keys=True, default=str))


@pytest.mark.parametrize("stem", CAPTURES)
def test_tables_as_with_every_message_decoded(stem: str) -> None:
    capture = REPO / "captures" / f"{stem}.pcap"
    assert stats_object(capture, ports_of(capture), False) == stats_object(capture, ports_of(capture), True)


def test_per_partition_errors_are_still_read() -> None:
    # the lab's raw Produce to a topic the broker did not have: its manifest
    # names the topic, the partition and the broker's error_code 3, which
    # Kafka's error table calls UNKNOWN_TOPIC_OR_PARTITION
    capture = REPO / "captures" / "unknown_topic_kafka.pcap"
    produced = json.loads(capture.with_suffix(".manifest.json").read_text())["produced"][0]
    assert produced["error"] == "error_code 3"
    rows = stats_object(capture, ports_of(capture), False)["partition_errors"]
    assert {"topic": produced["topic"], "partition": produced["partition"], "error": "UNKNOWN_TOPIC_OR_PARTITION",
            "count": 1} in rows


def test_per_partition_errors_of_other_apis() -> None:
    # DeleteRecords past the high watermark and a preferred election of a
    # one-replica partition: kafka-python's admin client raised error 1 for the
    # first and returned error_code 84 for the second (the manifest), which
    # Kafka's error table calls OFFSET_OUT_OF_RANGE and ELECTION_NOT_NEEDED.
    # Neither API is one the forensic tables keep: only the kept error
    # responses carry these rows.
    capture = REPO / "captures" / "partition_errors_kafka.pcap"
    results = [op["result"] for op in json.loads(capture.with_suffix(".manifest.json").read_text())["operations"]]
    assert "[Error 1] OffsetOutOfRangeError" in results[1] and "partition_id=0, error_code=84" in results[2]
    rows = stats_object(capture, ports_of(capture), False)["partition_errors"]
    assert sorted(rows, key=lambda row: row["error"]) == [
        {"topic": "trimmed", "partition": 0, "error": "ELECTION_NOT_NEEDED", "count": 1},
        {"topic": "trimmed", "partition": 0, "error": "OFFSET_OUT_OF_RANGE", "count": 1}]


@pytest.mark.parametrize("stem,lost", [("unknown_topic_kafka", 3), ("forensics_kafka", 20)])
def test_damaged_copies(stem: str, lost: int, tmp_path: Path) -> None:
    capture = REPO / "captures" / f"{stem}.pcap"
    trace = impair.load_pcap(capture)
    dropped, _lost = impair.drop_random(trace, seed=29, count=lost)
    ports = ports_of(capture)
    for path in (impair.write_pcap(dropped, tmp_path / "dropped.pcap"),
                 impair.write_pcap(impair.with_snaplen(trace, 200), tmp_path / "snap.pcap")):
        assert stats_object(path, ports, False) == stats_object(path, ports, True)
