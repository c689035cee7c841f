"""The executors' tasks: splits read (and their connections dissected in
place), then the shipped connections' segments -> exchange rows.

A dissecting task's input rows are runs of segments (see segments.py)
merged by 4-tuple and then by (order_ts, capture_index, frame_number) of
their first segment (kdissect.spark.handoff), so all segments of one
4-tuple arrive consecutively. With one capture file they are
in feed order already; with several, `captureset.ConnectionMerge` merges the
runs into the capture set's feed order and drops duplicates across files,
exactly as `kdissect export` does for the whole set. Each 4-tuple meets the
state of a fresh `Dissector` (the single-process one): the task's one
dissector closes every connection of a 4-tuple before the next 4-tuple
comes and then starts afresh (`Dissector.end_connections`, `start_afresh`), so a task holds
one connection's state at a time. A read task's in-place connections
(kdissect.spark.inrange) are fed otherwise: all of them at once, in capture
order, as `kdissect export` feeds a capture (`run_in_place`). A read stage
of one task reads the whole capture set and feeds every segment as read
(`read_capture_set`): nothing to sort into in place and shipped.

Exchange rows and the per-partition errors of their responses go to the
task's own files (`part_files.PartSink`), with their connection's
classification key in place of a stream number, and so do the keys of
every connection classified as Kafka, so the driver can number streams
exactly as the CLI does, even for connections without exchanges. What goes
back to Spark is a row per task and per split read (OUTPUT_SCHEMA): the
summed `Accounting` as JSON, with the rows the task wrote, under the task's
partition index, which names its files.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Iterator, Sequence

import pyarrow as pa

from kdissect.model.accounting import Accounting
from kdissect.wire.captureset import ConnectionMerge
from kdissect.model.exchange import Exchange, row_values
from kdissect.shared.output import lossless_row
from kdissect.conn.pipeline import Dissector
from kdissect.spark.part_files import EXCHANGES, PARTITION_ERRORS, PartSink
from kdissect.spark.segments import add_read_stats, run_segments, split_segments

OUTPUT_SCHEMA = pa.schema([
    ("task_partition", pa.int32()),
    ("accounting", pa.string()),
])

# the columns of an exchange's partition error rows taken from the exchange
_PARTITION_ERROR_EXCHANGE_COLUMNS = ("capture", "correlation_id", "api_key", "api_name", "api_version")
# the columns after an exchange's row in its work file (part_files.WORK_SCHEMAS)
_ORDER_COLUMNS = ("stream_capture_index", "stream_frame_number", "ordinal")


def _partition_errors(exchange: Exchange) -> list[dict[str, Any]]:
    """The non-zero errors per topic-partition of the exchange's response, as partition_errors/ rows."""
    from kdissect.protocol.errors import error_name
    from kdissect.stats.summary import partition_errors_of

    return [{"topic": None if topic is None else str(topic), "partition": partition,
             "error_code": code, "error_name": error_name(code)}
            for topic, partition, code in partition_errors_of(exchange)]


class ConnectionRunner:
    """Feeds consecutive rows of one 4-tuple at a time to its Dissector, started afresh for each."""

    def __init__(self, ports: Sequence[int], detect: bool, capture_names: Sequence[str], sink: PartSink,
                 keylog: Any = None, several_files: bool | None = None, forensics: Any = None,
                 arrivals: Any = None, selection: Any = None) -> None:
        self.sink = sink
        # the rows the job keeps (kdissect.filters.selection.Selection), or None: all
        self.selection = selection
        # the task's forensic tallies (kdissect.spark.forensics.TaskForensics), or None
        self.forensics = forensics
        # closed with the runner's other files, unless several runners share them (a read task's splits)
        self.closes_forensics = True
        # the task's arrival rows (kdissect.spark.arrivals.ArrivalSink), or None
        self.arrivals = arrivals
        self.keylog = keylog
        self.tls_stats: Any = None
        # runs of several files must be merged (and copies across files dropped)
        self.several_files = len(capture_names) > 1 if several_files is None else several_files
        self.merge: ConnectionMerge | None = None
        self.duplicates = 0
        self.ports = list(ports)
        self.detect = detect
        self.capture_names = list(capture_names)
        self.accounting = Accounting()
        self.partition_error_failures = 0
        self.read_totals: dict[str, Any] = {}  # copies across files dropped (the splits' counts come with theirs)
        self.classified_connections = 0
        self._dissector: Dissector | None = None  # the task's one, made at its first 4-tuple
        # each connection's next ordinal (the order of its rows), by stream key
        self._ordinals: dict[tuple | None, int] = {}
        # a read task's in-place counts (kdissect.spark.inrange.InRangeCounts), reported with its accounting
        self.in_range: Any = None
        # 4-tuples whose connection the reassembler still held open after their
        # last segment (in place: at the range's end)
        self.left_open: set[tuple] = set()
        self._key: tuple | None = None

    def _start(self) -> None:
        """A 4-tuple begins (the dissector made at the first one)."""
        # rows are skimmed (no decoded messages kept), except what the tables
        # read, as `kdissect stats` keeps it (COLLECT_KEEPS): responses with
        # error codes, whose per-partition errors the job tabulates, and,
        # with the forensic tables, the messages they read; all connections
        # of the task count into one (additive) Accounting
        if self._dissector is None:
            from kdissect.stats.tables import COLLECT_KEEPS

            keeps = COLLECT_KEEPS if self.forensics else {**COLLECT_KEEPS, "keep_apis": ()}
            self._dissector = Dissector(ports=self.ports, detect=self.detect, capture_names=self.capture_names,
                                        # (--group reads the decoded messages)
                                        keep_messages=self.selection is not None and self.selection.reads_messages,
                                        accounting=self.accounting, keylog=self.keylog, **keeps)
        self._ordinals = {}

    def _emit(self, exchanges: Iterable[Exchange]) -> None:
        selection = self.selection
        add_exchange = self.sink.add_exchange
        ordinals = self._ordinals
        for exchange in exchanges:
            if selection is not None and not selection.matches(exchange):
                if self.forensics is not None:  # topic names are context, learned from every exchange
                    self.forensics.learn_names(exchange)
                if exchange.arrival is not None and self.arrivals is not None:
                    self.arrivals.add_produced(exchange)  # a Produce ends other fetches' waits, kept or not
                exchange.request = exchange.response = None  # counted in the accounting, not kept
                continue
            key = exchange.stream_key
            # the work file's columns: the row's (its strings made lossless in
            # the work file, a column at a time), the stream key, the ordinal
            ordinal = ordinals.get(key, 0)
            ordinals[key] = ordinal + 1
            ordered = (*(key if key is not None else (None, None)), ordinal)
            add_exchange((*row_values(exchange), *ordered))
            if exchange.arrival is not None and self.arrivals is not None:
                self.arrivals.add(exchange, ordered)
            errors = None
            if exchange.error_codes:  # (partition_errors_of's own test, without the call for every exchange)
                try:
                    errors = _partition_errors(exchange)
                except Exception:  # a summary problem must not lose the exchange; counted
                    self.partition_error_failures += 1
            if errors:
                # captured strings as every output stores them
                shared = {**lossless_row({name: getattr(exchange, name) for name in _PARTITION_ERROR_EXCHANGE_COLUMNS}),
                          **dict(zip(_ORDER_COLUMNS, ordered))}
                for error in errors:
                    self.sink.add_partition_error({**shared, **error})
            if self.forensics is not None:
                self.forensics.add(exchange)
            # decoded messages are not needed any more
            exchange.request = exchange.response = None

    def finish_connection(self) -> None:
        """The current 4-tuple's last segment was fed: its connections close."""
        dissector = self._dissector
        if dissector is None or self._key is None:
            return
        if self.merge is not None:
            self._emit(dissector.feed_many(self.merge.finish()))
            self.duplicates += self.merge.duplicates
            self.merge = None
        if dissector.open_connections:
            self.left_open.add(self._key)
        self._emit(dissector.end_connections())
        self.classified_connections += self.sink.add_connections(dissector.start_afresh())
        self._key = None

    def _end_dissector(self) -> None:
        """The task's last 4-tuple done: the dissector's counts go to the accounting."""
        dissector = self._dissector
        if dissector is None:
            return
        self._emit(dissector.finish())  # (no connection is open any more: only its counts)
        if self.accounting.tls_connections:
            self.tls_stats = dissector.tls_stats
        dissector.release()  # freed now by its reference count, not by the worker's collection after the task
        self._dissector = None

    def run_runs(self, runs: Iterable[tuple]) -> Iterator[pa.RecordBatch]:
        """OUTPUT_SCHEMA batches of RUN_SCHEMA tuples, each 4-tuple's runs
        consecutive and in the order of their first segments
        (kdissect.spark.handoff.bucket_runs); a run is unpacked as it is fed."""
        return self.run_rows((addr_a, port_a, addr_b, port_b,
                              run_segments(capture_index, addr_a, port_a, addr_b, port_b, packed))
                             for addr_a, port_a, addr_b, port_b, _, capture_index, _, packed in runs)

    def run_rows(self, rows: Iterable[tuple]) -> Iterator[pa.RecordBatch]:
        """OUTPUT_SCHEMA batches of (addr_a, port_a, addr_b, port_b, segments)
        rows, each 4-tuple's rows consecutive, its segments (TcpSegments in
        capture order) a run's (a read task's in-place segments go through
        `run_in_place` instead)."""
        current = None
        for addr_a, port_a, addr_b, port_b, segments in rows:
            key = (addr_a, port_a, addr_b, port_b)
            if key != current:
                self.finish_connection()
                self._start()
                current = self._key = key
                if self.several_files:
                    self.merge = ConnectionMerge()
            if self.merge is not None:
                segments = self.merge.add_run(segments)
            # (the exchanges as each segment completes them, fed in one call)
            self._emit(self._dissector.feed_many(segments))  # type: ignore[union-attr]
        self.finish_connection()
        yield from self._finish_task()

    def run_in_place(self, segments: list[Any]) -> Iterator[pa.RecordBatch]:
        """OUTPUT_SCHEMA batches of a read task's in-place segments
        (kdissect.spark.inrange): every 4-tuple's at once, in capture order,
        through the one Dissector, as `kdissect export` feeds a capture (fed
        4-tuple by 4-tuple, a range of 200,000 short connections took about
        1.3 times as long: benchmarks/README.md). Each segment is let go as it
        is fed (`segments` ends empty), so the connections' state takes the
        place of their segments instead of adding to them. `left_open` gets
        the 4-tuples of the connections still open at the range's end."""
        from kdissect.spark.inrange import canonical

        if segments:
            self._feed_together(_let_go(segments), lambda dissector: self.left_open.update(
                canonical(*four_tuple) for four_tuple in dissector.open_four_tuples()))
        yield from self._finish_task()

    def run_capture_set(self, segments: Iterable[Any]) -> Iterator[pa.RecordBatch]:
        """OUTPUT_SCHEMA batches of a whole capture set's segments in feed
        order (`read_capture_set`): fed to the one Dissector as `kdissect
        export` feeds them, as they are read."""
        self._feed_together(segments)
        yield from self._finish_task()

    def _feed_together(self, segments: Iterable[Any], at_end: Any = None) -> None:
        """Every segment to the one Dissector; then `at_end(dissector)`, if
        given, and the connections still open are closed."""
        self._start()
        dissector = self._dissector
        assert dissector is not None
        self._emit(dissector.feed_many(segments))
        if at_end is not None:
            at_end(dissector)
        self._emit(dissector.end_connections())
        self.classified_connections += self.sink.add_connections(dissector.start_afresh())

    def _finish_task(self) -> Iterator[pa.RecordBatch]:
        """The task's last segment was fed: its files close, its accounting row goes out."""
        self._end_dissector()
        if self.duplicates:
            add_read_stats(self.read_totals, {"duplicate_packets": self.duplicates})
        written = self.sink.close()
        if self.forensics is not None and self.closes_forensics:
            self.forensics.close()
        if self.arrivals is not None:
            self.arrivals.close()
        totals = self.accounting.to_dict()
        totals["partition_error_failures"] = self.partition_error_failures
        totals["read"] = self.read_totals
        totals["classified_connections"] = self.classified_connections
        totals["tls"] = self.tls_stats.to_dict() if self.tls_stats is not None else {}
        totals["rows_written"] = {EXCHANGES: written[EXCHANGES], PARTITION_ERRORS: written[PARTITION_ERRORS]}
        if self.in_range is not None:
            totals["in_range"] = self.in_range.to_dict()
        yield pa.RecordBatch.from_arrays([pa.array([self.sink.task_partition], pa.int32()),
                                          pa.array([json.dumps(totals)], pa.string())], schema=OUTPUT_SCHEMA)


def _let_go(segments: list[Any]) -> Iterator[Any]:
    """The items of `segments` in order, each removed from the list as it is handed out."""
    segments.reverse()
    take = segments.pop
    while segments:
        yield take()


def _selection(values: tuple | None) -> Any:
    """The tasks' Selection from the driver's checked values (Selection.task_values), or None."""
    if values is None:
        return None
    from kdissect.filters.selection import Selection

    return Selection.from_task_values(values)


def _runner(task_partition: int, ports: Sequence[int], detect: bool, capture_names: Sequence[str], work_dir: Any,
            keylog: Any, max_uncompressed: int | None, selection: tuple | None,
            several_files: bool | None = None, forensic_tables: bool = True, forensics: Any = None) -> ConnectionRunner:
    """A task partition's runner; `forensics`: tallies shared with other
    runners (closed by their owner), else its own (with `forensic_tables`)."""
    from kdissect.spark.arrivals import ArrivalSink
    from kdissect.spark.forensics import TaskForensics

    sink = PartSink(work_dir, task_partition)
    # without the forensic tables nothing is tallied and the dissector skims
    # every message, as `kdissect export` does
    shared = forensics is not None
    if not shared and forensic_tables:
        forensics = TaskForensics(work_dir, task_partition, max_uncompressed)
    arrivals = ArrivalSink(work_dir, task_partition)
    runner = ConnectionRunner(ports, detect, capture_names, sink, keylog, several_files=several_files,
                              forensics=forensics, arrivals=arrivals, selection=_selection(selection))
    runner.closes_forensics = not shared
    return runner


def _abandon(runner: ConnectionRunner) -> None:
    runner.sink.abandon()
    if runner.forensics is not None:
        runner.forensics.abandon()
    runner.arrivals.abandon()


def read_partition(batches: Iterable[pa.RecordBatch], in_place: bool, last_split_id: int, first_task_partition: int,
                   ports: Sequence[int], detect: bool, capture_names: Sequence[str], work_dir: Any,
                   keylog: Any = None, max_uncompressed: int | None = None,
                   selection: tuple | None = None, forensic_tables: bool = True,
                   buckets: int = 1) -> Iterator[pa.RecordBatch]:
    """mapInArrow body of the read stage: Split rows -> OUTPUT_SCHEMA batches.

    Each split's shipped runs go to its files under `_work/runs/`, in
    `buckets` buckets (kdissect.spark.handoff); an accounting row per split
    (task partition `first_task_partition` + split id) carries its read
    counts and those files' pieces by bucket (SHIPPED_KEY). With `in_place`,
    the 4-tuples wholly inside the split (kdissect.spark.inrange) are
    dissected here, as that task partition, and the split's 4-tuples
    written to `_work/tuples/` for the driver's check. The task's splits
    share one forensic tally (kdissect.spark.forensics.TaskForensics, named
    by its first split's task partition): one state and one ranges file
    per task instead of one per split, each pickled, written, read and
    merged again on the driver (a merge of tallies equals the tally of the
    whole, so the tables are the same)."""
    from kdissect.shared.outdir_tree import as_tree
    from kdissect.spark.handoff import SHIPPED_KEY, RunSpool
    from kdissect.spark.inrange import TUPLES_DIR, SplitReader
    from kdissect.spark.segments import RangeWatch, read_stats_values
    from kdissect.wire.capture import ReadStats

    work_dir = as_tree(work_dir)
    forensics: Any = None  # the splits' shared tallies, made with the first split that dissects
    try:
        for batch in batches:
            for split in batch.to_pylist():
                stats = ReadStats()
                split_id = split["split_id"]
                task_partition = first_task_partition + split_id
                watch = RangeWatch(split) if split["checked"] else None
                reader = SplitReader(split, stats, in_place=in_place, last_range=split_id == last_split_id, watch=watch)
                spool = RunSpool(work_dir, split_id, buckets)
                for runs in reader.shipped_runs():
                    spool.add(runs)
                read = {"read": read_stats_values(stats, watch), SHIPPED_KEY: spool.close()}
                yield pa.RecordBatch.from_pylist([{"task_partition": task_partition, "accounting": json.dumps(read)}],
                                                 schema=OUTPUT_SCHEMA)
                if not in_place:
                    continue
                if forensic_tables and forensics is None:
                    from kdissect.spark.forensics import TaskForensics

                    forensics = TaskForensics(work_dir, task_partition, max_uncompressed)
                runner = _runner(task_partition, ports, detect, capture_names, work_dir, keylog,
                                 max_uncompressed, selection, several_files=False, forensic_tables=forensic_tables,
                                 forensics=forensics)
                runner.in_range = reader.counts
                try:
                    yield from runner.run_in_place(reader.in_place_segments())
                except BaseException:
                    _abandon(runner)
                    raise
                table = reader.tuple_table(runner.left_open)
                stream = pa.BufferOutputStream()
                with pa.ipc.new_file(stream, table.schema) as writer:
                    writer.write_table(table)
                work_dir.write_bytes(stream.getvalue().to_pybytes(), TUPLES_DIR, f"split-{split_id:05d}.arrow")
    except BaseException:
        if forensics is not None:
            forensics.abandon()
        raise
    if forensics is not None:
        forensics.close()


def read_capture_set(batches: Iterable[pa.RecordBatch], firsts: Sequence[int | None], first_task_partition: int,
                     ports: Sequence[int], detect: bool, capture_names: Sequence[str], work_dir: Any,
                     keylog: Any = None, max_uncompressed: int | None = None, selection: tuple | None = None,
                     forensic_tables: bool = True) -> Iterator[pa.RecordBatch]:
    """mapInArrow body of a read stage that is one task (every split of the
    capture set; `firsts`: each file's first packet time, in capture order):
    the files' segments merged in feed order with the duplicates across
    files dropped (kdissect.wire.captureset.merge_files, as `kdissect
    export` reads a capture set) and fed, as they are read, to one Dissector.
    Nothing is held, sorted or shipped: with no other task, no connection
    continues elsewhere. The rows are those of task partition
    `first_task_partition` + the first split's id. An accounting row per
    split carries its read counts (and a checked range's end), then the
    runner's row follows."""
    from itertools import chain

    from kdissect.shared.outdir_tree import as_tree
    from kdissect.spark.segments import RangeWatch, read_stats_values
    from kdissect.wire.capture import ReadStats
    from kdissect.wire.captureset import DuplicateFilter, merge_files

    work_dir = as_tree(work_dir)
    splits = sorted((split for batch in batches for split in batch.to_pylist()), key=lambda split: split["split_id"])
    if not splits:
        return
    read = [(split, ReadStats(), RangeWatch(split) if split["checked"] else None) for split in splits]
    by_file: dict[int, list[tuple]] = {}
    for one in read:
        by_file.setdefault(one[0]["capture_index"], []).append(one)

    def open_file(capture_index: int) -> Iterator[Any]:
        # a cut file's ranges one after another, in file order
        return chain.from_iterable(split_segments(split, stats, watch)
                                   for split, stats, watch in by_file.get(capture_index, []))

    # (duplicates across files are counted with the first split's reading)
    segments = (open_file(0) if len(firsts) == 1
                else merge_files(firsts, open_file, DuplicateFilter(counts=read[0][1])))
    runner = _runner(first_task_partition + splits[0]["split_id"], ports, detect, capture_names, work_dir, keylog,
                     max_uncompressed, selection, several_files=False, forensic_tables=forensic_tables)
    try:
        yield from runner.run_capture_set(segments)
    except BaseException:
        _abandon(runner)
        raise
    yield pa.RecordBatch.from_pylist([
        {"task_partition": first_task_partition + split["split_id"],
         "accounting": json.dumps({"read": read_stats_values(stats, watch)})} for split, stats, watch in read],
        schema=OUTPUT_SCHEMA)


def dissect_buckets(batches: Iterable[pa.RecordBatch], buckets: list[tuple[int, list]], ports: Sequence[int], detect: bool,
                    capture_names: Sequence[str], work_dir: Any, keylog: Any = None,
                    max_uncompressed: int | None = None, selection: tuple | None = None,
                    forensic_tables: bool = True) -> Iterator[pa.RecordBatch]:
    """mapInArrow body of the dissecting stage: indexes into `buckets` ((bucket,
    its pieces) pairs) -> OUTPUT_SCHEMA batches. Each bucket's runs
    (kdissect.spark.handoff) are merged and dissected as task partition
    `bucket`, its exchange rows written to that task partition's files in
    `work_dir`."""
    from kdissect.shared.outdir_tree import as_tree
    from kdissect.spark.handoff import bucket_runs

    work_dir = as_tree(work_dir)
    for batch in batches:
        for index in batch.column(0).to_pylist():
            bucket, pieces = buckets[index]
            runner = _runner(bucket, ports, detect, capture_names, work_dir, keylog, max_uncompressed, selection,
                             forensic_tables=forensic_tables)
            try:
                yield from runner.run_runs(bucket_runs(work_dir, pieces))
            except BaseException:
                _abandon(runner)
                raise
