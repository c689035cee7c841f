"""`Forensics`: one pass over exchanges -> the topic, group and client tables.

    from kdissect.forensics import Forensics, FORENSIC_APIS
    from kdissect.conn.pipeline import analyze

    exchanges, accounting = analyze(paths, keep_apis=FORENSIC_APIS)
    forensics = Forensics()
    for ex in exchanges:
        forensics.add(ex)
    tables = forensics.tables()          # ForensicTables: .topics, .groups, .clients, ...

`add` reads the decoded messages of the APIs in FORENSIC_APIS (the others
only through their exchange rows), so a pipeline keeping just those
(`keep_apis=FORENSIC_APIS`) is enough; there a Produce's messages are kept
as their skimmed frames (kdissect.conn.kept_produce), and a Fetch's
(kdissect.conn.kept_fetch), an OffsetCommit's (kdissect.conn.kept_offset_commit),
a JoinGroup's (kdissect.conn.kept_join_group), a CreateTopics answer
(kdissect.conn.kept_create_topics) and an ApiVersions request
(kdissect.conn.kept_api_versions), read alike. Tallies are keyed by topic label (a
name, or an id's text where the wire gives only the id) and resolved with
every id -> name pair the capture set holds when the tables are made.

Forensics of parts merge (`merge`) into the forensics of the whole, whatever
the order: the Spark job tallies per task and merges on the driver. Every
"last value" is the one of the latest exchange by (time, connection,
correlation id), and everything order-dependent (fetch positions, producer
sequences, the software behind a client id) is followed per connection,
which a task always holds whole.
"""

from __future__ import annotations

from typing import Any, Final

from kdissect.forensics.batches import set_figures
from kdissect.forensics.clients import ClientTally, errors_by_client_rows
from kdissect.forensics.common import topic_label
from kdissect.forensics.groups import GROUP_APIS, GroupTally
from kdissect.forensics.lag_history import LagHistory
from kdissect.forensics.latency import (DEFAULT_HORIZON_NS, DEFAULT_SLACK_NS, LatencyTally, StreamMatcher)
from kdissect.protocol.topics import ID_BEARING_APIS, TopicNames
from kdissect.forensics.spill import RowSpool
from kdissect.forensics.share import SHARE_ACK, SHARE_APIS, SHARE_HEARTBEAT, ShareTally
from kdissect.forensics.topics import PartitionStats, TopicTally
from kdissect.forensics.transactions import TRANSACTION_APIS, TransactionTally
from kdissect.protocol.apis import ApiKey
from kdissect.records.codecs import DEFAULT_LIMIT
from kdissect.records.quick_spans import SetFigures
from kdissect.records.access import produce_results  # not records.table: pyarrow
from kdissect.conn.kept_fetch import FetchPartition, FetchRequestFrame, FetchResponseFrame, decoded_partition
from kdissect.conn.kept_produce import ProduceResponseFrame, produce_answers, produce_parts, response_bases

_PRODUCE: Final = int(ApiKey.PRODUCE)
_FETCH: Final = int(ApiKey.FETCH)
_SHARE_FETCH: Final = int(ApiKey.SHARE_FETCH)
_UNANSWERED: tuple[Any, int] = (None, 0)  # (base offset, error code) of a partition without an answer
FORENSIC_APIS = frozenset({_PRODUCE, _FETCH, _SHARE_FETCH, int(ApiKey.API_VERSIONS), int(ApiKey.INIT_PRODUCER_ID)}
                          | GROUP_APIS | ID_BEARING_APIS | SHARE_APIS | TRANSACTION_APIS)
# the API sets and keys `add` tests, as Final names of this module (compiled:
# read from a C static, not looked up in the module's dict for each exchange)
_ID_BEARING_APIS: Final = ID_BEARING_APIS
_GROUP_APIS: Final = GROUP_APIS
_TRANSACTION_APIS: Final = TRANSACTION_APIS
_SHARE_ACK: Final = SHARE_ACK
_SHARE_HEARTBEAT: Final = SHARE_HEARTBEAT


class ForensicTables:
    """The tables (lists of row dicts, columns as in kdissect.forensics.tables)
    and the flags `stats` prints."""

    def __init__(self, **tables: Any) -> None:
        self.topics: list[dict[str, Any]] = tables["topics"]
        self.topic_lag: list[dict[str, Any]] = tables["topic_lag"]
        self.end_to_end: list[dict[str, Any]] = tables["end_to_end"]
        self.groups: list[dict[str, Any]] = tables["groups"]
        self.group_commits: list[dict[str, Any]] = tables["group_commits"]
        self.group_lag: list[dict[str, Any]] = tables["group_lag"]
        self.group_lag_over_time: list[dict[str, Any]] = tables["group_lag_over_time"]
        self.clients: list[dict[str, Any]] | RowSpool = tables["clients"]  # (spooled when many)
        self.errors_by_client: list[dict[str, Any]] = tables["errors_by_client"]
        self.producers: list[dict[str, Any]] = tables["producers"]
        self.rebalance_storms: list[dict[str, Any]] = tables["rebalance_storms"]
        self.member_rejoins: list[dict[str, Any]] = tables["member_rejoins"]
        self.metadata_storms: list[dict[str, Any]] = tables["metadata_storms"]
        self.share_groups: list[dict[str, Any]] = tables["share_groups"]
        self.share_group_members: list[dict[str, Any]] = tables["share_group_members"]
        self.transactions: list[dict[str, Any]] = tables["transactions"]
        self.transaction_markers: list[dict[str, Any]] = tables["transaction_markers"]
        self.unresolved_topic_ids: list[str] = tables["unresolved_topic_ids"]
        self.topic_id_conflicts: int = tables["topic_id_conflicts"]

    def table(self, name: str) -> list[dict[str, Any]] | RowSpool:
        rows: list[dict[str, Any]] | RowSpool = getattr(self, name)
        return rows

    def to_dict(self) -> dict[str, Any]:
        """The tables `stats --json` carries (errors_by_client is the stats' own there)."""
        return {name: getattr(self, name) for name in (
            "topics", "topic_lag", "end_to_end", "groups", "group_commits", "group_lag", "group_lag_over_time",
            "clients", "producers",
            "transactions", "transaction_markers", "rebalance_storms", "member_rejoins", "metadata_storms",
            "share_groups", "share_group_members", "unresolved_topic_ids", "topic_id_conflicts")}


class Forensics:
    """Tallies fed one exchange at a time (see the module docstring).

    `horizon_ns` / `slack_ns`: the end-to-end latency rule
    (kdissect.forensics.latency). `latency_sink`: where produced and fetched
    offset ranges go instead of the one-pass matcher (the Spark tasks write
    them out and match them per partition after the shuffle)."""

    def __init__(self, horizon_ns: int = DEFAULT_HORIZON_NS, slack_ns: int = DEFAULT_SLACK_NS,
                 max_uncompressed: int = DEFAULT_LIMIT, latency_sink: Any = None) -> None:
        self.horizon_ns = horizon_ns
        self.slack_ns = slack_ns
        self.max_uncompressed = max_uncompressed
        self.names = TopicNames()
        self.topics = TopicTally()
        self.groups = GroupTally()
        self.clients = ClientTally()
        self.latency = LatencyTally()
        self.share = ShareTally()
        self.transactions = TransactionTally()
        self.history = LagHistory()
        self.ranges = latency_sink if latency_sink is not None else StreamMatcher(self.latency, horizon_ns, slack_ns)
        self.exchanges = 0

    def learn_names(self, ex: Any) -> None:
        """Learn topic names from an exchange (also one a selection does not keep: names are context)."""
        for topic_id in self.names.learn_exchange(ex):
            self.ranges.rename(topic_id, self.names.names[topic_id])

    def add(self, ex: Any) -> None:
        self.exchanges += 1
        api_key = ex.api_key
        # (an int: compared in C; -1 for a damaged header's None, in no set)
        key: int = api_key if api_key is not None else -1
        if key in _ID_BEARING_APIS:  # (learn_names reads no other API)
            self.learn_names(ex)
        # (read once here for the tallies below: each read of an Exchange is a
        # generic attribute lookup; the times stay objects, as read: typed as
        # ints, each use would box a new int of nanoseconds again)
        client_id: str | None = ex.client_id
        request_ts: Any = ex.request_ts
        response_ts: Any = ex.response_ts
        stats = self.clients.add(ex, key, client_id, request_ts, response_ts)
        if key == _PRODUCE:
            if ex.request is not None:
                self._produce(ex, stats, client_id, request_ts, response_ts)
        elif key == _FETCH or key == _SHARE_FETCH:
            if ex.response is not None:
                self._fetch(ex, key == _SHARE_FETCH, client_id, request_ts, response_ts)
            if key == _SHARE_FETCH:
                self.share.add(ex)
        elif key in _GROUP_APIS:
            self.groups.add(ex, self.history)
            if key == _SHARE_HEARTBEAT:
                self.share.add(ex)
        elif key == _SHARE_ACK:
            self.share.add(ex)
        if key in _TRANSACTION_APIS:
            self.transactions.add(ex)

    def _produce(self, ex: Any, stats: Any, client_id: str | None, request_ts: Any,
                 response_ts: Any) -> None:
        # (decoded, or kept as frames: kdissect.conn.kept_produce)
        transactional_id, parts = produce_parts(ex)
        response = ex.response
        # an answer kept as its frame: its base offsets as read (errors none,
        # an empty name "": produce_answers' values, its dict not built again)
        bases: dict[tuple[Any, Any], int] | None = None
        answers: dict[tuple[Any, Any], tuple[Any, int]] | None = None
        if type(response) is ProduceResponseFrame:
            bases = response_bases(response)
        else:
            results = produce_answers(ex, produce_results)
            answers = results if isinstance(results, dict) else None
        ts = request_ts if request_ts is not None else response_ts  # when(ex)
        timed = request_ts is not None and response_ts is not None
        limit = self.max_uncompressed
        connection = self.clients.connection  # (clients.add has just taken this exchange)
        partition_stats = self.topics.stats
        base: Any
        error: Any
        for label, partition, raw in parts:
            figures = set_figures(_as_bytes(raw), limit, produced=True) if raw else None
            if bases is not None:
                base, error = bases.get((label if label is not None else "", partition)), 0
            else:
                base, error = answers.get((label, partition), _UNANSWERED) if answers is not None else _UNANSWERED
            answered = base is not None and base >= 0 and not error
            spans = figures.spans if figures is not None else None
            last_offset = None
            if spans and answered:
                last_offset = base + (spans[0].last if len(spans) == 1 else max(span.last for span in spans))
            # (TopicTally.add_produce inline: once per partition of a Produce)
            key = (label, partition, "produce", client_id)
            found = partition_stats.get(key)
            if found is None:
                found = partition_stats[key] = PartitionStats()
            found.add(ts, figures, error, last_offset)
            if transactional_id:
                self.transactions.add_produce(ex, transactional_id, label, partition, figures, error)
            if figures is None:
                continue
            self.clients.add_produce(ex, stats, label, partition, figures, transactional_id, connection, client_id,
                                     request_ts)
            if answered:
                self.history.add_records(label, partition, figures, base, fetched=False)
                if timed:
                    name = self.names.name(label)
                    produced = self.ranges.produced
                    for span in spans:  # type: ignore[union-attr]
                        produced(name, partition, base + span.first, base + span.last, request_ts, response_ts)

    def _fetch(self, ex: Any, share: bool, client_id: str | None, request_ts: Any,
               response_ts: Any) -> None:
        asked: dict[tuple[str | None, int], int] = {}
        request = ex.request
        if share or request is None:
            pass
        elif type(request) is FetchRequestFrame:  # (kept as its frame: kdissect.conn.kept_fetch)
            asked = request.asked()
        else:
            for topic in getattr(request.body, "topics", None) or ():
                label = topic_label(topic, "topic")
                for entry in getattr(topic, "partitions", None) or ():
                    asked[(label, entry.partition)] = entry.fetch_offset
        ts = response_ts if response_ts is not None else request_ts  # when(ex, response_first=True)
        connection = self.clients.connection  # (clients.add has just taken this exchange)
        correlation_id = ex.correlation_id
        order = (ts if ts is not None else -1, connection, correlation_id if correlation_id is not None else -1)
        limit = self.max_uncompressed
        response = ex.response
        topics: list[tuple[str | None, list[FetchPartition]]]
        if type(response) is FetchResponseFrame:  # (kept as its frame: kdissect.conn.kept_fetch)
            topics = response.topics()
        else:  # (decoded: its entries in the frame's typed form)
            topics = [(topic_label(topic, "topic"), [decoded_partition(entry) for entry in
                                                      getattr(topic, "partitions", None) or ()])
                      for topic in getattr(response.body, "responses", None) or ()]
        for label, partitions in topics:
            for entry in partitions:
                partition = entry.partition_index
                raw = entry.records
                figures = set_figures(raw, limit, produced=False) if raw else None
                self.topics.add_fetch(client_id, label, partition, ts, figures, entry, asked.get((label, partition)),
                                      connection, share, order)
                if not share:
                    self.transactions.add_fetch(client_id, label, partition, entry, figures, limit)
                    self._history(label, partition, ts, entry, figures, order)
                if figures is not None and response_ts is not None and figures.spans:
                    name = self.names.name(label)
                    fetched = self.ranges.fetched
                    for span in figures.spans:
                        if span.offsets is None:  # first..last without holes: one run (span_offsets)
                            if span.last >= span.first:
                                fetched(name, partition, client_id, range(span.first, span.last + 1), response_ts)
                            continue
                        for first, last in _runs(span.offsets):
                            fetched(name, partition, client_id, range(first, last + 1), response_ts)

    def _history(self, label: str | None, partition: int, ts: int | None, entry: FetchPartition,
                 figures: SetFigures | None, order: tuple[Any, ...]) -> None:
        """A fetched partition's record timestamps and high watermark, for group lag in and over time."""
        if figures is not None:
            self.history.add_records(label, partition, figures, None, fetched=True)
        high_watermark = entry.high_watermark
        if ts is not None and not entry.error_code and high_watermark is not None and high_watermark >= 0:
            self.history.add_watermark(label, partition, order, ts, high_watermark)  # (order_key(ex, ts))

    def finish(self) -> None:
        """The end of the input: match what still waits (call before `tables`)."""
        finish = getattr(self.ranges, "finish", None)
        if finish is not None:
            finish()

    def merge(self, other: Forensics) -> None:
        """Add another part's tallies (their ranges must have been matched:
        `finish` called, or handled by a sink)."""
        self.exchanges += other.exchanges
        self.names.merge(other.names)
        self.topics.merge(other.topics)
        self.groups.merge(other.groups)
        self.clients.merge(other.clients)
        self.latency.merge(other.latency)
        self.share.merge(other.share)
        self.transactions.merge(other.transactions)
        self.history.merge(other.history)

    def state(self) -> dict[str, Any]:
        """What `merge` needs, picklable (the Spark tasks send it to the driver)."""
        return {"exchanges": self.exchanges, "names": self.names, "topics": self.topics, "groups": self.groups,
                "clients": self.clients, "latency": self.latency, "share": self.share,
                "transactions": self.transactions, "history": self.history}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Forensics:
        made = cls(latency_sink=_NoRanges())
        made.exchanges = state["exchanges"]
        made.names, made.topics, made.groups = state["names"], state["topics"], state["groups"]
        made.clients, made.latency, made.share = state["clients"], state["latency"], state["share"]
        made.transactions = state["transactions"]
        made.history = state["history"]
        return made

    def tables(self, release: bool = False) -> ForensicTables:
        """The tables; with `release`, the client tallies are dropped as their
        rows are made (call it once: the CLI, whose tallies end there)."""
        names = self.names
        topics = self.topics.rows(names)
        groups, commits = self.groups.rows(names, self.topics.high_watermarks(names))
        markers = self.transactions.marker_offsets(names)
        times = self.history.sorted_times(names)
        clients = self.clients.rows(names, release=release)
        labels = set(self.topics.labels()) | {label for label, _ in self.latency.histograms}
        labels |= {key[2] for key in self.groups.commits} | self.share.labels()
        share_groups, share_members = self.share.rows(names)
        labels |= {t for by_epoch in self.groups.epoch_assignments.values() for _, parts in by_epoch.values()
                   for t, _ in parts}
        return ForensicTables(
            topics=topics, topic_lag=self.topics.lag_rows(names), end_to_end=self.latency.rows(names),
            groups=groups, group_commits=commits,
            group_lag=self.groups.lag_rows(names, commits, markers, times),
            group_lag_over_time=self.history.rows(names, times, markers),
            clients=clients, errors_by_client=errors_by_client_rows(self.clients.error_counts),
            producers=self.clients.producer_rows(names),
            rebalance_storms=self.groups.storms(groups), member_rejoins=self.groups.rejoins(),
            metadata_storms=ClientTally.metadata_storms(clients),
            share_groups=share_groups, share_group_members=share_members,
            transactions=self.transactions.rows(names), transaction_markers=self.transactions.marker_rows(names),
            unresolved_topic_ids=names.unresolved(labels), topic_id_conflicts=names.conflicts)


class _NoRanges:
    """The ranges sink of a Forensics rebuilt from a state (nothing comes in)."""

    def produced(self, *args: Any) -> None:
        raise RuntimeError("a merged Forensics takes no exchanges")

    def fetched(self, *args: Any) -> None:
        raise RuntimeError("a merged Forensics takes no exchanges")

    def rename(self, old: str, new: str) -> None:
        pass


def _as_bytes(raw: Any) -> bytes:
    """A record set as bytes (a kept frame's is bytes already: no call)."""
    return raw if type(raw) is bytes else bytes(raw)


def _runs(offsets: Any) -> list[tuple[int, int]]:
    """[(first, last)] of the contiguous runs of ascending offsets."""
    if isinstance(offsets, range):
        return [(offsets[0], offsets[-1])] if len(offsets) else []
    runs: list[tuple[int, int]] = []
    for offset in offsets:
        if runs and offset == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], offset)
        else:
            runs.append((offset, offset))
    return runs
