"""The finishing step run in the driver's process (local mode, one task slot)
against the same step as a Spark job: the same parts and summary rows from
the same work files (`kdissect.spark.tables.finish_tables`)."""

from __future__ import annotations

import json
import shutil
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kdissect.spark.dissect import read_partition
from kdissect.spark.part_files import read_connection_keys
from kdissect.spark.plan import number_tasks, plan_splits
from kdissect.spark.tables import CONNECTION_COLUMNS, finish_tables
from tests.support.spark import local_session

# several files (task partitions), held fetches a Produce answered (fixes), partition errors
CAPTURES = ("longpoll_data_kafka.pcap", "consume_group_kafka.pcap", "hostile_strings_kafka.pcap",
            "java_transactions_kafka.pcap")


def _dissected(captures_dir, work) -> tuple[pa.Table, dict[int, int]]:
    """Read tasks' work files in `work`; the Kafka connections' keys and each task partition's exchange rows."""
    paths = [str(captures_dir / name) for name in CAPTURES]
    splits = [split.as_row() for split in number_tasks(plan_splits([(path, "pcap") for path in paths], 1 << 40))]
    rows = {}
    for batch in read_partition([pa.RecordBatch.from_pylist(splits)], True, splits[-1]["split_id"], 4, [9092], True,
                                CAPTURES, str(work), forensic_tables=False):
        for row in batch.to_pylist():
            if "rows_written" in json.loads(row["accounting"]):
                rows[row["task_partition"]] = json.loads(row["accounting"])["rows_written"]["exchanges"]
    return read_connection_keys(str(work)).select(list(CONNECTION_COLUMNS)), rows


def _tables(outdir) -> dict[str, list[dict]]:
    found = {}
    for file in sorted(outdir.rglob("*.parquet")):
        found[str(file.relative_to(outdir))] = pq.read_table(file, partitioning=None).to_pylist()
    return found


pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]


@pytest.fixture(scope="module")
def one_slot():
    with local_session(cores=1, shuffle_partitions=1) as session:
        yield session


def test_the_driver_finishes_the_parts_the_spark_job_finishes(one_slot, captures_dir, tmp_path):
    from kdissect.spark.arrivals import produce_answers

    work = tmp_path / "_work"
    connections, rows = _dissected(captures_dir, work)
    assert len(rows) == len(CAPTURES) and connections.num_rows >= len(CAPTURES)
    fixes = produce_answers(None, str(work), on_driver=True)
    assert fixes  # the long polls a Produce ended are fixed in both
    results = {}
    for on_driver in (False, True):
        outdir = tmp_path / f"out-{on_driver}"
        copy = tmp_path / f"work-{on_driver}"
        shutil.copytree(work, copy)
        summary, written = finish_tables(one_slot.sparkContext, connections, rows, str(copy), str(outdir), "us",
                                         fixes, [0] * 8, on_driver=on_driver)
        results[on_driver] = (summary, written, _tables(outdir))
    assert results[True][1]["exchanges"] == sum(rows.values()) > 0
    assert results[True][2] and all(results[True][2].values())
    assert results[True] == results[False]


def test_the_forensic_finish_runs_in_turn_when_no_finishing_job_starts(one_slot, captures_dir, tmp_path, monkeypatch):
    """One task slot in local mode: the finishing runs in this process, no
    Spark job starts, so the forensic finish is neither held back waiting
    for one (kdissect.spark.job._until_a_job_runs, up to 1 s) nor run in a
    thread beside it: it runs after the finishing, in the main thread."""
    from kdissect.spark import forensics, job

    waits, threads = [], []
    monkeypatch.setattr(job, "_until_a_job_runs", lambda sc, done, most=1.0: waits.append(most))
    finish_forensics = forensics.finish_forensics

    def recorded(*args, **kwargs):
        threads.append(threading.current_thread())
        return finish_forensics(*args, **kwargs)

    monkeypatch.setattr(forensics, "finish_forensics", recorded)
    outdir = tmp_path / "out"
    result = job.run_job(job.JobOptions(inputs=[str(captures_dir / "consume_group_kafka.pcap")], outdir=str(outdir),
                                        master=None), spark=one_slot)
    assert waits == [] and threads == [threading.main_thread()]
    assert result.manifest["forensics"]["rows"]["groups"] > 0
    assert not (outdir / "_work").exists()
