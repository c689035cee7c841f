"""Executor side of the shuffle: one connection's segments -> exchange rows.

Input rows are runs of segments (see segments.py) sorted by 4-tuple and then
by (order_ts, capture_index, frame_number) of their first segment, so all
segments of one 4-tuple arrive consecutively. With one capture file they are
in feed order already; with several, `captureset.ConnectionMerge` merges the
runs into the capture set's feed order and drops duplicates across files,
exactly as `kdissect export` does for the whole set. Each 4-tuple gets a
fresh `Dissector` (the single-process one), so a task holds one connection's
state at a time.

Exchange rows and the per-partition errors of their responses go to the
task's own files (`part_files.PartSink`), with their connection's
classification key in place of a stream number. What goes back to Spark is
small (OUTPUT_SCHEMA), of two kinds:
  CONNECTION  one per connection classified as Kafka, with that key, so the
              driver can number streams exactly as the CLI does, even for
              connections without exchanges;
  ACCOUNTING  one per task: the summed `Accounting` as JSON, with the rows
              the task wrote.
Both carry the task's partition index, which names its files.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Iterator, Sequence

import pyarrow as pa

from kdissect.model.accounting import Accounting
from kdissect.wire.captureset import ConnectionMerge
from kdissect.model.exchange import Exchange
from kdissect.conn.pipeline import Dissector
from kdissect.spark.part_files import EXCHANGES, PARTITION_ERRORS, PartSink
from kdissect.spark.segments import READ_STATS_KEY, add_read_stats, run_segments

CONNECTION, ACCOUNTING = 1, 2

OUTPUT_SCHEMA = pa.schema([
    ("kind", pa.int8()),
    ("task_partition", pa.int32()),
    ("stream_capture_index", pa.int32()),  # where the connection was classified as Kafka
    ("stream_frame_number", pa.int64()),
    ("stream_order_ts", pa.int64()),  # its feed time (kdissect.wire.captureset): streams are numbered in feed order
    ("accounting", pa.string()),
])

BATCH_ROWS = 2048
# the columns of an exchange's partition error rows taken from the exchange
_PARTITION_ERROR_EXCHANGE_COLUMNS = ("capture", "correlation_id", "api_key", "api_name", "api_version",
                                     "stream_capture_index", "stream_frame_number", "ordinal")


def _partition_errors(exchange: Exchange) -> list[dict[str, Any]]:
    """The non-zero errors per topic-partition of the exchange's response."""
    response = exchange.response
    if response is None or exchange.api_key is None:
        return []
    from kdissect.protocol.errors import error_name
    from kdissect.protocol.summary import partition_errors

    body = getattr(response, "body", None)
    if body is None:
        return []
    return [{"topic": None if topic is None else str(topic), "partition": partition,
             "error_code": code, "error_name": error_name(code)}
            for topic, partition, code in partition_errors(exchange.api_key, exchange.api_version, body)  # type: ignore[arg-type]
            if code]


class _Output:
    """Collects output rows and cuts them into Arrow batches."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    @property
    def size(self) -> int:
        return len(self.rows)

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append(row)

    def batch(self) -> pa.RecordBatch:
        batch = pa.RecordBatch.from_pylist(self.rows, schema=OUTPUT_SCHEMA)  # missing keys are nulls
        self.rows = []
        return batch


class ConnectionRunner:
    """Feeds consecutive rows of one 4-tuple at a time to a fresh Dissector."""

    def __init__(self, ports: Sequence[int], detect: bool, capture_names: Sequence[str], sink: PartSink,
                 keylog: Any = None, several_files: bool | None = None, forensics: Any = None,
                 arrivals: Any = None, selection: Any = None) -> None:
        self.sink = sink
        # the rows the job keeps (kdissect.filters.selection.Selection), or None: all
        self.selection = selection
        # the task's forensic tallies (kdissect.spark.forensics.TaskForensics), or None
        self.forensics = forensics
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
        self.read_totals: dict[str, Any] = {}  # summed ReadStats of the splits whose counts came here
        self.classified_connections = 0
        self.output = _Output()
        self._dissector: Dissector | None = None
        self._ordinal = 0

    def _start(self) -> None:
        # rows are skimmed (no decoded messages kept), except responses with
        # error codes, whose per-partition errors the job tabulates, and the
        # messages the forensic tables read; all connections of the task
        # count into one (additive) Accounting
        from kdissect.forensics import FORENSIC_APIS

        self._dissector = Dissector(ports=self.ports, detect=self.detect, capture_names=self.capture_names,
                                    # (--group reads the decoded messages)
                                    keep_messages=self.selection is not None and self.selection.reads_messages,
                                    keep_error_responses=True, accounting=self.accounting,
                                    keylog=self.keylog, keep_apis=FORENSIC_APIS if self.forensics else ())
        self._ordinal = 0

    def _emit(self, exchanges: Iterable[Exchange]) -> None:
        from kdissect.shared.output import lossless_row

        selection = self.selection
        for exchange in exchanges:
            if selection is not None and not selection.matches(exchange):
                if self.forensics is not None:  # topic names are context, learned from every exchange
                    self.forensics.learn_names(exchange)
                if exchange.arrival is not None and self.arrivals is not None:
                    self.arrivals.add_produced(exchange)  # a Produce ends other fetches' waits, kept or not
                exchange.request = exchange.response = None  # counted in the accounting, not kept
                continue
            row = lossless_row(exchange.to_row())  # captured strings as every output stores them
            key = exchange.stream_key
            row["stream_capture_index"], row["stream_frame_number"] = key if key is not None else (None, None)
            row["ordinal"] = self._ordinal
            self._ordinal += 1
            self.sink.add_exchange(row)
            if exchange.arrival is not None and self.arrivals is not None:
                self.arrivals.add(exchange, row)
            try:
                errors = _partition_errors(exchange)
            except Exception:  # a summary problem must not lose the exchange; counted
                self.partition_error_failures += 1
                errors = []
            if errors:
                shared = {name: row[name] for name in _PARTITION_ERROR_EXCHANGE_COLUMNS}
                for error in errors:
                    self.sink.add_partition_error({**shared, **error})
            if self.forensics is not None:
                self.forensics.add(exchange)
            # decoded messages are not needed any more
            exchange.request = exchange.response = None

    def finish_connection(self) -> None:
        dissector = self._dissector
        if dissector is None:
            return
        if self.merge is not None:
            feed = dissector.feed
            for segment in self.merge.finish():
                exchanges = feed(segment)
                if exchanges:
                    self._emit(exchanges)
            self.duplicates += self.merge.duplicates
            self.merge = None
        self._emit(dissector.finish())
        self.classified_connections += len(dissector.classification_keys)
        if dissector.accounting.tls_connections:
            if self.tls_stats is None:
                self.tls_stats = dissector.tls_stats
            elif dissector.tls_stats is not self.tls_stats:
                self.tls_stats.add(dissector.tls_stats)
        for order_ts, capture_index, frame_number in dissector.classification_keys:
            self.output.add({"kind": CONNECTION, "task_partition": self.sink.task_partition,
                             "stream_capture_index": capture_index, "stream_frame_number": frame_number,
                             "stream_order_ts": order_ts})
        self._dissector = None

    def run(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        current = None
        for batch in batches:
            columns = [batch.column(name).to_pylist() for name in (
                "capture_index", "addr_a", "port_a", "addr_b", "port_b", "segments")]
            for capture_index, addr_a, port_a, addr_b, port_b, packed in zip(*columns):
                key = (addr_a, port_a, addr_b, port_b)
                if key == READ_STATS_KEY:  # a split's read counts, not a connection
                    add_read_stats(self.read_totals, json.loads(packed))
                    continue
                if key != current:
                    self.finish_connection()
                    self._start()
                    current = key
                    if self.several_files:
                        self.merge = ConnectionMerge()
                feed = self._dissector.feed  # type: ignore[union-attr]
                segments = run_segments(capture_index, addr_a, port_a, addr_b, port_b, packed)
                if self.merge is not None:
                    segments = self.merge.add_run(segments)
                for segment in segments:
                    exchanges = feed(segment)
                    if exchanges:
                        self._emit(exchanges)
            if self.output.size >= BATCH_ROWS:
                yield self.output.batch()
        self.finish_connection()
        if self.duplicates:
            add_read_stats(self.read_totals, {"duplicate_packets": self.duplicates})
        written = self.sink.close()
        if self.forensics is not None:
            self.forensics.close()
        if self.arrivals is not None:
            self.arrivals.close()
        totals = self.accounting.to_dict()
        totals["partition_error_failures"] = self.partition_error_failures
        totals["read"] = self.read_totals
        totals["classified_connections"] = self.classified_connections
        totals["tls"] = self.tls_stats.to_dict() if self.tls_stats is not None else {}
        totals["rows_written"] = {EXCHANGES: written[EXCHANGES], PARTITION_ERRORS: written[PARTITION_ERRORS]}
        self.output.add({"kind": ACCOUNTING, "task_partition": self.sink.task_partition,
                         "accounting": json.dumps(totals)})
        yield self.output.batch()


def dissect_partition(batches: Iterable[pa.RecordBatch], ports: Sequence[int], detect: bool,
                      capture_names: Sequence[str], work_dir: Any, keylog: Any = None,
                      max_uncompressed: int | None = None, selection: tuple | None = None) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: sorted segment batches of one partition -> OUTPUT_SCHEMA
    batches; the exchange rows go to this task partition's files in `work_dir`."""
    from pyspark import TaskContext

    from kdissect.spark.arrivals import ArrivalSink
    from kdissect.spark.forensics import TaskForensics

    task_partition = TaskContext.get().partitionId()  # type: ignore[union-attr]
    sink = PartSink(work_dir, task_partition)
    forensics = TaskForensics(work_dir, task_partition, max_uncompressed)
    arrivals = ArrivalSink(work_dir, task_partition)
    try:
        kept = None
        if selection is not None:  # Selection.task_values: the driver checked them
            from kdissect.filters.selection import Selection

            kept = Selection.from_task_values(selection)
        yield from ConnectionRunner(ports, detect, capture_names, sink, keylog, forensics=forensics,
                                    arrivals=arrivals, selection=kept).run(batches)
    except BaseException:
        sink.abandon()
        forensics.abandon()
        arrivals.abandon()
        raise
