"""The forensic tables (kdissect.forensics) in the Spark job.

Each dissecting task tallies the exchanges of its connections with its own
`Forensics` (the messages of FORENSIC_APIS are kept for it:
`Dissector(keep_apis=...)`, a Produce's as its skimmed frames,
kdissect.conn.kept_produce; a read task's splits share one, named by the
first split's task partition) and leaves two files under OUTDIR/_work/forensics:

  state-NNNNN.pickle   the task's tallies (bounded by its topic-partitions,
                       groups, clients and connections, not its exchanges)
  ranges-NNNNN.parquet the offset ranges its Produce answers gave and its
                       Fetch responses delivered (end-to-end latency)

On the driver (`finish_forensics`): the states are merged (a merge of parts
equals the tally of the whole, kdissect.forensics.core); with the merged
topic-id names (so ids are resolved across the whole archive) one Spark job
brings every topic-partition's ranges together and matches them with the
same rule the CLI applies (`latency.match_partition`; each task hands back
its latency histograms, small); then the driver writes each table as one
Parquet file under OUTDIR/<table>/, rows as `kdissect topics|groups|clients
-o` writes them (same columns, same order).

Files are written under a temporary name and renamed, named by task
partition, so a task that runs twice writes the same files again.
"""

from __future__ import annotations

import pickle
from typing import Any, Callable, Iterable, Iterator

import pyarrow as pa

from kdissect.forensics.latency import FETCHED, PRODUCED, RangeRows
from kdissect.shared.outdir_tree import Tree, as_tree
from kdissect.spark.tree_rows import FLUSH_ROWS, TreeRows

FORENSICS_DIR = "forensics"
RANGE_SCHEMA = pa.schema([
    ("kind", pa.int8()),  # PRODUCED or FETCHED
    ("topic", pa.string()),  # the label the task knew (a name, or an id's text)
    ("partition", pa.int32()),
    ("first", pa.int64()),
    ("last", pa.int64()),
    ("ts", pa.int64()),  # produced: the request's time; fetched: the response's
    ("response_ts", pa.int64()),  # produced: the answer's time
    ("client_id", pa.string()),  # fetched: the consumer
])
TALLY_SCHEMA = pa.schema([("tally", pa.binary())])


def _directory(work_dir: Tree | str) -> Tree:
    return as_tree(work_dir).sub(FORENSICS_DIR)


class RangeSink:
    """A task's ranges to a Parquet file: `sink` (a compiled
    kdissect.forensics.latency.RangeRows) is the `latency_sink` of the
    task's Forensics, called once per range (a task has thousands), and
    hands its rows to the file once FLUSH_ROWS have gathered, as
    `TreeRows.add` would write them."""

    def __init__(self, work_dir: Tree | str, task_partition: int) -> None:
        self.rows = TreeRows(_directory(work_dir), f"ranges-{task_partition:05d}.parquet", RANGE_SCHEMA)
        self.sink = RangeRows(self._flush, FLUSH_ROWS)

    def _flush(self) -> None:
        self.rows.rows.extend(self.sink.take())
        self.rows.flush()

    def produced(self, label: str | None, partition: int, first: int, last: int, request_ts: int,
                 response_ts: int) -> None:
        self.sink.produced(label, partition, first, last, request_ts, response_ts)

    def fetched(self, label: str | None, partition: int, client_id: str | None, offsets: range,
                fetched_ts: int) -> None:
        self.sink.fetched(label, partition, client_id, offsets, fetched_ts)

    def rename(self, old: str, new: str) -> None:
        pass  # the driver resolves every label with the names of the whole archive

    def close(self) -> None:
        self.rows.rows.extend(self.sink.take())
        self.rows.close()

    def abandon(self) -> None:
        self.sink.take()
        self.rows.abandon()


class TaskForensics:
    """One dissecting task's Forensics and its files."""

    def __init__(self, work_dir: Tree | str, task_partition: int, max_uncompressed: int | None = None) -> None:
        from kdissect.forensics import Forensics

        self.work_dir = work_dir
        self.task_partition = task_partition
        self.ranges = RangeSink(work_dir, task_partition)
        limit = {} if max_uncompressed is None else {"max_uncompressed": max_uncompressed}
        self.forensics = Forensics(latency_sink=self.ranges.sink, **limit)
        # the tallies' own methods, called without a Python frame of this class
        # between (once per exchange: thousands a task)
        self.learn_names: Callable[[Any], None] = self.forensics.learn_names
        self.add: Callable[[Any], None] = self.forensics.add

    def close(self) -> None:
        self.ranges.close()
        state = pickle.dumps(self.forensics.state(), protocol=pickle.HIGHEST_PROTOCOL)
        _directory(self.work_dir).write_bytes(state, f"state-{self.task_partition:05d}.pickle")

    def abandon(self) -> None:
        self.ranges.abandon()


def merged_forensics(work_dir: Tree | str) -> Any:
    """The tasks' tallies merged (in file order; the merge does not depend on it)."""
    from kdissect.forensics import Forensics

    merged = None
    directory = _directory(work_dir)
    for name in directory.files(prefix="state-", suffix=".pickle"):
        part = Forensics.from_state(pickle.loads(directory.read_bytes(name)))
        if merged is None:
            merged = part
        else:
            merged.merge(part)
    return merged if merged is not None else Forensics.from_state(Forensics().state())


def _resolve(batches: Iterable[pa.RecordBatch], names: dict[str, str]) -> Iterator[pa.RecordBatch]:
    """Range rows with topic labels resolved by the archive's names (a batch
    without a label to resolve, the usual case, is passed on as it is)."""
    import pyarrow.compute as pc

    labels = pa.array(list(names), pa.string())
    for batch in batches:
        column = batch.column("topic")
        if not pc.any(pc.is_in(column, value_set=labels)).as_py():
            yield batch
            continue
        topics = [names.get(label, label) if label is not None else None for label in column.to_pylist()]
        yield batch.set_column(RANGE_SCHEMA.get_field_index("topic"), "topic", pa.array(topics, pa.string()))


def _match(batches: Iterable[pa.RecordBatch], horizon_ns: int, slack_ns: int) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: range rows sorted by (topic, partition) -> one row
    with this task's latency histograms (pickled LatencyTally)."""
    from kdissect.forensics.latency import LatencyTally, match_partition

    tally = LatencyTally()
    current: tuple | None = None
    produced: list[tuple] = []
    fetched: list[tuple] = []

    def flush() -> None:
        if current is not None and fetched:
            match_partition(produced, fetched, horizon_ns, slack_ns, tally, current[0])

    for batch in batches:
        columns = [batch.column(name).to_pylist() for name in RANGE_SCHEMA.names]
        kinds, topics, partitions, firsts, lasts, times, response_times, client_ids = columns
        # each run of rows of one (topic, partition) taken at once
        for start, end in _runs(batch):
            key = (topics[start], partitions[start])
            if key != current:
                flush()
                current, produced, fetched = key, [], []
            run = slice(start, end)
            produced.extend([(first, last, ts, response_ts) for kind, first, last, ts, response_ts
                             in zip(kinds[run], firsts[run], lasts[run], times[run], response_times[run])
                             if kind == PRODUCED])
            fetched.extend([(client_id, range(first, last + 1), ts) for kind, client_id, first, last, ts
                            in zip(kinds[run], client_ids[run], firsts[run], lasts[run], times[run])
                            if kind != PRODUCED])
    flush()
    yield pa.RecordBatch.from_pylist([{"tally": pickle.dumps(tally, protocol=pickle.HIGHEST_PROTOCOL)}],
                                     schema=TALLY_SCHEMA)


def _runs(batch: pa.RecordBatch) -> list[tuple[int, int]]:
    """(start, end) of each run of consecutive rows with the same topic and
    partition (nulls equal to each other), in order."""
    import pyarrow.compute as pc

    rows = batch.num_rows
    if rows < 2:
        return [(0, rows)] if rows else []
    changed = None
    for name in ("topic", "partition"):
        column = batch.column(name)
        after, before = column.slice(1), column.slice(0, rows - 1)
        differs = pc.or_(pc.fill_null(pc.not_equal(after, before), False),
                         pc.not_equal(pc.is_null(after), pc.is_null(before)))
        changed = differs if changed is None else pc.or_(changed, differs)
    starts = [0, *(at + 1 for at in pc.indices_nonzero(changed).to_pylist()), rows]
    return list(zip(starts, starts[1:]))


def _read_ranges(batches: Iterable[pa.RecordBatch], directory: Tree) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: names of range files -> their rows (read by the
    Python task through the Tree, so no JVM file system client is needed)."""
    import pyarrow.parquet as pq

    for batch in batches:
        for name in batch.column("name").to_pylist():
            with directory.open_input(name) as stream:
                yield from pq.ParquetFile(stream).iter_batches()


# range files up to this size (Parquet bytes) are matched in the driver's process
# in local mode, where the Spark job's planning and code generation cost more
# than the matching (as kdissect.spark.arrivals.DRIVER_JOIN_BYTES)
DRIVER_MATCH_BYTES = 64 << 20


def match_ranges(spark: Any, work_dir: Tree | str, forensics: Any, partitions: int, on_driver: bool = False) -> None:
    """The end-to-end latency of the whole archive into `forensics.latency`
    (one Spark job; `on_driver`, local mode: `match_here` when the range
    files are at most DRIVER_MATCH_BYTES)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    directory = _directory(work_dir)
    files = directory.files(prefix="ranges-", suffix=".parquet")
    if not files:
        return
    names = dict(forensics.names.names)
    horizon_ns, slack_ns = forensics.horizon_ns, forensics.slack_ns
    if on_driver and sum(info.size for info in directory.fs.get_file_info(
            [directory.path(name) for name in files])) <= DRIVER_MATCH_BYTES:
        forensics.latency.merge(match_here(directory, files, names, horizon_ns, slack_ns))
        return
    listing = spark.createDataFrame([(name,) for name in files], "name string").repartition(
        max(1, min(len(files), spark.sparkContext.defaultParallelism)))
    # read and resolved in one Python function: the rows cross to the JVM once
    frame = listing.mapInArrow(lambda batches: _resolve(_read_ranges(batches, directory), names),
                               from_arrow_schema(RANGE_SCHEMA))
    tallies = (
        frame.repartition(partitions, "topic", "partition")
        .sortWithinPartitions("topic", "partition", "kind")
        .mapInArrow(lambda batches: _match(batches, horizon_ns, slack_ns), from_arrow_schema(TALLY_SCHEMA))
        .collect()
    )
    for row in tallies:
        forensics.latency.merge(pickle.loads(row["tally"]))


def match_here(directory: Tree, files: list[str], names: dict[str, str], horizon_ns: int, slack_ns: int) -> Any:
    """`match_ranges`' job in this process: the same rows, resolved and
    grouped by topic-partition (produced before fetched) as the job's shuffle
    and sort bring them to `_match`; the latency tally."""
    listing = pa.RecordBatch.from_pylist([{"name": name} for name in files], schema=pa.schema([("name", pa.string())]))
    table = pa.Table.from_batches(list(_resolve(_read_ranges([listing], directory), names)), schema=RANGE_SCHEMA)
    table = table.sort_by([("topic", "ascending"), ("partition", "ascending"), ("kind", "ascending")])
    (row,) = _match(table.to_batches(), horizon_ns, slack_ns)
    return pickle.loads(row.column("tally")[0].as_py())


# Tables whose order (the CLI's sort key) can tie: a share group's topic
# partition named the same through two topic labels (a topic id in one
# capture, its name in another, or two clusters). Tied rows come in the
# order the tally met them, which in the job is the order the tasks' states
# were merged, so it followed the shuffle partitions; ordered here by their
# first and last times, as the CLI meets them in a capture set's time order.
_TIES_BY_TIME: dict[str, Callable[[dict[str, Any]], tuple]] = {
    "share_groups": lambda row: (row["group_id"] or "", row["topic"] or "", row["partition"],
                                 row["first_ts"] is not None, row["first_ts"] or 0,
                                 row["last_ts"] is not None, row["last_ts"] or 0),
}


def write_forensic_tables(tables: Any, outdir: Tree | str, ts_unit: str) -> dict[str, int]:
    """Each forensic table as one Parquet file under OUTDIR/<table>/ (rows
    in the CLI's order; times at `ts_unit`); rows written per table."""
    import pyarrow.parquet as pq

    from kdissect.forensics.tables import STATS_TABLES, TABLE_COLUMNS, arrow_schema
    from kdissect.shared.output import lossless_row

    outdir = as_tree(outdir)
    divisor = {"s": 10**9, "ms": 10**6, "us": 1000, "ns": 1}[ts_unit]
    written = {}
    for name, columns in TABLE_COLUMNS.items():
        if name in STATS_TABLES:  # the job's summaries write it (kdissect.spark.summaries)
            continue
        times = [column for column, kind in columns if kind == "timestamp"]
        found = tables.table(name)
        if name in _TIES_BY_TIME:
            found = sorted(found, key=_TIES_BY_TIME[name])
        rows = [{**lossless_row(row), **{column: None if row[column] is None else row[column] // divisor
                                          for column in times}}
                for row in found]
        with outdir.output(name, "part-00000.parquet") as stream:
            pq.write_table(pa.Table.from_pylist(rows, schema=arrow_schema(name, ts_unit)), stream)
        outdir.write_bytes(b"", name, "_SUCCESS")
        written[name] = len(rows)
    return written


def finish_forensics(spark: Any, work_dir: Tree | str, outdir: Tree | str, ts_unit: str, partitions: int,
                     horizon_ns: int | None = None, on_driver: bool = False) -> dict[str, Any]:
    """Merge the tasks' tallies, match the ranges (within `horizon_ns`, by
    default Forensics'; `on_driver`: see match_ranges), write the tables;
    what the manifest records (rows per table, flags, unnamed topic ids)."""
    forensics = merged_forensics(work_dir)
    if horizon_ns is not None:
        forensics.horizon_ns = horizon_ns
    match_ranges(spark, work_dir, forensics, partitions, on_driver)
    tables = forensics.tables()
    written = write_forensic_tables(tables, outdir, ts_unit)
    return {"rows": written, "rebalance_storms": tables.rebalance_storms, "member_rejoins": tables.member_rejoins,
            "metadata_storms": tables.metadata_storms, "unresolved_topic_ids": tables.unresolved_topic_ids,
            "topic_id_conflicts": tables.topic_id_conflicts}
