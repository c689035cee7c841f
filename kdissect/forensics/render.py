"""The forensic tables as text for the terminal (the commands and `stats`).

Terminal tables show a few columns each (`DISPLAY`); `-o FILE` writes every
column. Times are UTC clock times, lists are comma-separated.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from kdissect.text_escape import escape_text
from kdissect.times import clock_text

TITLES = {
    "topics": "topics: one row per topic, partition, direction and client id",
    "topic_lag": "consumer lag per minute",
    "end_to_end": "end-to-end latency (ms), produce request to the fetch response that delivered the record",
    "groups": "group generations",
    "group_commits": "committed offsets",
    "clients": "clients",
    "producers": "idempotent / transactional producers per partition",
    "share_groups": "share groups: record delivery per partition",
    "share_group_members": "share group members",
    "transactions": "transactions: one row per transaction",
    "transaction_markers": "transaction markers and aborted transactions in fetched data, per partition and producer",
}
DISPLAY: dict[str, list[str]] = {
    "topics": ["topic", "partition", "direction", "client_id", "requests", "records", "record_bytes", "batch_bytes",
               "compression_ratio", "codecs", "errors", "high_watermark", "next_offset", "lag"],
    "topic_lag": ["topic", "partition", "client_id", "minute", "fetches", "lag", "max_lag", "high_watermark"],
    "end_to_end": ["dimension", "topic", "client_id", "records", "p50_ms", "p90_ms", "p99_ms", "max_ms", "unmatched"],
    "groups": ["group_id", "group_type", "generation_id", "members", "leader", "rebalance_start", "rebalance_ms",
               "joins", "heartbeats", "leaves", "commits", "committed_lag", "errors", "assignments"],
    "group_commits": ["group_id", "generation_id", "topic", "partition", "committed_offset", "high_watermark",
                      "committed_lag", "commits", "failed", "client_id"],
    "clients": ["client_id", "software_name", "software_version", "hosts", "connections", "reconnects", "requests",
                "metadata_max_per_minute", "produce_batches", "mean_batch_bytes", "compression_ratio",
                "producer_ids", "sequence_gaps", "sequence_duplicates", "throttled", "errors"],
    "producers": ["producer_id", "producer_epoch", "transactional_id", "client_ids", "topic", "partition", "batches",
                  "records", "first_sequence", "next_sequence", "sequence_gaps", "missing_sequences", "duplicates"],
    "share_groups": ["group_id", "topic", "partition", "members", "acquired", "redelivered", "accepted", "released",
                     "rejected", "renewed", "ack_errors", "lock_timeouts"],
    "share_group_members": ["group_id", "client_ids", "member_epoch", "partitions", "acquired", "accepted",
                            "released", "rejected", "heartbeats", "heartbeat_interval_ms", "heartbeat_gap_mean_ms",
                            "session_opens", "session_resets", "session_errors"],
    "transactions": ["transactional_id", "transaction", "producer_id", "producer_epoch", "partitions",
                     "partitions_added", "records", "offsets_committed", "end", "result", "end_error", "first_ts",
                     "duration_ms"],
    "transaction_markers": ["topic", "partition", "producer_id", "commit_markers", "abort_markers", "aborted_listed",
                            "committed_batches", "aborted_batches", "aborted_records", "undecided_batches",
                            "client_ids"],
}
TIME_COLUMNS = frozenset(("first_ts", "last_ts", "end_ts", "rebalance_start", "rebalance_end", "minute", "last_commit_ts",
                          "window_start", "window_end"))


def cell(name: str, value: Any, escape: Callable[[str], str] = escape_text) -> str:
    if value is None:
        return "-"
    if name in TIME_COLUMNS and isinstance(value, int):
        return clock_text(value, with_date=name == "minute", places=3)
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.3f}"
    if isinstance(value, list):
        return ",".join(escape(str(v)) for v in value) if value else "-"
    return escape(str(value))


def render_rows(title: str, columns: list[str], rows: list[dict[str, Any]], width: int = 60) -> str:
    """An aligned text table; cells longer than `width` are cut with '...'."""
    if not rows:
        return f"{title}\n  (none)"
    cells = [[_cut(cell(name, row.get(name)), width) for name in columns] for row in rows]
    widths = [max(len(name), *(len(r[i]) for r in cells)) for i, name in enumerate(columns)]
    numeric = [all(isinstance(row.get(name), (int, float)) and not isinstance(row.get(name), bool)
                   or row.get(name) is None for row in rows) and name not in TIME_COLUMNS
               for name in columns]

    def line(values: list[str]) -> str:
        return "  " + "  ".join(v.rjust(w) if num else v.ljust(w)
                                for v, w, num in zip(values, widths, numeric)).rstrip()

    return "\n".join([title, line(columns), *(line(r) for r in cells)])


def render_table(name: str, rows: list[dict[str, Any]]) -> str:
    return render_rows(TITLES[name], DISPLAY[name], rows)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def render_flags(tables: Any, clients: bool = True) -> str:
    """The storms and flapping members `stats` flags (with `clients`, the
    metadata storms too), and unnamed topic ids."""
    parts = [
        render_rows("rebalance storms (5+ generations within 5 minutes)",
                    ["group_id", "group_type", "generations", "in_window", "window_start", "window_end"],
                    tables.rebalance_storms),
        render_rows("members that left and rejoined", ["group_id", "client_id", "host", "leaves", "rejoins"],
                    tables.member_rejoins),
    ]
    if clients:
        parts.append(render_rows("metadata storms (60+ Metadata requests in a minute)",
                                 ["client_id", "software_name", "metadata_requests", "metadata_max_per_minute"],
                                 tables.metadata_storms))
    if tables.unresolved_topic_ids:
        unnamed = tables.unresolved_topic_ids
        more = " ..." if len(unnamed) > 4 else ""
        parts.append(f"topic ids no response named: {len(unnamed)} ({', '.join(map(escape_text, unnamed[:4]))}{more})")
    return "\n\n".join(parts)


def render_stats(tables: Any) -> str:
    """What `kdissect stats` adds: the flags, producers with sequence
    problems, end-to-end latency per topic and client, and what the
    forensic commands would show."""
    troubled = [row for row in tables.producers if row["sequence_gaps"] or row["duplicates"]]
    parts = [
        "",
        f"forensics: {len({(r['topic'], r['partition']) for r in tables.topics})} topic-partitions, "
        f"{len({r['group_id'] for r in tables.groups})} groups "
        f"({len(tables.groups)} generations), {len(tables.clients)} clients "
        "(kdissect topics / groups / clients for the tables)",
        render_flags(tables),
        render_rows("producer sequence gaps and duplicates",
                    ["producer_id", "producer_epoch", "client_ids", "topic", "partition", "sequence_gaps",
                     "missing_sequences", "duplicates"], troubled),
        render_rows(TITLES["end_to_end"], DISPLAY["end_to_end"],
                    [row for row in tables.end_to_end if row["dimension"] != "topic_client"]),
    ]
    return "\n\n".join(parts) + "\n"
