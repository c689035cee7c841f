"""How many Spark tasks the job asks for: read tasks (splits sharing tasks) and shuffle partitions."""

from __future__ import annotations

from kdissect.spark.job import read_task_count, shuffle_partitions


def test_splits_share_read_tasks_beyond_four_per_slot():
    assert read_task_count(22, 1) == 1  # one slot: no wave to balance, one task reads every split
    assert read_task_count(1, 1) == 1
    assert read_task_count(22, 2) == 8  # bench_spark.py's many-small archive on two cores
    assert read_task_count(7, 2) == 7  # fewer splits than that: one split a task
    assert read_task_count(500, 200) == 500  # a cluster's many slots: one split a task
    assert read_task_count(0, 4) == 1  # parallelize needs one slice even with nothing to read


def test_one_slot_gets_shuffle_partitions_by_size_alone():
    assert shuffle_partitions(60 << 20, 1) == 2  # ~32 MiB each
    assert shuffle_partitions(1 << 20, 1) == 1
    assert shuffle_partitions(60 << 20, 2) == 8  # several slots: four a slot, a multiple of the slots
    assert shuffle_partitions(1 << 30, 3) == 33
