"""Acceptance against the capture lab: records decoded from real captures equal
what the clients reported producing and consuming (captures/<name>.manifest.json,
written from the clients' own APIs, never from the capture)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from kdissect.conn.pipeline import analyze
from kdissect.records.table import RecordTally, exchange_record_rows
from tests.support.paths import REPO

CAPTURES = REPO / "captures"
MANIFESTS = sorted(CAPTURES.glob("*.manifest.json"))
WITH_RECORDS = [m for m in MANIFESTS if (lambda d: d.get("produced") or d.get("consumed"))(json.loads(m.read_text()))]

# Every generation and codec to see verified on real traffic.
REQUIRED_PRODUCED = {(2, c) for c in ("none", "gzip", "snappy", "lz4", "zstd")} | {
    (m, c) for m in (0, 1) for c in ("none", "gzip", "snappy", "lz4")}


def _decode(manifest: dict) -> list[dict]:
    pcap = CAPTURES / manifest["capture"]
    exchanges, _accounting = analyze([pcap], ports=(manifest.get("port", 9092),), keep_messages=True)
    tally = RecordTally()
    rows = list(exchange_record_rows(exchanges, tally=tally))
    # every batch on the wire decoded cleanly (a cut-off batch at the end of a
    # Fetch response is partial, which is not a problem)
    assert tally.troubled == 0, tally.lines()
    return rows


def _produced_key(entry: dict) -> tuple:
    return (entry["topic"], entry["partition"], entry["key"], entry["value"],
            json.dumps(entry["headers"]), entry["magic"], entry["codec"])


def _check_produced(manifest: dict, rows: list[dict]) -> set[tuple[int, str]]:
    expected = manifest["produced"]
    if not expected:
        return set()
    topics = {e["topic"] for e in expected}
    produced_rows = [r for r in rows if r["direction"] == "produce" and r["topic"] in topics]
    wire = Counter(_produced_key(r) for r in produced_rows)
    wanted = Counter(_produced_key(e) for e in expected)
    undelivered = Counter(_produced_key(e) for e in expected if not e["delivered"])
    missing = wanted.keys() - wire.keys()
    unexpected = wire.keys() - wanted.keys()
    # a record the client failed to send (e.g. a codec it could not load) is not
    # on the wire; everything the client delivered must be
    never_sent = missing & undelivered.keys()
    missing -= never_sent
    assert not missing, f"{len(missing)} produced records not decoded, e.g. {sorted(missing, key=str)[:3]}"
    assert not unexpected, f"{len(unexpected)} decoded records not in the manifest, e.g. {sorted(unexpected, key=str)[:3]}"
    # retries may repeat a request on the wire, never drop one
    assert all(wire[k] >= n for k, n in wanted.items() if k not in never_sent)
    for row in produced_rows:
        assert row["crc_ok"] is True, row
        # the only problem a produced record may carry: why its offset is not known
        assert row["problems"] == [] if row["offset"] is not None else len(row["problems"]) == 1, row
    # the offset of a produced record: the broker's, as the client's delivery report gave it
    reported = {_produced_key(e): e["offset"] for e in expected if e["delivered"] and e["offset"] is not None}
    checked = 0
    for row in produced_rows:
        offset = reported.get(_produced_key(row))
        if offset is not None and row["offset"] is not None:
            assert row["offset"] == offset, row
            checked += 1
        elif offset is not None:
            assert any("offset" in p for p in row["problems"]), row
    if reported:
        assert checked, "no produced offset compared"
    return {(e["magic"], e["codec"]) for e in expected if _produced_key(e) not in never_sent}


def _check_consumed(manifest: dict, rows: list[dict]) -> int:
    consumed = manifest["consumed"]
    fetched: dict[tuple, dict] = {}
    for row in rows:
        if row["direction"] != "fetch":
            continue
        where = (row["topic"], row["partition"], row["offset"])
        content = (row["key"], row["value"], row["headers"])
        if where in fetched:  # fetched twice: must decode the same both times
            assert (fetched[where]["key"], fetched[where]["value"], fetched[where]["headers"]) == content
        fetched[where] = row
        assert row["crc_ok"] is True, row
    for entry in consumed:
        where = (entry["topic"], entry["partition"], entry["offset"])
        assert where in fetched, f"consumed record {where} not found in any Fetch response"
        row = fetched[where]
        assert (row["key"], row["value"], row["headers"]) == (entry["key"], entry["value"], entry["headers"]), where
        if entry.get("timestamp") is not None:
            assert row["timestamp"] == entry["timestamp"], where
    return len(consumed)


def test_lab_captures_exist():
    assert WITH_RECORDS, "no captures/*.manifest.json with produced or consumed records (run python3 -m tools.lab record)"


@pytest.mark.parametrize("manifest_path", WITH_RECORDS, ids=lambda p: p.name.split(".")[0])
def test_records_match_manifest(manifest_path):
    manifest = json.loads(manifest_path.read_text())
    rows = _decode(manifest)
    _check_produced(manifest, rows)
    _check_consumed(manifest, rows)


def test_every_generation_and_codec_verified():
    seen: set[tuple[int, str]] = set()
    consumed = 0
    for path in WITH_RECORDS:
        manifest = json.loads(path.read_text())
        rows = _decode(manifest)
        seen |= _check_produced(manifest, rows)
        consumed += _check_consumed(manifest, rows)
    assert REQUIRED_PRODUCED <= seen, f"not covered by the lab captures: {sorted(REQUIRED_PRODUCED - seen)}"
    assert consumed > 0, "no consume workload verified"


def test_real_magic0_lz4_uses_pre_kip57_framing():
    """kafka-python writes magic-0 lz4 with Kafka's old, wrong header checksum
    (KIP-57); the real captures must have exercised the repair, magic 1 not."""
    from kdissect.records import iter_batches_of

    seen = Counter()
    for path in WITH_RECORDS:
        manifest = json.loads(path.read_text())
        if not any(e["codec"] == "lz4" and e["magic"] < 2 for e in manifest["produced"]):
            continue
        exchanges, _ = analyze([CAPTURES / manifest["capture"]], ports=(manifest.get("port", 9092),),
                               keep_messages=True)
        for exchange in exchanges:
            if exchange.api_key != 0 or exchange.request is None:
                continue
            for _topic, _partition, batch in iter_batches_of(exchange):
                if batch.codec == "lz4" and batch.magic < 2:
                    legacy = "lz4 frame uses Kafka's pre-KIP-57 header checksum" in batch.notes
                    seen[(batch.magic, legacy)] += 1
    assert seen[(0, True)] > 0 and seen[(0, False)] == 0, seen
    assert seen[(1, False)] > 0 and seen[(1, True)] == 0, seen


def test_transaction_markers_match_manifest():
    """Control batches in Fetch responses: on each partition, one commit/abort
    marker right after each transaction's records there, in the order the
    producers ended them."""
    checked = 0
    for path in WITH_RECORDS:
        manifest = json.loads(path.read_text())
        produced = [e for e in manifest["produced"] if e.get("transaction")]
        if not produced:
            continue
        expected = []  # (topic, partition, marker offset, kind), one per transaction and partition
        for entry in sorted(produced, key=lambda e: (e["topic"], e["partition"], e["offset"])):
            kind = {"committed": "commit", "aborted": "abort"}[entry["transaction"]]
            place = (entry["topic"], entry["partition"])
            if expected and expected[-1][3] == kind and expected[-1][:2] == place \
                    and expected[-1][2] == entry["offset"]:
                expected[-1] = (*place, entry["offset"] + 1, kind)
            else:
                expected.append((*place, entry["offset"] + 1, kind))
        markers = {(r["topic"], r["partition"], r["offset"], r["control"])
                   for r in _decode(manifest) if r["direction"] == "fetch" and r["control"]}
        assert sorted(markers) == expected
        checked += 1
    assert checked, "no capture with transactional produce in the lab"


@pytest.mark.parametrize("capture", sorted(CAPTURES.glob("*.pcap")), ids=lambda p: p.name)
def test_exchange_record_counts_equal_the_records_table(capture: Path) -> None:
    """The `records` column of every Produce and Fetch exchange (from batch
    headers, compressed message sets counted by their inner entries) equals
    the rows `kdissect records` lists for it."""
    ports = (json.loads(capture.with_suffix(".manifest.json").read_text()).get("port", 9092),) \
        if capture.with_suffix(".manifest.json").exists() else (9092,)
    skimmed, _ = analyze([capture], ports=ports)
    columns = {(ex.stream, ex.correlation_id, ex.api_key): ex.records for ex in skimmed
               if ex.api_key in (0, 1) and ex.records is not None}
    unknown = [ex for ex in analyze([capture], ports=ports)[0] if ex.api_key in (0, 1) and ex.codecs
               and ex.records is None and ex.status == "ok"]
    assert not unknown, [(ex.api_name, ex.correlation_id, ex.problems) for ex in unknown]
    listed = Counter((r["stream"], r["correlation_id"], 0 if r["direction"] == "produce" else 1)
                     for r in exchange_record_rows(analyze([capture], ports=ports, keep_messages=True)[0]))
    for key, count in columns.items():
        assert listed.get(key, 0) == count, key
