"""The exchange and partition error tables, written by the Python tasks themselves.

Spark's own Parquet writer costs about ten times what pyarrow does on these
tables (measured on 622k exchanges, one core: 5.3 s against 0.5 s), and
handing the rows to the JVM first costs as much again. So the tasks that
dissect connections write their rows straight to Arrow files, one per task
partition, under OUTDIR/_work; OUTDIR is a `Tree` (kdissect.shared.outdir_tree): a
local or mounted path, or a store (S3, HDFS) every executor reaches.

Stream numbers are global (the order in which the CLI would have classified
each connection), so they are only known once every task has finished. The
driver numbers them (kdissect.spark.tables) and a second, small Spark job
hands each task partition the stream numbers of its own connections
(`finish_partitions`); that task rewrites its Arrow files as the final
Parquet parts, sorted by stream and exchange order, and sums up its
exchanges for the summary tables (summaries.py).

Files are written under a temporary name and renamed, and named by task
partition, so a task that runs twice (a retry, speculation) writes the same
file again.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, NamedTuple

import pyarrow as pa

from kdissect.model.exchange import TIMESTAMP_COLUMNS, arrow_columns, arrow_schema
from kdissect.shared.outdir_tree import Tree, as_tree
from kdissect.spark.tree_rows import TreeRows, read_ipc_files

EXCHANGES, PARTITION_ERRORS = "exchanges", "partition_errors"

# the connection's classification key (see dissect.py) and the exchange's
# emission order within its 4-tuple: what the stream number and the final
# sort are computed from
_STREAM_KEY_COLUMNS: list[tuple[str, pa.DataType]] = [
    ("stream_capture_index", pa.int32()),
    ("stream_frame_number", pa.int64()),
    ("ordinal", pa.int64()),
]
# the tasks' rows keep times as int nanoseconds (as Exchange rows hold
# them); the final tables have timestamps at the capture set's unit
EXCHANGE_WORK_SCHEMA = pa.schema([(name, pa.int64() if name in TIMESTAMP_COLUMNS else kind)
                                  for name, kind in arrow_columns()])
PARTITION_ERROR_SCHEMA = pa.schema([
    ("capture", pa.string()),
    ("stream", pa.int64()),
    ("correlation_id", pa.int32()),
    ("api_key", pa.int16()),
    ("api_name", pa.string()),
    ("api_version", pa.int16()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("error_code", pa.int16()),
    ("error_name", pa.string()),
])
TABLES = (EXCHANGES, PARTITION_ERRORS)
WORK_SCHEMAS = {name: pa.schema([*schema, *_STREAM_KEY_COLUMNS])
                for name, schema in ((EXCHANGES, EXCHANGE_WORK_SCHEMA), (PARTITION_ERRORS, PARTITION_ERROR_SCHEMA))}
_PARTITION_ERROR_NAMES = tuple(WORK_SCHEMAS[PARTITION_ERRORS].names)


def final_schemas(ts_unit: str) -> dict[str, pa.Schema]:
    """The schemas of the written tables, timestamps at `ts_unit`."""
    return {EXCHANGES: arrow_schema(ts_unit), PARTITION_ERRORS: PARTITION_ERROR_SCHEMA}


def _timestamps_in(table: pa.Table, ts_unit: str) -> pa.Table:
    """The work table's int-nanosecond times as timestamps at `ts_unit` (exact:
    the unit holds every input file's resolution)."""
    import pyarrow.compute as pc

    divisor = {"s": 10**9, "ms": 10**6, "us": 1000, "ns": 1}[ts_unit]
    for name in TIMESTAMP_COLUMNS:
        if name not in table.column_names:
            continue
        column = table.column(name)
        if divisor != 1:
            column = pc.divide(column, divisor)
        table = table.set_column(table.column_names.index(name), name,
                                 column.cast(pa.timestamp(ts_unit, tz="UTC")))
    return table


# rows per batch of a work file: a task holds at most this many rows of a table
BATCH_ROWS = 4096


def _part_name(task_partition: int, suffix: str) -> str:
    return f"part-{task_partition:05d}.{suffix}"


# A task's Kafka connections' classification keys (see dissect.py), one file
# per task partition: the driver ranks them into stream numbers
# (tables.stream_numbers). They were rows of the read stage's output; passing
# them through the JVM to the driver (Arrow to Spark's rows in the executor,
# back to Arrow for the collect) cost the JVM about 1 s of CPU on 200,000
# connections (2.66 s against 1.69 s in the read stage: benchmarks/README.md,
# 2026-11-29).
CONNECTIONS = "connections"
CONNECTION_KEY_SCHEMA = pa.schema([
    ("task_partition", pa.int32()),
    ("stream_capture_index", pa.int32()),  # where the connection was classified as Kafka
    ("stream_frame_number", pa.int64()),
    ("stream_order_ts", pa.int64()),  # its feed time (kdissect.wire.captureset): streams are numbered in feed order
])


def read_connection_keys(work_dir: Tree | str) -> pa.Table:
    """Every task's Kafka connection keys (CONNECTION_KEY_SCHEMA), from `work_dir`."""
    return read_ipc_files(as_tree(work_dir).sub(CONNECTIONS), CONNECTION_KEY_SCHEMA)


class PartSink:
    """Where one dissecting task puts its exchange and partition error rows
    and its Kafka connections' keys."""

    def __init__(self, work_dir: Tree | str, task_partition: int) -> None:
        work_dir = as_tree(work_dir)
        self.task_partition = task_partition
        # (the exchange rows come as captured: their strings are made lossless a column at a time)
        self.files = {table: TreeRows(work_dir.sub(table), _part_name(task_partition, "arrow"), WORK_SCHEMAS[table],
                                      ipc=True, lossless=table == EXCHANGES, flush_rows=BATCH_ROWS)
                      for table in WORK_SCHEMAS}
        self.connections = TreeRows(work_dir.sub(CONNECTIONS), _part_name(task_partition, "arrow"),
                                    CONNECTION_KEY_SCHEMA, ipc=True, flush_rows=BATCH_ROWS)

    def add_connections(self, keys: Iterable[tuple[int | None, int, int]]) -> int:
        """Kafka connections by their classification keys (order_ts, capture
        index, frame number); how many came."""
        add, task_partition, count = self.connections.add, self.task_partition, 0
        for order_ts, capture_index, frame_number in keys:
            add((task_partition, capture_index, frame_number, order_ts))
            count += 1
        return count

    def add_exchange(self, values: tuple) -> None:
        """An exchange row: its values in WORK_SCHEMAS[EXCHANGES]'s column order
        (`Exchange.to_row`'s values, then the stream key and the ordinal),
        its strings as captured (stored by output.lossless_row's rule)."""
        self.files[EXCHANGES].add(values)

    def add_partition_error(self, row: dict[str, Any]) -> None:
        """A partition error row by column name (a column it lacks is null),
        strings as they are stored."""
        self.files[PARTITION_ERRORS].add(tuple(map(row.get, _PARTITION_ERROR_NAMES)))

    def close(self) -> dict[str, int]:
        """Close the files; rows written per table."""
        for file in self.files.values():
            file.close()
        self.connections.close()
        return {table: file.written for table, file in self.files.items()}

    def abandon(self) -> None:
        for file in (*self.files.values(), self.connections):
            file.abandon()


def finish_part(work_dir: Tree | str, outdir: Tree | str, task_partition: int,
                streams: PartStreams | None, ts_unit: str = "us",
                fixes: dict | None = None, frame_offsets: list[int] | None = None
                ) -> tuple[dict[str, int], pa.Table]:
    """Rewrite one task partition's Arrow files as final Parquet parts: stream
    numbers from `streams` (None: the partition has no Kafka connection), rows
    sorted by stream and exchange order, the waits of long polls a captured
    Produce ended from `fixes` (kdissect.spark.arrivals), frame numbers made
    global with `frame_offsets` (kdissect.spark.frames). Returns the rows
    written per table and the partition's exchanges' summaries.SUMMARY_COLUMNS,
    times in int nanoseconds (for the summary tables)."""
    import pyarrow.parquet as pq

    from kdissect.spark.summaries import SUMMARY_COLUMNS

    work_dir, outdir = as_tree(work_dir), as_tree(outdir)
    written: dict[str, int] = {}
    summary_schema = pa.schema([EXCHANGE_WORK_SCHEMA.field(name) for name in SUMMARY_COLUMNS])
    exchanges = summary_schema.empty_table()
    for table, schema in final_schemas(ts_unit).items():
        source = _part_name(task_partition, "arrow")
        if not work_dir.exists(table, source):  # the task had no rows of this table
            written[table] = 0
            continue
        with work_dir.open_input(table, source) as stream:
            rows = pa.ipc.open_file(stream).read_all()
        if table == EXCHANGES and fixes:
            from kdissect.spark.arrivals import fix_exchanges

            rows = fix_exchanges(rows, fixes)
        if table == EXCHANGES and frame_offsets:
            from kdissect.spark.frames import renumber_frames

            rows = renumber_frames(rows, frame_offsets)
        numbered = rows.set_column(schema.get_field_index("stream"), "stream", stream_column(rows, streams))
        ordered = _in_stream_order(numbered)
        selected = ordered.select(schema.names)
        final = _timestamps_in(selected, ts_unit).cast(schema)
        for directory, rows_of_day in _lake_partitions(table, final):
            with outdir.output(*directory, _part_name(task_partition, "parquet")) as stream:
                pq.write_table(rows_of_day, stream)
        written[table] = final.num_rows
        if table == EXCHANGES:
            exchanges = selected.select(list(SUMMARY_COLUMNS)).cast(summary_schema)
    return written, exchanges


class PartStreams(NamedTuple):
    """One task partition's Kafka connections and their global stream
    numbers: numpy int64 arrays sorted by (capture index, frame number) of
    each connection's key (kdissect.spark.tables.stream_numbers)."""

    captures: Any
    frames: Any
    streams: Any

    @classmethod
    def of(cls, streams: dict[tuple[int, int], int]) -> "PartStreams":
        """From {(capture index, frame number): stream}."""
        import numpy as np

        keys = sorted(streams)
        return cls(*(np.array(values, dtype=np.int64) for values in
                     ([key[0] for key in keys], [key[1] for key in keys], [streams[key] for key in keys])))


def stream_column(rows: pa.Table, streams: PartStreams | None) -> pa.Array:
    """The global stream number of each work row, from its connection's key
    (stream_capture_index, stream_frame_number) and `streams`; null where
    the key is not in `streams` (a row of no Kafka connection)."""
    import numpy as np
    import pyarrow.compute as pc

    length = rows.num_rows
    found = np.zeros(length, dtype=bool)
    numbers = np.zeros(length, dtype=np.int64)
    if streams is not None and len(streams.frames) and length:
        captures, frames_of_rows = rows.column("stream_capture_index"), rows.column("stream_frame_number")
        known = pc.and_(captures.is_valid(), frames_of_rows.is_valid()).to_numpy()
        # nulls filled first: a column with nulls would come out as float64, which
        # cannot hold a locally numbered frame (split id << 40) exactly
        capture_of = pc.fill_null(captures, -1).to_numpy()
        frame_of = pc.fill_null(frames_of_rows, -1).to_numpy()
        # (a partition's connections come from few files: one sorted lookup per file)
        for capture_index in np.unique(streams.captures):
            first, end = np.searchsorted(streams.captures, [capture_index, capture_index + 1])
            frames, their_streams = streams.frames[first:end], streams.streams[first:end]
            here = np.flatnonzero(known & (capture_of == capture_index))
            wanted = frame_of[here]
            at = np.minimum(np.searchsorted(frames, wanted), len(frames) - 1)
            hit = frames[at] == wanted
            found[here[hit]] = True
            numbers[here[hit]] = their_streams[at[hit]]
    return pa.array(numbers, pa.int64(), mask=~found)


def _in_stream_order(rows: pa.Table) -> pa.Table:
    """`rows` sorted by stream and exchange order (stable: a response's
    partition errors keep their order). A task writes each connection's rows
    together and in order, so a part is often in order already: then the
    sort's copy of every column (a `take`) is skipped."""
    import numpy as np
    import pyarrow.compute as pc

    stream, ordinal = rows.column("stream"), rows.column("ordinal")
    if not stream.null_count and not ordinal.null_count:
        s, o = stream.to_numpy(), ordinal.to_numpy()
        if bool(np.all((s[1:] > s[:-1]) | ((s[1:] == s[:-1]) & (o[1:] >= o[:-1])))):
            return rows
    return rows.take(pc.sort_indices(rows, [("stream", "ascending"), ("ordinal", "ascending")]))


# The exchanges table is partitioned for a lake, Hive style:
# exchanges/capture_date=YYYY-MM-DD/part-NNNNN.parquet, the UTC date of the
# request (of the response for an orphan response). Spark SQL, DuckDB
# (hive_partitioning) and pyarrow datasets (partitioning="hive") read the
# date as a column and skip other days' files; a reader that ignores the
# directories (pyarrow's default) gets exactly `kdissect export`'s columns.
PARTITION_COLUMN = "capture_date"
NO_DATE = "__HIVE_DEFAULT_PARTITION__"  # Hive's and Spark's name for a null partition value


def _lake_partitions(table: str, final: pa.Table) -> Iterator[tuple[tuple[str, ...], pa.Table]]:
    """(directory parts, rows) of one task partition's final table; each
    day's rows keep their order."""
    import pyarrow.compute as pc

    if table != EXCHANGES or final.num_rows == 0:
        yield (table,), final
        return
    when = pc.coalesce(final.column("request_ts"), final.column("response_ts"))
    day = _single_day(when)
    if day is not None:  # the usual case: one day's rows, no per-row formatting
        yield (table, f"{PARTITION_COLUMN}={day}"), final
        return
    days = pc.fill_null(pc.strftime(when, format="%Y-%m-%d"), NO_DATE)
    for day in sorted(set(days.to_pylist())):
        yield (table, f"{PARTITION_COLUMN}={day}"), final.filter(pc.equal(days, day))


def _single_day(when: pa.ChunkedArray) -> str | None:
    """The UTC date (YYYY-MM-DD, as pc.strftime writes it) when every time in
    `when` falls on the same day and none is null; else None."""
    import pyarrow.compute as pc

    if when.null_count:
        return None
    try:
        bounds = pc.min_max(when)
        first, last = bounds["min"].as_py(), bounds["max"].as_py()
    except (ValueError, OverflowError, ArithmeticError):  # out of Python's datetime range
        return None
    if first is None or (first.year, first.month, first.day) != (last.year, last.month, last.day):
        return None
    if not 1000 <= first.year <= 9999:
        return None
    return f"{first.year:04d}-{first.month:02d}-{first.day:02d}"


# exchanges summed up together for the summary tables: more per batch, fewer
# contribution rows (a group met in several batches gives a row in each) but
# more memory (~150 bytes per exchange). On the 1 GB benchmark archive, 2^18
# -> 2^20 took the merge stage from 1.4 s to 1.1 s on two cores.
SUMMARY_BATCH_ROWS = 1 << 19


def finish_partitions(parts: Iterable[tuple[int, PartStreams | None, dict | None]], work_dir: Tree,
                      outdir: Tree, ts_unit: str = "us",
                      frame_offsets: list[int] | None = None) -> Iterator[pa.Table]:
    """A finishing task's body: (task partition, its streams, its arrivals
    fixes) items -> the finished task partitions' contributions to the
    summary tables and the rows they wrote (summaries.CONTRIBUTION_SCHEMA).
    Exchanges of consecutive task partitions are summed up together, up to
    SUMMARY_BATCH_ROWS at a time."""
    from kdissect.spark.summaries import contributions

    pending: list[pa.Table] = []
    written = {table: 0 for table in TABLES}

    def summarise(counts: dict[str, int] | None = None) -> pa.Table:
        summed = contributions(pa.concat_tables(pending) if pending else EXCHANGE_WORK_SCHEMA.empty_table(),
                               counts or {})
        pending.clear()
        return summed

    for task_partition, streams, fixes in parts:
        counts, exchanges = finish_part(work_dir, outdir, task_partition, streams, ts_unit, fixes, frame_offsets)
        for table, count in counts.items():
            written[table] += count
        pending.append(exchanges)
        if sum(table.num_rows for table in pending) >= SUMMARY_BATCH_ROWS:
            yield summarise()
    yield summarise(written)


def write_empty_parts(outdir: Tree | str, ts_unit: str = "us") -> None:
    """A dataset with no rows still gets one (empty) file, so it can be read
    with its schema; and each dataset gets Spark's `_SUCCESS` marker."""
    import pyarrow.parquet as pq

    outdir = as_tree(outdir)
    for table, schema in final_schemas(ts_unit).items():
        if not outdir.files(table, suffix=".parquet"):
            with outdir.output(table, "part-00000.parquet") as stream:
                pq.write_table(schema.empty_table(), stream)
        outdir.write_bytes(b"", table, "_SUCCESS")
