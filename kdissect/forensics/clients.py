"""Which client misbehaves: one row per client (client id, and the software
name and version its ApiVersions v3+ requests announce, KIP-511), and one per
idempotent producer and partition.

A connection's exchanges go to the client id of each request and the
software its ApiVersions request named; a connection whose ApiVersions was
not captured counts under the software of the client id's other connections
when they all agree, else under an unknown software.

Reconnects: connections from the same host to the same broker that start
after an earlier one has gone quiet (its last exchange), each earlier one
replaced at most once; concurrent connections (a consumer's fetch and
coordinator connections) are not reconnects.

Producer sequences (idempotent and transactional producers, KIP-98): per
producer id, epoch and partition, each batch's base sequence should be the
previous batch's plus its record count (modulo 2^31). A higher one is a gap
(the records between were never sent, or not captured); a lower one a
duplicate (a retry). Sequences are followed per connection, in capture
order, then the connections' runs are joined by time.

Memory: per client, its connections (two times and a key each) and minutes
with Metadata requests; per producer and partition its connections' runs.
A capture may hold hundreds of thousands of client ids, so a client's small
sets (hosts, brokers, producers, transactional ids) are tuples while they
hold at most SMALL_SET items and sets past that (one client id on thousands
of hosts: a tuple's `in` and `+` are linear, which made the tally quadratic
in connections), the host texts are shared, and the tables fold the stats
without copying them. The tally keeps at most
`kdissect.forensics.spill.key_limit()` clients in memory (a `SpillMap`: the
rest in sorted runs on disk, merged back in key order), and the client rows
are made one client id at a time into a `RowSpool`.
"""

from __future__ import annotations

from typing import Any, Final, Iterable, Iterator

from kdissect.conn.kept_api_versions import ApiVersionsRequestFrame
from kdissect.records.quick_spans import SetFigures
from kdissect.forensics.spill import RowSpool, SpillMap
from kdissect.forensics.common import (MINUTE_NS, add_count, connection_of, error_list, host_of, max_of,
                                       merge_counts, min_of)
from kdissect.protocol.apis import ApiKey

# (Final: compiled, read from C statics, not the module's dict, once or more per exchange)
_API_VERSIONS: Final = int(ApiKey.API_VERSIONS)
_METADATA: Final = int(ApiKey.METADATA)
_INIT_PRODUCER_ID: Final = int(ApiKey.INIT_PRODUCER_ID)
_SEQUENCE_SPACE: Final = 1 << 31
# a client's small set is a tuple up to this many items, a set past it
SMALL_SET: Final = 8
# a client is flagged for a metadata storm at this many Metadata requests in one minute
METADATA_STORM_PER_MINUTE = 60


class ClientStats:
    __slots__ = ("hosts", "brokers", "connections", "requests", "metadata_minutes", "produce_batches",
                 "produce_records", "batch_bytes", "batch_bytes_max", "record_bytes", "producers",
                 "transactional_ids", "throttled", "throttle_ms", "throttle_ms_max", "errors", "first_ts", "last_ts")

    def __init__(self) -> None:
        # small sets as tuples (a set costs 216 bytes, a one-item tuple 48), sets past SMALL_SET items
        self.hosts: tuple[str, ...] | set[str] = ()
        self.brokers: tuple[str, ...] | set[str] = ()
        # connection -> [first ts, last ts, host, broker]
        self.connections: dict[tuple[Any, ...], list[Any]] = {}
        self.requests: dict[str, int] = {}
        self.metadata_minutes: dict[int, int] | None = None  # made at the first (most clients have none)
        self.produce_batches = 0
        self.produce_records = 0
        self.batch_bytes = 0
        self.batch_bytes_max = 0
        self.record_bytes = 0
        self.producers: tuple[tuple[int, int], ...] | set[tuple[int, int]] = ()
        self.transactional_ids: tuple[str, ...] | set[str] = ()
        self.throttled = 0
        self.throttle_ms = 0
        self.throttle_ms_max = 0
        self.errors: dict[int, int] | None = None  # made at the first
        self.first_ts: int | None = None
        self.last_ts: int | None = None

    def merge(self, other: ClientStats) -> None:
        self.hosts = _union(self.hosts, other.hosts)
        self.brokers = _union(self.brokers, other.brokers)
        for key, (first, last, host, broker) in other.connections.items():
            mine = self.connections.get(key)
            if mine is None:
                self.connections[key] = [first, last, host, broker]
            else:
                mine[0], mine[1] = min_of(mine[0], first), max_of(mine[1], last)
        merge_counts(self.requests, other.requests)
        if other.metadata_minutes:
            if self.metadata_minutes is None:
                self.metadata_minutes = {}
            merge_counts(self.metadata_minutes, other.metadata_minutes)
        self.produce_batches += other.produce_batches
        self.produce_records += other.produce_records
        self.batch_bytes += other.batch_bytes
        self.batch_bytes_max = max(self.batch_bytes_max, other.batch_bytes_max)
        self.record_bytes += other.record_bytes
        self.producers = _union(self.producers, other.producers)
        self.transactional_ids = _union(self.transactional_ids, other.transactional_ids)
        self.throttled += other.throttled
        self.throttle_ms += other.throttle_ms
        self.throttle_ms_max = max(self.throttle_ms_max, other.throttle_ms_max)
        if other.errors:
            if self.errors is None:
                self.errors = {}
            merge_counts(self.errors, other.errors)
        self.first_ts = min_of(self.first_ts, other.first_ts)
        self.last_ts = max_of(self.last_ts, other.last_ts)


def _union(mine: Any, other: Any) -> Any:
    """`mine` with the items of `other` it lacks: a tuple while that holds at
    most SMALL_SET items, else a set. A set `mine` is grown in place (its
    stats own it); `other` is never returned nor changed."""
    if not other:
        return mine
    if type(mine) is tuple and type(other) is tuple and len(mine) + len(other) <= SMALL_SET:
        return mine + tuple(item for item in other if item not in mine)
    grown = set(mine) if type(mine) is tuple else mine
    grown.update(other)
    return grown


def _with(items: Any, item: Any) -> Any:
    """`items` with `item` added (see _union): once per exchange, so the
    common case (already there, or a short tuple) takes no set."""
    if item in items:
        return items
    if type(items) is tuple and len(items) < SMALL_SET:
        return items + (item,)
    return _union(items, (item,))


class SequenceRun:
    """One connection's batches of one producer (id, epoch) to one partition."""

    __slots__ = ("first_order", "first_sequence", "next_sequence", "last_ts", "batches", "records", "gaps",
                 "missing", "duplicates", "client_ids")

    # (defaults: a compiled class is unpickled by calling it without arguments)
    def __init__(self, order: tuple[Any, ...] = (), first_sequence: int = 0) -> None:
        self.first_order = order
        self.first_sequence = first_sequence
        self.next_sequence = first_sequence
        self.last_ts: int | None = None
        self.batches = 0
        self.records = 0
        self.gaps = 0
        self.missing = 0
        self.duplicates = 0
        self.client_ids: set[str] = set()

    def add(self, base_sequence: int, count: int) -> None:
        if self.batches:
            self.step(base_sequence)
        self.batches += 1
        self.records += count
        end = (base_sequence + count) % _SEQUENCE_SPACE
        if self.batches == 1 or _ahead(end, self.next_sequence):
            self.next_sequence = end

    def step(self, base_sequence: int) -> None:
        """Count a gap or duplicate where `base_sequence` follows next_sequence."""
        ahead = (base_sequence - self.next_sequence) % _SEQUENCE_SPACE
        if ahead == 0:
            return
        if ahead < _SEQUENCE_SPACE // 2:
            self.gaps += 1
            self.missing += ahead
        else:
            self.duplicates += 1


def _same(a: object, b: object) -> bool:
    """a == b, by identity where it can (the values compared are texts, tuples or None)."""
    return a is b or a == b


def _ahead(a: int, b: int) -> bool:
    """Whether sequence a is after b (modulo 2^31)."""
    return 0 < (a - b) % _SEQUENCE_SPACE < _SEQUENCE_SPACE // 2


class ClientTally:
    def __init__(self) -> None:
        self.error_counts: dict[tuple[str | None, int], int] = {}  # made by `rows`
        # (client id, software name, version) -> stats, in memory up to the spill limit
        self.stats: SpillMap[ClientStats] = SpillMap(ClientStats, ClientStats.merge, client_order)
        self.software: dict[tuple[Any, ...], tuple[str | None, str | None]] = {}  # connection -> (name, version)
        # (producer id, epoch, label, partition) -> {connection: SequenceRun}
        self.sequences: dict[tuple[Any, ...], dict[tuple[Any, ...], SequenceRun]] = {}
        self.transactional: dict[tuple[int, int], set[str]] = {}  # (producer id, epoch) -> transactional ids
        self.texts: dict[str, str] = {}  # one copy of each host and broker text
        # the last exchange's connection (connection_of), and what `add` looked up for it
        self.connection: tuple[Any, ...] = ("", -1, -1)
        self._cached: tuple[Any, ...] | None = None

    def __getstate__(self) -> dict[str, Any]:
        """What a merge needs: not the connections' software (the tally
        follows it while exchanges come; a part's connections are whole, and a
        merged tally takes no exchanges) nor `add`'s lookup of the last one."""
        # (named one by one: a compiled class has no __dict__)
        return {"error_counts": self.error_counts, "stats": self.stats, "sequences": self.sequences,
                "transactional": self.transactional, "texts": self.texts, "connection": self.connection}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.error_counts = state["error_counts"]
        self.stats = state["stats"]
        self.sequences = state["sequences"]
        self.transactional = state["transactional"]
        self.texts = state["texts"]
        self.connection = state["connection"]
        self.software = {}
        self._cached = None

    def _stats(self, key: tuple[Any, ...]) -> ClientStats:
        return self.stats[key]

    def add(self, ex: Any, key: int, client_id: str | None, request_ts: Any, response_ts: Any) -> ClientStats:
        """Count one exchange; the client's stats (for the produce figures).
        `key` (its api key, -1 for none), `client_id` and the times are the
        exchange's as the caller read them (an attribute read of an Exchange is
        a generic lookup: each is read once an exchange). `connection` is left
        holding the exchange's connection (connection_of)."""
        client, stream_key = ex.client, ex.stream_key
        ts = request_ts if request_ts is not None else response_ts  # when(ex)
        last = response_ts if response_ts is not None else request_ts  # when(ex, response_first=True)
        # A connection's exchanges come one after another: what depends only on
        # the connection, client id and broker (the stats, the connection's
        # entry, its host and broker counted) is looked up again only when they change,
        # when an ApiVersions request may name the software, or after a spill
        # (the stats in memory were written out).
        cached = self._cached
        stats: ClientStats  # (typed: the compiled code reads its fields directly)
        seen: list[Any]
        connection: tuple[Any, ...]
        broker = ex.broker
        # (`is` first: a connection's exchanges mostly share these objects, and
        # an identity test costs less than a generic ==)
        if cached is not None and key != _API_VERSIONS and _same(cached[0], client) \
                and _same(cached[1], stream_key) and _same(cached[2], client_id) \
                and cached[3] is self.stats.memory and _same(cached[7], broker):
            connection, stats, seen = cached[4], cached[5], cached[6]
            if ts is not None and (seen[0] is None or ts < seen[0]):
                seen[0] = ts
            if last is not None and (seen[1] is None or last > seen[1]):
                seen[1] = last
        else:
            connection = connection_of(ex)
            if key == _API_VERSIONS and ex.request is not None and (ex.api_version or 0) >= 3:
                if type(ex.request) is ApiVersionsRequestFrame:  # (kept as its frame: kdissect.conn.kept_api_versions)
                    name, version = ex.request.software()
                else:
                    body = ex.request.body
                    name, version = (getattr(body, "client_software_name", None),
                                     getattr(body, "client_software_version", None))
                if name:
                    self.software[connection] = (name, version)
            name, version = self.software.get(connection, (None, None))
            stats = self.stats[(client_id, name, version)]
            host = host_of(client)
            if host is not None:
                host = self.texts.setdefault(host, host)
                stats.hosts = _with(stats.hosts, host)
            if broker and broker not in stats.brokers:
                stats.brokers = _with(stats.brokers, self.texts.setdefault(broker, broker))
            known = stats.connections.get(connection)
            if known is None:
                seen = stats.connections[connection] = [ts, last, host or "", broker or ""]
            else:  # (min_of, max_of inline: once per exchange)
                seen = known
                if ts is not None and (seen[0] is None or ts < seen[0]):
                    seen[0] = ts
                if last is not None and (seen[1] is None or last > seen[1]):
                    seen[1] = last
            self._cached = (client, stream_key, client_id, self.stats.memory, connection, stats, seen, broker)
        self.connection = connection
        if ts is not None and (stats.first_ts is None or ts < stats.first_ts):
            stats.first_ts = ts
        if last is not None and (stats.last_ts is None or last > stats.last_ts):
            stats.last_ts = last
        api_name = ex.api_name
        if api_name:
            requests = stats.requests
            requests[api_name] = requests.get(api_name, 0) + 1
        if key == _METADATA and ts is not None:
            if stats.metadata_minutes is None:
                stats.metadata_minutes = {}
            add_count(stats.metadata_minutes, ts - ts % MINUTE_NS)
        throttle = ex.throttle_time_ms
        if throttle:
            stats.throttled += 1
            stats.throttle_ms += throttle
            stats.throttle_ms_max = max(stats.throttle_ms_max, throttle)
        if ex.error_codes or ex.error_code:
            for code in set(ex.error_codes or ()) | ({ex.error_code} if ex.error_code else set()):
                if stats.errors is None:
                    stats.errors = {}
                add_count(stats.errors, code)
        if key == _INIT_PRODUCER_ID and ex.request is not None and ex.response is not None:
            txn = getattr(ex.request.body, "transactional_id", None)
            response = ex.response.body
            if txn and not response.error_code and response.producer_id >= 0:
                self.transactional.setdefault((response.producer_id, response.producer_epoch), set()).add(txn)
                stats.transactional_ids = _with(stats.transactional_ids, txn)
        return stats

    def add_produce(self, ex: Any, stats: ClientStats, label: str | None, partition: int,
                    figures: SetFigures, transactional_id: str | None, connection: tuple[Any, ...],
                    client_id: str | None, request_ts: Any) -> None:
        """The batches of one partition of a Produce request (`connection`:
        its connection_of; `client_id`, `request_ts`: the exchange's, as read)."""
        order_ts = request_ts if request_ts is not None else -1
        if transactional_id:
            stats.transactional_ids = _with(stats.transactional_ids, transactional_id)
        for span in figures.spans:
            stats.produce_batches += 1
            stats.produce_records += span.count
            stats.batch_bytes += span.wire_bytes
            stats.batch_bytes_max = max(stats.batch_bytes_max, span.wire_bytes)
            stats.record_bytes += span.record_bytes
            if span.producer_id is None or span.producer_id < 0 or span.base_sequence is None \
                    or span.base_sequence < 0:
                continue
            producer = (span.producer_id, span.producer_epoch)
            stats.producers = _with(stats.producers, producer)
            if transactional_id:
                self.transactional.setdefault(producer, set()).add(transactional_id)  # type: ignore[arg-type]
            runs = self.sequences.setdefault((span.producer_id, span.producer_epoch, label, partition), {})
            run = runs.get(connection)
            if run is None:
                run = runs[connection] = SequenceRun((order_ts, connection, ex.correlation_id), span.base_sequence)
            run.add(span.base_sequence, span.count)
            run.last_ts = max_of(run.last_ts, request_ts)
            if client_id is not None:
                run.client_ids.add(client_id)

    def merge(self, other: ClientTally) -> None:
        for key, stats in other.stats.items():
            self._stats(key).merge(stats)
        self.software.update(other.software)
        for sequence_key, by_connection in other.sequences.items():
            mine = self.sequences.setdefault(sequence_key, {})
            mine.update(by_connection)  # a connection is whole in one tally
        for producer, ids in other.transactional.items():
            self.transactional.setdefault(producer, set()).update(ids)

    # -- tables --------------------------------------------------------------------

    def _folded(self) -> Iterator[tuple[tuple[Any, ...], ClientStats]]:
        """(key, stats) in key order, the stats of connections without a
        captured ApiVersions folded into their client id's one known
        software, where there is exactly one. The keys come in client id
        order, so one client id's keys are folded together and then let go."""
        group: list[tuple[tuple[Any, ...], ClientStats]] = []
        for key, stats in self.stats.items():
            if group and group[0][0][0] != key[0]:
                yield from _fold(group)
                group = []
            group.append((key, stats))
        if group:
            yield from _fold(group)

    def producer_rows(self, names: Any) -> list[dict[str, Any]]:
        merged: dict[tuple[Any, ...], list[SequenceRun]] = {}
        for (producer_id, epoch, label, partition), by_connection in self.sequences.items():
            merged.setdefault((producer_id, epoch, names.name(label), partition), []).extend(by_connection.values())
        rows = []
        for key in sorted(merged, key=lambda k: (k[0], k[1], k[2] or "", k[3])):
            producer_id, epoch, topic, partition = key
            runs = sorted(merged[key], key=lambda run: run.first_order)
            joined = SequenceRun(runs[0].first_order, runs[0].first_sequence)
            joined.next_sequence = runs[0].first_sequence
            for i, run in enumerate(runs):
                if i:
                    joined.step(run.first_sequence)
                joined.batches += run.batches
                joined.records += run.records
                joined.gaps += run.gaps
                joined.missing += run.missing
                joined.duplicates += run.duplicates
                joined.client_ids |= run.client_ids
                joined.last_ts = max_of(joined.last_ts, run.last_ts)
                if i == 0 or _ahead(run.next_sequence, joined.next_sequence):
                    joined.next_sequence = run.next_sequence
            rows.append({
                "producer_id": producer_id, "producer_epoch": epoch,
                "transactional_id": ",".join(sorted(self.transactional.get((producer_id, epoch), ()))) or None,
                "client_ids": sorted(joined.client_ids), "topic": topic, "partition": partition,
                "connections": len(runs), "batches": joined.batches, "records": joined.records,
                "first_sequence": joined.first_sequence, "next_sequence": joined.next_sequence,
                "sequence_gaps": joined.gaps, "missing_sequences": joined.missing, "duplicates": joined.duplicates,
                "first_ts": runs[0].first_order[0] if runs[0].first_order[0] >= 0 else None,
                "last_ts": joined.last_ts,
            })
        return rows

    def rows(self, names: Any, release: bool = False) -> list[dict[str, Any]] | RowSpool:
        """One row per client; with `release`, each client's stats are
        dropped once its row is made (the tally is then spent), so the
        tallies and the rows of hundreds of thousands of client ids are not
        held at once. `error_counts` is left holding (client id, error code)
        -> exchanges (the errors_by_client table)."""
        self.error_counts = {}
        producers = self.producer_rows(names)
        by_client: dict[str | None, list[dict[str, Any]]] = {}
        for row in producers:
            for client_id in row["client_ids"] or [None]:
                by_client.setdefault(client_id, []).append(row)
        rows = RowSpool()
        for key, stats in self._folded():
            client_id, name, version = key
            own = [row for row in by_client.get(client_id, [])
                   if (row["producer_id"], row["producer_epoch"]) in stats.producers]
            per_minute = max((stats.metadata_minutes or {}).values(), default=0)
            for code, n in (stats.errors or {}).items():
                add_count(self.error_counts, (client_id, code), n)
            rows.append({
                "client_id": client_id, "software_name": name, "software_version": version,
                "hosts": sorted(stats.hosts), "brokers": sorted(stats.brokers),
                "connections": len(stats.connections), "reconnects": _reconnects(stats.connections),
                "first_ts": stats.first_ts, "last_ts": stats.last_ts,
                "requests": sum(stats.requests.values()),
                "requests_by_api": [f"{api}:{n}" for api, n in sorted(stats.requests.items())],
                "metadata_requests": stats.requests.get("Metadata", 0),
                "metadata_max_per_minute": per_minute,
                "produce_batches": stats.produce_batches, "produce_records": stats.produce_records,
                "produce_batch_bytes": stats.batch_bytes, "produce_record_bytes": stats.record_bytes,
                "max_batch_bytes": stats.batch_bytes_max if stats.produce_batches else None,
                "mean_batch_bytes": stats.batch_bytes / stats.produce_batches if stats.produce_batches else None,
                "compression_ratio": stats.record_bytes / stats.batch_bytes if stats.batch_bytes else None,
                "producer_ids": [f"{pid}:{epoch}" for pid, epoch in sorted(stats.producers)],
                "transactional_ids": sorted(stats.transactional_ids),
                "sequence_gaps": sum(row["sequence_gaps"] for row in own),
                "sequence_duplicates": sum(row["duplicates"] for row in own),
                "throttled": stats.throttled, "throttle_ms": stats.throttle_ms,
                "max_throttle_ms": stats.throttle_ms_max if stats.throttled else None,
                "errors": error_list(stats.errors or {}),
            })
        if release:
            self.stats.close()
            self.stats = SpillMap(ClientStats, ClientStats.merge, client_order)
        return rows.settled()

    def folded_items(self) -> list[tuple[tuple[Any, ...], ClientStats]]:
        return list(self._folded())

    @staticmethod
    def metadata_storms(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{"client_id": row["client_id"], "software_name": row["software_name"],
                 "metadata_requests": row["metadata_requests"],
                 "metadata_max_per_minute": row["metadata_max_per_minute"]}
                for row in rows if row["metadata_max_per_minute"] >= METADATA_STORM_PER_MINUTE]


def client_order(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """The sort key of a (client id, software name, version) key: None first."""
    return tuple((v is not None, v or "") for v in key)


def _fold(group: list[tuple[tuple[Any, ...], ClientStats]]) -> list[tuple[tuple[Any, ...], ClientStats]]:
    """One client id's (key, stats), the software-less ones folded into its
    one known software if it has exactly one; in key order."""
    software = {(name, version) for (_, name, version), _ in group if name is not None or version is not None}
    folded: dict[tuple[Any, ...], ClientStats] = {}
    copies: set[tuple[Any, ...]] = set()  # keys whose stats are a merged copy (the tally's own stay untouched)
    for (client_id, name, version), stats in group:
        if name is None and version is None and len(software) == 1:
            name, version = next(iter(software))
        key = (client_id, name, version)
        found = folded.get(key)
        if found is None:
            folded[key] = stats  # most clients: no copy
            continue
        if key not in copies:
            copies.add(key)
            found = folded[key] = _copy(found)
        found.merge(stats)
    return sorted(folded.items(), key=lambda item: client_order(item[0]))


def _copy(stats: ClientStats) -> ClientStats:
    made = ClientStats()
    made.merge(stats)
    return made


def _reconnects(connections: dict[tuple[Any, ...], list[Any]]) -> int:
    by_path: dict[tuple[str, str], list[tuple[Any, ...]]] = {}
    for key, (first, last, host, broker) in connections.items():
        by_path.setdefault((host, broker), []).append((first if first is not None else -1,
                                                       last if last is not None else -1, key))
    count = 0
    for spans in by_path.values():
        spans.sort()
        ended: list[int] = []  # last times of connections not yet replaced
        for first, last, _key in spans:
            quiet = [i for i, end in enumerate(ended) if end < first]
            if quiet:
                count += 1
                del ended[min(quiet, key=lambda i: ended[i])]
            ended.append(last)
    return count



def errors_by_client_rows(counts: dict[tuple[str | None, int], int]) -> list[dict[str, Any]]:
    """The errors_by_client table from (client id, error code) -> exchanges
    carrying the code (`ClientTally.error_counts`), as the Spark job's
    summaries write it (a request without a client id is "(none)"), in
    `kdissect stats`' order: failures first, then by client id, each
    client's errors by exchanges."""
    from kdissect.conn.normal_flow import is_normal_flow_name
    from kdissect.protocol.errors import error_name

    merged: dict[tuple[str, int], int] = {}
    for (client_id, code), n in counts.items():
        add_count(merged, (client_id if client_id is not None else "(none)", code), n)
    keys = sorted(merged, key=lambda k: (is_normal_flow_name(error_name(k[1])), k[0], -merged[k], error_name(k[1])))
    return [{"client_id": client_id, "error_code": code, "error_name": error_name(code),
             "normal_flow": is_normal_flow_name(error_name(code)), "exchanges": merged[(client_id, code)]}
            for client_id, code in keys]
