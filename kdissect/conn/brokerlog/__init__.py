"""Apache Kafka's request log (`kafka.request.logger`) joined to the wire.

- `kdissect.conn.brokerlog.parse`: the log's "Completed request:" lines (the JSON
  form of Kafka 2.8 and later, KIP-673, at DEBUG or TRACE) -> `LogEntry`,
  streamed from rotated files in time order;
- `kdissect.conn.brokerlog.join`: `BrokerLogJoin` joins each entry to its exchange
  by the connection's client endpoint, the correlation id and the api key,
  using time only to choose between candidates;
- `kdissect.stats.brokerlog`: the latency decomposition, principals and
  unmatched tables.

Python API:

    from kdissect.conn.pipeline import analyze
    exchanges, accounting = analyze(["run.pcap"], broker_logs=["server-request.log"])
"""

from __future__ import annotations

from typing import Any

from kdissect import native as _native

_native.extend(__path__, __name__)  # the native reader (_native_lines), when in use

from kdissect.conn.brokerlog.join import BrokerLogJoin  # noqa: E402
from kdissect.conn.brokerlog.parse import LogReadStats, read_entries, request_log_files  # noqa: E402

__all__ = ["BrokerLogJoin", "LogEntry", "LogReadStats", "read_entries", "request_log_files"]


def __getattr__(name: str) -> Any:
    if name == "LogEntry":  # (msgspec's class: imported when asked for)
        from kdissect.conn.brokerlog.decoder import LogEntry

        return LogEntry
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
