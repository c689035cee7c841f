"""`--broker-log` in the Spark job: the request log joined to the exchanges
table after it is written, with the single process's rules
(kdissect.conn.brokerlog.join: identity first, the nearest line within the
tolerance after the clock offset; the same reasons for what does not join).

1. The log files are read on the executors, one task per file
   (kdissect.conn.brokerlog.parse; bodies never decoded), into rows of the
   identity, time and the broker's fields, plus one row of counts per file.
2. Each exchanges/ part file is read by a task into (part, row, identity,
   time, status) rows.
3. Candidates = both joined on (client, correlation id, api key). The clock
   offset is the median of (log time - exchange time) over identities with
   one candidate; within the tolerance of it, each exchange takes its
   nearest line and each line its nearest exchange.
4. Each part file is rewritten by a task (pyarrow, its schema and timestamp
   unit kept) with the broker columns filled; the tables `broker_latency`,
   `broker_principals`, `broker_unmatched` are written; the accounting goes
   into the manifest.

Percentiles in `broker_latency` are Spark's `percentile_approx` (accuracy
10000), where the CLI's are exact.
"""

from __future__ import annotations

import json
from typing import Any, Iterator, Sequence

from kdissect.conn.brokerlog.join import (AFTER_CAPTURE, BEFORE_CAPTURE, CAPTURE_ONLY_REASONS, CONNECTION_NOT_CAPTURED,
                                     CONNECTION_NOT_LOGGED, DEFAULT_TOLERANCE_S, EXCHANGE_NOT_CAPTURED, JOINED,
                                     LOG_ONLY_REASONS, NOT_LOGGED, OUTSIDE_LOG_TIME, PRE_AUTHENTICATION, UNANSWERED,
                                     network_ms)
from kdissect.stats.brokerlog import COMPONENTS
from kdissect.shared.outdir_tree import Tree

_TIMES = ("broker_total_ms", "broker_request_queue_ms", "broker_local_ms", "broker_remote_ms", "broker_throttle_ms",
          "broker_response_queue_ms", "broker_send_ms")
_LOG_SCHEMA = ("kind int, lid long, client string, correlation_id int, api_key int, log_ns long, "
               + ", ".join(f"{name} double" for name in _TIMES)
               + ", principal string, security_protocol string, listener string, client_id string, software string,"
                 " counts string")
_EXCHANGE_SCHEMA = ("part string, row long, client string, correlation_id int, api_key int, t_ns long, "
                    "status string, api_name string, api_version int, client_id string, broker string, "
                    "latency_ms double, service_ms double, ttfb_ms double, socket_wait_ms double")
_FILLED_SCHEMA = ("part string, row long, broker_log string, " + ", ".join(f"{name} double" for name in _TIMES)
                  + ", principal string, security_protocol string, listener string")


def _read_log(item: tuple[int, str]) -> Iterator[tuple]:
    from kdissect.conn.brokerlog.parse import LogReadStats, read_entries

    index, path = item
    stats = LogReadStats()
    for n, e in enumerate(read_entries([path], stats)):
        yield (0, (index << 40) | n, e.client, e.correlation_id, e.api_key, e.ts, e.total_ms, e.request_queue_ms,
               e.local_ms, e.remote_ms, e.throttle_ms, e.response_queue_ms, e.send_ms, e.principal,
               e.security_protocol, e.listener, e.client_id, e.software, None)
    yield (1, None, None, None, None, None, *([None] * 7), None, None, None, None, None, json.dumps(stats.to_dict()))


def _read_part(outdir: Tree, part: str) -> Iterator[tuple]:
    """The rows of one exchanges part file (`part`: its path below exchanges/, capture_date=.../part-NNNNN.parquet)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    with outdir.open_input("exchanges", part) as stream:
        table = pq.read_table(stream, columns=["client", "correlation_id", "api_key", "request_ts", "response_ts", "status",
                                         "api_name", "api_version", "client_id", "broker", "latency_ms",
                                         "service_ms", "ttfb_ms", "socket_wait_ms"])
    times = pc.coalesce(table["response_ts"], table["request_ts"])
    ns = pc.cast(pc.cast(times, pa.timestamp("ns", tz="UTC")), pa.int64()).to_pylist()
    columns = [table[name].to_pylist() for name in ("client", "correlation_id", "api_key")]
    rest = [table[name].to_pylist() for name in ("status", "api_name", "api_version", "client_id", "broker",
                                                  "latency_ms", "service_ms", "ttfb_ms", "socket_wait_ms")]
    for i in range(table.num_rows):
        yield (part, i, columns[0][i], columns[1][i], columns[2][i], ns[i], *(column[i] for column in rest))


def _network(ttfb_ms: float | None, socket_wait_ms: float | None, total: float | None,
             send: float | None) -> float | None:
    """network_ms as the single process computes it (join.network_ms, in
    whole ns: the columns hold ns / 1e6 exactly enough to round back)."""
    if ttfb_ms is None or total is None or send is None or total != total or send != send:  # (NaN: no line)
        return None
    waited = None if socket_wait_ms is None or socket_wait_ms != socket_wait_ms else round(socket_wait_ms * 1e6)
    return network_ms(0, round(ttfb_ms * 1_000_000), waited, total, send)


def _rewrite(outdir: Tree):
    def rewrite(frame: Any) -> Any:
        import pandas as pd
        import pyarrow as pa
        import pyarrow.parquet as pq

        part = frame["part"].iloc[0]
        with outdir.open_input("exchanges", part) as stream:
            table = pq.read_table(stream)
        frame = frame.sort_values("row")
        if len(frame) != table.num_rows or list(frame["row"]) != list(range(table.num_rows)):
            raise RuntimeError(f"{part}: {len(frame)} broker-log rows for {table.num_rows} exchanges")
        ttfb, socket_wait = table["ttfb_ms"].to_pylist(), table["socket_wait_ms"].to_pylist()
        network = [_network(*row) for row in zip(ttfb, socket_wait, frame["broker_total_ms"].tolist(),
                                                  frame["broker_send_ms"].tolist())]
        values = {name: frame[name].tolist() for name in ("broker_log", *_TIMES, "principal", "security_protocol",
                                                          "listener")}
        values["network_ms"] = network
        for name, column in values.items():
            column = [None if isinstance(v, float) and v != v else v for v in column]
            position = table.schema.get_field_index(name)
            table = table.set_column(position, table.schema.field(position),
                                     pa.array(column, type=table.schema.field(position).type))
        with outdir.output("exchanges", part) as stream:  # write-then-rename, as every file of OUTDIR
            pq.write_table(table, stream)
        return pd.DataFrame({"part": [part], "rows": [table.num_rows]})

    return rewrite


def _write_table(outdir: Tree, name: str, rows: list[dict[str, Any]], columns: list[tuple[str, str]]) -> None:
    """A small table as one Parquet file under OUTDIR/<name>/ (which
    kdissect.spark.outdir emptied of earlier runs' files), written through the tree (write-then-rename)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    kinds = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64()}
    schema = pa.schema([(column, kinds[kind]) for column, kind in columns])
    with outdir.output(name, "part-00000.parquet") as stream:
        pq.write_table(pa.Table.from_pylist([{c: row.get(c) for c, _ in columns} for row in rows], schema=schema),
                       stream)
    outdir.write_bytes(b"", name, "_SUCCESS")


def join_broker_log(spark: Any, outdir: Tree, inputs: Sequence[str], partitions: int,
                    tolerance_s: float = DEFAULT_TOLERANCE_S) -> dict[str, Any]:
    """Fill the broker columns of OUTDIR/exchanges and write the broker_*
    tables; the join's accounting (as the CLI's `broker_log.accounting`)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from kdissect.conn.brokerlog.parse import request_log_files

    sc = spark.sparkContext
    paths = request_log_files(list(inputs))
    tolerance = int(tolerance_s * 1e9)
    log_rows = spark.createDataFrame(
        sc.parallelize(list(enumerate(paths)), max(1, len(paths))).flatMap(_read_log), _LOG_SCHEMA).cache()
    counts: dict[str, int] = {}
    for row in log_rows.where("kind = 1").select("counts").collect():
        for key, value in json.loads(row["counts"]).items():
            counts[key] = counts.get(key, 0) + value
    log = log_rows.where("kind = 0").drop("kind", "counts")

    parts = outdir.files("exchanges", suffix=".parquet")  # below the capture_date= partitions
    exchanges = spark.createDataFrame(sc.parallelize(parts, max(1, len(parts))).flatMap(
                                          lambda part: _read_part(outdir, part)),
                                      _EXCHANGE_SCHEMA).cache()
    keys = ["client", "correlation_id", "api_key"]
    candidates = (exchanges.select("part", "row", *keys, "t_ns")
                  .join(log.select("lid", *keys, "log_ns"), keys)
                  .withColumn("diff", F.col("log_ns") - F.col("t_ns")))
    single = candidates.groupBy(*keys).agg(F.count("*").alias("n"), F.first("diff").alias("diff")).where("n = 1")
    offset_row = single.agg(F.percentile_approx("diff", 0.5, 10000).alias("offset")).collect()[0]
    offset = int(offset_row["offset"] or 0)
    near = candidates.withColumn("distance", F.abs(F.col("diff") - F.lit(offset))).where(
        F.col("distance") <= tolerance)
    by_exchange = Window.partitionBy("part", "row").orderBy("distance", "lid")
    by_line = Window.partitionBy("lid").orderBy("distance", "part", "row")
    ranked = near.withColumn("choices", F.count("*").over(Window.partitionBy("part", "row"))).withColumn(
        "rank", F.row_number().over(by_exchange)).where("rank = 1").withColumn(
        "line_rank", F.row_number().over(by_line)).where("line_rank = 1")
    chosen = ranked.select("part", "row", "lid", "diff", "choices").cache()

    # capture-only reasons need what the log knows about each client, and its span
    span = log.agg(F.min("log_ns").alias("low"), F.max("log_ns").alias("high")).collect()[0]
    log_clients = log.groupBy("client").agg(F.first("security_protocol").alias("log_protocol"))
    joined_log = chosen.join(log.drop(*keys, "client_id", "software", "log_ns"), "lid")
    filled = (exchanges.join(joined_log.drop("diff", "choices"), ["part", "row"], "left")
              .join(log_clients, "client", "left"))
    low, high = span["low"], span["high"]
    log_t = F.col("t_ns") + F.lit(offset)
    reason = (F.when(F.col("lid").isNotNull(), F.lit(JOINED))
              .when(F.lit(low is None) | F.col("t_ns").isNull(), F.lit(OUTSIDE_LOG_TIME))
              .when((log_t < F.lit(low or 0) - tolerance) | (log_t > F.lit(high or 0) + tolerance),
                    F.lit(OUTSIDE_LOG_TIME))
              .when(F.col("api_key").isin(17, 36) | ((F.col("api_key") == 18)
                                                      & F.coalesce(F.col("log_protocol"), F.lit("")).startswith("SASL")),
                    F.lit(PRE_AUTHENTICATION))
              .when(F.col("log_protocol").isNull(), F.lit(CONNECTION_NOT_LOGGED))
              .when(~F.col("status").isin("ok", "inexact"), F.lit(UNANSWERED))
              .otherwise(F.lit(NOT_LOGGED)))
    filled = filled.withColumn("broker_log", reason).cache()
    rewritten = (filled.select("part", "row", "broker_log", *_TIMES, "principal", "security_protocol", "listener")
                 .groupBy("part").applyInPandas(_rewrite(outdir), "part string, rows long").collect())
    if sum(r["rows"] for r in rewritten) != exchanges.count():
        raise RuntimeError("broker log: not every exchanges part was rewritten")

    # logged only, with its reason
    span_ex = exchanges.agg(F.min("t_ns").alias("low"), F.max("t_ns").alias("high")).collect()[0]
    captured = exchanges.select("client").distinct().withColumn("captured", F.lit(True))
    capture_t = F.col("log_ns") - F.lit(offset)
    log_only = (log.join(chosen.select("lid"), "lid", "left_anti").join(captured, "client", "left")
                .withColumn("reason", F.when(F.lit(span_ex["low"] is None)
                                             | (capture_t < F.lit(span_ex["low"] or 0) - tolerance),
                                             F.lit(BEFORE_CAPTURE))
                            .when(capture_t > F.lit(span_ex["high"] or 0) + tolerance, F.lit(AFTER_CAPTURE))
                            .when(F.col("captured").isNull(), F.lit(CONNECTION_NOT_CAPTURED))
                            .otherwise(F.lit(EXCHANGE_NOT_CAPTURED)))).cache()

    # the tables
    joined_rows = filled.where(F.col("broker_log") == JOINED).withColumn(  # (network_ms as the rows have it)
        "network_ms", F.col("ttfb_ms") - F.coalesce(F.col("socket_wait_ms"), F.lit(0.0))
        - (F.col("broker_total_ms") - F.col("broker_send_ms")))
    measures = []
    for stem, column in COMPONENTS:
        measures += [F.percentile_approx(column, 0.5, 10000).alias(f"{stem}_p50"),
                     F.percentile_approx(column, 0.99, 10000).alias(f"{stem}_p99")]
    groups = {"api": F.concat(F.col("api_name"), F.lit(" v"), F.col("api_version").cast("string")),
              "client": F.coalesce(F.col("client_id"), F.lit("")), "broker": F.coalesce(F.col("broker"), F.lit(""))}
    decomposition = None
    for by, group in groups.items():
        frame = joined_rows.groupBy(group.alias("group")).agg(F.count("broker_total_ms").alias("count"), *measures)
        frame = frame.select(F.lit(by).alias("by"), "*")
        decomposition = frame if decomposition is None else decomposition.unionByName(frame)
    assert decomposition is not None  # (groups is never empty)
    _write_table(outdir, "broker_latency", [r.asDict() for r in decomposition.orderBy("by", "group").collect()],
                 [("by", "string"), ("group", "string"), ("count", "int64")]
                 + [(f"{stem}_{q}", "float64") for stem, _ in COMPONENTS for q in ("p50", "p99")])
    principals = (
        joined_rows.select(F.coalesce("client_id", F.lit("")).alias("client_id"), "client", "principal",
                           "security_protocol", "listener", F.lit(None).cast("string").alias("software"),
                           F.lit(1).alias("exchanges"), F.lit(0).alias("logged_only"))
        .unionByName(log_only.select(F.coalesce("client_id", F.lit("")).alias("client_id"), "client", "principal",
                                     "security_protocol", "listener", "software", F.lit(0).alias("exchanges"),
                                     F.lit(1).alias("logged_only")))
        .groupBy("client_id", "client").agg(F.first("principal", True).alias("principal"),
                                            F.first("security_protocol", True).alias("security_protocol"),
                                            F.first("listener", True).alias("listener"),
                                            F.first("software", True).alias("software"),
                                            F.sum("exchanges").alias("exchanges"),
                                            F.sum("logged_only").alias("logged_only"))
        # (the job does not tell TLS connections it could not decrypt apart: "no" for them too)
        .withColumn("captured", F.when(F.col("exchanges") > 0, F.lit("exchanges")).otherwise(F.lit("no"))))
    _write_table(outdir, "broker_principals", [r.asDict() for r in principals.orderBy("client_id", "client").collect()],
                 [("client_id", "string"), ("client", "string"), ("principal", "string"),
                  ("security_protocol", "string"), ("listener", "string"), ("software", "string"),
                  ("exchanges", "int64"), ("logged_only", "int64"), ("captured", "string")])
    unmatched = (filled.where(F.col("broker_log") != JOINED)
                 .select(F.lit("capture_only").alias("side"), F.col("broker_log").alias("reason"),
                         F.coalesce("api_name", F.lit("")).alias("detail"))
                 .unionByName(log_only.select(F.lit("log_only").alias("side"), "reason",
                                              F.coalesce("listener", F.lit("")).alias("detail")))
                 .groupBy("side", "reason", "detail").count())
    unmatched_rows = unmatched.orderBy("side", "reason", "detail").collect()
    _write_table(outdir, "broker_unmatched", [r.asDict() for r in unmatched_rows],
                 [("side", "string"), ("reason", "string"), ("detail", "string"), ("count", "int64")])

    offsets = chosen.select((F.col("diff") / 1e6).alias("ms")).agg(
        F.count("*").alias("pairs"), F.percentile_approx("ms", 0.5, 10000).alias("median_ms"),
        F.percentile_approx("ms", 0.05, 10000).alias("p5_ms"), F.percentile_approx("ms", 0.95, 10000).alias("p95_ms"),
        F.min("ms").alias("min_ms"), F.max("ms").alias("max_ms")).collect()[0].asDict()
    if offsets["pairs"]:
        offsets["spread_ms"] = offsets["p95_ms"] - offsets["p5_ms"]
    else:
        offsets = {key: None for key in offsets} | {"pairs": 0, "spread_ms": None}
    log_only_counts = {r: 0 for r in LOG_ONLY_REASONS}
    capture_only_counts = {r: 0 for r in CAPTURE_ONLY_REASONS}
    for row in unmatched_rows:
        target = log_only_counts if row["side"] == "log_only" else capture_only_counts
        target[row["reason"]] = target.get(row["reason"], 0) + row["count"]
    joined = chosen.count()
    accounting = {**counts, "exchanges": exchanges.count(), "joined": joined,
                  "ambiguous": chosen.where("choices > 1").count(), "log_only": log_only_counts,
                  "capture_only": capture_only_counts, "clock_offset": offsets, "tolerance_s": tolerance_s,
                  "window_s": None}
    for frame in (log_rows, exchanges, chosen, filled, log_only):
        frame.unpersist()
    return accounting
