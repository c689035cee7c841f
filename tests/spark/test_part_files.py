"""The exchange files the dissecting tasks write, and their rewrite with stream numbers.

No Spark here: `PartSink`, `finish_part` and `finish_partitions` are plain
Python (the job runs them inside Spark tasks; tests/spark/test_job.py checks the
whole job against `kdissect export`).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from kdissect.spark.part_files import (
    EXCHANGES,
    PARTITION_ERRORS,
    WORK_SCHEMAS,
    PartSink,
    PartStreams,
    finish_part,
    finish_partitions,
)


def _exchange(key: tuple[int, int], ordinal: int, correlation_id: int) -> dict:
    return {"capture": "a.pcap", "stream": 0, "correlation_id": correlation_id, "api_key": 3, "api_name": "Metadata",
            "api_version": 12, "status": "ok", "error_codes": [], "problems": [], "request_ts": 1700000000.0 + ordinal,
            "stream_capture_index": key[0], "stream_frame_number": key[1], "ordinal": ordinal}


def _write(work, task_partition: int, exchanges: list[dict], errors: list[dict] = ()) -> dict[str, int]:
    sink = PartSink(str(work), task_partition)
    for row in exchanges:
        sink.add_exchange(tuple(row.get(name) for name in WORK_SCHEMAS[EXCHANGES].names))
    for row in errors:
        sink.add_partition_error(row)
    return sink.close()


def test_streams_are_numbered_and_rows_sorted_by_stream_then_order(tmp_path):
    from kdissect.spark.summaries import SUMMARY_COLUMNS

    work, out = tmp_path / "work", tmp_path / "out"
    # two connections interleaved as a task would see them: 4-tuple order, not stream order
    rows = [_exchange((0, 40), 0, 7), _exchange((0, 40), 1, 8), _exchange((0, 5), 0, 1), _exchange((0, 5), 1, 2)]
    error = {"capture": "a.pcap", "correlation_id": 8, "api_key": 3, "api_name": "Metadata", "api_version": 12,
             "topic": "t", "partition": 0, "error_code": 3, "error_name": "UNKNOWN_TOPIC_OR_PARTITION",
             "stream_capture_index": 0, "stream_frame_number": 40, "ordinal": 1}
    assert _write(work, 4, rows, [error]) == {EXCHANGES: 4, PARTITION_ERRORS: 1}
    written, exchanges = finish_part(str(work), str(out), 4, PartStreams.of({(0, 5): 11, (0, 40): 12}))
    assert written == {EXCHANGES: 4, PARTITION_ERRORS: 1}
    # what the summary tables read, in the written order
    assert exchanges.column_names == list(SUMMARY_COLUMNS) and exchanges.num_rows == 4
    # partitioned by the request's UTC date (the rows hold int ns: 1.7 s after the epoch)
    table = pq.read_table(out / "exchanges" / "capture_date=1970-01-01" / "part-00004.parquet")
    assert table.column("stream").to_pylist() == [11, 11, 12, 12]
    assert table.column("correlation_id").to_pylist() == [1, 2, 7, 8]
    assert "ordinal" not in table.column_names
    [error_row] = pq.read_table(out / "partition_errors" / "part-00004.parquet").to_pylist()
    assert (error_row["stream"], error_row["correlation_id"], error_row["error_code"]) == (12, 8, 3)


def test_a_task_that_runs_twice_leaves_one_file_with_the_second_runs_rows(tmp_path):
    work = tmp_path / "work"
    _write(work, 0, [_exchange((0, 1), 0, 1)])
    _write(work, 0, [_exchange((0, 1), 0, 1), _exchange((0, 1), 1, 2)])
    assert [p.name for p in (work / "exchanges").iterdir()] == ["part-00000.arrow"]
    assert finish_part(str(work), str(tmp_path / "out"), 0, PartStreams.of({(0, 1): 0}))[0][EXCHANGES] == 2


def test_a_partition_without_rows_is_finished_with_none(tmp_path):
    from kdissect.spark.summaries import WRITTEN

    work, out = tmp_path / "work", tmp_path / "out"
    _write(work, 1, [_exchange((2, 9), 0, 5)])
    parts = [(0, None, None), (1, PartStreams.of({(2, 9): 3}), None)]  # partition 0 wrote nothing
    rows = pa.concat_tables(finish_partitions(parts, str(work), str(out))).to_pylist()
    written = {row["dimension"]: row["count"] for row in rows if row["table"] == WRITTEN}
    assert written == {EXCHANGES: 1, PARTITION_ERRORS: 0}
    # the one exchange has a request time, so it counts in the time series
    assert sum(row["count"] for row in rows if row["table"] == "timeseries") == 1
    day = out / "exchanges" / "capture_date=1970-01-01"
    assert pq.read_table(day / "part-00001.parquet").column("stream").to_pylist() == [3]
    assert [p.name for p in (out / "exchanges").rglob("*.parquet")] == ["part-00001.parquet"]


def test_rows_as_values_give_the_batch_dict_rows_gave(captures_dir):
    """The tasks hand an exchange's values in column order, strings as
    captured (to_row's values, then the stream key and ordinal): on real
    captures, hostile strings among them, the batch equals the one
    `from_pylist` made of the rows by name after `lossless_row`."""
    from kdissect.conn.pipeline import Analysis
    from kdissect.shared.output import lossless_row
    from kdissect.model.exchange import row_values
    from kdissect.shared.arrow_rows import rows_batch

    schema = WORK_SCHEMAS[EXCHANGES]
    escaped = 0
    for name in ("hostile_strings_kafka.pcap", "consume_group_kafka.pcap", "java_transactions_kafka.pcap"):
        by_name, values = [], []
        for ordinal, exchange in enumerate(Analysis([str(captures_dir / name)], (9092,), True, False)):
            row = exchange.to_row()
            assert list(row) == schema.names[:-3]
            assert row_values(exchange) == tuple(row.values())  # what the tasks hand over
            values.append((*row_values(exchange), 0, ordinal + 1, ordinal))
            stored = lossless_row(row)
            escaped += stored is not row
            by_name.append({**stored, "stream_capture_index": 0, "stream_frame_number": ordinal + 1,
                            "ordinal": ordinal})
        assert len(values) > 20
        expected = pa.RecordBatch.from_pylist(by_name, schema=schema)
        assert rows_batch(values, schema, lossless=True).equals(expected)
    assert escaped > 5  # (the hostile capture's strings did need the rule)
    # a row of another length is refused, not cut to fit
    import pytest

    with pytest.raises(ValueError):
        rows_batch([values[0], values[1][:-1]], schema)


def test_each_column_of_an_exchange_row_is_its_attribute_of_that_name():
    """The tasks take an exchange's row values as its attributes named by
    COLUMN_NAMES (kdissect.model.exchange.row_values): `to_row` must say
    exactly that, entry by entry ("name": self.name), read from its source."""
    import ast
    import inspect
    import textwrap

    from kdissect.model.exchange import COLUMN_NAMES, Exchange

    [function] = ast.parse(textwrap.dedent(inspect.getsource(Exchange.to_row))).body
    [returned] = [node for node in ast.walk(function) if isinstance(node, ast.Return)]
    entries = returned.value
    assert isinstance(entries, ast.Dict)
    pairs = [(key.value, (value.value.id, value.attr)) for key, value in zip(entries.keys, entries.values)
             if isinstance(key, ast.Constant) and isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name)]
    assert len(pairs) == len(entries.keys)
    assert pairs == [(name, ("self", name)) for name in COLUMN_NAMES]


def test_stream_numbers_follow_each_rows_capture_and_frame_and_an_unknown_key_is_null():
    from kdissect.spark.part_files import stream_column

    # the same frame number in two files is two connections; (1, 99) was not classified
    rows = pa.table({"stream_capture_index": pa.array([1, 0, 1, 0, None], pa.int32()),
                     "stream_frame_number": pa.array([7, 7, 99, 3, 3], pa.int64())})
    streams = PartStreams.of({(0, 7): 4, (1, 7): 2, (0, 3): 0})
    assert stream_column(rows, streams).to_pylist() == [2, 4, None, 0, None]
    assert stream_column(rows, None).to_pylist() == [None] * 5
    assert stream_column(rows, PartStreams.of({})).to_pylist() == [None] * 5
    # frames numbered within a range (split id << 40, kdissect.spark.frames) differ by one
    # beyond float64's precision; a row without a key in the same column must not round them
    local = (9000 << 40) + 5
    rows = pa.table({"stream_capture_index": pa.array([0, 0, None], pa.int32()),
                     "stream_frame_number": pa.array([local, local + 1, None], pa.int64())})
    assert stream_column(rows, PartStreams.of({(0, local): 1, (0, local + 1): 0})).to_pylist() == [1, 0, None]


def test_a_part_in_order_is_kept_and_one_out_of_order_is_sorted_stably(tmp_path):
    from kdissect.spark.part_files import _in_stream_order

    ordered = pa.table({"stream": [0, 0, 0, 2], "ordinal": [0, 1, 1, 0], "tag": ["a", "b", "c", "d"]})
    assert _in_stream_order(ordered) is ordered
    shuffled = pa.table({"stream": [2, 0, 0, 0], "ordinal": [0, 1, 0, 1], "tag": ["d", "b", "a", "c"]})
    assert _in_stream_order(shuffled).column("tag").to_pylist() == ["a", "b", "c", "d"]
    # a row of no known stream goes last (Arrow's null placement), as before the in-order check
    with_null = pa.table({"stream": pa.array([None, 0], pa.int64()), "ordinal": [0, 0], "tag": ["z", "a"]})
    assert _in_stream_order(with_null).column("tag").to_pylist() == ["a", "z"]
