"""The exchange model and the one table schema every writer uses.

An `Exchange` is one request and its response (either may be missing). Its row
(`to_row`) is what JSONL, CSV, Parquet and the Spark job emit; the columns and
their Arrow types are defined once, in `COLUMN_TYPES`. Times are integers of
nanoseconds since the epoch (`kdissect.model.times`); durations are computed from
them and are exact to the capture's resolution.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

from kdissect.model.packet import TableRecord, fresh
from kdissect.model.problems import code_of

# status values
OK = "ok"
NO_RESPONSE = "no_response"
ORPHAN_RESPONSE = "orphan_response"
MALFORMED = "malformed"
TRUNCATED = "truncated"
# decoded with an assumed layout (a version newer than known, or only the other
# direction's) that left bytes over: fields are missing, values may be wrong
INEXACT = "inexact"
STATUSES = (OK, INEXACT, NO_RESPONSE, ORPHAN_RESPONSE, MALFORMED, TRUNCATED)
# the wait reason of a long poll that data may have ended at an unknown time
# (kdissect.conn.arrivals): no service time is known
LONG_POLL_UNKNOWN = "long_poll_unknown"

# The exchange table: (column, Arrow type name), in output order. Type names
# (not pyarrow objects) keep pyarrow out of the import path of the CLI;
# `arrow_schema()` builds the pyarrow schema from them. "timestamp" columns
# hold integer nanoseconds in rows and take the run's unit in Arrow.
COLUMN_TYPES: list[tuple[str, str]] = [
    ("capture", "string"),
    ("stream", "int64"),
    ("client", "string"),
    ("broker", "string"),
    ("correlation_id", "int32"),
    ("api_key", "int16"),
    ("api_name", "string"),
    ("api_version", "int16"),
    ("client_id", "string"),
    ("request_ts", "timestamp"),
    ("response_ts", "timestamp"),
    ("request_frame", "int64"),
    ("response_frame", "int64"),
    ("latency_ms", "float64"),
    # where the time went (kdissect.conn.waits): first response byte, transfers,
    # the wait the protocol asked for and the rest (service), the network
    ("ttfb_ms", "float64"),
    ("response_transfer_ms", "float64"),
    ("request_transfer_ms", "float64"),
    ("wait_reason", "string"),
    ("wait_ms", "float64"),
    # of wait_ms, the time before the broker could read the request: behind
    # the previous answer on its connection, or a quota's mute
    ("socket_wait_ms", "float64"),
    ("service_ms", "float64"),
    ("rtt_ms", "float64"),
    ("capture_side", "string"),
    ("broker_ms", "float64"),
    ("request_bytes", "int64"),
    ("response_bytes", "int64"),
    ("throttle_time_ms", "int32"),
    ("error_code", "int16"),
    ("error_codes", "list<int16>"),
    ("status", "string"),
    ("problems", "list<string>"),
    ("problem_codes", "list<string>"),
    # record counts from batch headers (kdissect.records), null where the
    # exchange carries no records
    ("records", "int64"),
    ("record_bytes", "int64"),
    ("codecs", "list<string>"),
    # the broker's own request log joined by connection, correlation id and
    # api key (kdissect.conn.brokerlog; `--broker-log`); null without a log or
    # where no log line joined (`broker_log` says why)
    ("broker_log", "string"),
    ("broker_total_ms", "float64"),
    ("broker_request_queue_ms", "float64"),
    ("broker_local_ms", "float64"),
    ("broker_remote_ms", "float64"),
    ("broker_throttle_ms", "float64"),
    ("broker_response_queue_ms", "float64"),
    ("broker_send_ms", "float64"),
    ("network_ms", "float64"),
    ("principal", "string"),
    ("security_protocol", "string"),
    ("listener", "string"),
]
BROKER_LOG_COLUMNS = ("broker_log", "broker_total_ms", "broker_request_queue_ms", "broker_local_ms",
                      "broker_remote_ms", "broker_throttle_ms", "broker_response_queue_ms", "broker_send_ms",
                      "network_ms", "principal", "security_protocol", "listener")
COLUMN_NAMES: list[str] = [name for name, _ in COLUMN_TYPES]
# an exchange's `to_row()` values, in its order, without the dict: each
# column of the row is the exchange's attribute of that name
# (tests/spark/test_part_files.py checks to_row's source says so)
row_values = attrgetter(*COLUMN_NAMES)
# columns computed from the exchange's times (properties, not stored)
COMPUTED_COLUMNS = frozenset(("latency_ms", "ttfb_ms", "response_transfer_ms", "request_transfer_ms", "wait_ms",
                              "socket_wait_ms",
                              "service_ms", "rtt_ms", "broker_ms"))
LIST_COLUMNS = frozenset(name for name, kind in COLUMN_TYPES if kind.startswith("list<"))
TIMESTAMP_COLUMNS = frozenset(name for name, kind in COLUMN_TYPES if kind == "timestamp")


def arrow_type(name: str, ts_unit: str = "us"):  # -> pyarrow.DataType
    """The pyarrow type of a column type name."""
    import pyarrow as pa

    if name.startswith("list<"):
        return pa.list_(arrow_type(name[5:-1], ts_unit))
    if name == "timestamp":
        return pa.timestamp(ts_unit, tz="UTC")
    return {"string": pa.string(), "int64": pa.int64(), "int32": pa.int32(),
            "int16": pa.int16(), "float64": pa.float64(), "bool": pa.bool_()}[name]


def arrow_columns(ts_unit: str = "us") -> list:
    """[(name, pyarrow type)] of the exchange table."""
    return [(name, arrow_type(kind, ts_unit)) for name, kind in COLUMN_TYPES]


def arrow_schema(ts_unit: str = "us"):  # -> pyarrow.Schema
    """The exchange table's pyarrow schema (JSONL/CSV/Parquet/Spark all follow it)."""
    import pyarrow as pa

    return pa.schema(arrow_columns(ts_unit))


def endpoint(ip: str, port: int) -> str:
    """`ip:port`, with IPv6 addresses in brackets."""
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


class Exchange(TableRecord):
    """One request/response pair of one connection, with what went wrong.

    A table record (kdissect.model.packet.TableRecord: the fields below are its
    slots and __init__'s parameters, in order), whose equality is identity.
    Construct it with keywords; the pairer sets the response side when the
    response comes."""

    __eq__ = object.__eq__
    __hash__ = object.__hash__  # type: ignore[assignment]

    capture: str | None = None  # file holding the request (the response, for orphans)
    stream: int | None = None
    client: str | None = None
    broker: str | None = None
    correlation_id: int | None = None
    api_key: int | None = None
    api_name: str | None = None
    api_version: int | None = None
    client_id: str | None = None
    request_ts: int | None = None  # ns: the packet that completed the request frame
    response_ts: int | None = None  # ns: the packet that completed the response frame
    request_frame: int | None = None
    response_frame: int | None = None
    request_bytes: int | None = None
    response_bytes: int | None = None
    throttle_time_ms: int | None = None
    error_code: int | None = None
    error_codes: list[int] = fresh(factory=list)
    status: str = OK
    problems: list[str] = fresh(factory=list)
    problem_codes: list[str] = fresh(factory=list)  # one code per text
    # record counts from batch headers (kdissect.records), None where the
    # exchange carries no records
    records: int | None = None
    record_bytes: int | None = None
    codecs: list[str] | None = None
    # not in the table: the decoded messages (for `show -v`, notebooks) and
    # where each half was seen
    request: Any = None
    response: Any = None
    request_capture_index: int | None = None
    response_capture_index: int | None = None
    # stream offsets of the frames' size fields (per direction, from the first byte seen)
    request_offset: int | None = None
    response_offset: int | None = None
    # ns: the packets that carried each frame's first byte
    request_first_ts: int | None = None
    response_first_ts: int | None = None
    expects_response: bool = True
    # (capture_index, frame_number) at which the connection was classified as Kafka
    stream_key: tuple[int, int] | None = None
    # what the request says a wait rule needs (kdissect.conn.waits.request_hint);
    # on the skim path the request frame instead (wait_hint_frame), decoded
    # into wait_hint only when a rule reads it (kdissect.conn.waits.WaitTimer)
    wait_hint: tuple | None = None
    wait_hint_frame: bytes | None = None
    wait_reason: str | None = None  # why the protocol asked the broker to wait (kdissect.conn.waits)
    wait_ns: int | None = None
    # of wait_ns, the part before the broker could read the request (0: none;
    # None: not timed, no response)
    socket_wait_ns: int | None = None
    # the connection's network round trip at the capture point, and which
    # side the capture point is near ("client", "broker", "unknown")
    rtt_ns: int | None = None
    capture_side: str | None = None
    # not in the table: when a held fetch's data arrived, or the offsets a
    # Produce wrote, for the capture-wide step (kdissect.conn.arrivals)
    arrival: Any = None
    # the broker's request log (kdissect.conn.brokerlog.join): the join's
    # status ("joined" or why not), the broker's times, who is connected
    broker_log: str | None = None
    broker_total_ms: float | None = None
    broker_request_queue_ms: float | None = None
    broker_local_ms: float | None = None
    broker_remote_ms: float | None = None
    broker_throttle_ms: float | None = None
    broker_response_queue_ms: float | None = None
    broker_send_ms: float | None = None
    # the time to the first response byte outside the broker's account
    # (kdissect.conn.brokerlog.join.network_ms)
    network_ms: float | None = None
    principal: str | None = None
    security_protocol: str | None = None
    listener: str | None = None

    @property
    def latency_ms(self) -> float | None:
        """From the packet that completed the request to the one that completed the response."""
        request_ts, response_ts = self.request_ts, self.response_ts
        if request_ts is None or response_ts is None:
            return None
        return (response_ts - request_ts) / 1_000_000

    @property
    def ttfb_ms(self) -> float | None:
        """From the packet that completed the request to the one with the response's first byte."""
        if self.request_ts is None or self.response_first_ts is None:
            return None
        return (self.response_first_ts - self.request_ts) / 1_000_000

    @property
    def response_transfer_ms(self) -> float | None:
        """From the response's first byte to its last (ttfb + this = latency, exactly in ns)."""
        if self.response_first_ts is None or self.response_ts is None:
            return None
        return (self.response_ts - self.response_first_ts) / 1_000_000

    @property
    def request_transfer_ms(self) -> float | None:
        if self.request_first_ts is None or self.request_ts is None:
            return None
        return (self.request_ts - self.request_first_ts) / 1_000_000

    @property
    def wait_ms(self) -> float | None:
        return None if self.wait_ns is None else self.wait_ns / 1_000_000

    @property
    def socket_wait_ms(self) -> float | None:
        """The time the request sat unread in the broker's socket: the broker
        reads a connection's next request only once it has answered the one
        before, and not while a quota mutes the connection (kdissect.conn.waits)."""
        return None if self.socket_wait_ns is None else self.socket_wait_ns / 1_000_000

    @property
    def service_ms(self) -> float | None:
        """The latency without the wait the protocol asked for; None where
        the whole latency was that wait, where the wait's length is unknown
        (a long poll that data ended, kdissect.conn.arrivals), or there is no latency."""
        request_ts, response_ts = self.request_ts, self.response_ts
        if request_ts is None or response_ts is None:
            return None
        wait = self.wait_ns
        if wait is None:
            if self.wait_reason == LONG_POLL_UNKNOWN:  # a wait of unknown length: no service time known
                return None
            return (response_ts - request_ts) / 1_000_000
        rest = response_ts - request_ts - wait
        return rest / 1_000_000 if rest > 0 else None

    @property
    def rtt_ms(self) -> float | None:
        return None if self.rtt_ns is None else self.rtt_ns / 1_000_000

    @property
    def broker_ms(self) -> float | None:
        """An estimate of the broker's time to the first response byte: the
        ttfb where the capture point is at the broker, the ttfb minus the
        round trip where it is at the client; None where that is unknown."""
        if self.request_ts is None or self.response_first_ts is None:
            return None
        ttfb = self.response_first_ts - self.request_ts
        if self.capture_side == "broker":
            return ttfb / 1_000_000
        if self.capture_side == "client" and self.rtt_ns is not None:
            return max(0, ttfb - self.rtt_ns) / 1_000_000
        return None

    def to_row(self) -> dict[str, Any]:
        """The table row: a dict with exactly COLUMN_NAMES as keys, in order."""
        return {
            "capture": self.capture,
            "stream": self.stream,
            "client": self.client,
            "broker": self.broker,
            "correlation_id": self.correlation_id,
            "api_key": self.api_key,
            "api_name": self.api_name,
            "api_version": self.api_version,
            "client_id": self.client_id,
            "request_ts": self.request_ts,
            "response_ts": self.response_ts,
            "request_frame": self.request_frame,
            "response_frame": self.response_frame,
            "latency_ms": self.latency_ms,
            "ttfb_ms": self.ttfb_ms,
            "response_transfer_ms": self.response_transfer_ms,
            "request_transfer_ms": self.request_transfer_ms,
            "wait_reason": self.wait_reason,
            "wait_ms": self.wait_ms,
            "socket_wait_ms": self.socket_wait_ms,
            "service_ms": self.service_ms,
            "rtt_ms": self.rtt_ms,
            "capture_side": self.capture_side,
            "broker_ms": self.broker_ms,
            "request_bytes": self.request_bytes,
            "response_bytes": self.response_bytes,
            "throttle_time_ms": self.throttle_time_ms,
            "error_code": self.error_code,
            "error_codes": self.error_codes,
            "status": self.status,
            "problems": self.problems,
            "problem_codes": self.problem_codes,
            "records": self.records,
            "record_bytes": self.record_bytes,
            "codecs": self.codecs,
            "broker_log": self.broker_log,
            "broker_total_ms": self.broker_total_ms,
            "broker_request_queue_ms": self.broker_request_queue_ms,
            "broker_local_ms": self.broker_local_ms,
            "broker_remote_ms": self.broker_remote_ms,
            "broker_throttle_ms": self.broker_throttle_ms,
            "broker_response_queue_ms": self.broker_response_queue_ms,
            "broker_send_ms": self.broker_send_ms,
            "network_ms": self.network_ms,
            "principal": self.principal,
            "security_protocol": self.security_protocol,
            "listener": self.listener,
        }

    def add_problem(self, code: str, text: str) -> None:
        """Note a problem (code from kdissect.model.problems.CATALOG); repeats are kept once."""
        if text not in self.problems:
            self.problems.append(text)
            self.problem_codes.append(code_of(code))


def __getattr__(name: str):
    # COLUMNS ([(name, pyarrow type)]) and SCHEMA (pyarrow.Schema), built on
    # first use so that importing this module does not import pyarrow
    if name == "COLUMNS":
        return arrow_columns()
    if name == "SCHEMA":
        return arrow_schema()
    raise AttributeError(f"module 'kdissect.model.exchange' has no attribute {name!r}")
