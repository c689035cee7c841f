"""Small pieces the forensic tallies share: keys, times, error counts."""

from __future__ import annotations

from typing import Any

from kdissect.protocol.errors import error_name

MINUTE_NS = 60_000_000_000


def connection_of(ex: Any) -> tuple[str, int, int]:
    """A connection's identity that every face gives the same way: the
    client's endpoint and the packet at which the connection was classified
    as Kafka (stream numbers differ between a Spark task and the CLI)."""
    key = ex.stream_key or (-1, -1)
    return (ex.client or "", int(key[0]), int(key[1]))


def host_of(endpoint: str | None) -> str | None:
    """The address of an `ip:port` / `[v6]:port` endpoint."""
    if not endpoint:
        return None
    if endpoint.startswith("["):
        return endpoint[1:endpoint.index("]")]
    return endpoint.rsplit(":", 1)[0]


def when(ex: Any, response_first: bool = False) -> int | None:
    """The exchange's time: its request's (or, with `response_first`, its
    response's), else the other one."""
    ts: int | None
    if response_first:
        ts = ex.response_ts if ex.response_ts is not None else ex.request_ts
    else:
        ts = ex.request_ts if ex.request_ts is not None else ex.response_ts
    return ts


def order_key(ex: Any, ts: int | None) -> tuple[Any, ...]:
    """A total order of exchanges that every face computes alike (time, then
    connection, then correlation id): "the last" of anything is its maximum."""
    return (ts if ts is not None else -1, connection_of(ex), ex.correlation_id if ex.correlation_id is not None else -1)


def add_count(counts: dict[Any, Any], key: Any, n: int = 1) -> None:
    counts[key] = counts.get(key, 0) + n


def merge_counts(into: dict[Any, Any], other: dict[Any, Any]) -> None:
    for key, n in other.items():
        into[key] = into.get(key, 0) + n


def error_list(codes: dict[int, int]) -> list[str]:
    """["NAME:count", ...] of non-zero error codes, by name."""
    return sorted(f"{error_name(code)}:{n}" for code, n in codes.items() if code)


def min_of(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else min(a, b)


def max_of(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else max(a, b)


def topic_label(entry: Any, name_field: str) -> str | None:
    """A topic's label in a decoded message: its name, else its id's text."""
    name: str | None = getattr(entry, name_field, None)
    if name:
        return name
    topic_id = getattr(entry, "topic_id", None)
    return None if topic_id is None else str(topic_id)
