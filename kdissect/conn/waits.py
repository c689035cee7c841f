"""Waits the protocol asks for, told apart from the broker's own time.

An exchange's wire latency can be long because the protocol asked the broker
to wait. `classify` names such a wait (`wait_reason`) and its length; the
exchange's `service_ms` is then the latency minus the wait (null when the
whole latency is the wait). A wait is named only where it shows in the
exchange's timing: an exchange the broker answered at once is never a wait,
whatever its API. The rules and their tolerances:

* long_poll: a Fetch or ShareFetch answered without records after at least
  `LONG_POLL_SHARE` (90%) of its `max_wait_ms` (brokers' delay timers fire a
  little early or late): the broker waited for data that did not come. The
  whole latency is the wait. A fetch answered early without records is not
  a wait. A fetch held with records may have waited for them: the wait
  ends when the data arrived (kdissect.conn.arrivals: the Produce that wrote it,
  else the batch's timestamp), the rest is service; where neither tells,
  `long_poll_unknown` with no wait or service length.
* group_barrier: a JoinGroup answered successfully after `BARRIER_MIN_NS`
  (10 ms) or more: the group coordinator holds every member's JoinGroup
  until the group's members have joined (up to `rebalance_timeout_ms`); and
  a follower's SyncGroup (no assignments in it) held until the leader sent
  the assignment. The whole latency is the wait. Answers with an error
  (MEMBER_ID_REQUIRED, REBALANCE_IN_PROGRESS, ...) are not waits.
* throttle: a throttled answer (`throttle_time_ms` > 0) either was held
  for its throttle time (brokers before Kafka 2.0, for versions before an
  API's KIP-219 cut-over, generated from the specs' notes:
  `ANSWERED_BEFORE_THROTTLING_FROM`) or was sent at once while the broker
  mutes the connection for that time (KIP-219). Which one happened shows in
  the timing: a response before its API's cut-over counts as held only when
  its latency is at least `HELD_SHARE` (90%) of the throttle time; the wait
  is then `min(throttle_time_ms, latency)`. Otherwise the connection is muted
  until the response's time plus the throttle time, and a request the client
  sends before that (an old client does not know to wait; Kafka 3.9
  answers Fetch v3 at once and mutes, as the lab's `throttle_old_kafka3`
  capture shows) waits until the mute ends: its wait is the rest of the mute
  (capped by its latency) and it carries `sent-while-muted`. So does a
  pipelined request sent before the throttled answer (the broker had not
  read it: see queued), without the problem: its client did nothing wrong. A fetch that
  waited out a mute and then long-polled gets both waits (reason: throttle).

Not waits: ConsumerGroupHeartbeat and ShareGroupHeartbeat (answered at once;
their intervals pace the client, not the broker), OffsetCommit, and every
other API: their latency is service.

* queued: a broker reads a connection's next request only once it has
  answered the one before (Apache Kafka mutes the connection while a request
  is in hand; responses come in request order), so a request completed
  before the previous response on its connection waited for that answer:
  its wait is from its request to that response (capped by its latency) and
  the broker's time for it starts there. Pipelined requests (several in
  flight) and the Java consumer's session-closing Fetch sent while its last
  long poll waits (the lab's `waits_more_kafka`) are such. The rules above
  then apply to what is left of the latency.

Where several waits add up, `wait_ms` is their sum and `wait_reason` names
the mute where one held the request (whichever of the mute and the earlier
answer ended later held it), else the protocol's own wait, else the queue.
"""

from __future__ import annotations

from typing import Any

from kdissect.conn.arrivals import DATA_WAIT_MIN_NS, decide, fetch_arrival
from kdissect.conn.decoding import decode_tolerant
from kdissect.model.exchange import LONG_POLL_UNKNOWN, Exchange
from kdissect.protocol.codec import decode_request
from kdissect.protocol._generated.throttling import ANSWERED_BEFORE_THROTTLING_FROM
from kdissect.protocol.apis import ApiKey

FETCH, JOIN_GROUP, SYNC_GROUP, SHARE_FETCH = (int(ApiKey.FETCH), int(ApiKey.JOIN_GROUP), int(ApiKey.SYNC_GROUP),
                                              int(ApiKey.SHARE_FETCH))
LONG_POLL_SHARE = 0.9
HELD_SHARE = 0.9
BARRIER_MIN_NS = 10_000_000

LONG_POLL = "long_poll"
GROUP_BARRIER = "group_barrier"
THROTTLE = "throttle"
QUEUED = "queued"
REASONS = (LONG_POLL, GROUP_BARRIER, THROTTLE, QUEUED, LONG_POLL_UNKNOWN)

# APIs whose request carries what a wait rule needs (kept on the exchange)
HINT_APIS = frozenset((FETCH, JOIN_GROUP, SYNC_GROUP, SHARE_FETCH))


def request_hint(api_key: int, body: Any) -> tuple[Any, ...] | None:
    """What the wait rules need from a request body: (max_wait_ms, min_bytes,
    {(topic label, partition): fetch offset}) of a fetch (no offsets for a
    ShareFetch), (rebalance_timeout_ms,) of a JoinGroup, (is_leader,) of a
    SyncGroup; None for other APIs."""
    if api_key in (FETCH, SHARE_FETCH):
        offsets: dict[tuple[Any, Any], int | None] = {}
        if api_key == FETCH:
            for topic in getattr(body, "topics", None) or ():
                label = getattr(topic, "topic", None) or getattr(topic, "topic_id", None)
                label = None if label is None else str(label)
                for entry in getattr(topic, "partitions", None) or ():
                    offsets[(label, getattr(entry, "partition", None))] = getattr(entry, "fetch_offset", None)
        return (getattr(body, "max_wait_ms", None), getattr(body, "min_bytes", None), offsets)
    if api_key == JOIN_GROUP:
        timeout = getattr(body, "rebalance_timeout_ms", None)
        return (timeout if timeout is not None else getattr(body, "session_timeout_ms", None),)
    if api_key == SYNC_GROUP:
        return (bool(getattr(body, "assignments", None)),)
    return None


def classify(api_key: int | None, api_version: int | None, hint: tuple[Any, ...] | None, latency_ns: int,
             records: int | None, error_code: int | None, throttle_time_ms: int | None,
             throttle_delays_response: bool) -> tuple[str, int] | None:
    """(reason, wait in ns) of an answered exchange (its latency, or what is
    left of it after a mute), or None. `throttle_delays_response`: the
    version is before its API's KIP-219 cut-over."""
    if throttle_time_ms and throttle_time_ms > 0 and throttle_delays_response and \
            latency_ns >= HELD_SHARE * throttle_time_ms * 1_000_000:
        return THROTTLE, min(throttle_time_ms * 1_000_000, latency_ns)
    if api_key in (FETCH, SHARE_FETCH) and hint is not None:
        max_wait_ms = hint[0]
        if max_wait_ms and max_wait_ms > 0 and not records and \
                latency_ns >= LONG_POLL_SHARE * max_wait_ms * 1_000_000:
            return LONG_POLL, latency_ns
    elif api_key == JOIN_GROUP:
        if not error_code and latency_ns >= BARRIER_MIN_NS:
            return GROUP_BARRIER, latency_ns
    elif api_key == SYNC_GROUP and hint is not None:
        if not hint[0] and not error_code and latency_ns >= BARRIER_MIN_NS:
            return GROUP_BARRIER, latency_ns
    return None


def throttle_holds_response(api_key: int | None, api_version: int | None) -> bool:
    """Whether a broker holds this version's response for its throttle time
    (before KIP-219's cut-over) rather than answering and muting."""
    cut = ANSWERED_BEFORE_THROTTLING_FROM.get(api_key)  # type: ignore[arg-type]
    return cut is not None and api_version is not None and api_version < cut


def decoded_hint(api_key: int, frame: bytes) -> tuple[Any, ...] | None:
    """The wait hint of a request frame (None when it does not decode)."""
    request = decode_tolerant(decode_request, frame)[0]
    return None if request is None else request_hint(api_key, request.body)


class WaitTimer:
    """The wait rules applied to one connection's exchanges as they complete:
    it remembers what the rules need across exchanges (the mute a throttled
    answer started, when the latest answer came) and sets each answered
    exchange's `wait_reason` and `wait_ns`."""

    __slots__ = ("muted_until", "last_answer_ts")

    def __init__(self) -> None:
        # KIP-219: the broker answered a throttled request at once and will
        # not read this connection until then (ns)
        self.muted_until = 0
        # when the latest response on this connection was complete (ns): the
        # broker reads the next request only after answering the one before
        self.last_answer_ts = 0

    def sent_while_muted(self, ex: Exchange) -> bool:
        """Whether a request was sent while the broker muted the connection;
        if so its wait so far is the rest of the mute (capped when answered)."""
        sent = ex.request_first_ts if ex.request_first_ts is not None else ex.request_ts
        if not self.muted_until or sent is None or sent >= self.muted_until:
            return False
        ex.wait_ns = self.muted_until - sent
        ex.add_problem("sent-while-muted", "sent while the broker muted the connection for throttling "
                                           f"({ex.wait_ns / 1_000_000:g} ms left)")
        return True

    def time(self, ex: Exchange, request_ts: int, response_ts: int) -> None:
        """The waits before the broker could serve an answered request (a
        mute, the answer to an earlier request), the wait the protocol asked
        for, and the mute a throttled answer starts (KIP-219). `request_ts`
        and `response_ts` are the exchange's, as the caller read them."""
        latency = response_ts - request_ts
        # a request sent while muted waited for the mute first (noted at request time);
        # so did one sent before an answer that started a mute (KIP-219): the
        # broker had not read it yet (one request per connection in hand) and
        # reads nothing on a muted connection
        # (the exchange's fields are read and set once each: from compiled code
        # an attribute of this Python class costs a lookup)
        asked = ex.wait_ns
        muted = min(latency, asked) if asked else 0
        if self.muted_until > request_ts:  # type: ignore[operator]
            muted = max(muted, min(latency, self.muted_until - request_ts))  # type: ignore[operator]
        # a request sent before the previous answer waited for it (in order: answers come in order)
        previous = self.last_answer_ts
        queued = min(latency, previous - request_ts) if previous > request_ts else 0  # type: ignore[operator]
        if response_ts > previous:  # type: ignore[operator]
            self.last_answer_ts = response_ts  # type: ignore[assignment]
        before = max(muted, queued)
        before_reason = (THROTTLE if muted >= queued else QUEUED) if before else None
        ex.socket_wait_ns = before  # (the broker's own account starts after it: kdissect.conn.brokerlog)
        decided = False  # (the waits set by the batch timestamps' rule; else set below)
        throttle = ex.throttle_time_ms
        api_key = ex.api_key
        old_version = bool(throttle) and throttle_holds_response(api_key, ex.api_version)
        found = None
        held_sets = ex.arrival
        if held_sets.__class__ is list:  # a held fetch's records (pairing)
            ex.arrival = None
        else:
            held_sets = None
        if api_key in HINT_APIS or old_version:
            hint = ex.wait_hint
            frame = ex.wait_hint_frame
            if frame is not None:  # the request frame (skim path), decoded only where a rule reads it
                if ex.records and held_sets is None and (api_key == FETCH or api_key == SHARE_FETCH):
                    pass  # a fetch that brought records at once is no wait: no rule reads its hint
                else:
                    hint = ex.wait_hint = decoded_hint(api_key, frame)  # type: ignore[arg-type]
                    ex.wait_hint_frame = None
            found = classify(api_key, ex.api_version, hint, latency - before, ex.records, ex.error_code,
                             throttle, old_version)
            if found is None and held_sets is not None:
                # held with records: the wait, if any, ended when they arrived (kdissect.conn.arrivals)
                first_byte = ex.response_first_ts if ex.response_first_ts is not None else response_ts
                start = request_ts + before  # type: ignore[operator]
                arrival = fetch_arrival(held_sets, hint, start, first_byte, before, before_reason)  # type: ignore[arg-type]
                if arrival is not None and first_byte - start >= DATA_WAIT_MIN_NS:  # type: ignore[operator]
                    ex.wait_reason = ex.wait_ns = None
                    decide(ex, arrival)  # sets the waits, the one before included
                    decided = True
                    ex.arrival = arrival  # for the Produce rule across connections
                    before = 0
        if found is not None:
            # a mute names the whole wait (it held the request first); an earlier
            # answer is only a queue before the protocol's own wait
            ex.wait_reason, ex.wait_ns = (THROTTLE if before_reason == THROTTLE else found[0]), before + found[1]
        elif before:
            ex.wait_reason, ex.wait_ns = before_reason, before
        elif not decided:
            ex.wait_reason = ex.wait_ns = None
        held = found is not None and found[0] == THROTTLE
        if throttle and throttle > 0 and not held:
            # answered at once: the broker will not read this connection until then
            self.muted_until = max(self.muted_until, response_ts + throttle * 1_000_000)  # type: ignore[operator]
