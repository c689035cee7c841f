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
