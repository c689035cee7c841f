"""The forensic tables as text for the terminal (the commands and `stats`).

Terminal tables show a few columns each (`DISPLAY`, in priority order), as
many as the width allows; `-o FILE` writes every column. Times are UTC clock
times, lists are comma-separated.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Iterator

from kdissect.text_escape import escape_text
from kdissect.stats.text_table import table_lines as text_table_lines
from kdissect.stats.text_table import wrap_line
from kdissect.model.times import clock_text

TITLES = {
    "topics": "topics: one row per topic, partition, direction and client id",
    "topic_lag": "consumer lag per minute",
    "end_to_end": "end-to-end latency (ms), produce request to the fetch response that delivered the record",
    "groups": "group generations",
    "group_commits": "committed offsets",
    "group_lag": "group lag per partition at the capture's end (records and ms behind; committed offset, high "
                 "watermark, owner)",
    "group_lag_over_time": "group lag per partition over time (as of each interval's end)",
    "clients": "clients",
    "errors_by_client": "errors by client id (exchanges; failures first, then by client id)",
    "producers": "idempotent / transactional producers per partition",
    "share_groups": "share groups: record delivery per partition",
    "share_group_members": "share group members",
    "transactions": "transactions: one row per transaction",
    "transaction_markers": "transaction markers and aborted transactions in fetched data, per partition and producer",
}
# Display order is priority order: the row's identity, then the columns that
# answer the table's question (lag, errors, times), ids and detail last; a
# terminal narrower than the table keeps the leading columns (kdissect.stats.text_table).
DISPLAY: dict[str, list[str]] = {
    "topics": ["topic", "partition", "direction", "lag", "errors", "requests", "records", "high_watermark",
               "next_offset", "client_id", "record_bytes", "batch_bytes", "compression_ratio", "codecs"],
    "topic_lag": ["topic", "partition", "minute", "lag", "max_lag", "high_watermark", "fetches", "client_id"],
    "end_to_end": ["dimension", "topic", "p50_ms", "p90_ms", "p99_ms", "max_ms", "records", "unmatched",
                   "client_id"],
    "groups": ["group_id", "generation_id", "rebalance_ms", "errors", "committed_lag", "members", "joins",
               "leaves", "commits", "heartbeats", "rebalance_start", "group_type", "leader", "assignments"],
    "group_commits": ["group_id", "topic", "partition", "committed_lag", "failed", "committed_offset",
                      "high_watermark", "commits", "generation_id", "client_id"],
    "group_lag": ["group_id", "topic", "partition", "lag", "lag_ms", "committed_offset", "high_watermark",
                  "owner_client_id",
                  "owner_member_id", "generation_id", "last_commit_ts", "committed_by"],
    "group_lag_over_time": ["group_id", "topic", "partition", "window_end", "lag", "lag_ms", "committed_offset",
                            "high_watermark", "window_start"],
    "clients": ["client_id", "errors", "throttled", "reconnects", "sequence_gaps", "sequence_duplicates",
                "requests", "connections", "metadata_max_per_minute", "software_name", "software_version", "hosts",
                "produce_batches", "mean_batch_bytes", "compression_ratio", "producer_ids"],
    "errors_by_client": ["client_id", "error_name", "normal_flow", "exchanges", "error_code"],
    "producers": ["topic", "partition", "producer_id", "sequence_gaps", "missing_sequences", "duplicates", "batches",
                  "records", "producer_epoch", "first_sequence", "next_sequence", "transactional_id", "client_ids"],
    "share_groups": ["group_id", "topic", "partition", "ack_errors", "lock_timeouts", "redelivered", "rejected",
                     "acquired", "accepted", "released", "renewed", "members"],
    "share_group_members": ["group_id", "member_epoch", "session_errors", "session_resets", "heartbeat_gap_mean_ms",
                            "acquired", "accepted", "released", "rejected", "heartbeats", "heartbeat_interval_ms",
                            "session_opens", "partitions", "client_ids"],
    "transactions": ["transactional_id", "transaction", "result", "end_error", "duration_ms", "records",
                     "partitions", "offsets_committed", "end", "first_ts", "producer_id", "producer_epoch",
                     "partitions_added"],
    "transaction_markers": ["topic", "partition", "aborted_records", "undecided_batches", "commit_markers",
                            "abort_markers", "aborted_listed", "committed_batches", "aborted_batches", "producer_id",
                            "client_ids"],
}
METADATA_STORM_COLUMNS = ["client_id", "metadata_max_per_minute", "metadata_requests", "software_name"]
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


def render_rows(title: str, columns: list[str], rows: Iterable[dict[str, Any]], width: int | None = None) -> str:
    """An aligned text table of `columns` (priority order), fitted to `width`
    terminal columns (None: every column)."""
    return "\n".join(render_lines(title, columns, rows, width))


def render_lines(title: str, columns: list[str], rows: Iterable[dict[str, Any]],
                 width: int | None = None) -> Iterator[str]:
    """`render_rows`' lines, one at a time: `rows` is read twice (the widths,
    then the lines; a list or a kdissect.forensics.spill.RowSpool), not held as text."""
    numbers = [name not in TIME_COLUMNS for name in columns]

    def is_number(i: int, value: Any) -> bool:
        return numbers[i] and (value is None or isinstance(value, (int, float)) and not isinstance(value, bool))

    return text_table_lines(title, columns, lambda: ([row.get(name) for name in columns] for row in rows),
                            lambda i, value: cell(columns[i], value), is_number, width)


def render_table(name: str, rows: Iterable[dict[str, Any]], width: int | None = None) -> str:
    return render_rows(TITLES[name], DISPLAY[name], rows, width)


def table_lines(name: str, rows: Iterable[dict[str, Any]], width: int | None = None) -> Iterator[str]:
    """`render_table`'s lines, one at a time."""
    return render_lines(TITLES[name], DISPLAY[name], rows, width)


def render_flags(tables: Any, clients: bool = True, width: int | None = None) -> str:
    """The storms and flapping members `stats` flags (with `clients`, the
    metadata storms too), and unnamed topic ids."""
    parts = [
        render_rows("rebalance storms (5+ generations within 5 minutes)",
                    ["group_id", "group_type", "generations", "in_window", "window_start", "window_end"],
                    tables.rebalance_storms, width),
        render_rows("members that left and rejoined", ["group_id", "leaves", "rejoins", "client_id", "host"],
                    tables.member_rejoins, width),
    ]
    if clients:
        parts.append(render_rows("metadata storms (60+ Metadata requests in a minute)",
                                 METADATA_STORM_COLUMNS, tables.metadata_storms, width))
    if tables.unresolved_topic_ids:
        unnamed = tables.unresolved_topic_ids
        more = " ..." if len(unnamed) > 4 else ""
        parts.append(f"topic ids no response named: {len(unnamed)} ({', '.join(map(escape_text, unnamed[:4]))}{more})")
    return "\n\n".join(parts)


def render_stats(tables: Any, width: int | None = None) -> str:
    """What `kdissect stats` adds: the flags, producers with sequence
    problems, end-to-end latency per topic and client, and what the
    forensic commands would show."""
    troubled = [row for row in tables.producers if row["sequence_gaps"] or row["duplicates"]]
    parts = [
        "",
        wrap_line(f"forensics: {len({(r['topic'], r['partition']) for r in tables.topics})} topic-partitions, "
                  f"{len({r['group_id'] for r in tables.groups})} groups "
                  f"({len(tables.groups)} generations), {len(tables.clients)} clients "
                  "(kdissect topics / groups / clients for the tables)", width),
        render_flags(tables, width=width),
        render_rows("producer sequence gaps and duplicates",
                    ["topic", "partition", "producer_id", "sequence_gaps", "missing_sequences", "duplicates",
                     "producer_epoch", "client_ids"], troubled, width),
        render_rows(TITLES["end_to_end"], DISPLAY["end_to_end"],
                    [row for row in tables.end_to_end if row["dimension"] != "topic_client"], width),
    ]
    return "\n\n".join(parts) + "\n"
