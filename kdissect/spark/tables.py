"""The driver's side of the tables: stream numbering and the job that writes
the task tables and computes the summary tables; row counts and the printed
summary, read from the written files.

Nothing here collects more than the summary tables' rows to the driver.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


def stream_ranks(work):
    """(task_partition, stream_capture_index, stream_frame_number, global_stream)
    of every connection classified as Kafka, numbered as the CLI numbers them.

    The CLI numbers connections in the order they are classified as Kafka,
    which is the feed order of the classifying packet: (its order_ts, its
    file, its frame number; kdissect.wire.captureset). Each connection's key
    (capture_index, frame_number) is unique, so ranking by the feed order
    reproduces the CLI's numbers. The keys are a few dozen bytes per
    connection, so one window over all of them is cheap.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order = Window.orderBy("stream_order_ts", "stream_capture_index", "stream_frame_number")
    return (
        work.where("kind = 1")
        .select("task_partition", "stream_capture_index", "stream_frame_number", "stream_order_ts")
        .withColumn("global_stream", F.row_number().over(order).cast("long") - 1)
        .drop("stream_order_ts")
    )


def finish_tables(work, partitions: int, slots: int, work_dir: Any, outdir: Any,
                  ts_unit: str = "us", fixes: dict | None = None, frame_offsets: list[int] | None = None
                  ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, int]]:
    """Number the streams of the rows the dissecting tasks wrote, turn their
    files into the exchanges/ and partition_errors/ tables (part_files.py),
    and compute the summary tables (summaries.py): one Spark job.

    Each task partition gets its connections' stream numbers, plus one marker
    row (from its accounting row) so a partition with no Kafka connection is
    finished too. One task per task slot finishes several task partitions,
    summing up their exchanges together (see part_files.finish_partitions):
    fewer tasks, fewer contribution rows. `fixes`: per task partition, the
    long polls a captured Produce ended (kdissect.spark.arrivals); `frame_offsets`:
    per split id, the frame offset of a locally numbered range
    (kdissect.spark.frames). (`coalesce` rather than a shuffle
    into `slots` partitions: hashing a few partition numbers into as few
    partitions can put several on one task and leave another idle.)
    Returns the rows of each summary table (a row per API, client, broker or
    minute: small) and the rows written per task table.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    from kdissect.spark.part_files import RANK_SCHEMA, finish_partitions
    from kdissect.spark.summaries import (CONTRIBUTION_SCHEMA, GROUP_COLUMNS, MERGED_SCHEMA, merge_contributions,
                                          split_merged)

    markers = work.where("kind = 2").select(
        "task_partition", F.lit(None).cast("int").alias("stream_capture_index"),
        F.lit(None).cast("long").alias("stream_frame_number"), F.lit(None).cast("long").alias("global_stream"))
    ranks = stream_ranks(work).unionByName(markers)
    merged = (
        ranks.repartition(partitions, "task_partition")
        .sortWithinPartitions("task_partition")
        .coalesce(slots)
        .select(*RANK_SCHEMA.names)
        .mapInArrow(lambda batches: finish_partitions(batches, work_dir, outdir, ts_unit, fixes, frame_offsets),
                    from_arrow_schema(CONTRIBUTION_SCHEMA))
        .repartition(slots, *GROUP_COLUMNS)
        .sortWithinPartitions(*GROUP_COLUMNS)
        .mapInArrow(merge_contributions, from_arrow_schema(MERGED_SCHEMA))
        .collect()  # the summary tables' rows
    )
    return split_merged(merged)


def parquet_rows(where: Any, name: str) -> int:
    """Rows of a written Parquet dataset `where`/`name` (`where` a Tree or a
    path), from the file footers (no Spark job); 0 if absent."""
    import pyarrow.parquet as pq

    from kdissect.shared.outdir_tree import as_tree

    tree = as_tree(where)
    total = 0
    for file in tree.files(name, suffix=".parquet"):
        with tree.open_input(name, file) as stream:
            total += pq.ParquetFile(stream).metadata.num_rows
    return total


def read_small_table(where: Any, name: str, columns: list[str] | None = None) -> list[dict[str, Any]]:
    """All rows of a small Parquet dataset `where`/`name`, as dicts (read on the driver)."""
    import pyarrow.parquet as pq

    from kdissect.shared.outdir_tree import as_tree

    tree = as_tree(where)
    rows: list[dict[str, Any]] = []
    for file in tree.files(name, suffix=".parquet"):
        with tree.open_input(name, file) as stream:
            rows.extend(pq.read_table(stream, columns=columns).to_pylist())
    return rows


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.3f}"
    return str(value)


def render_summary(outdir: Any, accounting: Any, top: int = 8) -> str:
    """A few lines for the terminal, from the accounting and the (small) summary tables."""
    lines: list[str] = []
    from kdissect.model.accounting import statuses_text

    statuses = [("inexact", accounting.inexact), ("no_response", accounting.no_response),
                ("orphan_response", accounting.orphan_responses), ("malformed", accounting.malformed),
                ("truncated", accounting.truncated)]
    statuses = sorted((item for item in statuses if item[1]), key=lambda item: -item[1])
    detail = ", ".join([statuses_text(accounting.ok, accounting.ok_with_errors, accounting.ok_normal_flow_only)]
                       + [f"{status} {count}" for status, count in statuses])
    lines.append(f"exchanges: {accounting.exchanges} ({detail})")
    latency = [row for row in read_small_table(outdir, "latency") if row["dimension"] == "api"]
    latency.sort(key=lambda row: -row["count"])
    if latency:
        lines.append("latency (ms) by API, busiest first:  count     p50     p99     max")
        for row in latency[:top]:
            lines.append(f"  {row['api_name']} v{row['api_version']}".ljust(37)
                         + f"{row['count']:>6} {_fmt(row['p50']):>7} {_fmt(row['p99']):>7} {_fmt(row['max']):>7}")
    errors = read_small_table(outdir, "errors")
    errors.sort(key=lambda row: (-row["anywhere"], row["api_name"], row["error_code"]))
    if errors:
        lines.append("errors: " + ", ".join(f"{row['api_name']} {row['error_name']} x{row['anywhere']}"
                                            for row in errors[:top]))
    throttle = read_small_table(outdir, "throttle")
    throttled = sum(row["throttled"] for row in throttle)
    worst = max((row["max_ms"] for row in throttle if row["max_ms"] is not None), default=None)
    lines.append(f"throttled responses: {throttled}" + (f" (max {worst} ms)" if throttled else ""))
    lines.extend(accounting.summary_lines())
    return "\n".join(lines)
