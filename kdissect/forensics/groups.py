"""Who keeps rebalancing: a consumer-group timeline, one row per generation.

Classic groups (JoinGroup / SyncGroup / Heartbeat / LeaveGroup, KIP-848's
"classic" protocol) are keyed by generation id: a JoinGroup answer names the
generation it joined, SyncGroup, Heartbeat and OffsetCommit requests name it.
KIP-848 consumer groups (ConsumerGroupHeartbeat) and share groups
(ShareGroupHeartbeat, KIP-932) are keyed by member epoch: a heartbeat answer
names the epoch the member reached, which is the group's epoch once the
member has caught up; its assignment is the last one the coordinator sent
(an answer without one leaves it unchanged).

Events that name no generation are placed by time when the tables are made:
a JoinGroup refused (MEMBER_ID_REQUIRED, REBALANCE_IN_PROGRESS ...) belongs
to the generation formed next, a LeaveGroup or a heartbeat with epoch 0/-1/-2
to the one current at its time.

Rebalance start: a classic generation's first JoinGroup request (refused
ones included), a consumer/share group epoch's first heartbeat whose answer
gave a member that epoch. End: the last successful SyncGroup answer of the
generation; for epochs, the answer at which the last member reached it.

Committed offsets (OffsetCommit, TxnOffsetCommit) are kept per generation
and partition (the last commit wins). Committed lag is the partition's high
watermark as last seen in the capture (by any fetching client) minus the
group's last committed offset; it is given on the row of that last commit
(earlier commits were superseded: their lag is null).

Memory: per generation its members, assignments and committed partitions,
and per group its joins and leaves (for the leave/rejoin flags); nothing per
heartbeat.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Any

from kdissect.forensics.common import (add_count, error_list, host_of, max_of, merge_counts, min_of, order_key,
                                       topic_label)
from kdissect.conn.kept_offset_commit import OffsetCommitRequestFrame, OffsetCommitResponseFrame
from kdissect.protocol.apis import ApiKey

_JOIN, _SYNC, _HEARTBEAT, _LEAVE = (int(ApiKey.JOIN_GROUP), int(ApiKey.SYNC_GROUP), int(ApiKey.HEARTBEAT),
                                    int(ApiKey.LEAVE_GROUP))
_COMMIT, _TXN_COMMIT = int(ApiKey.OFFSET_COMMIT), int(ApiKey.TXN_OFFSET_COMMIT)
_CONSUMER_HEARTBEAT, _SHARE_HEARTBEAT = int(ApiKey.CONSUMER_GROUP_HEARTBEAT), int(ApiKey.SHARE_GROUP_HEARTBEAT)
GROUP_APIS = frozenset((_JOIN, _SYNC, _HEARTBEAT, _LEAVE, _COMMIT, _TXN_COMMIT, _CONSUMER_HEARTBEAT,
                        _SHARE_HEARTBEAT))

CLASSIC, CONSUMER, SHARE = "classic", "consumer", "share"
# A storm: at least STORM_GENERATIONS generations started within STORM_WINDOW_NS
STORM_GENERATIONS = 5
STORM_WINDOW_NS = 5 * 60 * 1_000_000_000


def _answer(ex: Any) -> Any:
    """The exchange's decoded answer, None, or an OffsetCommit answer kept as
    its frame: one without error codes, which `_commit` reads as one without
    topics. (The request may have been decoded beside it: a request frame the
    skim refuses, in a damaged capture, is decoded in full.)"""
    response = ex.response
    if response is None or type(response) is OffsetCommitResponseFrame:
        return response
    return response.body


class Generation:
    """One generation (classic) or epoch (consumer, share) of a group."""

    __slots__ = ("protocol_type", "protocol_name", "leader", "members", "assignments", "start_ts", "end_ts",
                 "joins", "syncs", "heartbeats", "leaves", "commits", "errors", "first_ts", "last_ts", "joined")

    def __init__(self) -> None:
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader: str | None = None
        # member id -> [client ids, hosts]
        self.members: dict[str, tuple[set[str], set[str]]] = {}
        # member id -> (order, ((topic label, partition), ...)) (classic)
        self.assignments: dict[str, tuple[tuple[Any, ...], tuple[Any, ...]]] = {}
        self.start_ts: int | None = None
        self.end_ts: int | None = None
        self.joins = 0
        self.syncs = 0
        self.heartbeats = 0
        self.leaves = 0
        self.commits = 0
        self.errors: dict[int, int] = {}
        self.first_ts: int | None = None
        self.last_ts: int | None = None
        self.joined: dict[str, int] = {}  # member id -> its first successful JoinGroup request (classic)

    def member(self, member_id: str | None, client_id: str | None = None, host: str | None = None) -> None:
        if not member_id:
            return
        found = self.members.get(member_id)
        if found is None:
            found = self.members[member_id] = (set(), set())
        if client_id is not None:
            found[0].add(client_id)
        if host is not None:
            found[1].add(host)

    def seen(self, ts: int | None) -> None:
        self.first_ts = min_of(self.first_ts, ts)
        self.last_ts = max_of(self.last_ts, ts)

    def assign(self, member_id: str, order: tuple[Any, ...], partitions: tuple[Any, ...]) -> None:
        known = self.assignments.get(member_id)
        if known is None or order > known[0]:
            self.assignments[member_id] = (order, partitions)

    def merge(self, other: Generation) -> None:
        self.protocol_type = self.protocol_type or other.protocol_type
        self.protocol_name = self.protocol_name or other.protocol_name
        if other.leader and (not self.leader or other.leader < self.leader):
            self.leader = other.leader
        for member_id, (clients, hosts) in other.members.items():
            self.member(member_id)
            self.members[member_id][0].update(clients)
            self.members[member_id][1].update(hosts)
        for member_id, (order, partitions) in other.assignments.items():
            self.assign(member_id, order, partitions)
        self.start_ts = min_of(self.start_ts, other.start_ts)
        self.end_ts = max_of(self.end_ts, other.end_ts)
        self.joins += other.joins
        self.syncs += other.syncs
        self.heartbeats += other.heartbeats
        self.leaves += other.leaves
        self.commits += other.commits
        merge_counts(self.errors, other.errors)
        self.first_ts = min_of(self.first_ts, other.first_ts)
        self.last_ts = max_of(self.last_ts, other.last_ts)
        for member_id, ts in other.joined.items():
            self.joined[member_id] = min_of(self.joined.get(member_id), ts)


class Commit:
    __slots__ = ("order", "offset", "ts", "client_id", "commits", "errors")

    def __init__(self) -> None:
        self.order: tuple[Any, ...] = ()
        self.offset: int | None = None
        self.ts: int | None = None
        self.client_id: str | None = None
        self.commits = 0
        self.errors = 0

    def merge(self, other: Commit) -> None:
        self.commits += other.commits
        self.errors += other.errors
        if other.order > self.order:
            self.order, self.offset, self.ts, self.client_id = other.order, other.offset, other.ts, other.client_id


def _partitions_of_assignment(value: Any) -> tuple[Any, ...] | None:
    """((topic, partition), ...) of a consumer-protocol assignment; () for
    empty bytes; None when the bytes are not the consumer protocol."""
    if value is None:
        return None
    data = getattr(value, "data", None)
    if data is None:
        return () if isinstance(value, (bytes, bytearray)) and not value else None
    found = []
    for entry in getattr(data, "assigned_partitions", None) or ():
        for partition in getattr(entry, "partitions", None) or ():
            found.append((getattr(entry, "topic", None), partition))
    return tuple(sorted(found, key=_tp_order))


def _partitions_of_topic_ids(topic_partitions: Any) -> tuple[Any, ...]:
    found = []
    for entry in topic_partitions or ():
        label = None if getattr(entry, "topic_id", None) is None else str(entry.topic_id)
        for partition in getattr(entry, "partitions", None) or ():
            found.append((label, partition))
    return tuple(sorted(found, key=_tp_order))


def _tp_order(tp: tuple[Any, ...]) -> tuple[Any, ...]:
    return (tp[0] or "", tp[1] if tp[1] is not None else -1)


class GroupTally:
    def __init__(self) -> None:
        self.generations: dict[tuple[str, int], Generation] = {}
        self.kinds: dict[str, set[str]] = {}  # group -> protocols seen (classic / consumer / share)
        # group -> [(ts, what, member_id, client_id, host, error)] for events without a generation:
        # what: "join" (refused JoinGroup), "leave", "error"
        self.floating: dict[str, list[tuple[Any, ...]]] = {}
        # group -> [(ts, "join" | "leave", client_id, host)] of every join and leave
        self.membership: dict[str, list[tuple[Any, ...]]] = {}
        # (group, member) -> {epoch: (order, assignment)} for consumer/share groups
        self.epoch_assignments: dict[tuple[str, str], dict[int, tuple[tuple[Any, ...], tuple[Any, ...]]]] = {}
        # (group, generation, label, partition) -> Commit
        self.commits: dict[tuple[Any, ...], Commit] = {}

    # -- feeding ----------------------------------------------------------------

    def _generation(self, group: str, generation: int) -> Generation:
        key = (group, generation)
        found = self.generations.get(key)
        if found is None:
            found = self.generations[key] = Generation()
        return found

    def _kind(self, group: str, kind: str) -> None:
        self.kinds.setdefault(group, set()).add(kind)

    def add(self, ex: Any, history: Any = None) -> None:
        """One exchange; `history` (a kdissect.forensics.lag_history.LagHistory)
        gets the offsets committed."""
        key = ex.api_key
        if key not in GROUP_APIS or ex.request is None:
            return
        if type(ex.request) is OffsetCommitRequestFrame:  # (kept as its frame: kdissect.conn.kept_offset_commit)
            self._framed_commit(ex, ex.request.commit(), history)
            return
        request = ex.request.body
        response = _answer(ex)
        group = getattr(request, "group_id", None)
        if group is None:
            return
        host = host_of(ex.client)
        if key == _JOIN:
            self._join(ex, group, request, response, host)
        elif key == _SYNC:
            self._sync(ex, group, request, response, host)
        elif key == _HEARTBEAT:
            generation = self._generation(group, request.generation_id)
            self._kind(group, CLASSIC)
            generation.heartbeats += 1
            generation.member(request.member_id, ex.client_id, host)
            generation.seen(ex.request_ts)
            if response is not None and response.error_code:
                add_count(generation.errors, response.error_code)
        elif key == _LEAVE:
            self._leave(ex, group, request, response, host)
        elif key in (_COMMIT, _TXN_COMMIT):
            generation_id = getattr(request, "generation_id_or_member_epoch", None)
            if generation_id is None:
                generation_id = getattr(request, "generation_id", -1)
            committed = [(topic_label(topic, "name"), partition.partition_index, partition.committed_offset)
                         for topic in getattr(request, "topics", None) or ()
                         for partition in getattr(topic, "partitions", None) or ()]
            self._commit(ex, group, -1 if generation_id is None else generation_id,
                         getattr(request, "member_id", None), committed, response, host, history)
        else:
            self._heartbeat(ex, group, request, response, host, CONSUMER if key == _CONSUMER_HEARTBEAT else SHARE)

    def _float(self, group: str, ts: int | None, what: str, member_id: str | None, client_id: str | None,
               host: str | None, error: int) -> None:
        self.floating.setdefault(group, []).append((ts if ts is not None else -1, what, member_id or "",
                                                    client_id or "", host or "", error))

    def _membership(self, group: str, ts: int | None, what: str, client_id: str | None, host: str | None) -> None:
        self.membership.setdefault(group, []).append((ts if ts is not None else -1, what, client_id or "", host or ""))

    def _join(self, ex: Any, group: str, request: Any, response: Any, host: str | None) -> None:
        self._kind(group, CLASSIC)
        ts = ex.request_ts
        self._membership(group, ts, "join", ex.client_id, host)
        error = getattr(response, "error_code", 0) if response is not None else 0
        generation_id = getattr(response, "generation_id", -1) if response is not None else -1
        member_id = (getattr(response, "member_id", None) if response is not None else None) or request.member_id
        if response is None or error or generation_id is None or generation_id < 0:
            self._float(group, ts, "join", member_id, ex.client_id, host, error or 0)
            return
        generation = self._generation(group, generation_id)
        generation.joins += 1
        generation.start_ts = min_of(generation.start_ts, ts)
        generation.seen(ts)
        generation.member(member_id, ex.client_id, host)
        if member_id and ts is not None:
            generation.joined[member_id] = min_of(generation.joined.get(member_id), ts)
        generation.protocol_type = (getattr(response, "protocol_type", None) or generation.protocol_type
                                    or request.protocol_type)
        generation.protocol_name = getattr(response, "protocol_name", None) or generation.protocol_name
        if response.leader and (not generation.leader or response.leader < generation.leader):
            generation.leader = response.leader
        for member in getattr(response, "members", None) or ():
            generation.member(member.member_id)

    def _sync(self, ex: Any, group: str, request: Any, response: Any, host: str | None) -> None:
        self._kind(group, CLASSIC)
        generation = self._generation(group, request.generation_id)
        generation.syncs += 1
        generation.seen(ex.request_ts)
        generation.member(request.member_id, ex.client_id, host)
        order = order_key(ex, ex.request_ts)
        for assignment in getattr(request, "assignments", None) or ():  # the leader's plan
            generation.member(assignment.member_id)
            partitions = _partitions_of_assignment(assignment.assignment)
            if partitions is not None:
                generation.assign(assignment.member_id, (0, *order), partitions)
        if response is None:
            return
        if response.error_code:
            add_count(generation.errors, response.error_code)
            return
        generation.end_ts = max_of(generation.end_ts, ex.response_ts)
        generation.protocol_name = generation.protocol_name or getattr(response, "protocol_name", None)
        partitions = _partitions_of_assignment(response.assignment)
        if partitions is not None:  # what the member was given: wins over the plan
            generation.assign(request.member_id, (1, *order), partitions)

    def _leave(self, ex: Any, group: str, request: Any, response: Any, host: str | None) -> None:
        self._kind(group, CLASSIC)
        members = [m.member_id for m in getattr(request, "members", None) or ()]
        if not members and getattr(request, "member_id", None):
            members = [request.member_id]
        error = getattr(response, "error_code", 0) if response is not None else 0
        for member_id in members or [""]:
            self._float(group, ex.request_ts, "leave", member_id, ex.client_id, host, 0)
        self._membership(group, ex.request_ts, "leave", ex.client_id, host)
        if error:
            self._float(group, ex.request_ts, "error", members[0] if members else "", ex.client_id, host, error)

    def _framed_commit(self, ex: Any, commit: Any, history: Any) -> None:
        """An OffsetCommit whose request (and answer, if it carries no error
        code) was kept as its frame (kdissect.conn.kept_offset_commit)."""
        group, generation_id, member_id, committed = commit
        if group is None:
            return
        self._commit(ex, group, generation_id, member_id, committed, _answer(ex), host_of(ex.client), history)

    def _commit(self, ex: Any, group: str, generation_id: int, member_id: str | None,
                committed: list[tuple[Any, Any, Any]], response: Any, host: str | None, history: Any) -> None:
        """A commit: `committed` its (topic label, partition, offset) in request order."""
        generation = self._generation(group, generation_id)
        generation.commits += 1
        generation.seen(ex.request_ts)
        if generation_id >= 0:
            generation.member(member_id, ex.client_id, host)
        errors: dict[tuple[Any, ...], int] = {}
        # (an answer kept as its frame has no partition errors, and no
        # `topics`: a failed getattr costs an exception)
        for topic in (getattr(response, "topics", None) if type(response) is not OffsetCommitResponseFrame
                      else None) or ():
            label = topic_label(topic, "name")
            for partition in getattr(topic, "partitions", None) or ():
                if partition.error_code:
                    errors[(label, partition.partition_index)] = partition.error_code
                    add_count(generation.errors, partition.error_code)
        order = order_key(ex, ex.request_ts)
        for label, index, offset in committed:
            key = (group, generation_id, label, index)
            commit = self.commits.get(key)
            if commit is None:
                commit = self.commits[key] = Commit()
            commit.commits += 1
            if (label, index) in errors or response is None:
                commit.errors += (label, index) in errors
                continue  # not committed (or not known to be)
            if history is not None and ex.request_ts is not None and offset is not None and offset >= 0:
                history.add_commit(group, label, index, order, ex.request_ts, offset)
            if order > commit.order:
                commit.order, commit.offset, commit.ts = order, offset, ex.request_ts
                commit.client_id = ex.client_id

    def _heartbeat(self, ex: Any, group: str, request: Any, response: Any, host: str | None, kind: str) -> None:
        self._kind(group, kind)
        asked = request.member_epoch
        member_id = (getattr(response, "member_id", None) if response is not None else None) or request.member_id
        error = response.error_code if response is not None else 0
        given = response.member_epoch if response is not None and not error else None
        if asked == 0:
            self._membership(group, ex.request_ts, "join", ex.client_id, host)
        elif asked < 0:
            self._membership(group, ex.request_ts, "leave", ex.client_id, host)
            self._float(group, ex.request_ts, "leave", member_id, ex.client_id, host, 0)
        epoch = given if given is not None and given > 0 else asked if asked > 0 else None
        if epoch is None:
            if error:
                self._float(group, ex.request_ts, "error", member_id, ex.client_id, host, error)
            return
        generation = self._generation(group, epoch)
        generation.heartbeats += 1
        generation.seen(ex.request_ts)
        generation.member(member_id, ex.client_id, host)
        if asked == 0:
            generation.joins += 1
        if error:
            add_count(generation.errors, error)
            return
        if given is not None and given > 0:
            if asked != given:  # this answer moved the member to the epoch
                generation.start_ts = min_of(generation.start_ts, ex.request_ts)
                generation.end_ts = max_of(generation.end_ts, ex.response_ts)
            assignment = getattr(response, "assignment", None)
            if assignment is not None and member_id:
                partitions = _partitions_of_topic_ids(getattr(assignment, "topic_partitions", None))
                by_epoch = self.epoch_assignments.setdefault((group, member_id), {})
                order = order_key(ex, ex.response_ts)
                known = by_epoch.get(given)
                if known is None or order > known[0]:
                    by_epoch[given] = (order, partitions)

    # -- merging ----------------------------------------------------------------

    def merge(self, other: GroupTally) -> None:
        for key, generation in other.generations.items():
            self._generation(*key).merge(generation)
        for group, kinds in other.kinds.items():
            self.kinds.setdefault(group, set()).update(kinds)
        for group, events in other.floating.items():
            self.floating.setdefault(group, []).extend(events)
        for group, events in other.membership.items():
            self.membership.setdefault(group, []).extend(events)
        for member_key, by_epoch in other.epoch_assignments.items():
            mine = self.epoch_assignments.setdefault(member_key, {})
            for epoch, value in by_epoch.items():
                if epoch not in mine or value[0] > mine[epoch][0]:
                    mine[epoch] = value
        for commit_key, commit in other.commits.items():
            known = self.commits.get(commit_key)
            if known is None:
                self.commits[commit_key] = commit
            else:
                known.merge(commit)

    # -- tables -------------------------------------------------------------------

    def group_type(self, group: str) -> str:
        kinds = self.kinds.get(group, set())
        if len(kinds) == 1:
            return next(iter(kinds))
        return "+".join(sorted(kinds)) if kinds else "offsets-only"

    def _placed(self) -> dict[tuple[str, int], Generation]:
        """Copies of the generations with the events that name none placed
        (the tally itself is left as it is). A refused JoinGroup goes to the
        generation its member joined next (MEMBER_ID_REQUIRED answers name the
        member id the retry uses), else to the first generation starting after
        it; other events to the generation current at their time."""
        placed: dict[tuple[str, int], Generation] = {}
        for key, generation in self.generations.items():
            copy = placed[key] = Generation()
            copy.merge(generation)
        by_group: dict[str, list[tuple[int, int]]] = {}
        for (group, generation_id), generation in placed.items():
            if generation_id >= 0:
                start = generation.start_ts if generation.start_ts is not None else generation.first_ts
                by_group.setdefault(group, []).append((generation_id, start if start is not None else -1))
        for group, events in self.floating.items():
            known = sorted(by_group.get(group, []))
            # start times in generation order, made non-decreasing
            starts: list[int] = []
            for _generation_id, start in known:
                starts.append(max(start, starts[-1]) if starts else start)
            for ts, what, member_id, _client, _host, error in sorted(events):
                if known:
                    at = None
                    if what == "join" and member_id:
                        at = next((i for i, (generation_id, _) in enumerate(known)
                                   if placed[(group, generation_id)].joined.get(member_id, -1) >= ts), None)
                    if at is None and what == "join":  # the generation formed next
                        at = min(bisect_left(starts, ts), len(known) - 1)
                    elif at is None:  # the generation current then
                        at = max(0, bisect_right(starts, ts) - 1)
                    generation = placed[(group, known[at][0])]
                else:
                    generation = placed.get((group, -1)) or Generation()
                    placed[(group, -1)] = generation
                if what == "join":
                    generation.joins += 1
                    generation.start_ts = min_of(generation.start_ts, ts if ts >= 0 else None)
                elif what == "leave":
                    generation.leaves += 1
                if error:
                    add_count(generation.errors, error)
        return placed

    def rows(self, names: Any, high_watermarks: dict[tuple[Any, ...], int]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(generation rows, committed-offset rows)."""
        commit_rows = self._commit_rows(names, high_watermarks)
        committed: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        for row in commit_rows:
            if row["committed_offset"] is not None:
                committed.setdefault((row["group_id"], row["generation_id"]), []).append(row)
        placed = self._placed()
        rows = []
        for (group, generation_id) in sorted(placed):
            generation = placed[(group, generation_id)]
            kind = self.group_type(group)
            assignments = self._assignments(group, generation_id, generation, kind)
            member_ids = sorted(generation.members)
            clients = sorted({c for member in generation.members.values() for c in member[0]})
            hosts = sorted({h for member in generation.members.values() for h in member[1]})
            commits = committed.get((group, generation_id), [])
            lags = [row["committed_lag"] for row in commits if row["committed_lag"] is not None]
            start, end = generation.start_ts, generation.end_ts
            rows.append({
                "group_id": group, "group_type": kind, "generation_id": generation_id,
                "protocol_type": generation.protocol_type, "protocol_name": generation.protocol_name,
                "members": len(member_ids), "member_ids": member_ids, "client_ids": clients, "hosts": hosts,
                "leader": generation.leader,
                "assignments": [f"{member_id}=" + ",".join(f"{names.name(t)}-{p}" for t, p in partitions)
                                for member_id, partitions in sorted(assignments.items())],
                "rebalance_start": start, "rebalance_end": end,
                "rebalance_ms": (end - start) / 1_000_000 if start is not None and end is not None and end >= start
                else None,
                "joins": generation.joins, "syncs": generation.syncs, "heartbeats": generation.heartbeats,
                "leaves": generation.leaves, "commits": generation.commits, "errors": error_list(generation.errors),
                "committed_partitions": len(commits),
                "committed_lag": sum(lags) if lags else None,
                "first_ts": generation.first_ts, "last_ts": generation.last_ts,
            })
        return rows, commit_rows

    def lag_rows(self, names: Any, commit_rows: list[dict[str, Any]],
                 markers: dict[tuple[Any, ...], set[int]] | None = None, times: dict[tuple[Any, ...], Any] | None = None
                 ) -> list[dict[str, Any]]:
        """The group_lag table: one row per group and partition as of the
        capture's end, as `kafka-consumer-groups --describe` shows it: the
        group's last committed offset (whichever member committed it), the
        partition's last high watermark, their difference, and the member
        that owns the partition in the group's last generation (a partition
        owned but never committed has no offset and no lag; share groups,
        whose members share partitions, are left to share_groups). `markers`:
        (topic, partition) -> offsets of the transaction markers seen in
        fetched data; a marker between the committed offset and the high
        watermark is not lag (a read_committed consumer never gets it as a
        record, and may commit the offset before it). `times`: (topic,
        partition) -> its records' timestamps (kdissect.forensics.lag_history),
        for the lag in time (lag_ms)."""
        from kdissect.forensics.lag_history import lag_ms

        markers = markers or {}
        times = times or {}
        current: dict[tuple[Any, ...], dict[str, Any]] = {}
        for row in commit_rows:
            if row["committed_offset"] is None:
                continue
            key = (row["group_id"], row["topic"], row["partition"])
            known = current.get(key)
            when = (row["last_commit_ts"] if row["last_commit_ts"] is not None else -1, row["generation_id"])
            if known is None or when >= (known["last_commit_ts"] if known["last_commit_ts"] is not None else -1,
                                         known["generation_id"]):
                current[key] = row
        placed = self._placed()
        last_generation: dict[str, int] = {}
        for group, generation_id in placed:
            if generation_id >= 0:
                last_generation[group] = max(last_generation.get(group, generation_id), generation_id)
        owners: dict[tuple[Any, ...], tuple[str, str | None, int]] = {}
        for group, generation_id in last_generation.items():
            kind = self.group_type(group)
            if kind == SHARE:  # members share partitions and commit nothing: the share_groups table
                continue
            generation = placed[(group, generation_id)]
            assigned = self._assignments(group, generation_id, generation, kind)
            for member_id, partitions in sorted(assigned.items()):
                member = generation.members.get(member_id)
                client = min(member[0]) if member and member[0] else None
                for label, partition in partitions:
                    owners[(group, names.name(label), partition)] = (member_id, client, generation_id)
        rows = []
        for key in sorted(set(current) | set(owners), key=lambda k: (k[0], k[1] or "", k[2] if k[2] is not None
                                                                      else -1)):
            group, topic, partition = key
            commit = current.get(key)
            owner = owners.get(key)
            lag = None
            if commit and commit["high_watermark"] is not None and commit["committed_offset"] >= 0:
                low, high = commit["committed_offset"], commit["high_watermark"]
                lag = max(0, high - low - sum(1 for o in markers.get((topic, partition), ()) if low <= o < high))
            rows.append({
                "group_id": group, "topic": topic, "partition": partition,
                "lag": lag,
                "lag_ms": lag_ms(times.get((topic, partition)), lag, commit["committed_offset"] if commit else None,
                                 commit["high_watermark"] if commit else None),
                "committed_offset": commit["committed_offset"] if commit else None,
                "high_watermark": commit["high_watermark"] if commit else None,
                "owner_member_id": owner[0] if owner else None, "owner_client_id": owner[1] if owner else None,
                "generation_id": owner[2] if owner else last_generation.get(group),
                "last_commit_ts": commit["last_commit_ts"] if commit else None,
                "committed_by": commit["client_id"] if commit else None,
            })
        return rows

    def _assignments(self, group: str, generation_id: int, generation: Generation, kind: str) -> dict[str, tuple[Any, ...]]:
        if kind in (CONSUMER, SHARE):
            found = {}
            for member_id in generation.members:
                by_epoch = self.epoch_assignments.get((group, member_id), {})
                earlier = [epoch for epoch in by_epoch if epoch <= generation_id]
                if earlier:
                    found[member_id] = by_epoch[max(earlier)][1]
            return found
        return {member_id: partitions for member_id, (_order, partitions) in generation.assignments.items()}

    def _commit_rows(self, names: Any, high_watermarks: dict[tuple[Any, ...], int]) -> list[dict[str, Any]]:
        merged: dict[tuple[Any, ...], Commit] = {}
        for (group, generation_id, label, partition), commit in self.commits.items():
            key = (group, generation_id, names.name(label), partition)
            mine = merged.get(key)
            if mine is None:
                merged[key] = mine = Commit()
            mine.merge(commit)
        latest: dict[tuple[Any, ...], tuple[Any, ...]] = {}  # (group, topic, partition) -> the order of its last commit
        for (group, _generation_id, topic, partition), commit in merged.items():
            if commit.offset is not None:
                partition_key = (group, topic, partition)
                latest[partition_key] = max(latest.get(partition_key, ()), commit.order)
        rows = []
        for key in sorted(merged, key=lambda k: (k[0], k[1], k[2] or "", k[3] if k[3] is not None else -1)):
            group, generation_id, topic, partition = key
            commit = merged[key]
            watermark = high_watermarks.get((topic, partition))
            lag = None
            current = commit.offset is not None and latest.get((group, topic, partition)) == commit.order
            if current and watermark is not None and commit.offset is not None and commit.offset >= 0:
                lag = max(0, watermark - commit.offset)
            rows.append({"group_id": group, "generation_id": generation_id, "topic": topic, "partition": partition,
                         "committed_offset": commit.offset, "commits": commit.commits, "failed": commit.errors,
                         "last_commit_ts": commit.ts, "client_id": commit.client_id, "high_watermark": watermark,
                         "committed_lag": lag})
        return rows

    # -- flags ----------------------------------------------------------------------

    def storms(self, generation_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Groups with at least STORM_GENERATIONS generations started within STORM_WINDOW_NS."""
        starts: dict[str, list[int]] = {}
        for row in generation_rows:
            start = row["rebalance_start"] if row["rebalance_start"] is not None else None
            if start is not None and row["generation_id"] >= 0:
                starts.setdefault(row["group_id"], []).append(start)
        found = []
        for group, times in sorted(starts.items()):
            times.sort()
            best, best_at = 0, 0
            for i, start in enumerate(times):
                n = bisect_right(times, start + STORM_WINDOW_NS) - i
                if n > best:
                    best, best_at = n, i
            if best >= STORM_GENERATIONS:
                found.append({"group_id": group, "group_type": self.group_type(group), "generations": len(times),
                              "in_window": best, "window_start": times[best_at],
                              "window_end": times[best_at + best - 1]})
        return found

    def rejoins(self) -> list[dict[str, Any]]:
        """Members (client id and host) that left a group and joined it again."""
        found = []
        for group, events in sorted(self.membership.items()):
            by_member: dict[tuple[str, str], list[tuple[int, str]]] = {}
            for ts, what, client_id, host in events:
                by_member.setdefault((client_id, host), []).append((ts, what))
            for (client_id, host), seen in sorted(by_member.items()):
                seen.sort()
                leaves = sum(1 for _, what in seen if what == "leave")
                rejoins = sum(1 for (_, a), (_, b) in zip(seen, seen[1:]) if a == "leave" and b == "join")
                if rejoins:
                    found.append({"group_id": group, "client_id": client_id, "host": host, "leaves": leaves,
                                  "rejoins": rejoins, "joins": sum(1 for _, what in seen if what == "join")})
        return found
