"""RangeRows: the Spark tasks' latency sink (kdissect.forensics.latency),
rows checked against values written out by hand, and the file the task's
RangeSink writes from it (kdissect.spark.forensics)."""

from __future__ import annotations

import pyarrow.parquet as pq

from kdissect.forensics.latency import FETCHED, PRODUCED, RangeRows
from kdissect.spark.forensics import RANGE_SCHEMA, RangeSink


def test_rows_and_the_limit() -> None:
    handed: list[list[tuple]] = []
    sink = RangeRows(lambda: handed.append(sink.take()), 3)
    sink.produced("orders", 2, 10, 14, 1_000, 2_000)
    sink.fetched("orders", 2, "consumer-1", range(12, 20), 3_000)
    assert handed == []
    sink.rename("orders", "renamed")  # rows keep their label
    sink.fetched(None, 0, None, range(5, 6), 4_000)
    assert handed == [[(0, "orders", 2, 10, 14, 1_000, 2_000, None),
                       (1, "orders", 2, 12, 19, 3_000, None, "consumer-1"),
                       (1, None, 0, 5, 5, 4_000, None, None)]]
    assert (PRODUCED, FETCHED) == (0, 1)
    sink.produced("t", 0, 0, 0, 5, 6)
    assert sink.take() == [(0, "t", 0, 0, 0, 5, 6, None)] and sink.take() == []


def test_the_task_file(tmp_path) -> None:
    ranges = RangeSink(str(tmp_path), 7)
    ranges.sink.produced("orders", 1, 100, 109, 1_000, 1_500)
    ranges.produced("orders", 1, 110, 110, 1_600, 1_700)  # (the sink's methods through the wrapper too)
    ranges.sink.fetched("orders", 1, "c", range(100, 111), 2_000)
    ranges.close()
    (path,) = tmp_path.glob("**/ranges-00007.parquet")
    table = pq.read_table(path)
    assert table.schema.equals(RANGE_SCHEMA)
    assert table.to_pylist() == [
        {"kind": 0, "topic": "orders", "partition": 1, "first": 100, "last": 109, "ts": 1_000, "response_ts": 1_500,
         "client_id": None},
        {"kind": 0, "topic": "orders", "partition": 1, "first": 110, "last": 110, "ts": 1_600, "response_ts": 1_700,
         "client_id": None},
        {"kind": 1, "topic": "orders", "partition": 1, "first": 100, "last": 110, "ts": 2_000, "response_ts": None,
         "client_id": "c"}]
