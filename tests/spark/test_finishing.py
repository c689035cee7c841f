"""The driver's side of the finishing job: stream numbers and the finishing tasks' runs.

No Spark here (tests/spark/test_job.py checks the whole job's stream numbers
against `kdissect export`).
"""

from __future__ import annotations

import random

import pyarrow as pa

from kdissect.spark.tables import CONNECTION_COLUMNS, finishing_tasks, stream_numbers


def _numbered(connections: list[tuple]) -> dict[int, dict[tuple[int, int], int]]:
    """stream_numbers of (task partition, capture index, frame number, order_ts) tuples, as plain dicts."""
    table = pa.table([pa.array([c[i] for c in connections], kind) for i, kind in
                      enumerate((pa.int32(), pa.int32(), pa.int64(), pa.int64()))], names=list(CONNECTION_COLUMNS))
    return {partition: {(int(capture), int(frame)): int(stream)
                        for capture, frame, stream in zip(streams.captures, streams.frames, streams.streams)}
            for partition, streams in stream_numbers(table).items()}


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
    assert _numbered(connections) == {
        0: {(0, 40): 0, (0, 9): 4},
        5: {(0, 41): 1, (1, 2): 2},
        3: {(1, 7): 3},
    }


def test_a_connection_without_feed_time_comes_first():
    assert _numbered([(0, 0, 5, 10), (1, 0, 9, None)]) == {1: {(0, 9): 0}, 0: {(0, 5): 1}}


def test_many_connections_are_numbered_as_the_feed_order_sorts_them():
    # the rule as the docstring states it, with Python's sort: a missing time
    # first, then the time, the file, the frame; frames numbered within a
    # range (split id << 40) are beyond float64's precision
    chooser = random.Random(29)
    keys = set()
    while len(keys) < 5000:
        frame = chooser.choice([chooser.randrange(100), (chooser.randrange(9000) << 40) + chooser.randrange(3)])
        keys.add((chooser.randrange(3), frame))
    connections = [(chooser.randrange(6), capture, frame, None if chooser.random() < 0.05 else chooser.randrange(50))
                   for capture, frame in sorted(keys)]
    chooser.shuffle(connections)
    expected: dict[int, dict[tuple[int, int], int]] = {}
    for number, (partition, capture, frame, _) in enumerate(
            sorted(connections, key=lambda c: (c[3] is not None, c[3] or 0, c[1], c[2]))):
        expected.setdefault(partition, {})[(capture, frame)] = number
    assert _numbered(connections) == expected


def test_no_connection_numbers_nothing():
    assert _numbered([]) == {}


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
