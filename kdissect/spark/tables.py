"""The driver's side of the tables: stream numbering and the job that writes
the task tables and computes the summary tables; row counts and the printed
summary, read from the written files.

What reaches the driver is small: a classification key per Kafka
connection, and the finishing tasks' contributions to the summary tables
(a row per group and task).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Iterator

# the columns of the Kafka connections' keys (the tasks' part_files.CONNECTIONS files) the numbering reads
CONNECTION_COLUMNS = ("task_partition", "stream_capture_index", "stream_frame_number", "stream_order_ts")


def stream_numbers(connections: Any) -> dict[int, Any]:
    """{task partition: its part_files.PartStreams} of the connections
    classified as Kafka, given as a table of CONNECTION_COLUMNS (task
    partition, capture index, frame number, order_ts), numbered as the CLI
    numbers them.

    The CLI numbers connections in the order they are classified as Kafka,
    which is the feed order of the classifying packet: (its order_ts, its
    file, its frame number; kdissect.wire.captureset). Each connection's key
    (capture index, frame number) is unique, so ranking by the feed order
    reproduces the CLI's numbers. The keys are a few dozen bytes per
    connection and ranking them needs all of them in one place (as a Spark
    window without partitions would put them in one task), so the driver
    ranks them, with numpy (a capture of 200,000 connections: one sort, not
    a Python key per connection). (A missing order_ts sorts first, as in Spark.)
    """
    import numpy as np
    import pyarrow.compute as pc

    from kdissect.spark.part_files import PartStreams

    if connections.num_rows == 0:
        return {}
    task_partitions, captures, frames = (connections.column(name).to_numpy().astype(np.int64)
                                         for name in CONNECTION_COLUMNS[:3])
    order_ts = connections.column("stream_order_ts")
    timed = order_ts.is_valid().to_numpy()
    times = pc.fill_null(order_ts, 0).to_numpy().astype(np.int64)
    numbers = np.empty(len(frames), dtype=np.int64)
    numbers[np.lexsort((frames, captures, times, timed))] = np.arange(len(frames), dtype=np.int64)
    by_partition = np.lexsort((frames, captures, task_partitions))
    cuts = np.flatnonzero(np.diff(task_partitions[by_partition])) + 1
    return {int(task_partitions[rows[0]]): PartStreams(captures[rows], frames[rows], numbers[rows])
            for rows in np.split(by_partition, cuts)}


def finishing_tasks(rows: dict[int, int], slots: int) -> list[list[int]]:
    """The task partitions (keys of `rows`, their exchange rows) cut into at
    most `slots` runs of consecutive partitions with about as many rows each:
    one finishing task per run, so every slot finishes about the same work
    and sums up its partitions' exchanges together (fewer contribution rows)."""
    ordered = sorted(rows)
    tasks = max(1, min(slots, len(ordered)))
    share = max(1, sum(rows.values())) / tasks
    runs: list[list[int]] = [[] for _ in range(tasks)]
    done = 0
    for task_partition in ordered:
        # the run this partition's middle row falls in
        runs[min(tasks - 1, int((done + rows[task_partition] / 2) / share))].append(task_partition)
        done += rows[task_partition]
    return [run for run in runs if run]


def finishes_here(rows: dict[int, int], slots: int, on_driver: bool) -> bool:
    """Whether `finish_tables` finishes in this process, without a Spark job:
    `on_driver` (local mode) and one finishing task."""
    return on_driver and len(finishing_tasks(rows, slots)) == 1


def finish_tables(sc: Any, connections: Any, rows: dict[int, int],
                  work_dir: Any, outdir: Any, ts_unit: str = "us", fixes: dict | None = None,
                  frame_offsets: list[int] | None = None, on_driver: bool = False
                  ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, int]]:
    """Number the streams of the rows the dissecting tasks wrote, turn their
    files into the exchanges/ and partition_errors/ tables (part_files.py),
    and compute the summary tables (summaries.py): one Spark job of at most
    one task per task slot.

    `connections`: a table of CONNECTION_COLUMNS, a row for every connection
    classified as Kafka; `rows`: every task partition
    (one with no Kafka connection is finished too) and its exchange rows.
    Each finishing task gets consecutive task partitions with their stream
    numbers and `fixes` (per task partition, the long polls a captured
    Produce ended: kdissect.spark.arrivals), rewrites their files and hands
    back its contributions to the summary tables, which the driver merges
    (a row per group and finishing task: small). `frame_offsets`: per split
    id, the frame offset of a locally numbered range (kdissect.spark.frames).
    Returns the rows of each summary table (a row per API, client, broker or
    minute: small) and the rows written per task table.
    (An RDD job: the DataFrame job it replaced, a window, three shuffles
    and their query planning, cost the JVM more than the finishing itself.)
    `on_driver` (local mode): one finishing task (one task slot) runs in this
    process instead, the same function over the same parts, without a Spark
    job: on one core the job's scheduling, the task's closure and the
    worker's round trip cost about as much CPU as a third of the finishing.
    """
    import pyarrow as pa

    from kdissect.spark.part_files import finish_partitions
    from kdissect.spark.summaries import CONTRIBUTION_SCHEMA, GROUP_COLUMNS, merged_rows, split_merged

    streams = stream_numbers(connections)
    fixes = fixes or {}
    runs = [[(task_partition, streams.get(task_partition), fixes.get(task_partition)) for task_partition in run]
            for run in finishing_tasks(rows, sc.defaultParallelism)]

    def finish(parts: Iterable[tuple]) -> Iterator[bytes]:
        for summed in finish_partitions(parts, work_dir, outdir, ts_unit, frame_offsets):
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, summed.schema) as writer:
                writer.write_table(summed)
            yield sink.getvalue().to_pybytes()

    if finishes_here(rows, sc.defaultParallelism, on_driver):
        found = list(finish_partitions(runs[0], work_dir, outdir, ts_unit, frame_offsets))
    else:
        # one slice per run: the items are a run's parts, flattened in order
        parts = sc.parallelize(runs, len(runs)).flatMap(lambda run: run) if runs else None
        found = [pa.ipc.open_stream(data).read_all() for data in parts.mapPartitions(finish).collect()] if parts else []
    summed = pa.concat_tables(found) if found else CONTRIBUTION_SCHEMA.empty_table()
    ordered = summed.sort_by([(name, "ascending") for name in GROUP_COLUMNS])
    return split_merged(merged_rows(ordered))


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
