"""What the report's reader should look at first: the findings, ranked.

From the report's data only (both paths: captures and a Spark OUTDIR), in
this order: slowest service (service time, the waits the protocol asked for
set apart), failures by client (normal-flow codes left out), throttled clients, rebalances, partitions
whose lag grew, capture problems. Each finding names the table rows behind
it (`anchor`: the id of a row on the page, `kdissect.report.page.row_id`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

SHOWN = 3  # entries named per finding


def row_id(table: str, index: int) -> str:
    """The id of a table row on the page (the table's `index`th row)."""
    return f"row-{table}-{index}"


def _finding(kind: str, title: str, text: str, table: str, indexes: list[int]) -> dict[str, Any]:
    return {"kind": kind, "title": title, "text": text, "table": table,
            "anchors": [row_id(table, i) for i in indexes]}


def findings(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The findings, ranked (an empty list: nothing stands out)."""
    stats, report = data["stats"], data["report"]
    found = [_slowest_service(stats), _failures_by_client(stats), _throttled_clients(stats),
             _rebalances(stats), _growing_lag(stats), _capture_problems(report)]
    return [f for f in found if f is not None]


def _slowest_service(stats: dict[str, Any]) -> dict[str, Any] | None:
    rows = stats.get("latency_by_api") or []
    timed = [(i, r) for i, r in enumerate(rows) if r.get("service_count") and r.get("service_p99") is not None]
    if not timed:
        return None
    top = sorted(timed, key=lambda item: -item[1]["service_p99"])[:SHOWN]
    parts = [f"{r['api']} v{r['version']}: p99 {r['service_p99']:,.1f} ms, max {r['service_max']:,.1f} ms "
             f"({r['service_count']:,} exchanges, {r.get('waits', 0):,} waits set apart)" for _i, r in top]
    return _finding("slowest_service", "Slowest service", "; ".join(parts), "latency_by_api", [i for i, _r in top])


def _failures_by_client(stats: dict[str, Any]) -> dict[str, Any] | None:
    """Clients by exchanges carrying a failure code (the codes of the
    protocol's normal flow left out: `stats`' errors_by_client table)."""
    rows = stats.get("errors_by_client") or []
    per_client: dict[str, list[tuple[int, dict[str, Any]]]] = defaultdict(list)
    for index, row in enumerate(rows):
        if not row.get("normal_flow"):
            per_client[str(row["client_id"])].append((index, row))
    if not per_client:
        return None
    ranked = sorted(per_client.items(), key=lambda item: (-sum(r["exchanges"] for _i, r in item[1]), item[0]))
    parts = [f"{client}: " + ", ".join(f"{r['error']} x{r['exchanges']:,}" for _i, r in found[:3])
             for client, found in ranked[:SHOWN]]
    more = f"; {len(ranked) - SHOWN} more clients" if len(ranked) > SHOWN else ""
    return _finding("failures_by_client", "Failures by client", "; ".join(parts) + more, "errors_by_client",
                    [found[0][0] for _client, found in ranked[:SHOWN]])


def _throttled_clients(stats: dict[str, Any]) -> dict[str, Any] | None:
    rows = stats.get("throttle_by_client") or []
    hit = [(i, r) for i, r in enumerate(rows) if r.get("throttled") or r.get("sent_while_muted")]
    if not hit:
        return None
    hit.sort(key=lambda item: -item[1]["total_ms"])
    parts = [f"{r['client_id']} at {r['broker']}: {r['throttled']:,} responses throttled, {r['total_ms']:,} ms "
             f"in all" + (f", {r['sent_while_muted']:,} requests sent while muted" if r["sent_while_muted"] else "")
             for _i, r in hit[:SHOWN]]
    return _finding("throttled_clients", "Throttled clients", "; ".join(parts), "throttle_by_client",
                    [i for i, _r in hit[:SHOWN]])


def _rebalances(stats: dict[str, Any]) -> dict[str, Any] | None:
    storms = stats.get("rebalance_storms") or []
    if storms:
        parts = [f"{r['group_id']}: {r['in_window']} generations within 5 minutes" for r in storms[:SHOWN]]
        return _finding("rebalances", "Rebalance storms", "; ".join(parts), "rebalance_storms",
                        list(range(min(SHOWN, len(storms)))))
    groups = [(i, r) for i, r in enumerate(stats.get("groups") or []) if r.get("rebalance_ms")]
    if not groups:
        return None
    longest = sorted(groups, key=lambda item: -item[1]["rebalance_ms"])[:SHOWN]
    parts = [f"{r['group_id']} generation {r['generation_id']}: {r['rebalance_ms']:,.0f} ms" for _i, r in longest]
    return _finding("rebalances", "Longest rebalances", "; ".join(parts), "groups", [i for i, _r in longest])


def _growing_lag(stats: dict[str, Any]) -> dict[str, Any] | None:
    """Partitions whose lag (per client, per minute) was higher at the end
    than at the start of the capture."""
    series: dict[tuple[str, int, str], list[tuple[int, int, int]]] = defaultdict(list)
    for index, row in enumerate(stats.get("topic_lag") or []):
        if row.get("lag") is not None and row.get("minute") is not None:
            series[(row["topic"], row["partition"], row["client_id"])].append((row["minute"], row["lag"], index))
    growing = []
    for (topic, partition, client), points in series.items():
        points.sort()
        if len(points) > 1 and points[-1][1] > points[0][1]:
            growing.append((points[-1][1] - points[0][1], topic, partition, client, points[-1][1], points[-1][2]))
    if not growing:
        return None
    growing.sort(key=lambda item: (-item[0], item[1], item[2]))
    parts = [f"{topic}-{partition} read by {client}: lag {last:,} (+{grew:,})"
             for grew, topic, partition, client, last, _i in growing[:SHOWN]]
    return _finding("growing_lag", "Partitions with growing lag", "; ".join(parts), "topic_lag",
                    [item[-1] for item in growing[:SHOWN]])


def _capture_problems(report: dict[str, Any]) -> dict[str, Any] | None:
    rows = report.get("problems") or []
    if not rows:
        return None
    parts = [f"{r['code']}: {r['exchanges']:,} exchanges" for r in rows[:SHOWN]]
    more = f"; {len(rows) - SHOWN} more problem codes" if len(rows) > SHOWN else ""
    return _finding("capture_problems", "Capture problems", "; ".join(parts) + more, "problems",
                    list(range(min(SHOWN, len(rows)))))
