"""The exchange model and the one table schema every writer uses.

An `Exchange` is one request and its response (either may be missing). Its row
(`to_row`) is what JSONL, CSV, Parquet and the Spark job emit; the columns and
their Arrow types are defined once, in `COLUMNS`.
"""

from __future__ import annotations

from typing import Any

# status values
OK = "ok"
NO_RESPONSE = "no_response"
ORPHAN_RESPONSE = "orphan_response"
MALFORMED = "malformed"
TRUNCATED = "truncated"
STATUSES = (OK, NO_RESPONSE, ORPHAN_RESPONSE, MALFORMED, TRUNCATED)

# The exchange table: (column, Arrow type name), in output order. Type names
# (not pyarrow objects) keep pyarrow out of the import path of the CLI;
# `arrow_schema()` builds the pyarrow schema from them.
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
    ("request_ts", "float64"),
    ("response_ts", "float64"),
    ("request_frame", "int64"),
    ("response_frame", "int64"),
    ("latency_ms", "float64"),
    ("request_bytes", "int64"),
    ("response_bytes", "int64"),
    ("throttle_time_ms", "int32"),
    ("error_code", "int16"),
    ("error_codes", "list<int16>"),
    ("status", "string"),
    ("problems", "list<string>"),
    # record counts from batch headers (kdissect.records), null where the
    # exchange carries no records
    ("records", "int64"),
    ("record_bytes", "int64"),
    ("codecs", "list<string>"),
]
COLUMN_NAMES: list[str] = [name for name, _ in COLUMN_TYPES]
LIST_COLUMNS = frozenset(name for name, kind in COLUMN_TYPES if kind.startswith("list<"))


def _arrow_type(name: str):  # -> pyarrow.DataType
    import pyarrow as pa

    if name.startswith("list<"):
        return pa.list_(_arrow_type(name[5:-1]))
    return {"string": pa.string(), "int64": pa.int64(), "int32": pa.int32(),
            "int16": pa.int16(), "float64": pa.float64()}[name]


def arrow_columns() -> list:
    """[(name, pyarrow type)] of the exchange table."""
    return [(name, _arrow_type(kind)) for name, kind in COLUMN_TYPES]


def arrow_schema():  # -> pyarrow.Schema
    """The exchange table's pyarrow schema (JSONL/CSV/Parquet/Spark all follow it)."""
    import pyarrow as pa

    return pa.schema(arrow_columns())


def endpoint(ip: str, port: int) -> str:
    """`ip:port`, with IPv6 addresses in brackets."""
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


_NEW_LIST: Any = object()  # default of the list fields: a new empty list per exchange


class Exchange:
    """One request/response pair of one connection, with what went wrong.

    A plain slot class (equality is identity) rather than a dataclass: its
    31 fields would cost a millisecond or two of generated code at every
    start of the CLI. Construct it with keywords."""

    __slots__ = ("capture", "stream", "client", "broker", "correlation_id", "api_key", "api_name",
                 "api_version", "client_id", "request_ts", "response_ts", "request_frame", "response_frame",
                 "request_bytes", "response_bytes", "throttle_time_ms", "error_code", "error_codes", "status",
                 "problems", "records", "record_bytes", "codecs", "request", "response",
                 "request_capture_index", "response_capture_index", "request_offset", "response_offset",
                 "expects_response", "stream_key")

    def __init__(
        self,
        capture: str | None = None,
        stream: int | None = None,
        client: str | None = None,
        broker: str | None = None,
        correlation_id: int | None = None,
        api_key: int | None = None,
        api_name: str | None = None,
        api_version: int | None = None,
        client_id: str | None = None,
        request_ts: float | None = None,
        response_ts: float | None = None,
        request_frame: int | None = None,
        response_frame: int | None = None,
        request_bytes: int | None = None,
        response_bytes: int | None = None,
        throttle_time_ms: int | None = None,
        error_code: int | None = None,
        error_codes: list[int] = _NEW_LIST,
        status: str = OK,
        problems: list[str] = _NEW_LIST,
        records: int | None = None,
        record_bytes: int | None = None,
        codecs: list[str] | None = None,
        request: Any = None,
        response: Any = None,
        request_capture_index: int | None = None,
        response_capture_index: int | None = None,
        request_offset: int | None = None,
        response_offset: int | None = None,
        expects_response: bool = True,
        stream_key: tuple[int, int] | None = None,
    ) -> None:
        self.capture = capture
        self.stream = stream
        self.client = client
        self.broker = broker
        self.correlation_id = correlation_id
        self.api_key = api_key
        self.api_name = api_name
        self.api_version = api_version
        self.client_id = client_id
        self.request_ts = request_ts
        self.response_ts = response_ts
        self.request_frame = request_frame
        self.response_frame = response_frame
        self.request_bytes = request_bytes
        self.response_bytes = response_bytes
        self.throttle_time_ms = throttle_time_ms
        self.error_code = error_code
        self.error_codes = [] if error_codes is _NEW_LIST else error_codes
        self.status = status
        self.problems = [] if problems is _NEW_LIST else problems
        # record counts from batch headers (kdissect.records), None where the
        # exchange carries no records
        self.records = records
        self.record_bytes = record_bytes
        self.codecs = codecs
        # not in the table: the decoded messages (for `show -v`, notebooks) and
        # where each half was seen
        self.request = request
        self.response = response
        self.request_capture_index = request_capture_index
        self.response_capture_index = response_capture_index
        # stream offsets of the frames' size fields (per direction, from the first byte seen)
        self.request_offset = request_offset
        self.response_offset = response_offset
        self.expects_response = expects_response
        # (capture_index, frame_number) at which the connection was classified as Kafka
        self.stream_key = stream_key

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"Exchange({fields})"

    @property
    def latency_ms(self) -> float | None:
        if self.request_ts is None or self.response_ts is None:
            return None
        return (self.response_ts - self.request_ts) * 1000.0

    def to_row(self) -> dict[str, Any]:
        """The table row: a dict with exactly COLUMN_NAMES as keys, in order."""
        request_ts = self.request_ts
        response_ts = self.response_ts
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
            "request_ts": request_ts,
            "response_ts": response_ts,
            "request_frame": self.request_frame,
            "response_frame": self.response_frame,
            "latency_ms": None if request_ts is None or response_ts is None
            else (response_ts - request_ts) * 1000.0,
            "request_bytes": self.request_bytes,
            "response_bytes": self.response_bytes,
            "throttle_time_ms": self.throttle_time_ms,
            "error_code": self.error_code,
            "error_codes": self.error_codes,
            "status": self.status,
            "problems": self.problems,
            "records": self.records,
            "record_bytes": self.record_bytes,
            "codecs": self.codecs,
        }

    def add_problem(self, text: str) -> None:
        if text not in self.problems:
            self.problems.append(text)


def __getattr__(name: str):
    # COLUMNS ([(name, pyarrow type)]) and SCHEMA (pyarrow.Schema), built on
    # first use so that importing this module does not import pyarrow
    if name == "COLUMNS":
        return arrow_columns()
    if name == "SCHEMA":
        return arrow_schema()
    raise AttributeError(f"module 'kdissect.exchange' has no attribute {name!r}")
