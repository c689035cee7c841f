"""The broker-log tables: where each request's time went, who is behind each
connection, and what one side has that the other lacks.

`BrokerLogTables` observes a `BrokerLogJoin` (`join.observer = tables`):
`exchange(ex)` for every exchange, `log_only(entry, reason)` for every log
line without one. Memory: one `QuantileSketch` per group and component (as
`kdissect.stats.summary` keeps latencies: exact up to its limit, then within 1%),
one row per connection for principals.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from kdissect.forensics.sketch import QuantileSketch
from kdissect.stats.summary import _table, latency_row

# (column stem, Exchange attribute): wire latency and service time beside the broker's parts
COMPONENTS = (("latency", "latency_ms"), ("service", "service_ms"), ("socket_wait", "socket_wait_ms"),
              ("network", "network_ms"),
              ("broker_total", "broker_total_ms"), ("request_queue", "broker_request_queue_ms"),
              ("local", "broker_local_ms"), ("remote", "broker_remote_ms"), ("throttle", "broker_throttle_ms"),
              ("response_queue", "broker_response_queue_ms"), ("send", "broker_send_ms"))
DIMENSIONS = ("api", "client", "broker")
_TOTAL = [stem for stem, _ in COMPONENTS].index("broker_total")


class _Parts:
    __slots__ = ("values",)

    def __init__(self) -> None:
        self.values: list[QuantileSketch] = [QuantileSketch() for _ in COMPONENTS]

    def add(self, exchange: Any) -> None:
        for values, (_, name) in zip(self.values, COMPONENTS):
            value = getattr(exchange, name)
            if value is not None:
                values.add(value)

    def row(self) -> dict[str, Any]:
        row: dict[str, Any] = {"count": self.values[_TOTAL].count}  # (every joined exchange has a broker total)
        for values, (stem, _) in zip(self.values, COMPONENTS):
            figures = latency_row(values)
            row[f"{stem}_p50"] = figures["p50"] if values.count else None
            row[f"{stem}_p99"] = figures["p99"] if values.count else None
        return row


class BrokerLogTables:
    def __init__(self) -> None:
        self.groups: dict[tuple[str, str], _Parts] = defaultdict(_Parts)
        # (client id, client endpoint) -> [principal, protocol, listener, software, captured, logged only]
        self.connections: dict[tuple[str, str], list[Any]] = {}
        self.unmatched: Counter[tuple[str, str, str]] = Counter()  # (side, reason, listener or api)

    def exchange(self, exchange: Any) -> None:
        if exchange.broker_log != "joined":
            self.unmatched[("capture_only", exchange.broker_log or "", exchange.api_name or "")] += 1
            return
        version = "" if exchange.api_version is None else f" v{exchange.api_version}"
        for key in (("api", f"{exchange.api_name}{version}"), ("client", exchange.client_id or ""),
                    ("broker", exchange.broker or "")):
            self.groups[key].add(exchange)
        row = self.connections.get((exchange.client_id or "", exchange.client or ""))
        if row is None:
            row = self.connections[(exchange.client_id or "", exchange.client or "")] = [
                exchange.principal, exchange.security_protocol, exchange.listener, None, 0, 0]
        row[4] += 1

    def log_only(self, entry: Any, reason: str) -> None:
        self.unmatched[("log_only", reason, entry.listener or "")] += 1
        key = (entry.client_id or "", entry.client)
        row = self.connections.get(key)
        if row is None:
            row = self.connections[key] = [entry.principal, entry.security_protocol, entry.listener, None, 0, 0]
        row[3] = row[3] or entry.software
        row[5] += 1

    def to_dict(self, encrypted: Any = frozenset()) -> dict[str, Any]:
        """The tables; `encrypted`: client endpoints of TLS connections the
        capture holds but could not decrypt (their `captured` is "encrypted")."""
        decomposition = [{"by": by, "group": group, **parts.row()}
                         for (by, group), parts in sorted(self.groups.items(),
                                                          key=lambda item: (DIMENSIONS.index(item[0][0]), item[0][1]))]
        principals = [{"client_id": client_id, "client": client, "principal": row[0], "security_protocol": row[1],
                       "listener": row[2], "software": row[3], "exchanges": row[4], "logged_only": row[5],
                       "captured": "exchanges" if row[4] else "encrypted" if client in encrypted else "no"}
                      for (client_id, client), row in sorted(self.connections.items())]
        unmatched = [{"side": side, "reason": reason, "detail": detail, "count": count}
                     for (side, reason, detail), count in sorted(self.unmatched.items())]
        return {"latency_decomposition": decomposition, "principals": principals, "unmatched": unmatched}

    def render(self, encrypted: Any = frozenset(), width: int | None = None) -> str:
        """The tables as text, each fitted to `width` columns (None: every column)."""
        tables = self.to_dict(encrypted)
        stems = [stem for stem, _ in COMPONENTS]
        header = ["by", "group", "count"] + [f"{s} p50/p99" for s in stems]

        def pair(row: dict[str, Any], stem: str) -> str:
            low, high = row[f"{stem}_p50"], row[f"{stem}_p99"]
            return "-" if low is None else f"{low:.3f}/{high:.3f}"

        decomposition = [[r["by"], r["group"], r["count"], *(pair(r, s) for s in stems)]
                         for r in tables["latency_decomposition"]]
        principals = [[r["client_id"], r["client"], r["principal"], r["security_protocol"], r["listener"],
                       r["exchanges"], r["logged_only"], r["captured"]] for r in tables["principals"]]
        unmatched = [[r["side"], r["reason"], r["detail"], r["count"]] for r in tables["unmatched"]]
        return "\n\n".join([
            _table("Broker log: latency decomposition, ms (wire latency, service, socket wait, network = time to "
                   "first byte - socket wait - (broker total - send), then the broker's parts)", header,
                   decomposition, width),
            _table("Broker log: principals per client id and connection",
                   ["client_id", "client", "principal", "protocol", "listener", "exchanges", "logged only",
                    "captured"],
                   principals, width),
            _table("Broker log: unmatched (log_only: logged, not captured; capture_only: captured, not logged)",
                   ["side", "reason", "listener/api", "count"], unmatched, width),
        ]) + "\n"


def observe(analysis: Any) -> BrokerLogTables | None:
    """Attach the tables to an Analysis's broker-log join (None without a log)."""
    join = getattr(analysis, "broker_log", None)
    if join is None:
        return None
    tables = join.observer = BrokerLogTables()
    return tables


def payload(analysis: Any, tables: BrokerLogTables) -> dict[str, Any]:
    """The "broker_log" entry of `stats --json` and of the report's stats:
    the join's accounting and the three tables."""
    return {"accounting": analysis.broker_log.accounting.to_dict(),
            **tables.to_dict(analysis.dissector.encrypted_clients)}
