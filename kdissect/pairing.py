"""Pair the request and response frames of one connection into Exchanges.

Requests wait in a map keyed by correlation id (not by order: clients pipeline
requests and brokers may answer some out of order). A response is decoded with
the api key and version of its request. Produce with acks=0 expects no
response; it is held briefly in case the broker answers anyway (some do) and
emitted as `ok` either way. Requests still waiting when the connection closes
(or the capture ends) are emitted as `no_response`. A response with no waiting
request is held briefly too (a capture merged from two interfaces can show a
response before its request), then becomes an `orphan_response` row whose api
is unknown.

After a SaslHandshake v0 exchange the connection carries raw SASL tokens
(size-prefixed, no Kafka header) until the client speaks Kafka again; those
frames are counted, not decoded.

Without kept messages (`keep_messages=False`: export) frames are skimmed
(`protocol.skim`): the same checks as the full decoder, only the row's
values. A frame the skim rejects goes to the full decoder for its exact
DecodeError, so rows do not depend on which path ran.
"""

from __future__ import annotations

from struct import Struct
from typing import Any, Sequence

from kdissect import protocol
from kdissect.accounting import Accounting
from kdissect.exchange import (
    MALFORMED,
    NO_RESPONSE,
    OK,
    ORPHAN_RESPONSE,
    TRUNCATED,
    Exchange,
)
from kdissect.framing import Frame

# protocol functions, bound on first use (the protocol package loads lazily)
_decode_request: Any = None
_decode_response: Any = None
_DecodeError: Any = Exception
_peek_request_header: Any = None
_looks_like_request: Any = None
_api_name: Any = None
_response_figures: Any = None
_skim_request: Any = None
_skim_response: Any = None


def _bind_protocol() -> None:
    global _decode_request, _decode_response, _DecodeError, _peek_request_header
    global _looks_like_request, _api_name, _response_figures, _skim_request, _skim_response
    if _decode_request is not None:
        return
    from kdissect.protocol.skim import skim_request, skim_response
    from kdissect.protocol.summary import response_figures

    _skim_request = skim_request
    _skim_response = skim_response

    _decode_response = protocol.decode_response
    _DecodeError = protocol.DecodeError
    _peek_request_header = protocol.peek_request_header
    _looks_like_request = protocol.looks_like_request
    _api_name = protocol.api_name
    _response_figures = response_figures
    _decode_request = protocol.decode_request


_INT16 = Struct(">h")
_INT32 = Struct(">i")

# Status precedence: a worse status is never overwritten by a better one.
_RANK = {OK: 0, NO_RESPONSE: 1, ORPHAN_RESPONSE: 1, TRUNCATED: 2, MALFORMED: 3}

_PRODUCE = 0
_FETCH = 1
_SHARE_FETCH = 78
_MAX_UNANSWERED = 64  # acks=0 requests held per connection
_MAX_EARLY = 64  # responses held per connection waiting for their request

try:
    from kdissect.records.access import record_figures as _record_figures
    from kdissect.records.access import set_figures as _set_figures
except ImportError:  # pragma: no cover - records package missing
    _record_figures = _set_figures = None


def _worsen(exchange: Exchange, status: str) -> None:
    if _RANK[status] > _RANK[exchange.status]:
        exchange.status = status


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


def header_client_id(prefix: bytes, api_key: int, api_version: int) -> str | None:
    """The client id from the captured start of a request header, if present."""
    if api_key == 7 and api_version == 0:  # ControlledShutdown v0: no client id
        return None
    if len(prefix) < 10:
        return None
    length = _INT16.unpack_from(prefix, 8)[0]
    if length < 0 or 10 + length > len(prefix):
        return None
    return prefix[10 : 10 + length].decode("utf-8", "replace")


def _add_records(ex: Exchange, figures: tuple | None) -> None:
    """The records/record_bytes/codecs columns (kdissect.records.record_figures)."""
    if figures is None:
        return
    ex.records, ex.record_bytes, ex.codecs, problems = figures
    for text in problems:
        ex.add_problem(text)


class Pairer:
    """Request/response pairing for one Kafka connection."""

    __slots__ = (
        "accounting", "capture_names", "stream", "client", "broker", "stream_key",
        "keep_messages", "keep_error_responses", "pending", "client_raw", "server_raw",
        "_sasl_cid", "unanswered", "early",
    )

    def __init__(
        self,
        accounting: Accounting,
        capture_names: Sequence[str],
        stream: int,
        client: str,
        broker: str,
        stream_key: tuple[int, int],
        keep_messages: bool = True,
    ) -> None:
        _bind_protocol()
        self.accounting = accounting
        self.capture_names = capture_names
        self.stream = stream
        self.client = client
        self.broker = broker
        self.stream_key = stream_key
        self.keep_messages = keep_messages
        # without kept messages, still keep the decoded response of exchanges
        # with error codes (for per-partition error tables: Spark, stats)
        self.keep_error_responses = False
        self.pending: dict[int, Exchange] = {}
        # requests that expect no response (Produce acks=0), held briefly in case
        # the broker answers anyway (some do); emitted when a later response
        # shows none is coming, when too many wait, or at the end
        self.unanswered: dict[int, Exchange] = {}
        # responses whose request has not been seen (yet), oldest first
        self.early: dict[int, Frame] = {}
        self.client_raw = False  # client side is sending raw SASL tokens
        self.server_raw = False
        self._sasl_cid: int | None = None  # correlation id of a pending SaslHandshake v0

    # -- helpers -------------------------------------------------------------

    def _capture(self, index: int) -> str | None:
        if 0 <= index < len(self.capture_names):
            return self.capture_names[index]
        return None

    def _new(self) -> Exchange:
        return Exchange(stream=self.stream, client=self.client, broker=self.broker,
                        stream_key=self.stream_key)

    def _emit(self, exchange: Exchange, out: list[Exchange]) -> None:
        acc = self.accounting
        acc.exchanges += 1
        status = exchange.status
        if status == OK:
            acc.ok += 1
        elif status == NO_RESPONSE:
            acc.no_response += 1
        elif status == ORPHAN_RESPONSE:
            acc.orphan_responses += 1
        elif status == MALFORMED:
            acc.malformed += 1
        else:
            acc.truncated += 1
        out.append(exchange)

    # -- requests ------------------------------------------------------------

    def on_request(self, frame: Frame, out: list[Exchange]) -> None:
        acc = self.accounting
        data = frame.data
        if self.client_raw:
            if frame.complete and _looks_like_request(data[:64], frame.size):
                self.client_raw = False  # authentication over: Kafka again
            else:
                acc.raw_sasl_frames += 1
                return
        # Rows need a few values, not the objects: the skim decoder validates
        # like the full one and returns just those. When it rejects a frame the
        # full decoder runs, for its exact DecodeError (or, were the two ever
        # to disagree, for the values).
        skim = _skim_request(data) if frame.complete and not self.keep_messages else None
        if skim is not None:
            # the common request, in one go: what _new, _capture, _add_records,
            # _requested and _wait do, without their calls
            acc.request_frames += 1
            acc.decoded_frames += 1
            api_key, api_version, cid, client_id, expects_response, starts_raw_sasl, sets = skim
            records = record_bytes = codecs = problems = None
            if api_key == _PRODUCE and _set_figures is not None:
                records, record_bytes, codecs, problems = _set_figures(sets)
            ci = frame.capture_index
            names = self.capture_names
            # Exchange's constructor arguments in order (positional: a keyword
            # call of 31 parameters costs twice as much)
            ex = Exchange(names[ci] if 0 <= ci < len(names) else None, self.stream, self.client, self.broker,
                          cid, api_key, _api_name(api_key), api_version, client_id, frame.ts, None,
                          frame.frame_number, None, frame.size, None, None, None, [], OK, [],
                          records, record_bytes, codecs, None, None, ci, None, frame.offset, None, True,
                          self.stream_key)
            if problems:
                for text in problems:
                    ex.add_problem(text)
            if expects_response and not starts_raw_sasl and cid not in self.pending and not self.early:
                self.pending[cid] = ex  # (what _wait does then)
            else:
                self._requested(ex, expects_response, starts_raw_sasl, out)
            return
        ex = self._new()
        ex.capture = self._capture(frame.capture_index)
        ex.request_capture_index = frame.capture_index
        ex.request_ts = frame.ts
        ex.request_frame = frame.frame_number
        ex.request_bytes = frame.size
        ex.request_offset = frame.offset
        if not frame.complete:
            acc.truncated_frames += 1
            header = _peek_request_header(data)
            if header is None:
                # not even the header survived: count it, nothing to pair
                ex.status = TRUNCATED
                ex.add_problem(f"request truncated ({frame.missing}): header not captured")
                self._emit(ex, out)
                return
            ex.api_key, ex.api_version, ex.correlation_id = header
            ex.api_name = _api_name(ex.api_key)
            ex.client_id = header_client_id(data, ex.api_key, ex.api_version)
            ex.status = TRUNCATED
            ex.add_problem(
                f"request truncated ({frame.missing}): {len(data)} of {frame.size} bytes captured"
            )
            self._wait(ex, out)
            return
        acc.request_frames += 1
        try:
            request = _decode_request(data)
        except Exception as error:  # DecodeError, or a decoder bug: never stop the run
            acc.malformed_frames += 1
            ex.status = MALFORMED
            if isinstance(error, _DecodeError):
                ex.add_problem(_decode_error_text("request", error))
            else:
                ex.add_problem(f"request malformed: decoder failed ({type(error).__name__}: {error})")
            header = _peek_request_header(data)
            if header is None:
                self._emit(ex, out)
                return
            ex.api_key, ex.api_version, ex.correlation_id = header
            ex.api_name = _api_name(ex.api_key)
            ex.client_id = header_client_id(data, ex.api_key, ex.api_version)
            self._wait(ex, out)
            return
        acc.decoded_frames += 1
        h = request.header
        ex.api_key = api_key = h.api_key
        ex.api_version = h.api_version
        ex.correlation_id = h.correlation_id
        ex.api_name = _api_name(api_key)
        ex.client_id = h.client_id
        if self.keep_messages:
            ex.request = request
        if api_key == _PRODUCE and _record_figures is not None:
            _add_records(ex, _record_figures(api_key, ex.api_version, request.body))
        self._requested(ex, request.expects_response, request.starts_raw_sasl, out)

    def _requested(self, ex: Exchange, expects_response: bool, starts_raw_sasl: bool,
                   out: list[Exchange]) -> None:
        """A decoded request: wait for its response, or hold it if none is expected."""
        cid = ex.correlation_id
        if not expects_response:
            ex.expects_response = False
            self.accounting.acks0_requests += 1
            unanswered = self.unanswered
            earlier = unanswered.pop(cid, None)
            if earlier is not None:
                self._emit(earlier, out)
            unanswered[cid] = ex
            if len(unanswered) > _MAX_UNANSWERED:
                self._emit(unanswered.pop(next(iter(unanswered))), out)
            if self.early and cid in self.early:
                self.on_response(self.early.pop(cid), out)
            return
        if starts_raw_sasl:
            self._sasl_cid = cid
        self._wait(ex, out)

    def _wait(self, ex: Exchange, out: list[Exchange]) -> None:
        cid = ex.correlation_id
        earlier = self.pending.pop(cid, None)
        if earlier is not None:
            # a client reused a correlation id before the answer came
            _worsen(earlier, NO_RESPONSE)
            earlier.add_problem("correlation id reused by a later request before any response")
            self._emit(earlier, out)
        self.pending[cid] = ex
        if self.early and cid in self.early:
            self.on_response(self.early.pop(cid), out)

    # -- responses -----------------------------------------------------------

    def expects(self, correlation_id: int) -> bool:
        return correlation_id in self.pending or correlation_id in self.unanswered

    def on_response(self, frame: Frame, out: list[Exchange]) -> None:
        acc = self.accounting
        data = frame.data
        if self.server_raw:
            if (not self.client_raw and frame.complete and len(data) >= 4
                    and _INT32.unpack_from(data, 0)[0] in self.pending):
                self.server_raw = False
            else:
                acc.raw_sasl_frames += 1
                return
        if len(data) < 4:
            if frame.complete:
                acc.response_frames += 1
                acc.malformed_frames += 1
            else:
                acc.truncated_frames += 1
            acc.unreadable_responses += 1
            return
        cid = _INT32.unpack_from(data, 0)[0]
        ex = self.pending.pop(cid, None)
        if self.unanswered:
            if ex is None and cid in self.unanswered:
                ex = self.unanswered.pop(cid)
                ex.add_problem("response to a request that asked for none (acks=0)")
            self._release_unanswered_before(cid, out)
        if ex is None:
            # no request yet: it may still come (packets captured out of
            # order, e.g. on two interfaces); hold the response a little
            early = self.early
            if cid in early:
                self._emit_orphan(early.pop(cid), out)
            early[cid] = frame
            if len(early) > _MAX_EARLY:
                self._emit_orphan(early.pop(next(iter(early))), out)
            return
        # (what _fill_response_timing does)
        ex.response_ts = frame.ts
        ex.response_frame = frame.frame_number
        ex.response_bytes = frame.size
        ex.response_capture_index = frame.capture_index
        ex.response_offset = frame.offset
        if not frame.complete:
            acc.truncated_frames += 1
            _worsen(ex, TRUNCATED)
            ex.add_problem(
                f"response truncated ({frame.missing}): {len(data)} of {frame.size} bytes captured"
            )
            self._emit(ex, out)
            return
        acc.response_frames += 1
        api_key = ex.api_key
        skim = None if self.keep_messages else _skim_response(data, api_key, ex.api_version)
        if skim is not None:  # see on_request
            acc.decoded_frames += 1
            throttle, error_code, error_codes, assumed, sets = skim
            if (api_key == _FETCH or api_key == _SHARE_FETCH) and _set_figures is not None:
                _add_records(ex, _set_figures(sets))
            if error_codes and self.keep_error_responses:
                try:
                    ex.response = _decode_response(data, api_key, ex.api_version)
                except Exception:  # the skim accepted it, so the decoder should too; the row stands
                    pass
            if assumed or cid == self._sasl_cid or ex.status != OK:
                self._answered(ex, cid, throttle, error_code, error_codes, assumed, out)
                return
            # the common answer: what _answered and _emit do, without their calls
            ex.throttle_time_ms = throttle
            ex.error_code = error_code
            ex.error_codes = error_codes
            acc.exchanges += 1
            acc.ok += 1
            out.append(ex)
            return
        try:
            response = _decode_response(data, ex.api_key, ex.api_version)
            throttle, error_code, error_codes = _response_figures(ex.api_key, ex.api_version, response.body)
        except _DecodeError as error:
            acc.malformed_frames += 1
            _worsen(ex, MALFORMED)
            ex.add_problem(_decode_error_text("response", error))
            self._emit(ex, out)
            return
        except Exception as error:  # a decoder bug must not stop the run; say so in the row
            acc.malformed_frames += 1
            _worsen(ex, MALFORMED)
            ex.add_problem(f"response malformed: decoder failed ({type(error).__name__}: {error})")
            self._emit(ex, out)
            return
        acc.decoded_frames += 1
        if self.keep_messages:
            ex.response = response
        if ex.api_key in (_FETCH, _SHARE_FETCH) and _record_figures is not None:
            _add_records(ex, _record_figures(ex.api_key, ex.api_version, response.body))
        self._answered(ex, cid, throttle, error_code, error_codes, response.assumed_version, out)

    def _answered(self, ex: Exchange, cid: int, throttle: int | None, error_code: int | None,
                  error_codes: list[int], assumed: str | None, out: list[Exchange]) -> None:
        """The response figures of a decoded response, then the row goes out."""
        ex.throttle_time_ms = throttle
        ex.error_code = error_code
        ex.error_codes = error_codes
        if assumed:
            ex.add_problem(assumed)
        if cid == self._sasl_cid:
            self._sasl_cid = None
            if not error_code:
                # SaslHandshake v0 succeeded: raw tokens follow on both sides
                self.client_raw = self.server_raw = True
        self._emit(ex, out)

    def _emit_orphan(self, frame: Frame, out: list[Exchange]) -> None:
        ex = self._new()
        ex.capture = self._capture(frame.capture_index)
        ex.correlation_id = _INT32.unpack_from(frame.data, 0)[0]
        ex.status = ORPHAN_RESPONSE
        ex.add_problem("request not in capture")
        self._fill_response_timing(ex, frame)
        if frame.complete:
            self.accounting.response_frames += 1
        else:
            self.accounting.truncated_frames += 1
            ex.add_problem(f"response truncated ({frame.missing})")
        self._emit(ex, out)

    def _release_unanswered_before(self, cid: int, out: list[Exchange]) -> None:
        """A response to `cid` came: earlier acks=0 requests will not get one."""
        for waiting in [c for c in self.unanswered if c < cid]:
            self._emit(self.unanswered.pop(waiting), out)

    def _fill_response_timing(self, ex: Exchange, frame: Frame) -> None:
        ex.response_ts = frame.ts
        ex.response_frame = frame.frame_number
        ex.response_bytes = frame.size
        ex.response_capture_index = frame.capture_index
        ex.response_offset = frame.offset

    # -- losses and the end --------------------------------------------------

    def note_response_gap(self) -> None:
        """Server bytes were lost: a waiting request's response may be among them."""
        for ex in self.pending.values():
            ex.add_problem("bytes lost in the response stream while waiting")

    def flush(self, reason: str, out: list[Exchange]) -> None:
        """Emit every waiting request (connection closed or capture ended)."""
        for frame in self.early.values():
            self._emit_orphan(frame, out)
        self.early.clear()
        for ex in self.pending.values():
            _worsen(ex, NO_RESPONSE)
            ex.add_problem(f"no response before {reason}")
            self._emit(ex, out)
        self.pending.clear()
        for ex in self.unanswered.values():
            self._emit(ex, out)
        self.unanswered.clear()
