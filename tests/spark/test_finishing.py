"""The driver's side of the finishing job: stream numbers and the finishing tasks' runs.

No Spark here (tests/spark/test_job.py checks the whole job's stream numbers
against `kdissect export`).
"""

from __future__ import annotations

from kdissect.spark.tables import finishing_tasks, stream_numbers


def test_streams_are_numbered_in_feed_order_across_task_partitions():
    # (task partition, capture index, frame number, order_ts): the CLI numbers
    # connections as their classifying packets come in the capture set's feed
    # order, order_ts first, then the file, then the frame
    connections = [
        (3, 1, 7, 2_000),  # third by time
        (0, 0, 40, 1_000),  # a tie on time: file 0 before file 1
        (5, 1, 2, 1_000),
        (0, 0, 9, 5_000),  # last by time though first in its file
        (5, 0, 41, 1_000),  # the same time and file: frame 40 before 41
    ]
    assert stream_numbers(connections) == {
        0: {(0, 40): 0, (0, 9): 4},
        5: {(0, 41): 1, (1, 2): 2},
        3: {(1, 7): 3},
    }


def test_a_connection_without_feed_time_comes_first():
    assert stream_numbers([(0, 0, 5, 10), (1, 0, 9, None)]) == {1: {(0, 9): 0}, 0: {(0, 5): 1}}


def test_finishing_runs_are_consecutive_and_share_the_rows():
    rows = {0: 100, 1: 100, 2: 100, 3: 100, 7: 0}
    assert finishing_tasks(rows, 2) == [[0, 1], [2, 3, 7]]
    assert finishing_tasks(rows, 1) == [[0, 1, 2, 3, 7]]


def test_a_partition_goes_where_its_middle_row_falls():
    # 1,030 rows, 515 a task: partition 1's middle row (the 510th) is in the first share
    assert finishing_tasks({0: 10, 1: 1000, 2: 10, 3: 10}, 2) == [[0, 1], [2, 3]]


def test_more_slots_than_partitions_and_no_rows():
    assert finishing_tasks({4: 0, 9: 0}, 8) == [[4, 9]]  # nothing to share: one task
    assert finishing_tasks({}, 2) == []
