"""How many Spark tasks the job asks for: read tasks (splits sharing tasks) and shuffle partitions."""

from __future__ import annotations

from kdissect.spark.job import read_task_sizes, shuffle_partitions


def test_splits_share_read_tasks_beyond_four_per_slot_in_shrinking_shares():
    assert read_task_sizes(22, 1) == [22]  # one slot: no wave to balance, one task reads every split
    assert read_task_sizes(1, 1) == [1]
    # bench_spark.py's many-small archive on two cores: the last tasks launched are single splits
    assert read_task_sizes(22, 2) == [6, 4, 3, 3, 2, 1, 1, 1, 1]
    assert read_task_sizes(7, 2) == [1] * 7  # fewer splits than four a slot: one split a task
    assert read_task_sizes(500, 200) == [1] * 500  # a cluster's many slots: one split a task
    assert read_task_sizes(2000, 200)[:3] == [5, 5, 5] and read_task_sizes(2000, 200)[-1] == 1
    assert sum(read_task_sizes(2000, 200)) == 2000
    assert read_task_sizes(0, 4) == [0]  # parallelize needs one slice even with nothing to read


def test_one_slot_gets_shuffle_partitions_by_size_alone():
    assert shuffle_partitions(60 << 20, 1) == 2  # ~32 MiB each
    assert shuffle_partitions(1 << 20, 1) == 1
    assert shuffle_partitions(60 << 20, 2) == 8  # several slots: four a slot, a multiple of the slots
    assert shuffle_partitions(1 << 30, 3) == 33


def test_in_place_runs_get_a_partition_per_slot_per_split_size():
    # only the connections crossing a split are shuffled: one partition a slot
    assert shuffle_partitions(60 << 20, 1, in_place=True) == 1
    assert shuffle_partitions(60 << 20, 2, in_place=True) == 2  # bench_spark.py's archives on two cores
    assert shuffle_partitions(0, 1, in_place=True) == 1
    # and one per 128 MiB (the default split size) of capture, a multiple of the slots
    assert shuffle_partitions(1 << 30, 1, in_place=True) == 8
    assert shuffle_partitions(1 << 30, 3, in_place=True) == 9
    assert shuffle_partitions(1 << 30, 200, in_place=True) == 200


def _splits(sizes: list[int]) -> list:
    from kdissect.spark.plan import Split

    splits, start = [], 0
    for split_id, size in enumerate(sizes):
        splits.append(Split(split_id, 0, "a.pcap", "pcap", start, start + size, sum(sizes)))
        start += size
    return splits


def test_read_tasks_launch_the_largest_splits_first_on_several_slots():
    from kdissect.spark.job import read_task_groups

    def ids(groups: list) -> list[list[int]]:
        return [[split.split_id for split in group] for group in groups]

    # bench_spark.py's few-large archive at --split-size 10m: two 30 MB files in ranges of
    # 10, 10 and 9 MiB, and a 4.5 MB file; the full ranges first, the short ones last
    mib = 1 << 20
    few_large = _splits([10 * mib, 10 * mib, 9 * mib, 10 * mib, 10 * mib, 9 * mib, 4 * mib + 300_000])
    assert ids(read_task_groups(few_large, 2)) == [[0], [1], [3], [4], [2], [5], [6]]
    # a small file in the middle of a rotated archive is read last
    assert ids(read_task_groups(_splits([3, 3, 1, 3]), 2)) == [[0], [1], [3], [2]]
    # splits that share a task: the largest ones in the first tasks, each task's in capture order;
    # every split read once; the task sizes are read_task_sizes'
    sizes = [3_000 + (split_id * 7919) % 500 for split_id in range(22)]
    groups = read_task_groups(_splits(sizes), 2)
    assert [len(group) for group in groups] == read_task_sizes(22, 2)
    assert sorted(split.split_id for group in groups for split in group) == list(range(22))
    assert all([s.split_id for s in group] == sorted(s.split_id for s in group) for group in groups)
    launched = [min(sizes[split.split_id] for split in group) for group in groups]
    assert all(smallest >= max(sizes[split.split_id] for split in later)
               for smallest, later in zip(launched, groups[1:]))
    # one slot: one task, capture order
    assert ids(read_task_groups(_splits([1, 3, 2]), 1)) == [[0, 1, 2]]
    assert ids(read_task_groups([], 2)) == [[]]
