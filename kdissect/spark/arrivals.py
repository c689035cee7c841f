"""The Produce rule of kdissect.conn.arrivals in the Spark job.

A task sees one connection at a time, so it decides a held fetch's wait
from the batch timestamps only (the Dissector's own rule) and leaves what
the capture-wide step needs in OUTDIR/_work/arrivals/arrivals-NNNNN.parquet
(produced-NNNNN.parquet when the task met no held fetch):
the offsets each answered Produce wrote, and each held fetch's first fetched
offsets with its hold. On the driver, `produce_answers` joins them (one
Spark job: the same window and the same choice, the earliest answer, as
`ArrivalResolver` in the CLI) and collects the fetches a Produce answer
ends, a row each; the task partitions apply them when they rewrite their
exchange rows (`fix_exchanges`, from part_files.finish_part).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from kdissect.conn.arrivals import (BY_PRODUCE, MAX_HELD_NS, PRODUCE_WINDOW_NS, FetchArrival, ProduceArrival,
                               apply_wait)
from kdissect.shared.outdir_tree import Tree, as_tree
from kdissect.spark.parquet_rows import ParquetRows

ARRIVALS_DIR = "arrivals"
PRODUCED, FETCHED = 0, 1
ARRIVAL_SCHEMA = pa.schema([
    ("kind", pa.int8()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("first", pa.int64()),  # produced: the first offset written; fetched: the first offset fetched
    ("last", pa.int64()),  # produced: the last offset written
    ("answer_ts", pa.int64()),  # produced: the answer's time
    # fetched: where the row is (task partition, connection key, ordinal) and the hold
    ("task_partition", pa.int32()),
    ("stream_capture_index", pa.int32()),
    ("stream_frame_number", pa.int64()),
    ("ordinal", pa.int64()),
    ("start_ns", pa.int64()),
    ("end_ns", pa.int64()),
    ("before_ns", pa.int64()),
    ("before_reason", pa.string()),
])

# a fix: the connection key and ordinal of an exchange row -> (answer time, start, end, before, before reason)
Fixes = dict[tuple[int, int, int], tuple[int, int, int, int, Any]]


class ArrivalSink:
    """A dissecting task's arrival rows, to one Parquet file."""

    def __init__(self, work_dir: Tree | str, task_partition: int) -> None:
        # named `produced-` when it holds no held fetch: the driver skips the join when no file holds one
        self.directory = as_tree(work_dir).sub(ARRIVALS_DIR)
        self.name = f"arrivals-{task_partition:05d}.parquet"
        self.task_partition = task_partition
        self.fetched = 0
        # the name is chosen at the end (`arrivals-` or `produced-`): written as `.partial` until then
        self.rows = ParquetRows(self.directory, f"{self.name}.partial", ARRIVAL_SCHEMA)

    def add(self, exchange: Any, row: dict[str, Any]) -> None:
        """Note the arrival facts of an exchange (its row holds its keys)."""
        arrival = exchange.arrival
        if isinstance(arrival, ProduceArrival):
            self.add_produced(exchange)
        elif isinstance(arrival, FetchArrival) and arrival.end_ns - arrival.start_ns <= MAX_HELD_NS:
            for label, partition, offset in arrival.marks:
                self.fetched += 1
                self.rows.add(FETCHED, label, partition, offset, None, None, self.task_partition,
                              row["stream_capture_index"], row["stream_frame_number"], row["ordinal"],
                              arrival.start_ns, arrival.end_ns, arrival.before_ns, arrival.before_reason)
        exchange.arrival = None

    def add_produced(self, exchange: Any) -> None:
        """Note where a Produce's answer put its offsets (the exchange may be
        one a selection drops: it still ends the waits of the fetches kept)."""
        arrival = exchange.arrival
        if isinstance(arrival, ProduceArrival) and exchange.response_ts is not None:
            for label, partition, first, last in arrival.ranges:
                self.rows.add(PRODUCED, label, partition, first, last, exchange.response_ts, *([None] * 8))
        exchange.arrival = None

    def close(self) -> None:
        if self.rows.close():
            target = self.name if self.fetched else self.name.replace("arrivals-", "produced-")
            self.directory.move(f"{self.name}.partial", target)

    def abandon(self) -> None:
        self.rows.abandon()


def _read_arrivals(directory: Tree, kind: int) -> Any:
    """mapInArrow body: file names -> the rows of one kind (PRODUCED or
    FETCHED) of those arrival files (read through the tree: any store). Each
    side of the join reads the files itself, so only its own rows cross to the JVM."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    def read(batches: Any) -> Any:
        for batch in batches:
            for name in batch.column(0).to_pylist():
                with directory.open_input(name) as stream:
                    table = pq.read_table(stream, schema=ARRIVAL_SCHEMA)
                yield from table.filter(pc.equal(table["kind"], kind)).to_batches()

    return read


# arrival files up to this size (Parquet bytes, ~10 bytes a row) are joined on the
# driver in local mode, where a Spark job's planning and code generation cost
# more than the join itself (its rows are a few per Produce and held fetch)
DRIVER_JOIN_BYTES = 64 << 20


def produce_answers(spark: Any, work_dir: Tree | str, on_driver: bool = False) -> dict[int, Fixes]:
    """{task partition: fixes}: the held fetches whose data a captured
    Produce wrote, with the earliest qualifying answer (one Spark job; the
    result holds a row per such fetch). `on_driver` (local mode): joined
    here (`join_here`) when the files are at most DRIVER_JOIN_BYTES."""
    from pyspark.sql import functions as F

    directory = as_tree(work_dir).sub(ARRIVALS_DIR)
    if not directory.files(prefix="arrivals-", suffix=".parquet"):
        return {}  # no held fetch anywhere: nothing to join
    # the tasks read the files through the tree, so the work directory may be in any store
    names = directory.files(suffix=".parquet")
    if on_driver and _total_bytes(directory, names) <= DRIVER_JOIN_BYTES:
        return join_here(directory, names)
    listing = spark.createDataFrame([(name,) for name in names], "name string").repartition(
        max(1, min(len(names), spark.sparkContext.defaultParallelism)))
    fetched = listing.mapInArrow(_read_arrivals(directory, FETCHED), _spark_schema()).alias("f")
    produced = listing.mapInArrow(_read_arrivals(directory, PRODUCED), _spark_schema()).select(
        "topic", "partition", "first", "last", "answer_ts")
    produced = produced.alias("p")
    f, p = F.col, F.col
    joined = fetched.join(produced, f("f.topic").eqNullSafe(p("p.topic")) & (f("f.partition") == p("p.partition"))
                          & (p("p.first") <= f("f.first")) & (f("f.first") <= p("p.last"))
                          & (p("p.answer_ts") >= f("f.start_ns") - PRODUCE_WINDOW_NS)
                          & (p("p.answer_ts") <= f("f.end_ns") + PRODUCE_WINDOW_NS))
    keys = ["task_partition", "stream_capture_index", "stream_frame_number", "ordinal", "start_ns", "end_ns",
            "before_ns", "before_reason"]
    found = joined.groupBy(*[f(f"f.{key}").alias(key) for key in keys]).agg(F.min("p.answer_ts").alias("answer"))
    fixes: dict[int, Fixes] = {}
    for row in found.collect():
        fixes.setdefault(row["task_partition"], {})[
            (row["stream_capture_index"], row["stream_frame_number"], row["ordinal"])] = (
            row["answer"], row["start_ns"], row["end_ns"], row["before_ns"], row["before_reason"])
    return fixes


def _total_bytes(directory: Tree, names: list[str]) -> int:
    return sum(info.size for info in directory.fs.get_file_info([directory.path(name) for name in names]))


def join_here(directory: Tree, names: list[str]) -> dict[int, Fixes]:
    """`produce_answers`' join in this process, with the same rule: a fetch
    is answered by the earliest answer of a Produce range on its topic and
    partition that holds its first fetched offset, within PRODUCE_WINDOW_NS
    of its hold; over the marks of one fetch, the earliest of all."""
    import bisect

    import pyarrow.parquet as pq

    produced: dict[tuple[Any, Any], list[tuple[int, int, int]]] = {}
    fetched: list[dict[str, Any]] = []
    for name in names:
        with directory.open_input(name) as stream:
            table = pq.read_table(stream, schema=ARRIVAL_SCHEMA)
        for row in table.to_pylist():
            if row["partition"] is None or row["first"] is None:
                continue  # (no match in the Spark job's join either: null never equals)
            if row["kind"] == PRODUCED:
                if row["last"] is None or row["answer_ts"] is None:
                    continue
                produced.setdefault((row["topic"], row["partition"]), []).append(
                    (row["first"], row["last"], row["answer_ts"]))
            else:
                fetched.append(row)
    # per topic-partition: ranges by first offset, and the highest last offset up to each
    index: dict[tuple[Any, Any], tuple[list[int], list[tuple[int, int, int]], list[int]]] = {}
    for key, ranges in produced.items():
        ranges.sort()
        reach, highest = [], None
        for _, last, _ in ranges:
            highest = last if highest is None or last > highest else highest
            reach.append(highest)
        index[key] = ([first for first, _, _ in ranges], ranges, reach)
    answers: dict[tuple, int] = {}
    for row in fetched:
        found = index.get((row["topic"], row["partition"]))
        if found is None or row["start_ns"] is None or row["end_ns"] is None:
            continue
        firsts, ranges, reach = found
        offset, earliest, latest = row["first"], row["start_ns"] - PRODUCE_WINDOW_NS, row["end_ns"] + PRODUCE_WINDOW_NS
        best = None
        position = bisect.bisect_right(firsts, offset) - 1
        while position >= 0 and reach[position] >= offset:  # ranges further back end before the offset
            _, last, answer = ranges[position]
            if last >= offset and earliest <= answer <= latest and (best is None or answer < best):
                best = answer
            position -= 1
        if best is None:
            continue
        fetch = (row["task_partition"], row["stream_capture_index"], row["stream_frame_number"], row["ordinal"],
                 row["start_ns"], row["end_ns"], row["before_ns"], row["before_reason"])
        if fetch not in answers or best < answers[fetch]:
            answers[fetch] = best
    fixes: dict[int, Fixes] = {}
    for (task_partition, capture_index, frame_number, ordinal, start, end, before, reason), answer in answers.items():
        fixes.setdefault(task_partition, {})[(capture_index, frame_number, ordinal)] = (answer, start, end, before,
                                                                                        reason)
    return fixes


def _spark_schema() -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(ARRIVAL_SCHEMA)


class _Waits:
    """What `apply_wait` sets, for a row that is not an Exchange."""

    __slots__ = ("wait_reason", "wait_ns")

    def __init__(self) -> None:
        self.wait_reason: str | None = None
        self.wait_ns: int | None = None


def fix_exchanges(rows: pa.Table, fixes: Fixes) -> pa.Table:
    """A task partition's exchange rows (work schema: int ns times) with the
    waits of the fetches in `fixes` ended at their Produce answer."""
    if not fixes:
        return rows
    keys = zip(rows.column("stream_capture_index").to_pylist(), rows.column("stream_frame_number").to_pylist(),
               rows.column("ordinal").to_pylist())
    reasons = rows.column("wait_reason").to_pylist()
    waits = rows.column("wait_ms").to_pylist()
    services = rows.column("service_ms").to_pylist()
    request_ts, response_ts = rows.column("request_ts").to_pylist(), rows.column("response_ts").to_pylist()
    for at, key in enumerate(keys):
        fix = fixes.get(key)
        if fix is None:
            continue
        answer, start, end, before, before_reason = fix
        waited = _Waits()
        apply_wait(waited, BY_PRODUCE, answer, FetchArrival((), start, end, before, before_reason, None))
        reasons[at] = waited.wait_reason
        waits[at] = None if waited.wait_ns is None else waited.wait_ns / 1_000_000
        rest = response_ts[at] - request_ts[at] - (waited.wait_ns or 0)
        services[at] = rest / 1_000_000 if rest > 0 else None
    for name, values in (("wait_reason", reasons), ("wait_ms", waits), ("service_ms", services)):
        index = rows.schema.get_field_index(name)
        rows = rows.set_column(index, rows.schema.field(index), pa.array(values, rows.schema.field(index).type))
    return rows
