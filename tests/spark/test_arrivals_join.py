"""The long polls a captured Produce ended, found on the driver (local mode)
or by the Spark job: the same fixes from the same arrival files. Both apply
kdissect.conn.arrivals.earliest_produce (the CLI's rule); what differs is how
the rows reach it (all at once, or grouped by topic-partition in Spark tasks).

The files are the ones read tasks write (kdissect.spark.arrivals.ArrivalSink)
for lab captures whose consumers waited on fetches a producer answered; the
exchange rows both joins lead to are checked against `kdissect export` in
test_job.py (its local session joins on the driver) and test_inrange.py."""

from __future__ import annotations

import pyarrow as pa
import pytest

from kdissect.shared.outdir_tree import as_tree
from kdissect.spark.arrivals import ARRIVALS_DIR, join_here, produce_answers
from kdissect.spark.dissect import read_partition
from kdissect.spark.plan import number_tasks, plan_splits
from tests.support.spark import local_session

# each holds fetches a Produce on another connection answered
CAPTURES = ("longpoll_data_kafka.pcap", "waits_kafka.pcap", "consume_group_kafka.pcap", "large_records_kafka.pcap")


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")
def test_the_driver_join_gives_the_spark_jobs_fixes(captures_dir, tmp_path):
    paths = [str(captures_dir / name) for name in CAPTURES]
    splits = [split.as_row() for split in number_tasks(plan_splits([(path, "pcap") for path in paths], 1 << 40))]
    work = tmp_path / "_work"
    for _ in read_partition([pa.RecordBatch.from_pylist(splits)], True, splits[-1]["split_id"], 4, [9092], True,
                            CAPTURES, str(work), forensic_tables=False):
        pass
    directory = as_tree(str(work)).sub(ARRIVALS_DIR)
    here = join_here(directory, directory.files(suffix=".parquet"))
    assert sum(len(fixes) for fixes in here.values()) >= 3
    with local_session(cores=1, shuffle_partitions=2) as spark:
        assert produce_answers(spark, str(work), on_driver=False) == here
        assert produce_answers(spark, str(work), on_driver=True) == here


def test_only_the_rows_a_fix_names_get_a_new_wait():
    from kdissect.spark.arrivals import fix_exchanges

    ms = 1_000_000
    # (capture index, frame number, ordinal), request and response times, and the wait as dissected
    rows = pa.table({
        "stream_capture_index": pa.array([0, 0, 1, 0, 2], pa.int32()),
        "stream_frame_number": pa.array([10, 10, 10, 20, 30], pa.int64()),
        "ordinal": pa.array([0, 1, 0, 3, 0], pa.int64()),
        "request_ts": pa.array([1000 * ms, 1000 * ms, 1000 * ms, 2000 * ms, 3000 * ms], pa.int64()),
        "response_ts": pa.array([1800 * ms, 1900 * ms, 1900 * ms, 2100 * ms, 3500 * ms], pa.int64()),
        "wait_reason": pa.array(["long_poll_unknown", None, "long_poll_unknown", None, "long_poll"], pa.string()),
        "wait_ms": pa.array([None, None, None, None, 12.0], pa.float64()),
        "service_ms": pa.array([None, 900.0, None, 100.0, 488.0], pa.float64()),
    })
    fixes = {
        # held from 1000 to 1800 ms, the data arrived at 1300 ms: 300 ms of long poll, 500 ms of service
        (0, 10, 0): (1300 * ms, 1000 * ms, 1800 * ms, 0, None),
        # the data came before the hold began: only the 5 ms throttle before it is a wait
        (0, 20, 3): (1500 * ms, 2010 * ms, 2090 * ms, 5 * ms, "throttle"),
        (0, 99, 0): (1 * ms, 0, 2 * ms, 0, None),  # names no row here
    }
    fixed = fix_exchanges(rows, fixes)
    assert fixed.schema == rows.schema
    assert fixed.column("wait_reason").to_pylist() == ["long_poll", None, "long_poll_unknown", "throttle", "long_poll"]
    assert fixed.column("wait_ms").to_pylist() == [300.0, None, None, 5.0, 12.0]
    assert fixed.column("service_ms").to_pylist() == [500.0, 900.0, None, 95.0, 488.0]
    for name in ("stream_capture_index", "stream_frame_number", "ordinal", "request_ts", "response_ts"):
        assert fixed.column(name).to_pylist() == rows.column(name).to_pylist()
    assert fix_exchanges(rows, {(5, 10, 0): fixes[(0, 10, 0)]}).equals(rows)  # a frame number, another file


def test_held_fetches_take_the_earliest_answer_of_their_own_topic_partitions():
    """Hand-made arrival rows: Produce answers on the topic-partitions no held
    fetch names (earlier, inside every window) are left out, a fetch whose
    topic label is unknown (null) is answered by a Produce of the same null
    label, and a fetch with no Produce holding its offset gets no answer."""
    from kdissect.spark.arrivals import ARRIVAL_SCHEMA, FETCHED, PRODUCED, earliest_answers

    second = 1_000_000_000
    start, end = 10 * second, 11 * second

    def produced(topic, partition, first, last, answer_ts):
        return {"kind": PRODUCED, "topic": topic, "partition": partition, "first": first, "last": last,
                "answer_ts": answer_ts}

    def held(topic, partition, first, ordinal):
        return {"kind": FETCHED, "topic": topic, "partition": partition, "first": first, "task_partition": 3,
                "stream_capture_index": 0, "stream_frame_number": 40, "ordinal": ordinal, "start_ns": start,
                "end_ns": end, "before_ns": 0, "before_reason": None}

    rows = [
        produced("t", 1, 0, 9, start + second // 10),  # another partition of the fetched topic
        produced("u", 0, 0, 9, start + second // 10),  # another topic, the fetched partition
        produced("t", 0, 20, 30, start + second // 20),  # does not hold the fetched offset
        produced("t", 0, 0, 9, start + 6 * second // 10),
        held("t", 0, 5, 1),
        produced("t", 0, 5, 5, start + 5 * second // 10),  # the earliest holding offset 5 of t/0
        produced(None, 2, 7, 7, start + 7 * second // 10),
        produced(None, None, 7, 7, start),  # a null partition holds nothing
        held(None, 2, 7, 2),
        held("v", 0, 1, 3),  # no Produce of v/0
    ]
    table = pa.Table.from_pylist(rows, schema=ARRIVAL_SCHEMA)
    key = (3, 0, 40)
    expected = {(*key, 1, start, end, 0, None): start + 5 * second // 10,
                (*key, 2, start, end, 0, None): start + 7 * second // 10}
    assert earliest_answers([table]) == expected
    # the same rows cut into batches (a Spark task's group)
    assert earliest_answers(table.to_batches(max_chunksize=3)) == expected
    assert earliest_answers([table.slice(0, 3)]) == {}  # Produce rows only
