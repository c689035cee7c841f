"""The topics table, lag and end-to-end latency (kdissect.forensics) against
independent sources: the `kdissect records` table and the exchange table
(record counts, offsets, times), and the clients' own manifests
(captures/forensics_kafka.manifest.json: what each producer sent and the
offsets its delivery reports gave, what each consumer returned)."""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from kdissect.forensics import FORENSIC_APIS, Forensics, forensic_tables
from kdissect.protocol.topics import ID_BEARING_APIS
from kdissect.conn.pipeline import analyze
from kdissect.records.table import exchange_record_rows
from tests.support.paths import REPO

CAPTURES = REPO / "captures"
FORENSICS = CAPTURES / "forensics_kafka.pcap"
ALL = sorted(CAPTURES.glob("*.pcap"))


def _port(capture: Path) -> tuple[int, ...]:
    manifest = capture.with_suffix(".manifest.json")
    return (json.loads(manifest.read_text()).get("port", 9092),) if manifest.exists() else (9092,)


def _records_and_exchanges(capture: Path) -> tuple[list[dict], dict[tuple, object]]:
    """The records table's rows and the exchanges (by capture, stream and
    correlation id), from one run with every message kept."""
    exchanges = list(analyze([capture], ports=_port(capture), keep_messages=True)[0])
    rows = list(exchange_record_rows(iter(exchanges)))
    by_key = {(ex.capture, ex.stream, ex.correlation_id): ex for ex in exchanges}
    return rows, by_key


@pytest.fixture(scope="module")
def forensics_run():
    tables, _accounting = forensic_tables([FORENSICS])
    manifest = json.loads(FORENSICS.with_suffix(".manifest.json").read_text())
    return tables, manifest


@pytest.mark.parametrize("capture", ALL, ids=lambda p: p.name)
def test_record_counts_equal_the_records_table(capture: Path) -> None:
    """Per topic, partition, direction and client id: the data records the
    records table lists (control records excluded), one for one."""
    tables, _ = forensic_tables([capture], ports=_port(capture))
    rows, exchanges = _records_and_exchanges(capture)
    expected: Counter = Counter()
    for row in rows:
        if row["control"] is None:
            client_id = exchanges[(row["capture"], row["stream"], row["correlation_id"])].client_id
            expected[(row["topic"], row["partition"], row["direction"], client_id)] += 1
    got = Counter({(r["topic"], r["partition"], r["direction"], r["client_id"]): r["records"]
                   for r in tables.topics if r["records"]})
    assert got == expected


def test_produced_records_match_the_producers_manifests(forensics_run) -> None:
    tables, manifest = forensics_run
    sent = Counter((e["client_id"], e["topic"], e["partition"]) for e in manifest["produced"] if e["delivered"])
    produced = {(r["client_id"], r["topic"], r["partition"]): r for r in tables.topics if r["direction"] == "produce"}
    assert {key: row["records"] for key, row in produced.items()} == dict(sent)
    for key, row in produced.items():
        offsets = [e["offset"] for e in manifest["produced"]
                   if (e["client_id"], e["topic"], e["partition"]) == key and e["offset"] is not None]
        assert row["last_offset"] == max(offsets), key  # the broker's offsets, from the ProduceResponse
        assert row["errors"] == [] and row["batch_bytes"] > 0 and row["record_bytes"] > 0
        assert row["codecs"] == sorted({e["codec"] for e in manifest["produced"]
                                        if (e["client_id"], e["topic"], e["partition"]) == key})


def _end_offsets(manifest: dict) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the high watermark after the producers: the
    offset after the last record their delivery reports gave (transactional
    topics: plus the last commit marker)."""
    ends: dict[tuple[str, int], int] = {}
    for e in manifest["produced"]:
        key = (e["topic"], e["partition"])
        ends[key] = max(ends.get(key, 0), e["offset"] + 1 + (1 if e.get("transaction") else 0))
    return ends


def test_fetch_rows_cover_what_the_consumers_returned(forensics_run) -> None:
    tables, manifest = forensics_run
    fetched = {(r["client_id"], r["topic"], r["partition"]): r for r in tables.topics if r["direction"] == "fetch"}
    consumed: dict[tuple, list[int]] = defaultdict(list)
    for e in manifest["consumed"]:
        consumed[(e["client_id"], e["topic"], e["partition"])].append(e["offset"])
    assert consumed
    ends = _end_offsets(manifest)
    for key, offsets in consumed.items():
        row = fetched[key]
        assert row["records"] >= len(set(offsets)), key
        assert row["last_offset"] >= max(offsets), key
        if row["topic"] != "fx-share":  # share fetches carry no offsets to lag behind
            end = ends[(row["topic"], row["partition"])]
            if max(offsets) + 1 >= end - 1:  # it read to the end: it saw the final high watermark
                assert row["high_watermark"] == end, key
            else:  # it stopped reading the partition (revoked) before the producers finished
                assert max(offsets) < row["high_watermark"] <= end, key
            assert row["log_start_offset"] == 0
            assert row["lag"] == max(0, row["high_watermark"] - row["next_offset"]) >= 0
        else:
            assert row["high_watermark"] is None and row["lag"] is None


def test_the_late_consumers_lag_falls_to_zero(forensics_run) -> None:
    """fx-late starts after the producers and fetches 600 bytes at a time: it
    starts behind, and the member that read a partition to its end ends with
    no lag there (the member that lost a partition in a rebalance keeps the lag
    it had when it stopped fetching it)."""
    tables, manifest = forensics_run
    ends = _end_offsets(manifest)
    last_consumed: dict[tuple, int] = {}
    for e in manifest["consumed"]:
        if e["group"] == "fx-late":
            key = (e["client_id"], e["topic"], e["partition"])
            last_consumed[key] = max(last_consumed.get(key, -1), e["offset"])
    finished = {key for key, offset in last_consumed.items() if offset + 1 == ends[key[1:]]}
    assert {key[1:] for key in finished} == {("fx-events", 0), ("fx-events", 1)}
    lag = sorted((r for r in tables.topic_lag if r["client_id"] in ("fx-late-1", "fx-late-2")),
                 key=lambda r: r["minute"])
    assert max(r["max_lag"] for r in lag) > 0
    final = {}
    for r in lag:
        final[(r["client_id"], r["topic"], r["partition"])] = (r["lag"], r["high_watermark"], r["next_offset"])
    for key, (lag_value, watermark, next_offset) in final.items():
        assert lag_value == watermark - next_offset >= 0, key
        if key in finished:
            assert lag_value == 0 and next_offset == ends[key[1:]], key
    rows = {(r["client_id"], r["topic"], r["partition"]): r for r in tables.topics if r["direction"] == "fetch"}
    for key in finished:
        assert rows[key]["lag"] == 0, key


def test_topic_ids_are_named(forensics_run) -> None:
    """librdkafka fetches with Fetch v16 (topic ids only): every row is named."""
    tables, manifest = forensics_run
    topics = {e["topic"] for e in manifest["produced"]}
    assert {r["topic"] for r in tables.topics} == topics
    assert tables.unresolved_topic_ids == [] and all(r["topic_id"] for r in tables.topics)
    exchanges, _ = analyze([FORENSICS], keep_messages=True)
    assert any(ex.api_key == 1 and ex.api_version >= 13 for ex in exchanges)


def _tables_of(exchanges) -> object:
    forensics = Forensics()
    for ex in exchanges:
        forensics.add(ex)
    forensics.finish()
    return forensics.tables()


def test_names_come_from_anywhere_in_the_capture_set() -> None:
    """The responses that name topic ids moved to the end change nothing;
    without them the ids stay ids and are counted."""
    exchanges = list(analyze([FORENSICS], keep_apis=FORENSIC_APIS)[0])
    in_order = _tables_of(exchanges).to_dict()
    naming = [ex for ex in exchanges if ex.api_key in ID_BEARING_APIS]
    others = [ex for ex in exchanges if ex.api_key not in ID_BEARING_APIS]
    late = _tables_of(others + naming).to_dict()
    for name in ("topics", "groups", "group_commits", "clients", "producers"):
        assert late[name] == in_order[name], name
    nameless = _tables_of(others)
    ids = {r["topic"] for r in nameless.topics if r["direction"] == "fetch" and r["client_id"] == "fx-848-1"}
    assert ids and all(len(i) == 36 for i in ids)
    assert ids <= set(nameless.unresolved_topic_ids)
    named = {r["topic_id"]: r["topic"] for r in in_order["topics"]}
    assert {named[i] for i in ids} == {"fx-orders"}


def _exact_latencies(capture: Path) -> dict[tuple[str, str], list[int]]:
    """(topic, consumer client id) -> every delivered record's latency in ns,
    from the records table (offsets) and the exchanges (times): the earliest
    Produce request that wrote the offset to the fetch response delivering it."""
    rows, exchanges = _records_and_exchanges(capture)
    produced: dict[tuple, int] = {}
    for row in rows:
        if row["direction"] == "produce" and row["offset"] is not None:
            ex = exchanges[(row["capture"], row["stream"], row["correlation_id"])]
            key = (row["topic"], row["partition"], row["offset"])
            produced[key] = min(produced.get(key, ex.request_ts), ex.request_ts)
    found: dict[tuple, list[int]] = defaultdict(list)
    for row in rows:
        if row["direction"] == "fetch" and row["control"] is None:
            ex = exchanges[(row["capture"], row["stream"], row["correlation_id"])]
            sent = produced.get((row["topic"], row["partition"], row["offset"]))
            if sent is not None:
                found[(row["topic"], ex.client_id)].append(ex.response_ts - sent)
    return found


def _nearest_rank(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1] / 1e6


@pytest.mark.parametrize("capture", [FORENSICS, CAPTURES / "consume_group_kafka.pcap",
                                     CAPTURES / "java_clients_kafka.pcap"], ids=lambda p: p.name)
def test_end_to_end_latency_against_the_records_table(capture: Path) -> None:
    tables, _ = forensic_tables([capture])
    exact = _exact_latencies(capture)
    rows = {(r["topic"], r["client_id"]): r for r in tables.end_to_end if r["dimension"] == "topic_client"}
    assert exact and set(k for k, r in rows.items() if r["records"]) == set(exact)
    for key, values in exact.items():
        row = rows[key]
        assert row["records"] == len(values), key
        assert row["unmatched"] == 0, key  # every fetched record of these captures was produced in them
        assert row["min_ms"] == min(values) / 1e6 and row["max_ms"] == max(values) / 1e6
        assert math.isclose(row["mean_ms"], sum(values) / len(values) / 1e6, rel_tol=1e-12)
        for q in (50, 90, 99):
            assert math.isclose(row[f"p{q}_ms"], _nearest_rank(values, q), rel_tol=0.01), (key, q)
    # the per-topic and per-client rows are the same records, grouped
    for dimension, index in (("topic", 0), ("client", 1)):
        totals: Counter = Counter()
        for key, values in exact.items():
            totals[key[index]] += len(values)
        got = {(r["topic"] if index == 0 else r["client_id"]): r["records"]
               for r in tables.end_to_end if r["dimension"] == dimension}
        assert got == dict(totals)


def test_the_horizon_leaves_records_unmatched() -> None:
    """A horizon shorter than the fastest delivery matches nothing: every
    delivered record is counted as unmatched instead."""
    tables, _ = forensic_tables([FORENSICS], horizon_ns=1_000)
    exact = _exact_latencies(FORENSICS)
    rows = {(r["topic"], r["client_id"]): r for r in tables.end_to_end if r["dimension"] == "topic_client"}
    for key, values in exact.items():
        assert rows[key]["records"] == 0 and rows[key]["unmatched"] >= len(values)
