"""Share groups (KIP-932): record delivery per partition and per member.

What the wire shows of a share group, from ShareFetch, ShareAcknowledge and
ShareGroupHeartbeat exchanges:

* per (group, topic, partition): records acquired (the `acquired_records`
  ranges of ShareFetch answers), of them redelivered (delivery count > 1),
  acknowledgements the consumers sent (`acknowledgement_batches` of
  ShareFetch and ShareAcknowledge requests: accept, release, reject, renew,
  one type for the whole range or one per offset; gaps are not counted),
  acknowledgements the broker refused (`acknowledge_error_code` /
  partition errors of the answers), and acquisition-lock timeouts where the
  capture shows them: an offset acquired again although the capture holds
  no release of its earlier acquisition (per offset: acquisitions - 1 -
  releases, when positive; a record whose earlier deliveries are outside
  the capture is not counted);
* per (group, member): which partitions it acquired records from, what it
  acknowledged, its heartbeats (the broker's `heartbeat_interval_ms` and
  the intervals between its ShareGroupHeartbeat requests, its leaves: member
  epoch -1; the member epoch is the last before it left), and its share
  sessions: a member has one per broker it fetches from; a request with
  epoch 0 opens one, -1 closes it, and an opening after the first on the
  same broker is a reset (the client lost its session: an error, a
  reconnect); session errors are the answers' top-level errors.

Share sessions are per member and broker, not per partition, so they are
member columns. Tallies merge (every count adds up; the "last" values are
those of the latest exchange, and heartbeat times are merged and sorted
before the intervals are taken).
"""

from __future__ import annotations

from typing import Any

from kdissect.forensics.common import add_count, error_list, max_of, merge_counts, min_of, when
from kdissect.protocol.apis import ApiKey

SHARE_HEARTBEAT, SHARE_FETCH, SHARE_ACK = (int(ApiKey.SHARE_GROUP_HEARTBEAT), int(ApiKey.SHARE_FETCH),
                                           int(ApiKey.SHARE_ACKNOWLEDGE))
SHARE_APIS = frozenset((SHARE_HEARTBEAT, SHARE_FETCH, SHARE_ACK))
ACK_NAMES = {1: "accepted", 2: "released", 3: "rejected", 4: "renewed"}  # 0 is a gap
_ACKS = ("accepted", "released", "rejected", "renewed")


def _label(topic_id: Any) -> str | None:
    return None if topic_id is None else str(topic_id)


class _Partition:
    __slots__ = ("acquired", "redelivered", "acks", "ack_errors", "offsets", "members", "first_ts", "last_ts")

    def __init__(self) -> None:
        self.acquired = 0
        self.redelivered = 0
        self.acks: dict[str, int] = {}
        self.ack_errors: dict[int, int] = {}
        self.offsets: dict[int, list[int]] = {}  # offset -> [acquisitions, releases]
        self.members: set[str] = set()
        self.first_ts: int | None = None
        self.last_ts: int | None = None

    def seen(self, ts: int | None) -> None:
        self.first_ts, self.last_ts = min_of(self.first_ts, ts), max_of(self.last_ts, ts)

    def merge(self, other: _Partition) -> None:
        self.acquired += other.acquired
        self.redelivered += other.redelivered
        merge_counts(self.acks, other.acks)
        merge_counts(self.ack_errors, other.ack_errors)
        for offset, (acquired, released) in other.offsets.items():
            mine = self.offsets.setdefault(offset, [0, 0])
            mine[0] += acquired
            mine[1] += released
        self.members |= other.members
        self.seen(other.first_ts)
        self.seen(other.last_ts)

    def lock_timeouts(self) -> int:
        return sum(max(0, acquired - 1 - released) for acquired, released in self.offsets.values())


class _Member:
    __slots__ = ("client_ids", "partitions", "acquired", "acks", "heartbeats", "interval", "epoch", "leaves",
                 "opens", "closes", "max_session_epoch", "session_errors", "first_ts", "last_ts")

    def __init__(self) -> None:
        self.client_ids: set[str] = set()
        self.partitions: set[tuple[Any, int]] = set()
        self.acquired = 0
        self.acks: dict[str, int] = {}
        self.heartbeats: list[int] = []  # request times
        self.interval: tuple[Any, ...] | None = None  # (order, the broker's heartbeat_interval_ms)
        self.epoch: tuple[Any, ...] | None = None  # (order, member epoch)
        self.leaves = 0  # heartbeats with member epoch -1
        self.opens: dict[str, int] = {}  # broker -> share sessions opened
        self.closes = 0
        self.max_session_epoch: int | None = None
        self.session_errors: dict[int, int] = {}
        self.first_ts: int | None = None
        self.last_ts: int | None = None

    def seen(self, ts: int | None) -> None:
        self.first_ts, self.last_ts = min_of(self.first_ts, ts), max_of(self.last_ts, ts)

    def merge(self, other: _Member) -> None:
        self.client_ids |= other.client_ids
        self.partitions |= other.partitions
        self.acquired += other.acquired
        merge_counts(self.acks, other.acks)
        self.heartbeats.extend(other.heartbeats)
        self.interval = max_of(self.interval, other.interval)
        self.epoch = max_of(self.epoch, other.epoch)
        self.leaves += other.leaves
        merge_counts(self.opens, other.opens)
        self.closes += other.closes
        self.max_session_epoch = max_of(self.max_session_epoch, other.max_session_epoch)
        merge_counts(self.session_errors, other.session_errors)
        self.seen(other.first_ts)
        self.seen(other.last_ts)


class ShareTally:
    """The share-group tallies (see the module docstring)."""

    def __init__(self) -> None:
        self.partitions: dict[tuple[str | None, str | None, int], _Partition] = {}
        self.members: dict[tuple[str | None, str | None], _Member] = {}

    def _partition(self, group: str | None, label: str | None, partition: int) -> _Partition:
        key = (group, label, partition)
        found = self.partitions.get(key)
        if found is None:
            found = self.partitions[key] = _Partition()
        return found

    def _member(self, group: str | None, member_id: str | None) -> _Member:
        key = (group, member_id)
        found = self.members.get(key)
        if found is None:
            found = self.members[key] = _Member()
        return found

    def add(self, ex: Any) -> None:
        if ex.request is None:
            return
        body = ex.request.body
        group, member_id = getattr(body, "group_id", None), getattr(body, "member_id", None)
        member = self._member(group, member_id)
        if ex.client_id is not None:
            member.client_ids.add(ex.client_id)
        ts = when(ex)
        member.seen(ts)
        answer = ex.response.body if ex.response is not None else None
        order = (ts if ts is not None else -1, ex.client or "", ex.correlation_id or 0)
        if ex.api_key == SHARE_HEARTBEAT:
            if ex.request_ts is not None:
                member.heartbeats.append(ex.request_ts)
            if getattr(body, "member_epoch", None) == -1:
                member.leaves += 1
            elif answer is not None and not getattr(answer, "error_code", 0):
                # (a leave's answer carries epoch -1 and no interval: the values before it stay)
                interval = getattr(answer, "heartbeat_interval_ms", None)
                if interval:
                    member.interval = max_of(member.interval, (order, interval))
                member.epoch = max_of(member.epoch, (order, getattr(answer, "member_epoch", None)))
            return
        epoch = getattr(body, "share_session_epoch", None)
        if epoch == 0:
            add_count(member.opens, ex.broker or "?")
        elif epoch == -1:
            member.closes += 1
        elif epoch is not None:
            member.max_session_epoch = max_of(member.max_session_epoch, epoch)
        if answer is not None and getattr(answer, "error_code", None):
            add_count(member.session_errors, answer.error_code)
        for topic in getattr(body, "topics", None) or ():
            label = _label(getattr(topic, "topic_id", None))
            for entry in getattr(topic, "partitions", None) or ():
                place = self._partition(group, label, entry.partition_index)
                place.seen(ts)
                for batch in getattr(entry, "acknowledgement_batches", None) or ():
                    self._acknowledged(place, member, batch)
        if answer is None:
            return
        for topic in getattr(answer, "responses", None) or ():
            label = _label(getattr(topic, "topic_id", None))
            for entry in getattr(topic, "partitions", None) or ():
                place = self._partition(group, label, entry.partition_index)
                refused = getattr(entry, "acknowledge_error_code", None) if ex.api_key == SHARE_FETCH \
                    else getattr(entry, "error_code", None)
                if refused:
                    add_count(place.ack_errors, refused)
                for acquired in getattr(entry, "acquired_records", None) or ():
                    first, last = acquired.first_offset, acquired.last_offset
                    count = last - first + 1
                    if count <= 0:
                        continue
                    place.acquired += count
                    member.acquired += count
                    if acquired.delivery_count > 1:
                        place.redelivered += count
                    for offset in range(first, last + 1):
                        counts = place.offsets.get(offset)
                        if counts is None:
                            place.offsets[offset] = [1, 0]
                        else:
                            counts[0] += 1
                    place.members.add(member_id or "")
                    member.partitions.add((label, entry.partition_index))
                    place.seen(when(ex, response_first=True))

    @staticmethod
    def _acknowledged(place: _Partition, member: _Member, batch: Any) -> None:
        first, last = batch.first_offset, batch.last_offset
        types = list(getattr(batch, "acknowledge_types", None) or ())
        if not types or last < first:
            return
        for at, offset in enumerate(range(first, last + 1)):
            kind = types[0] if len(types) == 1 else (types[at] if at < len(types) else None)
            name = ACK_NAMES.get(kind)  # type: ignore[arg-type]
            if name is None:
                continue
            add_count(place.acks, name)
            add_count(member.acks, name)
            if kind == 2:
                counts = place.offsets.get(offset)
                if counts is None:
                    place.offsets[offset] = [0, 1]
                else:
                    counts[1] += 1

    def merge(self, other: ShareTally) -> None:
        for key, part in other.partitions.items():
            mine = self.partitions.get(key)
            if mine is None:
                self.partitions[key] = mine = _Partition()
            mine.merge(part)
        for who, member in other.members.items():
            found = self.members.get(who)
            if found is None:
                self.members[who] = found = _Member()
            found.merge(member)

    def labels(self) -> set[str | None]:
        return {key[1] for key in self.partitions} | {label for m in self.members.values() for label, _ in m.partitions}

    def rows(self, names: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(share_groups rows, share_group_members rows)."""
        partitions = []
        for (group, label, partition), part in self.partitions.items():
            partitions.append({
                "group_id": group, "topic": names.name(label), "partition": partition,
                "members": len(part.members), "acquired": part.acquired, "redelivered": part.redelivered,
                **{name: part.acks.get(name, 0) for name in _ACKS},
                "ack_errors": error_list(part.ack_errors), "lock_timeouts": part.lock_timeouts(),
                "first_ts": part.first_ts, "last_ts": part.last_ts})
        partitions.sort(key=lambda r: (r["group_id"] or "", r["topic"] or "", r["partition"]))
        members = []
        for (group, member_id), member in self.members.items():
            beats = sorted(member.heartbeats)
            gaps = [(b - a) / 1_000_000 for a, b in zip(beats, beats[1:])]
            members.append({
                "group_id": group, "member_id": member_id, "client_ids": sorted(member.client_ids),
                "member_epoch": member.epoch[1] if member.epoch else None,
                "partitions": sorted(f"{names.name(label)}-{partition}" for label, partition in member.partitions),
                "acquired": member.acquired, **{name: member.acks.get(name, 0) for name in _ACKS},
                "heartbeats": len(beats), "leaves": member.leaves,
                "heartbeat_interval_ms": member.interval[1] if member.interval else None,
                "heartbeat_gap_min_ms": min(gaps) if gaps else None,
                "heartbeat_gap_mean_ms": sum(gaps) / len(gaps) if gaps else None,
                "heartbeat_gap_max_ms": max(gaps) if gaps else None,
                "session_opens": sum(member.opens.values()),
                "session_resets": sum(max(0, n - 1) for n in member.opens.values()),
                "session_closes": member.closes, "max_session_epoch": member.max_session_epoch,
                "session_errors": error_list(member.session_errors),
                "first_ts": member.first_ts, "last_ts": member.last_ts})
        members.sort(key=lambda r: (r["group_id"] or "", r["member_id"] or ""))
        return partitions, members
