"""The exchange model and the one table schema every writer uses.

An `Exchange` is one request and its response (either may be missing). Its row
(`to_row`) is what JSONL, CSV, Parquet and the Spark job emit; the columns and
their Arrow types are defined once, in `COLUMNS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

# status values
OK = "ok"
NO_RESPONSE = "no_response"
ORPHAN_RESPONSE = "orphan_response"
MALFORMED = "malformed"
TRUNCATED = "truncated"
STATUSES = (OK, NO_RESPONSE, ORPHAN_RESPONSE, MALFORMED, TRUNCATED)

# The exchange table: (column, Arrow type), in output order.
COLUMNS: list[tuple[str, pa.DataType]] = [
    ("capture", pa.string()),
    ("stream", pa.int64()),
    ("client", pa.string()),
    ("broker", pa.string()),
    ("correlation_id", pa.int32()),
    ("api_key", pa.int16()),
    ("api_name", pa.string()),
    ("api_version", pa.int16()),
    ("client_id", pa.string()),
    ("request_ts", pa.float64()),
    ("response_ts", pa.float64()),
    ("request_frame", pa.int64()),
    ("response_frame", pa.int64()),
    ("latency_ms", pa.float64()),
    ("request_bytes", pa.int64()),
    ("response_bytes", pa.int64()),
    ("throttle_time_ms", pa.int32()),
    ("error_code", pa.int16()),
    ("error_codes", pa.list_(pa.int16())),
    ("status", pa.string()),
    ("problems", pa.list_(pa.string())),
    # record counts from batch headers (kdissect.records), null where the
    # exchange carries no records or the records package is unavailable
    ("records", pa.int64()),
    ("record_bytes", pa.int64()),
    ("codecs", pa.list_(pa.string())),
]
COLUMN_NAMES: list[str] = [name for name, _ in COLUMNS]
LIST_COLUMNS = frozenset(name for name, kind in COLUMNS if pa.types.is_list(kind))
SCHEMA = pa.schema(COLUMNS)


def endpoint(ip: str, port: int) -> str:
    """`ip:port`, with IPv6 addresses in brackets."""
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


@dataclass(slots=True, eq=False)
class Exchange:
    """One request/response pair of one connection, with what went wrong."""

    capture: str | None = None
    stream: int | None = None
    client: str | None = None
    broker: str | None = None
    correlation_id: int | None = None
    api_key: int | None = None
    api_name: str | None = None
    api_version: int | None = None
    client_id: str | None = None
    request_ts: float | None = None
    response_ts: float | None = None
    request_frame: int | None = None
    response_frame: int | None = None
    request_bytes: int | None = None
    response_bytes: int | None = None
    throttle_time_ms: int | None = None
    error_code: int | None = None
    error_codes: list[int] = field(default_factory=list)
    status: str = OK
    problems: list[str] = field(default_factory=list)
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
    expects_response: bool = True
    # (capture_index, frame_number) at which the connection was classified as Kafka
    stream_key: tuple[int, int] | None = None

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
