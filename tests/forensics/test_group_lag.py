"""The group_lag table (per group and partition, as of the capture's end)
against the clients' own manifest of forensics_kafka.pcap: each member's last
committed offset, the offsets the producers were given (the partition's data
end), and the eager (classic) assignments the consumers logged."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from tests.support.paths import REPO

CAPTURE = REPO / "captures" / "forensics_kafka.pcap"
MANIFEST = json.loads((REPO / "captures" / "forensics_kafka.manifest.json").read_text())


@pytest.fixture(scope="module")
def stats() -> dict:
    done = subprocess.run([sys.executable, "-m", "kdissect", "stats", str(CAPTURE), "--json"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _split(label: str) -> tuple[str, int]:
    topic, partition = label.rsplit("-", 1)
    return topic, int(partition)


def test_committed_offsets_and_lag_match_the_manifest(stats: dict) -> None:
    data_end: dict[tuple[str, int], int] = defaultdict(int)  # last produced offset + 1
    for record in MANIFEST["produced"]:
        if record.get("offset") is not None:
            key = (record["topic"], record["partition"])
            data_end[key] = max(data_end[key], record["offset"] + 1)
    committed: dict[tuple[str, str, int], int] = {}
    for group in MANIFEST["groups"]:
        for member in group["members"]:
            for label, offset in (member.get("committed") or {}).items():
                key = (group["group"], *_split(label))
                committed[key] = max(committed.get(key, -1), offset)
    rows = {(r["group_id"], r["topic"], r["partition"]): r for r in stats["group_lag"]}
    assert committed and set(committed) <= set(rows)
    for key, offset in committed.items():
        row = rows[key]
        assert row["committed_offset"] == offset, row
        # records the group has not committed: the data end minus the commit (transaction markers
        # sit past the data end and are not lag: fx-txn's high watermark is one past its last record)
        assert row["lag"] == data_end[key[1:]] - offset, row
        assert row["high_watermark"] >= data_end[key[1:]]


def test_the_owner_is_the_member_last_assigned_the_partition(stats: dict) -> None:
    """Classic (eager) groups log each member's whole assignment at every
    rebalance: the owner at the end is the member assigned it last."""
    last: dict[tuple[str, str, int], tuple[float, str, str | None]] = {}
    for group in MANIFEST["groups"]:
        if group["protocol"] != "classic":
            continue
        for member in group["members"]:
            for event in member.get("events", []):
                if event["kind"] == "assign":
                    for label in event["partitions"]:
                        key = (group["group"], *_split(label))
                        if key not in last or event["time"] > last[key][0]:
                            last[key] = (event["time"], member["client_id"], event["member_id"])
    rows = {(r["group_id"], r["topic"], r["partition"]): r for r in stats["group_lag"]}
    assert last
    for key, (_time, client_id, member_id) in last.items():
        assert rows[key]["owner_client_id"] == client_id, key
        if member_id is not None:  # not every client logs its member id
            assert rows[key]["owner_member_id"] == member_id, key


def test_group_lag_is_not_the_stale_per_client_lag(stats: dict) -> None:
    """`topics` keeps lag per client: fx-late-1 fetched fx-events-1 before
    fx-late-2 took it over and read it to the end. The group's lag there is 0."""
    stale = [r for r in stats["topics"] if (r["topic"], r["partition"], r["client_id"]) == ("fx-events", 1, "fx-late-1")
             and r["direction"] == "fetch"]
    assert stale and stale[0]["lag"] > 0
    row = next(r for r in stats["group_lag"] if (r["group_id"], r["topic"], r["partition"]) == ("fx-late", "fx-events", 1))
    assert row["lag"] == 0 and row["owner_client_id"] == "fx-late-2"
