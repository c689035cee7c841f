"""The clients and producers tables (kdissect.forensics.clients) against the
exchange table (requests, Metadata per minute, throttling: the same capture
read without the forensic tallies), the lab manifests (client versions,
records sent, transactional id) and a capture with one Produce request cut
out (a sequence gap of exactly that batch)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from kdissect.forensics import forensic_tables
from kdissect.forensics.clients import SequenceRun
from kdissect.conn.pipeline import analyze
from kdissect.records import iter_batches
from tests.support import impair
from tests.support.paths import REPO

CAPTURES = REPO / "captures"
FORENSICS = CAPTURES / "forensics_kafka.pcap"
MINUTE = 60_000_000_000


@pytest.fixture(scope="module")
def run():
    tables, _ = forensic_tables([FORENSICS])
    manifest = json.loads(FORENSICS.with_suffix(".manifest.json").read_text())
    return tables, manifest


def test_software_names_and_versions(run) -> None:
    """KIP-511: what ApiVersions v3+ said, as the lab's clients report their versions."""
    tables, manifest = run
    versions = manifest["clients"]
    expected = {
        "confluent-kafka": ("confluent-kafka-python",
                            f"{versions['confluent-kafka']}-rdkafka-{versions['librdkafka']}"),
        "kafka-python": ("kafka-python", versions["kafka-python"]),
        "java": ("apache-kafka-java", versions["kafka-clients (java)"]),
    }
    by_client = {}
    for e in manifest["produced"] + manifest["consumed"]:
        by_client[e["client_id"]] = e["client"]
    rows = {r["client_id"]: r for r in tables.clients}
    assert len(rows) == len(tables.clients)  # one software per client id here
    for client_id, client in by_client.items():
        row = rows[client_id]
        assert (row["software_name"], row["software_version"]) == expected[client], client_id
        assert row["hosts"] == ["127.0.0.1"] and row["brokers"] == ["127.0.0.1:9092"]


@pytest.mark.parametrize("capture", [FORENSICS, CAPTURES / "quota_kafka.pcap", CAPTURES / "consume_group.pcap"],
                         ids=lambda p: p.name)
def test_counts_agree_with_the_exchange_table(capture: Path) -> None:
    tables, _ = forensic_tables([capture])
    exchanges = list(analyze([capture])[0])
    requests: dict[str | None, Counter] = defaultdict(Counter)
    metadata: dict[str | None, Counter] = defaultdict(Counter)
    throttled: Counter = Counter()
    connections: dict[str | None, set] = defaultdict(set)
    for ex in exchanges:
        if ex.api_name:
            requests[ex.client_id][ex.api_name] += 1
        if ex.api_name == "Metadata":
            ts = ex.request_ts if ex.request_ts is not None else ex.response_ts
            metadata[ex.client_id][ts // MINUTE] += 1
        if ex.throttle_time_ms:
            throttled[ex.client_id] += ex.throttle_time_ms
        connections[ex.client_id].add(ex.stream)
    rows: dict[str | None, list[dict]] = defaultdict(list)
    for row in tables.clients:
        rows[row["client_id"]].append(row)
    assert set(rows) == set(requests) | set(connections)
    for client_id, found in rows.items():
        by_api: Counter = Counter()
        for row in found:
            by_api.update({k: int(v) for k, v in (item.rsplit(":", 1) for item in row["requests_by_api"])})
        assert by_api == requests[client_id], client_id
        assert sum(r["connections"] for r in found) == len(connections[client_id]), client_id
        assert max(r["metadata_max_per_minute"] for r in found) == max(metadata[client_id].values(), default=0)
        assert sum(r["throttle_ms"] for r in found) == throttled[client_id], client_id
    if capture.name == "quota_kafka.pcap":
        assert any(r["throttled"] for r in tables.clients)


def test_producers(run) -> None:
    tables, manifest = run
    rows = {r["client_id"]: r for r in tables.clients}
    sent: Counter = Counter()
    for e in manifest["produced"]:
        if e["delivered"]:
            sent[(e["client_id"], e["topic"], e["partition"])] += 1
    for client_id in ("fx-idempotent", "fx-transactional"):
        producers = [r for r in tables.producers if r["client_ids"] == [client_id]]
        assert producers, client_id
        assert {(client_id, r["topic"], r["partition"]): r["records"] for r in producers} == \
            {k: n for k, n in sent.items() if k[0] == client_id}
        for r in producers:
            assert r["first_sequence"] == 0 and r["next_sequence"] == r["records"]
            assert r["sequence_gaps"] == r["missing_sequences"] == r["duplicates"] == 0
        assert rows[client_id]["producer_ids"] == sorted({f"{r['producer_id']}:{r['producer_epoch']}"
                                                          for r in producers})
        assert rows[client_id]["produce_records"] == sum(n for k, n in sent.items() if k[0] == client_id)
    transactional = {e["transactional_id"] for e in manifest["produced"] if e.get("transactional_id")}
    assert rows["fx-transactional"]["transactional_ids"] == sorted(transactional) == ["fx-txn-1"]
    assert {r["transactional_id"] for r in tables.producers if r["client_ids"] == ["fx-transactional"]} == \
        transactional
    # producers without idempotence carry no producer id
    assert rows["fx-plain"]["producer_ids"] == [] and rows["fx-share-feeder"]["producer_ids"] == []
    for client_id in ("fx-idempotent", "fx-plain", "fx-share-feeder"):
        row = rows[client_id]
        assert row["produce_batches"] > 0
        assert row["compression_ratio"] == row["produce_record_bytes"] / row["produce_batch_bytes"]
        assert row["max_batch_bytes"] >= row["mean_batch_bytes"]


def test_reconnects(run) -> None:
    """fx-classic-3 made a new consumer for each of its sessions, each with
    new connections after the previous ones went quiet."""
    tables, manifest = run
    member = next(m for g in manifest["groups"] for m in g["members"] if m["client_id"] == "fx-classic-3")
    row = next(r for r in tables.clients if r["client_id"] == "fx-classic-3")
    assert row["reconnects"] >= len(member["member_ids"]) - 1
    steady = next(r for r in tables.clients if r["client_id"] == "fx-classic-1")
    assert row["connections"] > steady["connections"]


def test_a_lost_produce_request_is_a_sequence_gap(tmp_path) -> None:
    """The packet of one Produce request of the idempotent producer cut out
    of the capture: its partition shows one gap of exactly its records."""
    exchanges = list(analyze([FORENSICS], keep_messages=True)[0])
    produce = [ex for ex in exchanges if ex.api_name == "Produce" and ex.client_id == "fx-idempotent"]
    victim = produce[len(produce) // 2]
    ((topic, partitions),) = [(t.name or str(t.topic_id), t.partition_data) for t in victim.request.body.topic_data]
    assert len(partitions) == 1
    lost = sum(len(b.records) for b in iter_batches(partitions[0].records))
    assert victim.request_bytes + 4 < 1400  # the request is in one packet: its frame
    cut = impair.write_pcap(impair.drop(impair.load_pcap(FORENSICS), [victim.request_frame - 1]),
                            tmp_path / "cut.pcap")
    tables, _ = forensic_tables([cut])
    row = next(r for r in tables.producers if r["client_ids"] == ["fx-idempotent"]
               and r["partition"] == partitions[0].index)
    assert (row["sequence_gaps"], row["missing_sequences"], row["duplicates"]) == (1, lost, 0)
    others = [r for r in tables.producers if r is not row]
    assert all(r["sequence_gaps"] == 0 for r in others)
    client = next(r for r in tables.clients if r["client_id"] == "fx-idempotent")
    assert client["sequence_gaps"] == 1


def test_sequence_rules() -> None:
    """Gaps, duplicates (retries) and the wrap at 2^31, batch by batch."""
    run = SequenceRun((0,), 0)
    run.add(0, 5)
    run.add(5, 5)  # in order
    run.add(5, 5)  # a retry: duplicate
    run.add(12, 3)  # 10 and 11 never seen: a gap of 2
    assert (run.gaps, run.missing, run.duplicates, run.next_sequence) == (1, 2, 1, 15)
    wrap = SequenceRun((0,), 2**31 - 2)
    wrap.add(2**31 - 2, 2)
    wrap.add(0, 4)  # sequences wrap to 0 after Int32.MAX
    assert (wrap.gaps, wrap.duplicates, wrap.next_sequence) == (0, 0, 4)


def test_metadata_storm_flags(run, monkeypatch) -> None:
    """The flag picks the clients whose busiest minute reaches the threshold
    (lowered here: the lab's clients are well behaved at 60 a minute)."""
    from kdissect.forensics import clients as module

    tables, _ = run
    assert tables.metadata_storms == []
    monkeypatch.setattr(module, "METADATA_STORM_PER_MINUTE", 6)
    per_minute: dict[str | None, Counter] = defaultdict(Counter)
    for ex in analyze([FORENSICS])[0]:
        if ex.api_name == "Metadata":
            per_minute[ex.client_id][ex.request_ts // MINUTE] += 1
    expected = sorted(client for client, minutes in per_minute.items() if max(minutes.values()) >= 6)
    flagged = sorted(r["client_id"] for r in module.ClientTally.metadata_storms(tables.clients))
    assert flagged == expected and expected


def test_client_rows_do_not_depend_on_how_connections_interleave(monkeypatch) -> None:
    """The client tally looks a connection's stats up once per run of its
    exchanges: the rows are the same whether the connections' exchanges come
    one connection after another or dealt round-robin, and with the client
    stats spilled at every new key (KDISSECT_SPILL_KEYS=1)."""
    from kdissect.forensics import FORENSIC_APIS, Forensics

    exchanges = list(analyze([str(FORENSICS)], keep_apis=FORENSIC_APIS)[0])
    by_connection: dict = defaultdict(list)
    for ex in exchanges:
        by_connection[(ex.client, ex.stream_key)].append(ex)
    queues = [list(q) for q in by_connection.values()]
    dealt = []
    while any(queues):
        for q in queues:
            if q:
                dealt.append(q.pop(0))
    assert len(by_connection) > 5 and dealt != exchanges

    def rows(order: list, spill: bool) -> list:
        if spill:
            monkeypatch.setenv("KDISSECT_SPILL_KEYS", "1")
        else:
            monkeypatch.delenv("KDISSECT_SPILL_KEYS", raising=False)
        forensics = Forensics()
        for ex in order:
            forensics.add(ex)
        forensics.finish()
        tables = forensics.tables()
        return [list(tables.clients), tables.producers, tables.errors_by_client]

    expected = rows([ex for q in by_connection.values() for ex in q], spill=False)
    assert expected[0] and rows(dealt, spill=False) == expected
    assert rows(dealt, spill=True) == expected


def test_one_client_id_on_many_hosts(tmp_path) -> None:
    """A client id seen from more hosts than a small tuple holds (a reconnect
    storm, a scan, a fleet sharing one client.id): its row lists every host
    and connection, and the tally keeps the hosts as a set (a tuple's `in`
    and `+` made the tally quadratic in connections). Expected: the source
    addresses dpkt reads from the capture."""
    import dpkt

    from kdissect.forensics.clients import SMALL_SET
    from tests.support.pcaps import many_connections_capture

    count = 4 * SMALL_SET + 3
    capture = many_connections_capture(tmp_path / "many.pcap", count, "syn-data")
    with capture.open("rb") as handle:
        sources = {dpkt.utils.inet_to_str(dpkt.ethernet.Ethernet(frame).data.src)
                   for _, frame in dpkt.pcap.Reader(handle)}
    assert len(sources) == count
    tables, _ = forensic_tables([capture])
    (row,) = tables.clients
    assert row["client_id"] == "client"
    assert row["hosts"] == sorted(sources) and row["connections"] == count


def test_client_stats_merge_small_and_large_sets() -> None:
    """ClientStats.merge gives the union of each small set, tuple or set on
    either side; a copy made for a fold (`_copy`) leaves the tally's own
    stats as they were."""
    import pickle

    from kdissect.forensics.clients import SMALL_SET, ClientStats, _copy

    def stats(hosts: list[str]) -> ClientStats:
        made = ClientStats()
        made.merge(ClientStats())
        for host in hosts:
            one = ClientStats()
            one.hosts = (host,)
            made.merge(one)
        return made

    few = [f"10.0.0.{i}" for i in range(SMALL_SET // 2)]
    many = [f"10.0.1.{i}" for i in range(3 * SMALL_SET)]
    for left, right in ((few, few[1:]), (few, many), (many, few), (many, many[2:] + few)):
        mine, other = stats(left), stats(right)
        other_before = set(other.hosts)
        mine.merge(other)
        assert sorted(mine.hosts) == sorted(set(left) | set(right))
        shipped = pickle.loads(pickle.dumps(mine))  # (Spark ships the tallies pickled)
        assert sorted(shipped.hosts) == sorted(mine.hosts)
        assert len(mine.hosts) == len(set(mine.hosts))
        assert set(other.hosts) == other_before
    own = stats(many)
    before = set(own.hosts)
    copied = _copy(own)
    copied.merge(stats([f"10.0.2.{i}" for i in range(SMALL_SET)]))
    assert set(own.hosts) == before and len(copied.hosts) == len(before) + SMALL_SET
    assert isinstance(own.hosts, set) and isinstance(stats(few).hosts, tuple)
