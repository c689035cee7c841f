"""Summaries of an exchange stream: latency percentiles, errors, throttling.

`Summary.add(exchange)` one at a time, then `render(accounting)` for text or
`to_dict()` for machines. Percentiles interpolate linearly between the closest
ranks (numpy's default method); each group's values go into a
`QuantileSketch`, so percentiles are exact up to its EXACT_LIMIT values and
within 1% past it, and memory does not grow with the number of exchanges.
The tallies per client id (and per client id and broker) keep at most
`kdissect.forensics.spill.key_limit()` keys in memory, the rest in sorted
runs on disk; their tables are `RowSpool`s and the text is made line by line
(`render_lines`), so memory does not grow with the number of client ids either.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Any, Callable, Iterable, Iterator

from kdissect.model.exchange import NO_RESPONSE, OK, Exchange
from kdissect.forensics.sketch import QuantileSketch
from kdissect.forensics.spill import RowSpool, SpillMap
from kdissect.conn.normal_flow import failure_codes, is_normal_flow_name
from kdissect.text_escape import escape_text

try:  # per-partition errors need the decoded response body
    from kdissect.protocol.errors import error_name
except ImportError:  # pragma: no cover - protocol package incomplete
    def error_name(code: int) -> str:
        return f"UNKNOWN_{code}"


def latency_row(sketch: QuantileSketch | None) -> dict[str, float | int]:
    if sketch is None:
        sketch = QuantileSketch()
    p50, p90, p99 = sketch.percentiles(50, 90, 99)
    return {"count": sketch.count, "p50": p50, "p90": p90, "p99": p99,
            "max": sketch.max if sketch.count else math.nan}


class _Times:
    """One group's wire latencies, service times (latency without the waits
    the protocol asked for; made at the first) and the number of waits set aside."""

    __slots__ = ("wire", "service", "waits")

    def __init__(self) -> None:
        self.wire = QuantileSketch()
        self.service: QuantileSketch | None = None
        self.waits = 0

    def add(self, latency: float, service: float | None, waited: bool) -> None:
        self.wire.add(latency)
        if service is not None:
            if self.service is None:
                self.service = QuantileSketch()
            self.service.add(service)
        self.waits += waited

    def merge(self, other: _Times) -> None:
        self.wire.merge(other.wire)
        if other.service is not None:
            if self.service is None:
                self.service = QuantileSketch()
            self.service.merge(other.service)
        self.waits += other.waits

    def row(self) -> dict[str, float | int]:
        row = latency_row(self.wire)
        service = latency_row(self.service)
        row.update({"service_count": service["count"], "service_p50": service["p50"], "service_p90": service["p90"],
                    "service_p99": service["p99"], "service_max": service["max"], "waits": self.waits})
        return row


class Summary:
    def __init__(self) -> None:
        self.by_api: dict[tuple[str, int | None], _Times] = defaultdict(_Times)
        self.by_client: SpillMap[_Times] = SpillMap(_Times, _Times.merge)  # one per client id: bounded
        self.by_broker: dict[str, _Times] = defaultdict(_Times)
        self.waits: dict[tuple[str, str], QuantileSketch] = defaultdict(QuantileSketch)  # (reason, api) -> waits (ms)
        # (reason, api) -> waits, those of unknown length (no time: kdissect.conn.arrivals) included
        self.wait_counts: Counter[tuple[str, str]] = Counter()
        # (client id, broker) -> [responses with a throttle field, throttled, total ms, max ms, sent while muted]
        self.throttle_by_client: SpillMap[list[int]] = SpillMap(_throttle_row, _merge_throttle)
        self.statuses: Counter[str] = Counter()
        self.top_errors: Counter[str] = Counter()  # exchanges per top-level error name
        self.any_errors: Counter[str] = Counter()  # exchanges with this code anywhere
        self.partition_errors: Counter[tuple[str, int, str]] = Counter()
        self.throttled: Counter[str] = Counter()  # exchanges with throttle > 0, per broker
        self.throttle_ms: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # broker -> [max ms, total ms]
        self.throttle_fields: Counter[str] = Counter()  # responses carrying a throttle time
        self.no_response: Counter[str] = Counter()
        self.exchanges = 0
        self.ok_with_errors = 0  # status ok with a non-zero code anywhere
        self.ok_normal_flow_only = 0  # of those, only normal-flow codes (kdissect.conn.normal_flow)
        # (client id, error name) -> [exchanges]: bounded like the other tallies per client id
        self.errors_by_client: SpillMap[list[int]] = SpillMap(_count, _merge_count, order=_error_order)

    def add(self, ex: Exchange) -> None:
        self.exchanges += 1
        self.statuses[ex.status] += 1
        api = ex.api_name or "unknown"
        latency = ex.latency_ms
        client_id = ex.client_id if ex.client_id is not None else "(none)"
        if latency is not None and ex.api_key is not None:
            service = ex.service_ms
            reason = ex.wait_reason
            waited = reason is not None
            self.by_api[(api, ex.api_version)].add(latency, service, waited)
            self.by_client[client_id].add(latency, service, waited)
            self.by_broker[ex.broker or "?"].add(latency, service, waited)
            if waited:
                key = (reason, api)
                self.wait_counts[key] += 1  # type: ignore[index]
                waits = self.waits[key]  # type: ignore[index]
                if ex.wait_ms is not None:
                    waits.add(ex.wait_ms)
        if ex.throttle_time_ms is not None or (ex.problem_codes and "sent-while-muted" in ex.problem_codes):
            row = self.throttle_by_client[(client_id, ex.broker or "?")]
            if ex.throttle_time_ms is not None:
                row[0] += 1
                if ex.throttle_time_ms > 0:
                    row[1] += 1
                    row[2] += ex.throttle_time_ms
                    row[3] = max(row[3], ex.throttle_time_ms)
            if "sent-while-muted" in ex.problem_codes:
                row[4] += 1
        if ex.status == NO_RESPONSE:
            self.no_response[f"{api} v{ex.api_version}" if ex.api_version is not None else api] += 1
        if ex.error_code:
            self.top_errors[error_name(ex.error_code)] += 1
        for code in ex.error_codes:
            self.any_errors[error_name(code)] += 1
        if ex.error_code or ex.error_codes:
            codes = set(ex.error_codes) | ({ex.error_code} if ex.error_code else set())
            for code in codes:
                self.errors_by_client[(client_id, error_name(code))][0] += 1
            if ex.status == OK:
                self.ok_with_errors += 1
                self.ok_normal_flow_only += not failure_codes(list(codes))
        if ex.throttle_time_ms is not None:
            broker = ex.broker or "?"
            self.throttle_ms[broker]  # noqa: B018 - a broker that reports throttle fields
            if ex.throttle_time_ms > 0:
                self.throttled[broker] += 1
                row = self.throttle_ms[broker]
                row[0] = max(row[0], ex.throttle_time_ms)
                row[1] += ex.throttle_time_ms
            self.throttle_fields[broker] += 1
        if ex.error_codes and ex.response is not None:
            try:
                found = partition_errors_of(ex)
            except Exception:  # a summary problem must not stop a report
                found = []
            for topic, partition, code in found:
                self.partition_errors[(str(topic), partition, error_name(code))] += 1

    def add_all(self, exchanges: Iterable[Exchange]) -> None:
        for ex in exchanges:
            self.add(ex)

    def to_dict(self) -> dict[str, Any]:
        return {
            "exchanges": self.exchanges,
            "statuses": dict(self.statuses),
            "latency_by_api": [
                {"api": api, "version": version, **times.row()}
                for (api, version), times in sorted(self.by_api.items(), key=_api_order)
            ],
            "latency_by_client": RowSpool({"client_id": k, **v.row()} for k, v in self.by_client.items()).settled(),
            "latency_by_broker": [{"broker": k, **v.row()} for k, v in sorted(self.by_broker.items())],
            # a long poll of unknown length is counted with no time (kdissect.conn.arrivals)
            "waits": [
                {"reason": reason, "api": api, "count": self.wait_counts[(reason, api)],
                 "median_ms": waits.percentiles(50)[0] if waits.count else None,
                 "max_ms": waits.max if waits.count else None}
                for (reason, api), waits in sorted(self.waits.items())
            ],
            "throttle_by_client": RowSpool(
                {"client_id": client_id, "broker": broker, "responses": row[0], "throttled": row[1],
                 "total_ms": row[2], "max_ms": row[3], "sent_while_muted": row[4]}
                for (client_id, broker), row in self.throttle_by_client.items()).settled(),
            "paired_with_error_codes": self.ok_with_errors,
            "paired_normal_flow_only": self.ok_normal_flow_only,
            "error_codes": [
                {"error": name, "normal_flow": is_normal_flow_name(name), "top_level": self.top_errors.get(name, 0),
                 "anywhere": self.any_errors.get(name, 0)}
                for name in self._error_names()
            ],
            "errors_by_client": RowSpool(self._errors_by_client_rows()).settled(),
            "top_level_errors": dict(self.top_errors.most_common()),
            "errors_anywhere": dict(self.any_errors.most_common()),
            "partition_errors": [
                {"topic": t, "partition": p, "error": e, "count": n}
                for (t, p, e), n in self.partition_errors.most_common()
            ],
            "throttle": [
                {"broker": b, "responses": self.throttle_fields[b], "throttled": self.throttled[b],
                 "max_ms": v[0], "total_ms": v[1]}
                for b, v in sorted(self.throttle_ms.items())
            ],
            "no_response": dict(self.no_response.most_common()),
        }

    def _error_names(self) -> list[str]:
        """Error names, failures first, then by exchanges carrying them."""
        return sorted(set(self.top_errors) | set(self.any_errors),
                      key=lambda n: (is_normal_flow_name(n), -self.any_errors.get(n, 0), n))

    def _errors_by_client_rows(self) -> Iterator[dict[str, Any]]:
        """errors_by_client's rows: failures first, then by client id, each
        client's errors by exchanges. (Not by exchanges across clients: the
        tally may be spilled to disk, read back in key order, and one
        client's few errors are all that is sorted in memory.)"""
        group: list[dict[str, Any]] = []
        for (client_id, name), (count,) in self.errors_by_client.items():
            normal = is_normal_flow_name(name)
            if group and (group[0]["normal_flow"], group[0]["client_id"]) != (normal, client_id):
                yield from sorted(group, key=lambda r: (-r["exchanges"], r["error"]))
                group = []
            group.append({"client_id": client_id, "error": name, "normal_flow": normal, "exchanges": count})
        yield from sorted(group, key=lambda r: (-r["exchanges"], r["error"]))

    def statuses_line(self) -> str:
        """`exchanges: N (...)`, with "ok" split by error codes."""
        from kdissect.model.accounting import statuses_text

        others = ", ".join(f"{k} {v}" for k, v in sorted(self.statuses.items()) if k != OK)
        return (f"exchanges: {self.exchanges} ("
                + statuses_text(self.statuses.get(OK, 0), self.ok_with_errors, self.ok_normal_flow_only)
                + (f", {others}" if others else "") + ")")

    def render(self, accounting: Any = None, width: int | None = None) -> str:
        """The tables as text, each fitted to `width` columns (None: every
        column). `accounting`: anything with summary_lines() (an Accounting,
        or an Analysis: with its TLS line)."""
        return "".join(self.render_lines(accounting, width))

    def render_lines(self, accounting: Any = None, width: int | None = None) -> Iterator[str]:
        """`render`'s text in pieces (a table may have a row per client id:
        made line by line, its rows read twice, never held as text)."""
        from kdissect.stats.text_table import joined_pieces, wrap_line

        d = self.to_dict()
        # service times first: "is the broker slow" is answered without the waits
        lat_cols = ["count", "service_p50", "service_p99", "service_max", "waits", "p50", "p99", "max",
                    "service_p90", "p90"]
        heads = ["count", "svc_p50", "svc_p99", "svc_max", "waits", "p50", "p99", "max", "svc_p90", "p90"]
        title = " (svc: service time, without the waits the protocol asked for; p: wire latency)"

        def of(rows: Iterable[dict[str, Any]], columns: list[str],
               shown: Callable[[str, Any], Any] = lambda _column, value: value) -> Callable[[], Iterator[list[Any]]]:
            return lambda: ([shown(c, r[c]) for c in columns] for r in rows)

        def yes_no(column: str, value: Any) -> Any:
            return ("yes" if value else "no") if column == "normal_flow" else value

        def table(title: str, header: list[str], rows: Callable[[], Iterable[list[Any]]]) -> Iterator[str]:
            return _table_lines(title, header, rows, width)

        throttle_cols = ["client_id", "throttled", "total_ms", "max_ms", "sent_while_muted", "responses", "broker"]
        parts: list[Iterator[str]] = [
            iter([wrap_line(self.statuses_line(), width)]),
            table("latency (ms) by API" + title, ["api", "version"] + heads,
                  of(d["latency_by_api"], ["api", "version"] + lat_cols)),
            table("latency (ms) by client id", ["client_id"] + heads,
                  of(d["latency_by_client"], ["client_id"] + lat_cols)),
            table("latency (ms) by broker", ["broker"] + heads, of(d["latency_by_broker"], ["broker"] + lat_cols)),
            table("waits the protocol asked for (ms)", ["reason", "api", "count", "median", "max"],
                  of(d["waits"], ["reason", "api", "count", "median_ms", "max_ms"])),
            table("error codes (normal_flow: a code the protocol uses in its normal flow, not a failure)",
                  ["error", "normal_flow", "top_level", "anywhere"],
                  of(d["error_codes"], ["error", "normal_flow", "top_level", "anywhere"], yes_no)),
            table("errors by client id (exchanges; failures first, then by client id)",
                  ["client_id", "error", "normal_flow", "exchanges"],
                  of(d["errors_by_client"], ["client_id", "error", "normal_flow", "exchanges"], yes_no)),
            table("per-partition errors", ["topic", "partition", "error", "count"],
                  of(d["partition_errors"], ["topic", "partition", "error", "count"])),
            table("throttling", ["broker", "responses", "throttled", "max_ms", "total_ms"],
                  of(d["throttle"], ["broker", "responses", "throttled", "max_ms", "total_ms"])),
            table("throttling by client", throttle_cols, of(d["throttle_by_client"], throttle_cols)),
            table("without response", ["api", "count"], lambda: ([k, v] for k, v in d["no_response"].items())),
        ]
        if accounting is not None:
            parts.append(iter(["accounting\n" + "\n".join(wrap_line("  " + line, width, "      ")
                                                            for line in accounting.summary_lines())]))
        yield from joined_pieces(parts)


def _throttle_row() -> list[int]:
    # responses with a throttle field, throttled, total ms, max ms, sent while muted
    return [0, 0, 0, 0, 0]


def _merge_throttle(into: list[int], other: list[int]) -> None:
    into[0] += other[0]
    into[1] += other[1]
    into[2] += other[2]
    into[3] = max(into[3], other[3])
    into[4] += other[4]


def _count() -> list[int]:
    return [0]


def _merge_count(into: list[int], other: list[int]) -> None:
    into[0] += other[0]


def _error_order(key: tuple[str, str]) -> tuple[bool, str, str]:
    """errors_by_client's key order: failures first, then client id, error."""
    return (is_normal_flow_name(key[1]), key[0], key[1])


def partition_errors_of(ex: Exchange) -> list[tuple[Any, int, int]]:
    """(topic, partition, code) for every non-zero code a partition-level
    struct of the exchange's decoded answer holds (`stats`, the Spark job's
    partition_errors table). `error_codes` holds every non-zero code the
    answer carries, its partitions' included: without one there is nothing
    to walk (an answer kept as its frame has none). May raise on a body the
    walk does not expect: the caller counts or skips it."""
    response = ex.response
    if response is None or ex.api_key is None or not ex.error_codes:
        return []
    body = getattr(response, "body", None)
    if body is None:
        return []
    from kdissect.protocol.summary import partition_errors

    return partition_errors(ex.api_key, ex.api_version, body)  # type: ignore[arg-type]


def _api_order(item: tuple[tuple[str, int | None], Any]) -> tuple[str, int]:
    (api, version), _ = item
    return (api, -1 if version is None else version)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.3f}"
    return "-" if value is None else escape_text(str(value))


def _table(title: str, header: list[str], rows: list[list[Any]], width: int | None = None) -> str:
    """An aligned text table of `rows` (each a list of values) fitted to `width`."""
    return "\n".join(_table_lines(title, header, lambda: rows, width))


def _table_lines(title: str, header: list[str], rows: Callable[[], Iterable[list[Any]]],
                 width: int | None = None) -> Iterator[str]:
    """An aligned text table fitted to `width`, line by line; `rows()` gives
    the rows' values, read twice (the widths, then the lines) rather than held."""
    from kdissect.stats.text_table import table_lines

    return table_lines(title, header, rows, lambda _i, value: _cell(value), lambda _i, value: _is_number(value),
                       width)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
