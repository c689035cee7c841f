"""The group timeline (kdissect.forensics.groups) against what the group
members themselves reported (captures/forensics_kafka.manifest.json,
`groups`: the member id librdkafka's `memberid()` gave, every assignment and
revocation their rebalance callbacks received, the offsets their commits
returned, when they left) and against the Java client's manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kdissect.forensics import forensic_tables
from tests.support.paths import REPO

CAPTURES = REPO / "captures"
FORENSICS = CAPTURES / "forensics_kafka.pcap"


@pytest.fixture(scope="module")
def run():
    tables, _ = forensic_tables([FORENSICS])
    manifest = json.loads(FORENSICS.with_suffix(".manifest.json").read_text())
    return tables, {g["group"]: g for g in manifest["groups"]}, manifest


def _assignments(row: dict) -> dict[str, list[str]]:
    found = {}
    for entry in row["assignments"]:
        member_id, _, partitions = entry.partition("=")
        found[member_id] = sorted(partitions.split(",")) if partitions else []
    return found


def _member_ids(member: dict, rows: list[dict]) -> list[str]:
    """The member ids a client had: as librdkafka reported them; for
    kafka-python (which does not say) the classic ids it was given, which
    start with its client id."""
    if member["member_ids"]:
        return member["member_ids"]
    return sorted({m for r in rows for m in r["member_ids"] if m.startswith(member["client_id"] + "-")})


def _generations(tables, group: str) -> list[dict]:
    return sorted((r for r in tables.groups if r["group_id"] == group), key=lambda r: r["generation_id"])


@pytest.mark.parametrize("group", ["fx-classic", "fx-late", "fx-txn-readers"])
def test_classic_assignments_are_what_each_member_was_given(run, group) -> None:
    """Eager (range) assignment: each generation a member took part in gave
    it one assignment callback with its whole assignment, in order."""
    tables, groups, _ = run
    rows = _generations(tables, group)
    assert rows and all(r["group_type"] == "classic" and r["protocol_type"] == "consumer" for r in rows)
    for member in groups[group]["members"]:
        ids = _member_ids(member, rows)
        assert ids, member["client_id"]
        ours = [_assignments(r)[m] for r in rows for m in ids if m in r["member_ids"] and m in _assignments(r)]
        theirs = [e["partitions"] for e in member["events"] if e["kind"] == "assign"]
        assert ours == theirs, member["client_id"]
        for r in rows:
            for m in ids:
                if m in r["member_ids"]:
                    assert member["client_id"] in r["client_ids"] and r["hosts"] == ["127.0.0.1"]


def test_classic_generations_hang_together(run) -> None:
    tables, _, _ = run
    for row in tables.groups:
        if row["group_type"] != "classic" or row["generation_id"] < 0:
            continue
        assert row["members"] == len(row["member_ids"]) >= 1
        assert row["leader"] in row["member_ids"]
        assert set(_assignments(row)) <= set(row["member_ids"])
        assert row["protocol_name"] == "range"
        if row["rebalance_end"] is not None:
            assert row["rebalance_start"] <= row["rebalance_end"]
            assert row["rebalance_ms"] == (row["rebalance_end"] - row["rebalance_start"]) / 1e6
        # every member answered MEMBER_ID_REQUIRED first (KIP-394): the refused join counts in the generation
        assert row["joins"] >= 1


def test_consumer_protocol_assignments(run) -> None:
    """KIP-848 (incremental callbacks): the partitions a member held when it
    closed are its assignment in the last epoch it reached."""
    tables, groups, _ = run
    rows = _generations(tables, "fx-848")
    assert rows and {r["group_type"] for r in rows} == {"consumer"}
    for member in groups["fx-848"]["members"]:
        held: set[str] = set()
        for event in member["events"][:-1]:  # the last event is the revocation at close
            held = held | set(event["partitions"]) if event["kind"] == "assign" else held - set(event["partitions"])
        (member_id,) = member["member_ids"]
        last = [r for r in rows if member_id in r["member_ids"]][-1]
        assert _assignments(last)[member_id] == sorted(held), member["client_id"]
        assert member["client_id"] in last["client_ids"]
    assert sum(r["leaves"] for r in rows) == 2  # both members sent a heartbeat with epoch -1


def test_share_group(run) -> None:
    tables, _, manifest = run
    rows = _generations(tables, "fx-share")
    assert rows and {r["group_type"] for r in rows} == {"share"}
    clients = {op["operation"].split("client.id=")[1] for op in manifest["operations"]
               if op["operation"].startswith("share consume group=fx-share client.id=")}
    assert clients == {"fx-share-1", "fx-share-2"}
    assert set(rows[-1]["client_ids"]) == clients and rows[-1]["members"] == 2
    assert all(parts == ["fx-share-0"] for parts in _assignments(rows[-1]).values())


def test_the_member_that_came_back(run) -> None:
    """fx-classic-3 joined with a new consumer (and member id) each time and
    left each time: a leave and a rejoin flagged, a rebalance storm."""
    tables, groups, _ = run
    member = next(m for m in groups["fx-classic"]["members"] if m["client_id"] == "fx-classic-3")
    sessions = len(member["member_ids"])
    assert sessions >= 3
    flagged = [r for r in tables.member_rejoins if r["client_id"] == "fx-classic-3"]
    assert flagged == [{"group_id": "fx-classic", "client_id": "fx-classic-3", "host": "127.0.0.1",
                        "leaves": sessions, "rejoins": sessions - 1, "joins": flagged[0]["joins"]}]
    assert {r["client_id"] for r in tables.member_rejoins} == {"fx-classic-3"}
    rows = _generations(tables, "fx-classic")
    # every LeaveGroup of the group is in some generation's count: one per
    # session of fx-classic-3, one each for fx-classic-1 and -2 at the end
    assert sum(r["leaves"] for r in rows) == sessions + 2
    storms = {r["group_id"]: r for r in tables.rebalance_storms}
    assert set(storms) == {"fx-classic"} and storms["fx-classic"]["generations"] == len(rows)


def test_committed_offsets_are_what_the_commits_returned(run) -> None:
    """The last offset each group committed per partition (the highest any
    member's commit returned) and its lag against the high watermark."""
    tables, groups, manifest = run
    ends: dict[str, int] = {}
    for e in manifest["produced"]:
        key = f"{e['topic']}-{e['partition']}"
        ends[key] = max(ends.get(key, 0), e["offset"] + 1 + (1 if e.get("transaction") else 0))
    checked = 0
    for group, log in groups.items():
        expected: dict[str, int] = {}
        for member in log["members"]:
            for commit in member["commits"]:
                if "offset" in commit:  # librdkafka: one topic-partition per entry
                    assert commit["error"] is None
                    pairs = [(f"{commit['topic']}-{commit['partition']}", commit["offset"])]
                else:  # kafka-python: {topic-partition: position}
                    pairs = list(commit.items())
                for key, offset in pairs:
                    expected[key] = max(expected.get(key, -1), offset)
        current = {f"{r['topic']}-{r['partition']}": r for r in tables.group_commits
                   if r["group_id"] == group and r["committed_lag"] is not None}
        assert {key: r["committed_offset"] for key, r in current.items()} == expected, group
        for key, row in current.items():
            assert row["high_watermark"] == ends[key] and row["committed_lag"] == ends[key] - expected[key]
            checked += 1
        superseded = [r for r in tables.group_commits if r["group_id"] == group and r["committed_lag"] is None]
        assert all(r["committed_offset"] <= expected[f"{r['topic']}-{r['partition']}"] for r in superseded)
    assert checked >= 8


def test_java_clients_groups() -> None:
    """The Java client's classic, KIP-848 and share groups (java_clients_kafka):
    the partitions each consumed, as its manifest's `consumed` shows, are the
    ones the group assigned it, and its committed offsets are what the manifest
    says `committed()` returned."""
    capture = CAPTURES / "java_clients_kafka.pcap"
    tables, _ = forensic_tables([capture])
    manifest = json.loads(capture.with_suffix(".manifest.json").read_text())
    types = {r["group_id"]: r["group_type"] for r in tables.groups}
    assert types == {"lab-java-classic": "classic", "lab-java-consumer": "consumer", "lab-java-share": "share"}
    for group in types:
        consumed = {f"{e['topic']}-{e['partition']}" for e in manifest["consumed"] if e["group"] == group}
        last = _generations(tables, group)[-1]
        assigned = {tp for parts in _assignments(last).values() for tp in parts}
        assert consumed <= assigned, group
    for op in manifest["operations"]:
        if op["operation"].startswith("consume group="):
            group = op["operation"].split("=")[1].split()[0]
            got = {f"{r['topic']}-{r['partition']}": r["committed_offset"] for r in tables.group_commits
                   if r["group_id"] == group and r["committed_lag"] is not None}
            assert got == op["result"]["committed"], group
