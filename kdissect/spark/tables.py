"""Tables derived from the dissected rows and from the exchange table.

All functions take and return DataFrames; nothing here collects more than a
few summary rows to the driver.

Percentiles are exact (linear interpolation between closest ranks, as
`kdissect stats` and Spark's `percentile` compute them), taken from each
group's sorted values: several times faster than Spark's `percentile`, which
counts values in a hash map per group.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

_NO_CLIENT_ID = "(none)"  # as `kdissect stats` labels a null client id
_NO_BROKER = "?"


def _sorted_values(column):
    """Aggregate: the group's non-null values, sorted."""
    from pyspark.sql import functions as F

    return F.sort_array(F.collect_list(column))


def _percentile(sorted_values: str, q: float):
    """Exact percentile of a sorted array column, interpolating linearly
    between the closest ranks; null for an empty array."""
    from pyspark.sql import functions as F

    values = F.col(sorted_values)
    n = F.size(values)
    position = (n - 1) * F.lit(q)
    lower = F.floor(position).cast("int")
    upper = F.ceil(position).cast("int")
    low, high = F.get(values, lower), F.get(values, upper)
    return F.when(n > 0, low + (high - low) * (position - lower)).cast("double")


def stream_ranks(work):
    """(task_partition, stream_capture_index, stream_frame_number, global_stream)
    of every connection classified as Kafka, numbered as the CLI numbers them.

    The CLI numbers connections in the order they are classified as Kafka;
    each connection's classification key (capture_index, frame_number) is
    unique, so ranking all keys reproduces that order. The keys are a dozen
    bytes per connection, so one window over all of them is cheap.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order = Window.orderBy("stream_capture_index", "stream_frame_number")
    return (
        work.where("kind = 1")
        .select("task_partition", "stream_capture_index", "stream_frame_number")
        .withColumn("global_stream", F.row_number().over(order).cast("long") - 1)
    )


def finish_part_files(work, partitions: int, work_dir: str, outdir: str) -> dict[str, int]:
    """Number the streams of the rows the dissecting tasks wrote and turn
    their files into the exchanges/ and partition_errors/ tables (see
    part_files.py); rows written per table.

    Each task partition gets its connections' stream numbers, plus one marker
    row (from its accounting row) so a partition with no Kafka connection is
    finished too.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    from kdissect.spark.part_files import FINISHED_SCHEMA, RANK_SCHEMA, finish_partitions

    markers = work.where("kind = 2").select(
        "task_partition", F.lit(None).cast("int").alias("stream_capture_index"),
        F.lit(None).cast("long").alias("stream_frame_number"), F.lit(None).cast("long").alias("global_stream"))
    ranks = stream_ranks(work).unionByName(markers)
    finished = (
        ranks.repartition(partitions, "task_partition")
        .sortWithinPartitions("task_partition")
        .select(*RANK_SCHEMA.names)
        .mapInArrow(lambda batches: finish_partitions(batches, work_dir, outdir), from_arrow_schema(FINISHED_SCHEMA))
        .collect()  # one small row per task partition
    )
    return {table: sum(row[table] for row in finished) for table in ("exchanges", "partition_errors")}


def latency_table(exchanges):
    """count, p50, p90, p99, max, mean of latency_ms per API+version, per client id, per broker.

    One table, three groupings (`dimension` says which; the other key
    columns are null), over exchanges with a request and a response.
    """
    from pyspark.sql import functions as F

    answered = exchanges.where("latency_ms IS NOT NULL AND api_key IS NOT NULL").select(
        "api_name", "api_version",
        F.coalesce("client_id", F.lit(_NO_CLIENT_ID)).alias("client_id"),
        F.coalesce("broker", F.lit(_NO_BROKER)).alias("broker"),
        "latency_ms",
    )
    stats = [
        F.count("latency_ms").alias("count"),
        _sorted_values("latency_ms").alias("values"),
        F.max("latency_ms").alias("max"),
        F.avg("latency_ms").alias("mean"),
    ]
    # one aggregation over three grouping sets (a single shuffle); grouping_id
    # tells them apart: a bit per grouping column, set where it is not grouped
    keys = ("api_name", "api_version", "client_id", "broker")
    dimension = (F.when(F.col("grouping") == 0b0011, "api").when(F.col("grouping") == 0b1101, "client_id")
                 .when(F.col("grouping") == 0b1110, "broker"))
    grouped = answered.groupingSets([("api_name", "api_version"), ("client_id",), ("broker",)], *keys).agg(
        *stats, F.grouping_id(*keys).alias("grouping"))
    return (
        grouped.select(dimension.alias("dimension"), "api_name", F.col("api_version").cast("short"), "client_id",
                       "broker", "count", _percentile("values", 0.5).alias("p50"),
                       _percentile("values", 0.9).alias("p90"), _percentile("values", 0.99).alias("p99"),
                       "max", "mean", "grouping")
        .repartition(1)
        .sortWithinPartitions("grouping", *keys)
        .drop("grouping")
    )


def error_names(spark):
    """(error_code, error_name) for every code Kafka defines (a hundred-odd rows)."""
    from pyspark.sql.types import ShortType, StringType, StructField, StructType

    from kdissect.protocol.errors import ERRORS

    rows = [(int(code), entry[0]) for code, entry in sorted(ERRORS.items())]
    return spark.createDataFrame(rows, StructType([
        StructField("error_code", ShortType()), StructField("error_name", StringType())]))


def errors_table(spark, exchanges):
    """Per API and error name: exchanges whose top-level error it is, and with it anywhere."""
    from pyspark.sql import functions as F

    top = (
        exchanges.where("error_code IS NOT NULL AND error_code != 0")
        .groupBy(F.coalesce("api_name", F.lit("unknown")).alias("api_name"), "error_code")
        .agg(F.count(F.lit(1)).alias("top_level"))
    )
    anywhere = (
        exchanges.select(F.coalesce("api_name", F.lit("unknown")).alias("api_name"),
                         F.explode(F.array_distinct("error_codes")).alias("error_code"))
        .where("error_code != 0")
        .groupBy("api_name", "error_code")
        .agg(F.count(F.lit(1)).alias("anywhere"))
    )
    counts = top.join(anywhere, ["api_name", "error_code"], "full_outer").fillna(0, ["top_level", "anywhere"])
    named = counts.join(F.broadcast(error_names(spark)), "error_code", "left").withColumn(
        "error_name", F.coalesce("error_name", F.concat(F.lit("UNKNOWN_"), F.col("error_code").cast("string"))))
    return named.select("api_name", "error_code", "error_name", "top_level", "anywhere").repartition(1) \
        .sortWithinPartitions(F.desc("anywhere"), "api_name", "error_code")


def throttle_table(exchanges):
    """Per client id and broker: responses carrying a throttle time, how many were throttled (> 0),
    and p50/p90/p99/max/total of the throttle time over the throttled ones."""
    from pyspark.sql import functions as F

    with_throttle = exchanges.where("throttle_time_ms IS NOT NULL").select(
        F.coalesce("client_id", F.lit(_NO_CLIENT_ID)).alias("client_id"),
        F.coalesce("broker", F.lit(_NO_BROKER)).alias("broker"),
        "throttle_time_ms",
    )
    throttled = F.when(F.col("throttle_time_ms") > 0, F.col("throttle_time_ms"))
    return with_throttle.groupBy("client_id", "broker").agg(
        F.count(F.lit(1)).alias("responses"),
        F.count(throttled).alias("throttled"),
        _sorted_values(throttled).alias("values"),
        F.max(throttled).alias("max_ms"),
        F.coalesce(F.sum(throttled), F.lit(0)).alias("total_ms"),
    ).select(
        "client_id", "broker", "responses", "throttled", _percentile("values", 0.5).alias("p50_ms"),
        _percentile("values", 0.9).alias("p90_ms"), _percentile("values", 0.99).alias("p99_ms"),
        "max_ms", "total_ms",
    ).repartition(1).sortWithinPartitions("client_id", "broker")


def timeseries_table(exchanges):
    """Per minute (of the request, else the response) and API: exchanges, bytes, errors, p99 latency."""
    from pyspark.sql import functions as F

    ts = F.coalesce("request_ts", "response_ts")
    minute = F.timestamp_seconds((F.floor(ts / 60) * 60).cast("long"))
    has_error = ((F.coalesce("error_code", F.lit(0)) != 0)
                 | (F.size(F.coalesce("error_codes", F.array())) > 0))
    return (
        exchanges.where(ts.isNotNull())
        .select(minute.alias("minute"), F.coalesce("api_name", F.lit("unknown")).alias("api_name"),
                (F.coalesce("request_bytes", F.lit(0)) + F.coalesce("response_bytes", F.lit(0))).alias("bytes"),
                has_error.alias("has_error"), "latency_ms")
        .groupBy("minute", "api_name")
        .agg(F.count(F.lit(1)).alias("exchanges"), F.sum("bytes").alias("bytes"),
             F.sum(F.col("has_error").cast("long")).alias("errors"),
             _sorted_values("latency_ms").alias("values"))
        .select("minute", "api_name", "exchanges", "bytes", "errors",
                _percentile("values", 0.99).alias("p99_latency_ms"))
        .repartition(1)
        .sortWithinPartitions("minute", "api_name")
    )


def summary_tables(spark, exchanges) -> dict[str, Any]:
    return {
        "latency": latency_table(exchanges),
        "errors": errors_table(spark, exchanges),
        "throttle": throttle_table(exchanges),
        "timeseries": timeseries_table(exchanges),
    }


def write_all(frames: dict[str, Any], outdir: str) -> None:
    """Write each frame as Parquet dataset OUTDIR/<name>, all at once.

    Each write is a Spark job (several, with adaptive execution) and most of
    them are small: one- or two-task stages with driver-side planning between
    them. Submitted from one thread each, their tasks fill the task slots the
    others leave idle and their planning overlaps the others' tasks. The
    first failure is raised once all writes have ended.
    """
    from concurrent.futures import ThreadPoolExecutor

    def write(name: str) -> None:
        frames[name].write.mode("overwrite").parquet(f"{outdir}/{name}")

    with ThreadPoolExecutor(max_workers=max(1, len(frames)), thread_name_prefix="kdissect-write") as pool:
        futures = [pool.submit(write, name) for name in frames]  # in order: the big ones first
    for future in futures:
        future.result()


def _local_path(path: str) -> str | None:
    """The local file system path of a Spark path, None for remote file systems."""
    if path.startswith("file://"):
        return path.removeprefix("file://")
    return None if "://" in path else path


def parquet_rows(spark, path: str) -> int:
    """Rows of a written Parquet dataset: from the file footers where the
    dataset is local (no Spark job), else counted by Spark. 0 if absent."""
    local = _local_path(path)
    if local is None:
        return spark.read.parquet(path).count()
    import pyarrow.parquet as pq

    root = Path(local)
    if not root.is_dir():
        return 0
    return sum(pq.ParquetFile(file).metadata.num_rows for file in sorted(root.rglob("*.parquet")))


def read_small_table(spark, path: str, columns: list[str] | None = None) -> list[dict[str, Any]]:
    """All rows of a small Parquet dataset, as dicts (read on the driver)."""
    local = _local_path(path)
    if local is None:
        frame = spark.read.parquet(path)
        return [row.asDict() for row in (frame.select(*columns) if columns else frame).collect()]
    import pyarrow.parquet as pq

    files = sorted(Path(local).rglob("*.parquet"))
    return [row for file in files for row in pq.read_table(file, columns=columns).to_pylist()]


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.3f}"
    return str(value)


def render_summary(spark, outdir: str, accounting: Any, top: int = 8) -> str:
    """A few lines for the terminal, from the accounting and the (small) summary tables."""
    lines: list[str] = []
    statuses = [("ok", accounting.ok), ("no_response", accounting.no_response),
                ("orphan_response", accounting.orphan_responses), ("malformed", accounting.malformed),
                ("truncated", accounting.truncated)]
    statuses = sorted((item for item in statuses if item[1]), key=lambda item: -item[1])
    detail = ", ".join(f"{status} {count}" for status, count in statuses)
    lines.append(f"exchanges: {accounting.exchanges}" + (f" ({detail})" if detail else ""))
    latency = [row for row in read_small_table(spark, f"{outdir}/latency") if row["dimension"] == "api"]
    latency.sort(key=lambda row: -row["count"])
    if latency:
        lines.append("latency (ms) by API, busiest first:  count     p50     p99     max")
        for row in latency[:top]:
            lines.append(f"  {row['api_name']} v{row['api_version']}".ljust(37)
                         + f"{row['count']:>6} {_fmt(row['p50']):>7} {_fmt(row['p99']):>7} {_fmt(row['max']):>7}")
    errors = read_small_table(spark, f"{outdir}/errors")
    errors.sort(key=lambda row: (-row["anywhere"], row["api_name"], row["error_code"]))
    if errors:
        lines.append("errors: " + ", ".join(f"{row['api_name']} {row['error_name']} x{row['anywhere']}"
                                            for row in errors[:top]))
    throttle = read_small_table(spark, f"{outdir}/throttle")
    throttled = sum(row["throttled"] for row in throttle)
    worst = max((row["max_ms"] for row in throttle if row["max_ms"] is not None), default=None)
    lines.append(f"throttled responses: {throttled}" + (f" (max {worst} ms)" if throttled else ""))
    lines.extend(accounting.summary_lines())
    return "\n".join(lines)
