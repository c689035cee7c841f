"""The Produce rule of kdissect.conn.arrivals in the Spark job.

A task sees one connection at a time, so it decides a held fetch's wait
from the batch timestamps only (the Dissector's own rule) and leaves what
the capture-wide step needs in OUTDIR/_work/arrivals/arrivals-NNNNN.parquet
(produced-NNNNN.parquet when the task met no held fetch):
the offsets each answered Produce wrote, and each held fetch's first fetched
offsets with its hold. On the driver, `produce_answers` brings each
topic-partition's rows together (one Spark job, or in local mode this
process: `join_here`) and applies the CLI's own rule to them
(`kdissect.conn.arrivals.earliest_produce`, through `earliest_answers`);
it collects the fetches a Produce answer ends, a row each, and the task
partitions apply them when they rewrite their exchange rows
(`fix_exchanges`, from part_files.finish_part).
"""

from __future__ import annotations

import bisect
from typing import Any, Iterable

import pyarrow as pa

from kdissect.conn.arrivals import BY_PRODUCE, MAX_HELD_NS, FetchArrival, ProduceArrival, apply_wait, earliest_produce
from kdissect.shared.outdir_tree import Tree, as_tree
from kdissect.spark.tree_rows import TreeRows

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
        self.rows = TreeRows(self.directory, f"{self.name}.partial", ARRIVAL_SCHEMA)

    def add(self, exchange: Any, ordered: tuple[int | None, int | None, int]) -> None:
        """Note the arrival facts of an exchange, whose row is found by
        `ordered`: its stream key (capture index, frame number) and ordinal."""
        arrival = exchange.arrival
        if isinstance(arrival, ProduceArrival):
            self.add_produced(exchange)
        elif isinstance(arrival, FetchArrival) and arrival.end_ns - arrival.start_ns <= MAX_HELD_NS:
            for label, partition, offset in arrival.marks:
                self.fetched += 1
                self.rows.add((FETCHED, label, partition, offset, None, None, self.task_partition, *ordered,
                               arrival.start_ns, arrival.end_ns, arrival.before_ns, arrival.before_reason))
        exchange.arrival = None

    def add_produced(self, exchange: Any) -> None:
        """Note where a Produce's answer put its offsets (the exchange may be
        one a selection drops: it still ends the waits of the fetches kept)."""
        arrival = exchange.arrival
        if isinstance(arrival, ProduceArrival) and exchange.response_ts is not None:
            for label, partition, first, last in arrival.ranges:
                self.rows.add((PRODUCED, label, partition, first, last, exchange.response_ts, *([None] * 8)))
        exchange.arrival = None

    def close(self) -> None:
        if self.rows.close():
            target = self.name if self.fetched else self.name.replace("arrivals-", "produced-")
            self.directory.move(f"{self.name}.partial", target)

    def abandon(self) -> None:
        self.rows.abandon()


def _read_arrivals(directory: Tree) -> Any:
    """mapInArrow body: file names -> the rows of those arrival files (read
    through the tree: any store)."""
    import pyarrow.parquet as pq

    def read(batches: Any) -> Any:
        for batch in batches:
            for name in batch.column(0).to_pylist():
                with directory.open_input(name) as stream:
                    yield from pq.read_table(stream, schema=ARRIVAL_SCHEMA).to_batches()

    return read


# arrival files up to this size (Parquet bytes, ~10 bytes a row) are joined on the
# driver in local mode, where a Spark job's planning and code generation cost
# more than the join itself (its rows are a few per Produce and held fetch)
DRIVER_JOIN_BYTES = 64 << 20

# a held fetch: where its row is (task partition, connection key, ordinal), and its hold
# (start, end, before, before reason)
FetchKey = tuple[int, int, int, int, int, int, int, Any]
ANSWER_SCHEMA = pa.schema([(name, ARRIVAL_SCHEMA.field(name).type) for name in (
    "task_partition", "stream_capture_index", "stream_frame_number", "ordinal", "start_ns", "end_ns", "before_ns",
    "before_reason")] + [("answer_ts", pa.int64())])


def produce_answers(spark: Any, work_dir: Tree | str, on_driver: bool = False) -> dict[int, Fixes]:
    """{task partition: fixes}: the held fetches whose data a captured
    Produce wrote, with the earliest qualifying answer. The rule is
    kdissect.conn.arrivals.earliest_produce, applied by `earliest_answers`
    to the rows of each topic-partition: one Spark job groups them (by hash
    partitioning), or, `on_driver` (local mode) with files of at most
    DRIVER_JOIN_BYTES, this process reads them all (`join_here`)."""
    directory = as_tree(work_dir).sub(ARRIVALS_DIR)
    if not directory.files(prefix="arrivals-", suffix=".parquet"):
        return {}  # no held fetch anywhere: nothing to join
    # the tasks read the files through the tree, so the work directory may be in any store
    names = directory.files(suffix=".parquet")
    if on_driver and _total_bytes(directory, names) <= DRIVER_JOIN_BYTES:
        return join_here(directory, names)
    from pyspark.sql.pandas.types import from_arrow_schema

    listing = spark.createDataFrame([(name,) for name in names], "name string").repartition(
        max(1, min(len(names), spark.sparkContext.defaultParallelism)))
    rows = listing.mapInArrow(_read_arrivals(directory), from_arrow_schema(ARRIVAL_SCHEMA))
    # a task gets every row of its topic-partitions, sorted so that each one's rows come together
    found = (rows.repartition("topic", "partition").sortWithinPartitions("topic", "partition")
             .mapInArrow(_answer_groups, from_arrow_schema(ANSWER_SCHEMA)).collect())
    # a fetch with marks on several topic-partitions has an answer from each of their groups
    return as_fixes((tuple(row[:-1]), row[-1]) for row in found)


def _answer_groups(batches: Any) -> Any:
    """mapInArrow body: arrival rows sorted by (topic, partition) -> the
    answers `earliest_answers` finds in each topic-partition's rows."""
    group: list[Any] = []
    current: Any = None
    for batch in batches:
        keys = list(zip(batch.column("topic").to_pylist(), batch.column("partition").to_pylist()))
        at = 0
        while at < len(keys):
            key, end = keys[at], at + 1
            while end < len(keys) and keys[end] == key:
                end += 1
            if key != current:
                if group:
                    yield _answer_batch(earliest_answers(group))
                group, current = [], key
            group.append(batch.slice(at, end - at))
            at = end
    if group:
        yield _answer_batch(earliest_answers(group))


def _answer_batch(answers: dict[FetchKey, int]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([dict(zip(ANSWER_SCHEMA.names, (*fetch, answer)))
                                       for fetch, answer in answers.items()], schema=ANSWER_SCHEMA)


def _total_bytes(directory: Tree, names: list[str]) -> int:
    return sum(info.size for info in directory.fs.get_file_info([directory.path(name) for name in names]))


def join_here(directory: Tree, names: list[str]) -> dict[int, Fixes]:
    """`produce_answers` in this process: the rows of all the files at once
    to `earliest_answers`."""
    import pyarrow.parquet as pq

    tables = []
    for name in names:
        with directory.open_input(name) as stream:
            tables.append(pq.read_table(stream, schema=ARRIVAL_SCHEMA))
    return as_fixes(earliest_answers(tables).items())


def earliest_answers(tables: Iterable[Any]) -> dict[FetchKey, int]:
    """{fetch: its Produce answer} by `earliest_produce` over arrival rows
    (Arrow tables or batches) holding every row of the topic-partitions
    they hold (all of the files', or a Spark task's group).

    The held fetches' rows are read first, then only the Produce rows of the
    topic-partitions they name (pyarrow picks them): an archive can have
    tens of thousands of answered Produce ranges and a hundred held fetches
    (bench_spark.py's record-heavy archive: 80,000 and 104; the join, on the
    driver between the two jobs, took 0.12 s, nearly all of it the
    Produce rows in Python)."""
    import pyarrow.compute as pc

    tables = list(tables)
    produced_rows = [pc.fill_null(pc.equal(table.column("kind"), PRODUCED), False) for table in tables]
    marks: dict[FetchKey, list[tuple[Any, Any, int]]] = {}
    for table, is_produced in zip(tables, produced_rows):
        held = table.filter(pc.invert(is_produced))
        columns = [held.column(name).to_pylist() for name in _MARK_COLUMNS]
        for (topic, partition, first, task_partition, capture_index, frame_number, ordinal, start, end, before,
             reason) in zip(*columns):
            if partition is None or first is None:
                continue  # (a null partition or offset equals none)
            if start is not None and end is not None:
                marks.setdefault((task_partition, capture_index, frame_number, ordinal, start, end, before, reason),
                                 []).append((topic, partition, first))
    if not marks:
        return {}
    named = {(topic, partition) for fetched in marks.values() for topic, partition, _ in fetched}
    topics = pa.array(sorted({topic for topic, _ in named if topic is not None}), pa.string())
    if any(topic is None for topic, _ in named):
        topics = pa.concat_arrays([topics, pa.nulls(1, pa.string())])
    partitions = pa.array(sorted({partition for _, partition in named}), pa.int32())
    produced: dict[tuple[Any, Any], list[tuple[int, int, int]]] = {}
    for table, is_produced in zip(tables, produced_rows):
        # (a superset of the named topic-partitions' rows: each row's pair is checked below)
        wanted = pc.and_(pc.and_(is_produced, pc.fill_null(pc.is_in(table.column("partition"), value_set=partitions),
                                                           False)),
                         pc.is_in(table.column("topic"), value_set=topics, skip_nulls=False))
        picked = table.filter(wanted)
        columns = [picked.column(name).to_pylist() for name in ("topic", "partition", "first", "last", "answer_ts")]
        for topic, partition, first, last, answer_ts in zip(*columns):
            if first is not None and last is not None and answer_ts is not None and (topic, partition) in named:
                produced.setdefault((topic, partition), []).append((first, last, answer_ts))
    written = _RangeIndex(produced)
    answers: dict[FetchKey, int] = {}
    for fetch, fetched in marks.items():
        _, _, _, _, start, end, before, reason = fetch
        answer = earliest_produce(FetchArrival(tuple(fetched), start, end, before, reason, None), written.holding)
        if answer is not None:
            answers[fetch] = answer
    return answers


# the columns of a held fetch's row earliest_answers reads
_MARK_COLUMNS = ("topic", "partition", "first", "task_partition", "stream_capture_index", "stream_frame_number",
                 "ordinal", "start_ns", "end_ns", "before_ns", "before_reason")


class _RangeIndex:
    """`earliest_produce`'s look-up over many Produce ranges: per
    topic-partition, the ranges by first offset and the highest last offset
    up to each, so a look-up walks back only over ranges that may hold the offset."""

    def __init__(self, produced: dict[tuple[Any, Any], list[tuple[int, int, int]]]) -> None:
        self.index: dict[tuple[Any, Any], tuple[list[int], list[tuple[int, int, int]], list[int]]] = {}
        for key, ranges in produced.items():
            ranges.sort()
            reach, highest = [], ranges[0][1]
            for _, last, _ in ranges:
                highest = max(highest, last)
                reach.append(highest)
            self.index[key] = ([first for first, _, _ in ranges], ranges, reach)

    def holding(self, label: Any, partition: Any, offset: int) -> list[tuple[int, int, int]]:
        found = self.index.get((label, partition))
        if found is None:
            return []
        firsts, ranges, reach = found
        end = bisect.bisect_right(firsts, offset)
        start = end
        while start > 0 and reach[start - 1] >= offset:  # ranges further back end before the offset
            start -= 1
        return ranges[start:end]


def as_fixes(answers: Iterable[tuple[Any, int]]) -> dict[int, Fixes]:
    """{task partition: fixes} from (fetch, answer) pairs, the earliest
    answer of a fetch named more than once."""
    earliest: dict[FetchKey, int] = {}
    for fetch, answer in answers:
        if fetch not in earliest or answer < earliest[fetch]:
            earliest[fetch] = answer
    fixes: dict[int, Fixes] = {}
    for (task_partition, capture_index, frame_number, ordinal, start, end, before, reason), answer in earliest.items():
        fixes.setdefault(task_partition, {})[(capture_index, frame_number, ordinal)] = (answer, start, end, before,
                                                                                        reason)
    return fixes


class _Waits:
    """What `apply_wait` sets, for a row that is not an Exchange."""

    __slots__ = ("wait_reason", "wait_ns")

    def __init__(self) -> None:
        self.wait_reason: str | None = None
        self.wait_ns: int | None = None


def fix_exchanges(rows: pa.Table, fixes: Fixes) -> pa.Table:
    """A task partition's exchange rows (work schema: int ns times) with the
    waits of the fetches in `fixes` ended at their Produce answer.

    Only the rows whose frame number some fix names are looked at in Python
    (pyarrow finds them): a partition holds thousands of rows and a few
    dozen fixes (converting every row's key cost ~0.1 s of the finishing
    on bench_spark.py's many-small archive)."""
    if not fixes:
        return rows
    import pyarrow.compute as pc

    frames = pa.array(sorted({frame_number for _, frame_number, _ in fixes}), pa.int64())
    candidates = pc.indices_nonzero(pc.is_in(rows.column("stream_frame_number"), value_set=frames))
    if len(candidates) == 0:
        return rows
    picked = rows.take(candidates)
    keys = zip(picked.column("stream_capture_index").to_pylist(), picked.column("stream_frame_number").to_pylist(),
               picked.column("ordinal").to_pylist())
    request_ts, response_ts = picked.column("request_ts").to_pylist(), picked.column("response_ts").to_pylist()
    fixed: list[int] = []
    changed: dict[str, list[Any]] = {"wait_reason": [], "wait_ms": [], "service_ms": []}
    for at, (row, key) in enumerate(zip(candidates.to_pylist(), keys)):
        fix = fixes.get(key)
        if fix is None:
            continue
        answer, start, end, before, before_reason = fix
        waited = _Waits()
        apply_wait(waited, BY_PRODUCE, answer, FetchArrival((), start, end, before, before_reason, None))
        fixed.append(row)
        changed["wait_reason"].append(waited.wait_reason)
        changed["wait_ms"].append(None if waited.wait_ns is None else waited.wait_ns / 1_000_000)
        rest = response_ts[at] - request_ts[at] - (waited.wait_ns or 0)
        changed["service_ms"].append(rest / 1_000_000 if rest > 0 else None)
    if not fixed:
        return rows
    mask = pa.array(_marked(rows.num_rows, fixed), pa.bool_())
    for name, values in changed.items():
        index = rows.schema.get_field_index(name)
        field = rows.schema.field(index)
        column = pc.replace_with_mask(rows.column(index).combine_chunks(), mask, pa.array(values, field.type))
        rows = rows.set_column(index, field, column)
    return rows


def _marked(length: int, positions: list[int]) -> list[bool]:
    """A mask of `length` values, True at `positions` (in increasing order)."""
    mask = [False] * length
    for position in positions:
        mask[position] = True
    return mask
