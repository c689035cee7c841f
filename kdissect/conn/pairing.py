"""Pair the request and response frames of one connection into Exchanges.

Requests wait in a map keyed by correlation id (not by order: clients pipeline
requests and brokers may answer some out of order). A response is decoded with
the api key and version of its request. Requests still waiting when the
connection closes (or the capture ends) are emitted as `no_response`.

Holding, by capture time (the times of this connection's frames):

* A Produce request with acks=0 expects no response, but some brokers answer
  anyway. It is held until a response to a request sent after it shows none
  is coming (a broker answers one connection's requests in order), or until
  the broker's side is past its own `timeout_ms`, or the connection ends; then it is emitted
  `ok` without a response. At most `MAX_UNANSWERED` are held per connection
  (no client keeps that many in flight); past that the oldest is released,
  and counted (`acks0_released`).
* A response whose request has not been seen is held until the client's
  side of the connection is `EARLY_WINDOW_NS` past it without sending the
  request (a capture merged from two interfaces can show a response before
  its request; a client's bytes may wait behind a hole in the capture),
  then becomes an `orphan_response`. At most `MAX_EARLY` are held.

An orphan is decoded by trial (`kdissect.conn.trial`): when exactly one response
layout fits, its API and version are filled in and marked `api-assumed`.

After a SaslHandshake v0 exchange the connection carries raw SASL tokens
(size-prefixed, no Kafka header) until the client speaks Kafka again; those
frames are counted, not decoded.

Frames are skimmed (`protocol.skim`: the same checks as the full decoder,
only the row's values) unless the decoded messages are kept. A frame the
skim rejects goes to the full decoder for its exact DecodeError, so rows do
not depend on which path ran. Bytes after a complete body are tolerated
(some clients send them; brokers accept them) with a `trailing-bytes` note.
"""

from __future__ import annotations

from struct import Struct
from typing import Any, Callable, Iterator, Sequence

from kdissect.protocol.apis import ApiKey
from kdissect.protocol.codec import DecodeError, decode_request, decode_response
from kdissect.protocol.headers import (
    api_name,
    peek_client_id,
    peek_request_header,
    read_request_header_layout,
    request_layout,
)
from kdissect.protocol.primitives import read_uvarint
from kdissect.conn.decoding import decode_tolerant
from kdissect.model.exchange import INEXACT, MALFORMED, NO_RESPONSE, OK, ORPHAN_RESPONSE, TRUNCATED, Exchange
from kdissect.conn.framing import Frame
from kdissect.conn.normal_flow import failure_codes
from kdissect.conn.pairing_stats import PairingStats
from kdissect.model.packet import SlotRecord, fields_of
from kdissect.model.problems import code_of
from kdissect.protocol.skim import skim_request, skim_response
from kdissect.protocol.summary import response_figures
from kdissect.conn.arrivals import DATA_WAIT_MIN_NS, ProduceAnswer, produce_bases, produce_ranges, produce_spans
from kdissect.conn.kept_api_versions import ApiVersionsRequestFrame
from kdissect.conn.kept_create_topics import CreateTopicsResponseFrame
from kdissect.conn.kept_fetch import FetchRequestFrame, FetchResponseFrame
from kdissect.conn.kept_join_group import JoinGroupRequestFrame, JoinGroupResponseFrame
from kdissect.conn.kept_metadata import MetadataRequestFrame, MetadataResponseFrame
from kdissect.conn.kept_offset_commit import OffsetCommitRequestFrame, OffsetCommitResponseFrame
from kdissect.conn.kept_produce import ProduceRequestFrame, ProduceResponseFrame
from kdissect.conn.holds import EARLY_WINDOW_NS, MAX_EARLY, MAX_UNANSWERED, Acks0Holds, EarlyResponses
from kdissect.records.access import record_figures, record_sets, set_figures
from kdissect.conn.sasl import SaslTracker
from kdissect.conn.waits import HINT_APIS, WaitTimer, request_hint

_INT16 = Struct(">h")
_INT32 = Struct(">i")
_TIMEOUT = Struct(">hi")

# Status precedence: a worse status is never overwritten by a better one.
_RANK = {OK: 0, INEXACT: 1, NO_RESPONSE: 2, ORPHAN_RESPONSE: 2, TRUNCATED: 3, MALFORMED: 4}

_PRODUCE = int(ApiKey.PRODUCE)  # (bound once: an enum member costs a lookup per frame)
_FETCH = int(ApiKey.FETCH)
_SHARE_FETCH = int(ApiKey.SHARE_FETCH)
# of an ApiVersions exchange in keep_apis only the request is kept: its answer
# (the broker's version ranges, the longest of the small answers to decode)
# is read by no table
_API_VERSIONS = int(ApiKey.API_VERSIONS)
# requests that keep_apis keeps as their frames where the skim accepts them
_METADATA = int(ApiKey.METADATA)
_OFFSET_COMMIT = int(ApiKey.OFFSET_COMMIT)
_JOIN_GROUP = int(ApiKey.JOIN_GROUP)
_KEPT_AS_FRAMES = frozenset((_PRODUCE, _FETCH, _METADATA, _OFFSET_COMMIT, _API_VERSIONS, _JOIN_GROUP))
# answers that keep_apis keeps as their frames where the skim accepts them and finds no error code
_CREATE_TOPICS = int(ApiKey.CREATE_TOPICS)
_ANSWERS_AS_FRAMES = frozenset((_PRODUCE, _FETCH, _METADATA, _OFFSET_COMMIT, _JOIN_GROUP, _CREATE_TOPICS))
# the Exchange fields a request's exchange is made with, by position
assert fields_of(Exchange)[:34] == ("capture", "stream", "client", "broker", "correlation_id", "api_key", "api_name",
                                   "api_version", "client_id", "request_ts", "response_ts", "request_frame",
                                   "response_frame", "request_bytes", "response_bytes", "throttle_time_ms",
                                   "error_code", "error_codes", "status", "problems", "problem_codes", "records",
                                   "record_bytes", "codecs", "request", "response", "request_capture_index",
                                   "response_capture_index", "request_offset", "response_offset",
                                   "request_first_ts", "response_first_ts", "expects_response", "stream_key")
__all__ = ["EARLY_WINDOW_NS", "MAX_EARLY", "MAX_UNANSWERED"]  # (kdissect.conn.holds: re-exported)
# orphans per connection tried against every response layout (each costs a
# few milliseconds); later ones only as ApiVersions responses
FULL_TRIALS = 32
DEFAULT_TIMEOUT_NS = 30_000_000_000  # for an acks=0 request whose timeout cannot be read
# what on_request / on_response return for a raw SASL token (after SaslHandshake v0)
RAW_SASL_TOKEN = "raw-sasl-token"


# a capture point is near one end when the other end is this many times as far, and at least this far (ns)
_SIDE_RATIO = 4
_SIDE_MIN_NS = 100_000


class ConnectionInfo:
    """What every exchange of one connection shares."""

    __slots__ = ("capture_names", "stream", "client", "broker", "stream_key", "timing", "client_dir", "_settled")

    def __init__(self, capture_names: Sequence[str], stream: int, client: str, broker: str,
                 stream_key: tuple[int, int], timing: Any = None, client_dir: int = 0) -> None:
        self.capture_names = capture_names
        self.stream = stream
        self.client = client  # "ip:port"
        self.broker = broker
        self.stream_key = stream_key  # (capture_index, frame_number) where it was classified as Kafka
        # what tells the network's timing: has `path_delays()` (a reassembly
        # TcpConnection); client_dir: which of its sides is the client
        self.timing = timing
        self.client_dir = client_dir
        # network() once the handshake's three times are known: they never change then
        self._settled: tuple[int | None, str | None] | None = None

    def network(self) -> tuple[int | None, str | None]:
        """(round trip in ns, which side the capture point is near) as the
        connection's timing says so far; (None, None) without timing."""
        if self._settled is not None:
            return self._settled
        timing = self.timing
        if timing is None:
            return None, None
        found = self._network()
        if getattr(timing, "ack_ts", None) is not None and timing.syn_ts is not None and \
                timing.syn_ack_ts is not None:
            self._settled = found  # path_delays() is the handshake's from now on
        return found

    def _network(self) -> tuple[int | None, str | None]:
        initiator, responder = self.timing.path_delays()
        client, broker = (initiator, responder) if self.client_dir == 0 else (responder, initiator)
        if client is None or broker is None:
            return None, "unknown"
        if broker >= _SIDE_RATIO * client and broker - client >= _SIDE_MIN_NS:
            side = "client"  # the broker is far from the capture point
        elif client >= _SIDE_RATIO * broker and client - broker >= _SIDE_MIN_NS:
            side = "broker"
        else:
            side = "unknown"
        return client + broker, side

    def capture(self, index: int) -> str | None:
        names = self.capture_names
        return names[index] if 0 <= index < len(names) else None


class PairedFrame(SlotRecord):
    """One Kafka frame as the core cut it (after TLS, when the connection is
    TLS) and what pairing made of it: what a `Dissector`'s `frame_hook` hears.

    `api_key` / `api_version`: a request's own (None when its header does not
    decode); a response's are those of the request it answers, None when
    that request was not seen by the time the response was cut (a response
    captured before its request is paired later, in its exchange, not here).
    """

    __slots__ = ("frame", "from_client", "raw_sasl", "api_key", "api_version", "capture", "stream", "client",
                 "broker", "tls")

    def __init__(self, frame: Frame, from_client: bool, outcome: Exchange | str | None, conn: ConnectionInfo,
                 tls: bool) -> None:
        self.frame = frame  # its bytes (after the size prefix), times, packet and stream offset
        self.from_client = from_client  # a request (or a client's raw SASL token)
        self.raw_sasl = outcome == RAW_SASL_TOKEN  # a raw SASL token: no Kafka header
        paired = outcome if isinstance(outcome, Exchange) else None
        self.api_key = None if paired is None else paired.api_key
        self.api_version = None if paired is None else paired.api_version
        self.capture = conn.capture(frame.capture_index)  # the file of the packet that completed it
        self.stream = conn.stream
        self.client = conn.client  # "ip:port"
        self.broker = conn.broker
        self.tls = tls  # decrypted from TLS


def produce_timeout_ns(data: bytes, api_version: int) -> int | None:
    """The `timeout_ms` of a Produce request frame, in ns (None if unreadable)."""
    try:
        _header, at, _layout = read_request_header_layout(data)  # the one header parser
        if api_version >= 9:  # transactional id: compact nullable string
            length, at = read_uvarint(data, at, 5, False)
            at += max(0, length - 1)
        elif api_version >= 3:  # transactional id: nullable string
            at += 2 + max(0, _INT16.unpack_from(data, at)[0])
        _acks, timeout_ms = _TIMEOUT.unpack_from(data, at)
    except Exception:  # DecodeError, IndexError, ValueError, struct.error
        return None
    return timeout_ms * 1_000_000 if timeout_ms >= 0 else None


def _decode_error_text(side: str, error: Exception) -> str:
    offset = getattr(error, "offset", None)
    path = getattr(error, "path", None)
    where = []
    if offset is not None:
        where.append(f"offset {offset}")
    if path:
        where.append(f"at {path}")
    detail = str(error) or type(error).__name__
    return f"{side} malformed: {detail}" + (f" ({', '.join(where)})" if where else "")


# what a Pairer's collaborators are until it first needs its own (never written)
def _idle(_held: Any) -> None:
    raise AssertionError("an idle shared holder released something")


_NO_ACKS0 = Acks0Holds(PairingStats(), _idle)
_NO_EARLY = EarlyResponses(PairingStats(), _idle)
_NO_SASL = SaslTracker()
_NO_TIMER = WaitTimer()


def _header_exchange(conn: ConnectionInfo, frame: Frame, header: tuple[int, int, int] | None,
                     data: bytes) -> Exchange:
    """An exchange for a request frame known only by its header (if that)."""
    capture_index = frame.capture_index
    ex = Exchange(conn.capture(capture_index), conn.stream, conn.client, conn.broker, None, None, None, None, None,
                  frame.ts, None, frame.frame_number, None, frame.size)  # (by position: see on_request)
    ex.request_capture_index = capture_index
    ex.request_offset = frame.offset
    ex.request_first_ts = frame.first_ts
    ex.stream_key = conn.stream_key
    if header is not None:
        api_key, api_version, ex.correlation_id = header
        ex.api_key, ex.api_version = api_key, api_version
        ex.api_name = api_name(api_key)
        ex.client_id = peek_client_id(data, api_key, api_version)
    return ex


_REQUEST_TRUNCATED = code_of("request-truncated")
_NO_RESPONSE = code_of("no-response")


def lone_request(stats: PairingStats, conn: ConnectionInfo, frame: Frame, reason: str) -> Exchange:
    """The exchange a new Pairer makes of `frame`, a request cut short (not
    `complete`), when the connection then closes (`flush(reason)`), counted
    in `stats` as the Pairer counts it, without making the Pairer: a scan or
    a reconnect storm closes thousands of connections whose one frame that
    is (kdissect.conn.pipeline's `close_lone_request`; its test compares the
    two)."""
    stats.request_frames += 1
    stats.truncated_frames += 1
    data = frame.data
    header = peek_request_header(data)
    ex = _header_exchange(conn, frame, header, data)
    ex.status = TRUNCATED
    # its problems, as add_problem would note them on the new exchange (the
    # lists whole: one connection of a scan or a storm costs microseconds)
    if header is None:
        ex.problems = [f"request truncated ({frame.missing}): header not captured"]
        ex.problem_codes = [_REQUEST_TRUNCATED]
    else:
        ex.problems = [f"request truncated ({frame.missing}): {len(data)} of {frame.size} bytes captured",
                       f"no response before {reason}"]
        ex.problem_codes = [_REQUEST_TRUNCATED, _NO_RESPONSE]
    if conn.timing is not None:
        ex.rtt_ns, ex.capture_side = conn.network()
    stats.exchanges += 1
    stats.truncated += 1
    return ex


class Pairer:
    """Request/response pairing for one Kafka connection.

    Exchanges go to `emit` as they complete. `keep_messages` keeps the
    decoded request and response on each exchange; `keep_error_responses`
    keeps only the decoded responses that carry error codes (for tables of
    per-partition errors); `keep_apis` keeps both decoded messages of the
    exchanges of those api keys (for tables that read them), a Produce's as
    its frames where the skim read them (kdissect.conn.kept_produce), a
    Fetch's, a Metadata answer, an OffsetCommit's, a JoinGroup's and a
    CreateTopics answer likewise (kdissect.conn.kept_fetch, kept_metadata,
    kept_offset_commit, kept_join_group, kept_create_topics), of an
    ApiVersions only the request, as its frame likewise (kept_api_versions).

    The Pairer keeps the requests waiting by correlation id and runs the
    steps; its collaborators each do one job: `acks0` and `early` hold
    (kdissect.conn.holds), `sasl` tells raw SASL tokens (kdissect.conn.sasl),
    `timer` names the waits (kdissect.conn.waits)."""

    __slots__ = ("stats", "conn", "emit", "keep_messages", "keep_error_responses", "keep_apis", "pending",
                 "acks0", "early", "sasl", "timer", "used", "full_trials")

    def __init__(self, stats: PairingStats, conn: ConnectionInfo, emit: Callable[[Exchange], None],
                 keep_messages: bool = True, keep_error_responses: bool = False,
                 keep_apis: frozenset[int] = frozenset()) -> None:
        self.stats = stats  # this layer's counts (the dissector's, shared by its pairers)
        self.conn = conn
        self.emit = emit
        self.keep_messages = keep_messages
        self.keep_error_responses = keep_error_responses
        self.keep_apis = keep_apis
        self.pending: dict[int, Exchange] = {}
        # the collaborators start as shared idle ones that nothing writes, and
        # each Pairer makes its own when it first needs to (most connections
        # never hold a response nor see SASL; a scan opens thousands of Pairers)
        self.acks0 = _NO_ACKS0  # acks=0 requests, until no answer can come
        self.early = _NO_EARLY  # responses before their request
        self.sasl = _NO_SASL
        self.timer = _NO_TIMER
        self.used: dict[tuple[int, int], None] = {}  # (api, version) pairs of this connection, newest last
        self.full_trials = FULL_TRIALS

    # -- requests ------------------------------------------------------------

    def on_request(self, frame: Frame) -> Exchange | str | None:
        """Hear a request frame. Returns RAW_SASL_TOKEN for a raw SASL token,
        else the exchange the frame opened."""
        acc = self.stats
        data = frame.data
        if self.early.held:
            # (the request's own correlation id: its held response is never too old for it)
            self.early.expire(frame.ts, _INT32.unpack_from(data, 4)[0] if len(data) >= 8 else None)
        sasl = self.sasl
        if (sasl.client_raw or sasl.handshake_cid is not None) and sasl.client_token(frame):
            acc.request_frames += 1
            acc.raw_sasl_frames += 1
            return RAW_SASL_TOKEN
        acc.request_frames += 1
        conn = self.conn
        if not frame.complete:
            acc.truncated_frames += 1
            header = peek_request_header(data)
            ex = self._new(frame, header, data)
            ex.status = TRUNCATED
            if header is None:
                # not even the header survived: counted, nothing to pair
                ex.add_problem("request-truncated", f"request truncated ({frame.missing}): header not captured")
                self._emit(ex)
                return ex
            ex.add_problem("request-truncated",
                           f"request truncated ({frame.missing}): {len(data)} of {frame.size} bytes captured")
            self._wait(ex)
            return ex
        keep_apis = self.keep_apis
        # (a kept Produce, Fetch, Metadata, OffsetCommit, ApiVersions or JoinGroup request is skimmed too,
        # and kept as its frame: kdissect.conn.kept_produce, kept_fetch, kept_metadata, kept_offset_commit,
        # kept_api_versions, kept_join_group)
        skim = None if self.keep_messages or (keep_apis and len(data) >= 2 and (data[0] << 8 | data[1]) in keep_apis
                                              and (data[0] << 8 | data[1]) not in _KEPT_AS_FRAMES) \
            else skim_request(data)
        if skim is not None:
            api_key, api_version, cid, client_id, expects_response, starts_raw_sasl, sets = skim
            request = None
        else:
            request, trailing, error = decode_tolerant(decode_request, data)
            if request is None:
                acc.malformed_frames += 1
                header = peek_request_header(data)
                ex = self._new(frame, header, data)
                ex.status = MALFORMED
                if isinstance(error, DecodeError):
                    ex.add_problem("request-malformed", _decode_error_text("request", error))
                else:
                    ex.add_problem("decoder-failed",
                                   f"request malformed: decoder failed ({type(error).__name__}: {error})")
                if header is None:
                    self._emit(ex)
                    return ex
                self._wait(ex)
                return ex
            h = request.header
            api_key, api_version, cid, client_id = h.api_key, h.api_version, h.correlation_id, h.client_id
            expects_response, starts_raw_sasl = request.expects_response, request.starts_raw_sasl
        acc.decoded_frames += 1
        # (the leading fields by position: a keyword costs a search of the
        # 53 parameter names; the order is checked below the imports)
        capture_index = frame.capture_index
        # a skimmed Produce's record figures, given to the exchange as it is made
        records: int | None = None
        record_bytes: int | None = None
        codecs: list[str] | None = None
        record_problems: list[str] = []
        if request is None and api_key == _PRODUCE:
            records, record_bytes, codecs, record_problems = set_figures(sets)
        # (the request side's placement and figures too, by position: an
        # attribute set from compiled code on this Python class costs more
        # than an argument)
        ex = Exchange(conn.capture(capture_index), conn.stream, conn.client, conn.broker, cid, api_key,
                      api_name(api_key), api_version, client_id, frame.ts, None, frame.frame_number, None,
                      frame.size, None, None, None, [], OK, [], [], records, record_bytes, codecs, None, None,
                      capture_index, None, frame.offset, None, frame.first_ts, None, True, conn.stream_key)
        if request is None:  # skimmed: the row's figures only
            assumed = request_layout(api_key, api_version)[2]  # cached; the skim decoded exactly
            if assumed:
                self._assumed(ex, "request", assumed, 0)
            if api_key == _PRODUCE:
                for text in record_problems:  # (after the layout's, as _add_records notes them)
                    ex.add_problem("records", text)
                if expects_response and sets:
                    ex.arrival = produce_spans(sets)  # placed at the answer's base offsets
                if keep_apis and _PRODUCE in keep_apis:
                    ex.request = ProduceRequestFrame(data if type(data) is bytes else bytes(data))
            elif api_key in HINT_APIS:
                ex.wait_hint_frame = data  # decoded only when a wait rule reads it (kdissect.conn.waits)
                if api_key == _FETCH and keep_apis and _FETCH in keep_apis:
                    ex.request = FetchRequestFrame(data if type(data) is bytes else bytes(data))
                elif api_key == _JOIN_GROUP and keep_apis and _JOIN_GROUP in keep_apis:
                    ex.request = JoinGroupRequestFrame(data if type(data) is bytes else bytes(data))
            elif api_key == _METADATA and keep_apis and _METADATA in keep_apis:
                ex.request = MetadataRequestFrame(data if type(data) is bytes else bytes(data))
            elif api_key == _OFFSET_COMMIT and keep_apis and _OFFSET_COMMIT in keep_apis:
                ex.request = OffsetCommitRequestFrame(data if type(data) is bytes else bytes(data))
            elif api_key == _API_VERSIONS and keep_apis and _API_VERSIONS in keep_apis:
                ex.request = ApiVersionsRequestFrame(data if type(data) is bytes else bytes(data))
        else:
            if request.assumed_version:
                self._assumed(ex, "request", request.assumed_version, trailing)
            elif trailing:
                ex.add_problem("trailing-bytes", f"request: {trailing} trailing bytes ignored")
            if self.keep_messages or api_key in self.keep_apis:
                ex.request = request
            if api_key == _PRODUCE:
                self._add_records(ex, record_figures(api_key, api_version, request.body))
                if expects_response:
                    ex.arrival = produce_spans(record_sets(api_key, api_version, request.body, "request"))
            elif api_key in HINT_APIS:
                ex.wait_hint = request_hint(api_key, request.body)
        self._requested(ex, api_key, api_version, cid, expects_response, starts_raw_sasl, data)
        return ex

    def _new(self, frame: Frame, header: tuple[int, int, int] | None, data: bytes) -> Exchange:
        """An exchange for a request frame known only by its header (if that)."""
        return _header_exchange(self.conn, frame, header, data)

    def _requested(self, ex: Exchange, api_key: int, api_version: int, cid: int, expects_response: bool,
                   starts_raw_sasl: bool, data: bytes) -> None:
        """A decoded request (`ex`, of those api key, version and correlation
        id, passed as read): wait for its response, or hold it if none is expected."""
        if self.timer.muted_until and self.timer.sent_while_muted(ex):
            self.stats.sent_while_muted += 1
        used = (api_key, api_version)
        self.used.pop(used, None)
        self.used[used] = None
        if not expects_response:
            ex.expects_response = False
            timeout = produce_timeout_ns(data, api_version) or DEFAULT_TIMEOUT_NS
            if self.acks0 is _NO_ACKS0:
                self.acks0 = Acks0Holds(self.stats, self._emit)
            self.acks0.hold(ex, cid, ex.request_ts + timeout)  # type: ignore[operator]
            if self.early.held:
                self._answer_held(cid)
            return
        if starts_raw_sasl:
            if self.sasl is _NO_SASL:
                self.sasl = SaslTracker()
            self.sasl.handshake_sent(cid)
        self._wait(ex, cid)

    def _wait(self, ex: Exchange, cid: int | None = None) -> None:
        """Wait for the answer to `ex` (`cid`: its correlation id, when read already)."""
        if cid is None:
            cid = ex.correlation_id
            assert cid is not None  # (a request's)
        earlier = self.pending.pop(cid, None)
        if earlier is not None:
            # a client reused a correlation id before the answer came
            self._worsen(earlier, NO_RESPONSE)
            earlier.add_problem("correlation-id-reused",
                                "correlation id reused by a later request before any response")
            self._emit(earlier)
        self.pending[cid] = ex
        if self.early.held:
            self._answer_held(cid)

    def _answer_held(self, cid: int) -> None:
        """A request came whose response may be held: pair them now."""
        held = self.early.take(cid)
        if held is not None:
            self.on_response(held)

    # -- responses -----------------------------------------------------------

    def expects(self, correlation_id: int) -> bool:
        """Whether a request with this correlation id waits for an answer (acks=0 ones included)."""
        return correlation_id in self.pending or correlation_id in self.acks0

    def waiting_for(self, correlation_id: int) -> Exchange | None:
        """The exchange of the request a response with this id would answer, if any."""
        ex = self.pending.get(correlation_id)
        if ex is None and correlation_id in self.acks0:
            ex = self.acks0.held[correlation_id][0]
        return ex

    def recent_apis(self) -> Iterator[tuple[int, int]]:
        """The (api key, version) pairs this connection used, newest first."""
        return reversed(self.used)

    def on_response(self, frame: Frame) -> Exchange | str | None:
        """Hear a response frame. Returns RAW_SASL_TOKEN for a raw SASL token,
        the exchange whose request it answers, or None when that is not known
        (yet): a response held for its request, or one too short to read."""
        acc = self.stats
        data = frame.data
        acks0 = self.acks0
        if acks0.held:
            acks0.expire(frame.ts)
        if self.sasl.server_raw and self.sasl.server_token(frame, self.pending):
            acc.response_frames += 1
            acc.raw_sasl_frames += 1
            return RAW_SASL_TOKEN
        if len(data) < 4:
            acc.response_frames += 1
            acc.unreadable_responses += 1
            if frame.complete:
                acc.malformed_frames += 1
            else:
                acc.truncated_frames += 1
            return None
        cid = _INT32.unpack_from(data, 0)[0]
        ex = self.pending.pop(cid, None)
        if acks0.held:
            if ex is None:
                ex = acks0.answered(cid)
            if ex is not None:
                acks0.release_before(ex.request_offset)
        if ex is None:
            # no request yet: it may still come (packets captured out of
            # order, e.g. on two interfaces); hold the response a little
            if self.early is _NO_EARLY:
                self.early = EarlyResponses(acc, self._emit_orphan)
            self.early.hold(cid, frame)
            return None
        acc.response_frames += 1
        ex.response_ts = frame.ts
        ex.response_frame = frame.frame_number
        ex.response_bytes = frame.size
        ex.response_capture_index = frame.capture_index
        ex.response_offset = frame.offset
        ex.response_first_ts = frame.first_ts
        if not frame.complete:
            acc.truncated_frames += 1
            self._worsen(ex, TRUNCATED)
            ex.add_problem("response-truncated",
                           f"response truncated ({frame.missing}): {len(data)} of {frame.size} bytes captured")
            self._emit(ex)
            return ex
        self._decode_response(ex, data)
        if self.sasl.handshake_cid == cid and self.sasl.answered(cid, not ex.error_code and ex.status == OK):
            # SaslHandshake v0 succeeded: raw tokens follow on both sides; held
            # "responses" after it in the broker's stream are its raw tokens
            if self.early.held:
                for token in self.sasl.held_tokens(self.early.after(frame.offset)):
                    self.early.drop(token)
                    acc.response_frames += 1
                    acc.raw_sasl_frames += 1
        self._emit(ex)
        return ex

    def _decode_response(self, ex: Exchange, data: bytes) -> None:
        """Fill the response figures of `ex` from a complete response frame."""
        acc = self.stats
        api_key, api_version = ex.api_key, ex.api_version
        if api_key is None or api_version is None:
            # a request known only by a damaged header: nothing to decode with
            acc.decoded_frames += 1
            return
        kept = api_key in self.keep_apis and api_key != _API_VERSIONS
        # (a kept Produce, Fetch, Metadata, OffsetCommit, JoinGroup or CreateTopics answer is skimmed
        # too: kdissect.conn.kept_produce, kept_fetch, kept_metadata, kept_offset_commit,
        # kept_join_group, kept_create_topics)
        keep = self.keep_messages or (kept and api_key not in _ANSWERS_AS_FRAMES)
        skim = None if keep else skim_response(data, api_key, api_version)
        if skim is not None:
            acc.decoded_frames += 1
            throttle, error_code, error_codes, assumed, sets = skim
            if api_key == _FETCH or api_key == _SHARE_FETCH:
                self._add_records(ex, set_figures(sets))
                if ex.records and sets:
                    self._held_sets(ex, sets)
            elif ex.arrival is not None:  # a Produce: the answer's base offsets place what it wrote
                # its base offsets are read if a fetch looks for what it wrote
                ex.arrival = ProduceAnswer(ex.arrival, data if type(data) is bytes else bytes(data), api_version)
            if error_codes and (self.keep_error_responses or kept):
                ex.response, _, _ = decode_tolerant(
                    lambda b: decode_response(b, api_key, api_version), data)
            elif kept:  # one of _ANSWERS_AS_FRAMES without an error code
                frame = data if type(data) is bytes else bytes(data)
                ex.response = ProduceResponseFrame(frame, api_version) if api_key == _PRODUCE \
                    else FetchResponseFrame(frame, api_version) if api_key == _FETCH \
                    else MetadataResponseFrame(frame, api_version) if api_key == _METADATA \
                    else OffsetCommitResponseFrame(frame, api_version) if api_key == _OFFSET_COMMIT \
                    else JoinGroupResponseFrame(frame, api_version) if api_key == _JOIN_GROUP \
                    else CreateTopicsResponseFrame(frame, api_version)
        else:
            response, trailing, error = decode_tolerant(
                lambda b: decode_response(b, api_key, api_version), data)
            if response is None:
                acc.malformed_frames += 1
                self._worsen(ex, MALFORMED)
                if isinstance(error, DecodeError):
                    ex.add_problem("response-malformed", _decode_error_text("response", error))
                else:
                    ex.add_problem("decoder-failed",
                                   f"response malformed: decoder failed ({type(error).__name__}: {error})")
                return
            acc.decoded_frames += 1
            if trailing and response.assumed_version:
                self._assumed(ex, "response", None, trailing)
            elif trailing:
                ex.add_problem("trailing-bytes", f"response: {trailing} trailing bytes ignored")
            try:
                throttle, error_code, error_codes = response_figures(api_key, api_version, response.body)
            except Exception as problem:  # a summary bug must not stop the run; say so in the row
                throttle = error_code = None
                error_codes = []
                ex.add_problem("decoder-failed", f"response figures failed ({type(problem).__name__})")
            assumed = response.assumed_version
            if keep or kept or (error_codes and self.keep_error_responses):
                ex.response = response
            if api_key in (_FETCH, _SHARE_FETCH):
                self._add_records(ex, record_figures(api_key, api_version, response.body))
                if ex.records:
                    self._held_sets(ex, list(record_sets(api_key, api_version, response.body, "response")))
            elif ex.arrival is not None:
                ex.arrival = produce_ranges(ex.arrival, produce_bases(response.body))
        ex.throttle_time_ms = throttle
        ex.error_code = error_code
        ex.error_codes = error_codes
        if assumed:
            ex.add_problem("assumed-version", assumed)

    @staticmethod
    def _held_sets(ex: Exchange, sets: list[Any]) -> None:
        """Keep a fetch's record sets until the WaitTimer when the broker held it
        long enough to have waited for them (kdissect.conn.arrivals)."""
        first_byte = ex.response_first_ts if ex.response_first_ts is not None else ex.response_ts
        if ex.request_ts is not None and first_byte is not None and first_byte - ex.request_ts >= DATA_WAIT_MIN_NS:
            ex.arrival = sets  # (an orphan response, known without its request, has no hold)

    def _emit_orphan(self, frame: Frame) -> None:
        acc = self.stats
        conn = self.conn
        ex = Exchange(capture=conn.capture(frame.capture_index), stream=conn.stream, client=conn.client,
                      broker=conn.broker, correlation_id=_INT32.unpack_from(frame.data, 0)[0],
                      status=ORPHAN_RESPONSE, response_ts=frame.ts, response_frame=frame.frame_number,
                      response_bytes=frame.size, response_capture_index=frame.capture_index,
                      response_offset=frame.offset, response_first_ts=frame.first_ts, stream_key=conn.stream_key)
        ex.add_problem("request-not-captured", "request not in capture")
        acc.response_frames += 1
        if not frame.complete:
            acc.truncated_frames += 1
            ex.add_problem("response-truncated", f"response truncated ({frame.missing})")
            self._emit(ex)
            return
        from kdissect.conn.trial import identify

        everything = self.full_trials > 0
        self.full_trials -= everything
        found = identify(frame.data, reversed(self.used), everything)
        if found.verdict == "assumed":
            assert found.api_key is not None and found.api_version is not None  # (an assumed layout has both)
            acc.assumed_apis += 1
            ex.api_key, ex.api_version = found.api_key, found.api_version
            ex.api_name = api_name(found.api_key)
            self.used[(found.api_key, found.api_version)] = None
            versions = [v for _, v in found.candidates]
            span = f"v{versions[0]}-v{versions[-1]}, the same layout" if len(versions) > 1 else f"v{versions[0]}"
            ex.add_problem("api-assumed", f"API assumed by trial decoding: {ex.api_name} {span}")
            self._decode_response(ex, frame.data)
        elif found.verdict == "ambiguous":
            acc.undecoded_frames += 1  # whole, but its API is not known
            acc.ambiguous_apis += 1
            names = ", ".join(f"{api_name(k)} v{v}" for k, v in found.candidates[:4])
            more = f" and {len(found.candidates) - 4} more" if len(found.candidates) > 4 else ""
            ex.add_problem("api-ambiguous", f"{len(found.candidates)} API versions decode it: {names}{more}")
        elif everything:
            acc.malformed_frames += 1  # no layout takes it
            acc.unknown_apis += 1
            ex.add_problem("api-unknown", "no API version decodes it")
        else:
            acc.undecoded_frames += 1
            acc.unknown_apis += 1
            ex.add_problem("api-unknown", f"not tried against every API version (only the first {FULL_TRIALS} "
                                          "orphans of a connection are)")
        self._emit(ex)

    # -- outcome ---------------------------------------------------------------

    def _assumed(self, ex: Exchange, side: str, assumed: str | None, trailing: int) -> None:
        """A body decoded with an assumed version: a problem always; when bytes
        are left over, the assumed layout is not the sender's: status inexact,
        counted, never ok as if the decode were exact."""
        if assumed:
            ex.add_problem("assumed-version", f"{side}: {assumed}")
        if trailing:
            ex.add_problem("assumed-version-leftover",
                           f"{side}: {trailing} bytes left over after the body decoded with an assumed version")
            self.stats.inexact_frames += 1
            self._worsen(ex, INEXACT)

    @staticmethod
    def _worsen(exchange: Exchange, status: str) -> None:
        if _RANK[status] > _RANK[exchange.status]:
            exchange.status = status

    @staticmethod
    def _add_records(ex: Exchange, figures: tuple[Any, ...] | None) -> None:
        """The records/record_bytes/codecs columns (kdissect.records)."""
        if figures is None:
            return
        ex.records, ex.record_bytes, ex.codecs, problems = figures
        for text in problems:
            ex.add_problem("records", text)

    def _emit(self, exchange: Exchange) -> None:
        acc = self.stats
        if self.conn.timing is not None:
            exchange.rtt_ns, exchange.capture_side = self.conn.network()
        response_ts, request_ts = exchange.response_ts, exchange.request_ts
        if response_ts is not None and request_ts is not None:
            if self.timer is _NO_TIMER:
                self.timer = WaitTimer()
            self.timer.time(exchange, request_ts, response_ts)
        acc.exchanges += 1
        status = exchange.status
        if status == OK:
            acc.ok += 1
            if exchange.error_code or exchange.error_codes:
                acc.ok_with_errors += 1
                if not failure_codes([*exchange.error_codes, exchange.error_code or 0]):
                    acc.ok_normal_flow_only += 1
        elif status == INEXACT:
            acc.inexact += 1
        elif status == NO_RESPONSE:
            acc.no_response += 1
        elif status == ORPHAN_RESPONSE:
            acc.orphan_responses += 1
        elif status == MALFORMED:
            acc.malformed += 1
        else:
            acc.truncated += 1
        self.emit(exchange)

    # -- losses and the end --------------------------------------------------

    def response_bytes_lost(self) -> None:
        """Server bytes were lost: a waiting request's response may be among them."""
        for ex in self.pending.values():
            ex.add_problem("response-lost-bytes", "bytes lost in the response stream while waiting")

    def flush(self, reason: str) -> None:
        """Emit everything held (the connection closed or the capture ended)."""
        self.early.release_all()
        for ex in self.pending.values():
            self._worsen(ex, NO_RESPONSE)
            ex.add_problem("no-response", f"no response before {reason}")
            self._emit(ex)
        self.pending.clear()
        self.acks0.release_all()
