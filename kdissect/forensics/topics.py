"""Who writes what where, and who is behind: one row per (topic, partition,
direction, client id), and the consumers' lag per minute.

Produce rows come from Produce requests (the records they carry) and their
responses (per-partition errors, the offsets the broker gave); fetch rows
from Fetch and ShareFetch responses (records, high watermark, last stable
and log start offsets, per-partition errors) and the Fetch requests (the
offset asked for).

Lag is the high watermark minus the next offset the consumer will fetch, as
of its last fetch (never negative). The next offset is tracked per
connection, since a fetch session's requests may leave out partitions whose
position did not change: after a response it is the offset after the last
record delivered, else the offset the request asked for, else what the
connection's previous fetch left it at. Of a client's connections, the one
with the latest fetch gives the row's values.

Memory: one entry per (topic, partition, direction, client id), per
(topic, partition, client id, connection) fetching it and per (topic,
partition, client id, minute) of lag; none per exchange.
"""

from __future__ import annotations

from typing import Any

from kdissect.conn.kept_fetch import FetchPartition
from kdissect.records.quick_spans import SetFigures
from kdissect.forensics.common import MINUTE_NS, add_count, error_list, max_of, merge_counts, min_of


class PartitionStats:
    __slots__ = ("requests", "records", "record_bytes", "batch_bytes", "batches", "codecs", "first_ts", "last_ts",
                 "errors", "last_offset")

    def __init__(self) -> None:
        self.requests = 0
        self.records = 0
        self.record_bytes = 0
        self.batch_bytes = 0
        self.batches = 0
        self.codecs: set[str] = set()
        self.first_ts: int | None = None
        self.last_ts: int | None = None
        self.errors: dict[int, int] = {}
        self.last_offset: int | None = None  # highest offset written (produce) or delivered (fetch)

    def add(self, ts: int | None, figures: SetFigures | None, error: int, last_offset: int | None) -> None:
        self.requests += 1
        if ts is not None:
            if self.first_ts is None or ts < self.first_ts:
                self.first_ts = ts
            if self.last_ts is None or ts > self.last_ts:
                self.last_ts = ts
        if error:
            add_count(self.errors, error)
        if figures is not None:
            self.records += figures.records
            self.record_bytes += figures.record_bytes
            self.batch_bytes += figures.batch_bytes
            self.batches += figures.batches
            codecs = self.codecs
            for codec in figures.codecs:  # (mostly one, already in: a test costs less than update's call)
                if codec not in codecs:
                    codecs.add(codec)
        if last_offset is not None and (self.last_offset is None or last_offset > self.last_offset):
            self.last_offset = last_offset

    def merge(self, other: PartitionStats) -> None:
        self.requests += other.requests
        self.records += other.records
        self.record_bytes += other.record_bytes
        self.batch_bytes += other.batch_bytes
        self.batches += other.batches
        self.codecs |= other.codecs
        self.first_ts = min_of(self.first_ts, other.first_ts)
        self.last_ts = max_of(self.last_ts, other.last_ts)
        merge_counts(self.errors, other.errors)
        self.last_offset = max_of(self.last_offset, other.last_offset)


class FetchPosition:
    """A connection's view of one partition it fetches, as of its last fetch."""

    __slots__ = ("order", "next_offset", "high_watermark", "last_stable_offset", "log_start_offset", "lag")

    def __init__(self) -> None:
        self.order: tuple[Any, ...] = ()
        self.next_offset: int | None = None
        self.high_watermark: int | None = None
        self.last_stable_offset: int | None = None
        self.log_start_offset: int | None = None
        self.lag: int | None = None


class LagPoint:
    """One minute of a consumer's lag on one partition."""

    __slots__ = ("order", "fetches", "lag", "max_lag", "high_watermark", "next_offset")

    def __init__(self) -> None:
        self.order: tuple[Any, ...] = ()
        self.fetches = 0
        self.lag: int | None = None  # at the minute's last fetch
        self.max_lag: int | None = None
        self.high_watermark: int | None = None
        self.next_offset: int | None = None

    def add(self, order: tuple[Any, ...], lag: int | None, high_watermark: int | None, next_offset: int | None) -> None:
        self.fetches += 1
        if lag is not None and (self.max_lag is None or lag > self.max_lag):  # (max_of inline, typed)
            self.max_lag = lag
        if order > self.order:
            self.order, self.lag, self.high_watermark, self.next_offset = order, lag, high_watermark, next_offset

    def merge(self, other: LagPoint) -> None:
        self.fetches += other.fetches
        self.max_lag = max_of(self.max_lag, other.max_lag)
        if other.order > self.order:
            self.order, self.lag = other.order, other.lag
            self.high_watermark, self.next_offset = other.high_watermark, other.next_offset


def _known(offset: int | None) -> int | None:
    """An offset field's value, None for the -1 that means "unknown"."""
    return offset if offset is not None and offset >= 0 else None


class TopicTally:
    """Partition rows and lag points, keyed by topic label (name or id text)."""

    def __init__(self) -> None:
        self.stats: dict[tuple[str | None, int, str, str | None], PartitionStats] = {}
        # (label, partition, client_id, connection) -> the connection's position
        self.positions: dict[tuple[Any, ...], FetchPosition] = {}
        self.lag: dict[tuple[str | None, int, str | None, int], LagPoint] = {}

    def _stats(self, key: tuple[Any, ...]) -> PartitionStats:
        found = self.stats.get(key)
        if found is None:
            found = self.stats[key] = PartitionStats()
        return found

    def add_produce(self, ex: Any, label: str | None, partition: int, ts: int | None, figures: SetFigures | None,
                    error: int, last_offset: int | None) -> None:
        self._stats((label, partition, "produce", ex.client_id)).add(ts, figures, error, last_offset)

    def add_fetch(self, client_id: str | None, label: str | None, partition: int, ts: int | None,
                  figures: SetFigures | None, entry: FetchPartition, fetch_offset: int | None,
                  connection: tuple[Any, ...], share: bool, order: tuple[Any, ...]) -> None:
        """One partition of a Fetch (or ShareFetch) response of `client_id`;
        `entry` is its partition (kdissect.conn.kept_fetch), `fetch_offset`
        what the request asked for, `order` the exchange's order_key at `ts`."""
        error = entry.error_code
        last = None
        if figures is not None:
            for span in figures.spans:  # (the highest last offset: a loop, not max() over a generator)
                if last is None or span.last > last:
                    last = span.last
        self._stats((label, partition, "fetch", client_id)).add(ts, figures, error, last)
        if share:
            return  # share groups track delivery on the broker: no offsets to lag behind
        key = (label, partition, client_id, connection)
        position = self.positions.get(key)
        if position is None:
            position = self.positions[key] = FetchPosition()
        if figures is not None and figures.next_offset is not None:
            position.next_offset = figures.next_offset
        elif fetch_offset is not None and fetch_offset >= 0:
            position.next_offset = fetch_offset
        high_watermark = _known(entry.high_watermark)
        if not error and high_watermark is not None:
            position.high_watermark = high_watermark
            position.last_stable_offset = _known(entry.last_stable_offset)
            position.log_start_offset = _known(entry.log_start_offset)
        lag = None
        if position.high_watermark is not None and position.next_offset is not None:
            lag = max(0, position.high_watermark - position.next_offset)
        position.lag = lag
        position.order = order
        if ts is not None:
            minute = ts - ts % MINUTE_NS
            point_key = (label, partition, client_id, minute)
            point = self.lag.get(point_key)
            if point is None:
                point = self.lag[point_key] = LagPoint()
            point.add(order, lag, position.high_watermark, position.next_offset)

    def merge(self, other: TopicTally) -> None:
        for key, stats in other.stats.items():
            self._stats(key).merge(stats)
        for fetch_key, position in other.positions.items():
            mine = self.positions.get(fetch_key)
            if mine is None or position.order > mine.order:
                self.positions[fetch_key] = position
        for minute_key, point in other.lag.items():
            known = self.lag.get(minute_key)
            if known is None:
                self.lag[minute_key] = point
            else:
                known.merge(point)

    def labels(self) -> set[str | None]:
        return {key[0] for key in self.stats}

    def rows(self, names: Any) -> list[dict[str, Any]]:
        """The partition table, topic ids resolved with `names` (TopicNames)."""
        merged: dict[tuple[Any, ...], PartitionStats] = {}
        for (label, partition, direction, client_id), stats in self.stats.items():
            key = (names.name(label), partition, direction, client_id)
            found = merged.get(key)
            if found is None:
                found = merged[key] = PartitionStats()
            found.merge(stats)
        latest: dict[tuple[Any, ...], FetchPosition] = {}
        for (label, partition, client_id, _connection), candidate in self.positions.items():
            fetch_key = (names.name(label), partition, "fetch", client_id)
            chosen = latest.get(fetch_key)
            if chosen is None or candidate.order > chosen.order:
                latest[fetch_key] = candidate
        rows = []
        for key in sorted(merged, key=_row_order):
            topic, partition, direction, client_id = key
            stats = merged[key]
            position = latest.get(key)
            rows.append({
                "topic": topic, "topic_id": names.topic_id(topic), "partition": partition,
                "direction": direction, "client_id": client_id, "requests": stats.requests,
                "batches": stats.batches, "records": stats.records, "record_bytes": stats.record_bytes,
                "batch_bytes": stats.batch_bytes, "codecs": sorted(stats.codecs),
                "compression_ratio": stats.record_bytes / stats.batch_bytes if stats.batch_bytes else None,
                "first_ts": stats.first_ts, "last_ts": stats.last_ts, "errors": error_list(stats.errors),
                "last_offset": stats.last_offset,
                "high_watermark": position.high_watermark if position else None,
                "last_stable_offset": position.last_stable_offset if position else None,
                "log_start_offset": position.log_start_offset if position else None,
                "next_offset": position.next_offset if position else None,
                "lag": position.lag if position else None,
            })
        return rows

    def lag_rows(self, names: Any) -> list[dict[str, Any]]:
        merged: dict[tuple[Any, ...], LagPoint] = {}
        for (label, partition, client_id, minute), point in self.lag.items():
            key = (names.name(label), partition, client_id, minute)
            found = merged.get(key)
            if found is None:
                merged[key] = found = LagPoint()
            found.merge(point)
        return [{"topic": key[0], "partition": key[1], "client_id": key[2], "minute": key[3],
                 "fetches": point.fetches, "lag": point.lag, "max_lag": point.max_lag,
                 "high_watermark": point.high_watermark, "next_offset": point.next_offset}
                for key, point in sorted(merged.items(), key=lambda item: _lag_order(item[0]))]

    def high_watermarks(self, names: Any) -> dict[tuple[str | None, int], int]:
        """(topic, partition) -> the high watermark of the latest fetch of any client."""
        latest: dict[tuple[Any, ...], FetchPosition] = {}
        for (label, partition, _client, _connection), position in self.positions.items():
            if position.high_watermark is None:
                continue
            key = (names.name(label), partition)
            found = latest.get(key)
            if found is None or position.order > found.order:
                latest[key] = position
        return {key: position.high_watermark for key, position in latest.items()}  # type: ignore[misc]


def _text(value: Any) -> tuple[Any, ...]:
    return (value is not None, value or "")


def _row_order(key: tuple[Any, ...]) -> tuple[Any, ...]:
    topic, partition, direction, client_id = key
    return (_text(topic), partition if partition is not None else -1, direction, _text(client_id))


def _lag_order(key: tuple[Any, ...]) -> tuple[Any, ...]:
    topic, partition, client_id, minute = key
    return (_text(topic), partition if partition is not None else -1, _text(client_id), minute)
