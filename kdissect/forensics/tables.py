"""The forensic tables' columns and types, defined once for every face.

Types are the exchange table's type names (kdissect.model.exchange.arrow_type):
"timestamp" columns hold int nanoseconds in rows and take the run's unit in
Arrow/Parquet; list columns are JSON text in CSV.
"""

from __future__ import annotations

from typing import Any

TABLE_COLUMNS: dict[str, list[tuple[str, str]]] = {
    "topics": [
        ("topic", "string"), ("topic_id", "string"), ("partition", "int32"), ("direction", "string"),
        ("client_id", "string"), ("requests", "int64"), ("batches", "int64"), ("records", "int64"),
        ("record_bytes", "int64"), ("batch_bytes", "int64"), ("codecs", "list<string>"),
        ("compression_ratio", "float64"), ("first_ts", "timestamp"), ("last_ts", "timestamp"),
        ("errors", "list<string>"), ("last_offset", "int64"), ("high_watermark", "int64"),
        ("last_stable_offset", "int64"), ("log_start_offset", "int64"), ("next_offset", "int64"), ("lag", "int64"),
    ],
    "topic_lag": [
        ("topic", "string"), ("partition", "int32"), ("client_id", "string"), ("minute", "timestamp"),
        ("fetches", "int64"), ("lag", "int64"), ("max_lag", "int64"), ("high_watermark", "int64"),
        ("next_offset", "int64"),
    ],
    "end_to_end": [
        ("dimension", "string"), ("topic", "string"), ("client_id", "string"), ("records", "int64"),
        ("min_ms", "float64"), ("mean_ms", "float64"), ("p50_ms", "float64"), ("p90_ms", "float64"),
        ("p99_ms", "float64"), ("max_ms", "float64"), ("unmatched", "int64"),
    ],
    "groups": [
        ("group_id", "string"), ("group_type", "string"), ("generation_id", "int32"), ("protocol_type", "string"),
        ("protocol_name", "string"), ("members", "int32"), ("member_ids", "list<string>"),
        ("client_ids", "list<string>"), ("hosts", "list<string>"), ("leader", "string"),
        ("assignments", "list<string>"), ("rebalance_start", "timestamp"), ("rebalance_end", "timestamp"),
        ("rebalance_ms", "float64"), ("joins", "int64"), ("syncs", "int64"), ("heartbeats", "int64"),
        ("leaves", "int64"), ("commits", "int64"), ("errors", "list<string>"), ("committed_partitions", "int64"),
        ("committed_lag", "int64"), ("first_ts", "timestamp"), ("last_ts", "timestamp"),
    ],
    "group_commits": [
        ("group_id", "string"), ("generation_id", "int32"), ("topic", "string"), ("partition", "int32"),
        ("committed_offset", "int64"), ("commits", "int64"), ("failed", "int64"), ("last_commit_ts", "timestamp"),
        ("client_id", "string"), ("high_watermark", "int64"), ("committed_lag", "int64"),
    ],
    # per group and partition as of the capture's end (kafka-consumer-groups --describe)
    "group_lag": [
        ("group_id", "string"), ("topic", "string"), ("partition", "int32"), ("lag", "int64"),
        ("lag_ms", "float64"),
        ("committed_offset", "int64"), ("high_watermark", "int64"), ("owner_member_id", "string"),
        ("owner_client_id", "string"), ("generation_id", "int32"), ("last_commit_ts", "timestamp"),
        ("committed_by", "string"),
    ],
    # the same per interval through the capture (kdissect.forensics.lag_history)
    "group_lag_over_time": [
        ("group_id", "string"), ("topic", "string"), ("partition", "int32"), ("window_start", "timestamp"),
        ("window_end", "timestamp"), ("lag", "int64"), ("lag_ms", "float64"), ("committed_offset", "int64"),
        ("high_watermark", "int64"),
    ],
    # share groups (kdissect.forensics.share): per partition, and per member
    "share_groups": [
        ("group_id", "string"), ("topic", "string"), ("partition", "int32"), ("members", "int32"),
        ("acquired", "int64"), ("redelivered", "int64"), ("accepted", "int64"), ("released", "int64"),
        ("rejected", "int64"), ("renewed", "int64"), ("ack_errors", "list<string>"), ("lock_timeouts", "int64"),
        ("first_ts", "timestamp"), ("last_ts", "timestamp"),
    ],
    "share_group_members": [
        ("group_id", "string"), ("member_id", "string"), ("client_ids", "list<string>"), ("member_epoch", "int32"),
        ("partitions", "list<string>"), ("acquired", "int64"), ("accepted", "int64"), ("released", "int64"),
        ("rejected", "int64"), ("renewed", "int64"), ("heartbeats", "int64"), ("leaves", "int64"),
        ("heartbeat_interval_ms", "int32"),
        ("heartbeat_gap_min_ms", "float64"), ("heartbeat_gap_mean_ms", "float64"),
        ("heartbeat_gap_max_ms", "float64"), ("session_opens", "int64"), ("session_resets", "int64"),
        ("session_closes", "int64"), ("max_session_epoch", "int32"), ("session_errors", "list<string>"),
        ("first_ts", "timestamp"), ("last_ts", "timestamp"),
    ],
    "clients": [
        ("client_id", "string"), ("software_name", "string"), ("software_version", "string"),
        ("hosts", "list<string>"), ("brokers", "list<string>"), ("connections", "int64"), ("reconnects", "int64"),
        ("first_ts", "timestamp"), ("last_ts", "timestamp"), ("requests", "int64"),
        ("requests_by_api", "list<string>"), ("metadata_requests", "int64"), ("metadata_max_per_minute", "int64"),
        ("produce_batches", "int64"), ("produce_records", "int64"), ("produce_batch_bytes", "int64"),
        ("produce_record_bytes", "int64"), ("max_batch_bytes", "int64"), ("mean_batch_bytes", "float64"),
        ("compression_ratio", "float64"), ("producer_ids", "list<string>"), ("transactional_ids", "list<string>"),
        ("sequence_gaps", "int64"), ("sequence_duplicates", "int64"), ("throttled", "int64"),
        ("throttle_ms", "int64"), ("max_throttle_ms", "int64"), ("errors", "list<string>"),
    ],
    # exchanges carrying each error code per client id (`kdissect stats`' table of the name, with the
    # Spark job's columns)
    "errors_by_client": [
        ("client_id", "string"), ("error_code", "int16"), ("error_name", "string"), ("normal_flow", "bool"),
        ("exchanges", "int64"),
    ],
    "producers": [
        ("producer_id", "int64"), ("producer_epoch", "int16"), ("transactional_id", "string"),
        ("client_ids", "list<string>"), ("topic", "string"), ("partition", "int32"), ("connections", "int64"),
        ("batches", "int64"), ("records", "int64"), ("first_sequence", "int32"), ("next_sequence", "int32"),
        ("sequence_gaps", "int64"), ("missing_sequences", "int64"), ("duplicates", "int64"),
        ("first_ts", "timestamp"), ("last_ts", "timestamp"),
    ],
    "transactions": [
        ("transactional_id", "string"), ("transaction", "int32"), ("producer_id", "int64"),
        ("producer_epoch", "int16"), ("client_ids", "list<string>"), ("partitions", "list<string>"),
        ("partitions_added", "int64"), ("produce_batches", "int64"), ("records", "int64"), ("group_id", "string"),
        ("offsets_committed", "list<string>"), ("end", "string"), ("result", "string"), ("end_error", "string"),
        ("fenced", "bool"), ("errors", "list<string>"), ("first_ts", "timestamp"), ("end_ts", "timestamp"),
        ("duration_ms", "float64"),
    ],
    "transaction_markers": [
        ("topic", "string"), ("partition", "int32"), ("producer_id", "int64"), ("commit_markers", "int64"),
        ("abort_markers", "int64"), ("aborted_listed", "int64"), ("aborted_first_offsets", "list<string>"),
        ("committed_batches", "int64"), ("committed_records", "int64"), ("aborted_batches", "int64"),
        ("aborted_records", "int64"), ("undecided_batches", "int64"), ("client_ids", "list<string>"),
    ],
}
# which tables each command writes (the first is its default)
COMMAND_TABLES = {
    "topics": ("topics", "topic_lag", "end_to_end"),
    "groups": ("groups", "group_commits", "group_lag", "group_lag_over_time", "share_groups", "share_group_members"),
    "clients": ("clients", "errors_by_client", "producers", "transactions", "transaction_markers"),
}
TABLE_NAMES = tuple(TABLE_COLUMNS)
# tables `kdissect stats` makes of its own from the exchange rows (and the Spark job's summaries):
# the forensic faces write them for the commands' -o, the others keep the stats' one
STATS_TABLES = frozenset({"errors_by_client"})


def column_names(table: str) -> list[str]:
    return [name for name, _ in TABLE_COLUMNS[table]]


def arrow_schema(table: str, ts_unit: str = "us") -> Any:
    import pyarrow as pa

    from kdissect.model.exchange import arrow_type

    return pa.schema([(name, arrow_type(kind, ts_unit)) for name, kind in TABLE_COLUMNS[table]])
