"""The local workers' daemon (kdissect/spark/worker_daemon.py): installed pyspark, frozen preloaded objects."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest

from kdissect.spark import worker_daemon
from tests.support.spark import local_session


def _spark_zips() -> list[str]:
    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    return sorted(str(path) for path in lib.glob("*.zip"))


def test_the_zips_of_an_installed_pyspark_leave_the_path(monkeypatch):
    zips = _spark_zips()
    assert any(path.endswith("pyspark.zip") for path in zips), "pip-installed pyspark ships its zip"
    monkeypatch.setattr(sys, "path", [*zips, *sys.path])
    worker_daemon.prefer_installed_pyspark()
    assert not set(zips) & set(sys.path)


def test_the_jars_of_an_installed_pyspark_leave_the_path_with_its_zips(monkeypatch):
    """Spark puts its spark-core jar on the workers' path; it holds no Python
    module, and zipimport re-read its directory in every new worker."""
    import pyspark

    jars = sorted(str(path) for path in (Path(pyspark.__file__).parent / "jars").glob("spark-core_*.jar"))
    assert jars, "pip-installed pyspark ships its jars"
    with zipfile.ZipFile(jars[0]) as archive:
        assert not [name for name in archive.namelist() if name.endswith(".py")]
    monkeypatch.setattr(sys, "path", [*_spark_zips(), jars[0], *sys.path])
    worker_daemon.prefer_installed_pyspark()
    assert jars[0] not in sys.path
    monkeypatch.setattr(sys, "path", [jars[0], *sys.path])  # without the zips (not the daemon's case): kept
    worker_daemon.prefer_installed_pyspark()
    assert sys.path[0] == jars[0]


def test_a_zip_of_another_pyspark_stays(tmp_path, monkeypatch):
    # SPARK_HOME/python/lib/pyspark.zip of a Spark whose pyspark is not the installed one
    lib = tmp_path / "spark" / "python" / "lib"
    lib.mkdir(parents=True)
    other = lib / "pyspark.zip"
    with zipfile.ZipFile(other, "w") as archive:
        archive.writestr("pyspark/version.py", "__version__: str = '0.0.1'\n")
    monkeypatch.setattr(sys, "path", [str(other), *sys.path])
    worker_daemon.prefer_installed_pyspark()
    assert sys.path[0] == str(other)


@pytest.mark.slow
def test_local_workers_use_the_installed_pyspark_with_frozen_modules():
    import pyspark

    installed = str(Path(pyspark.__file__).resolve())

    def probe(_):
        import gc

        import pyspark as worker_pyspark

        return (str(Path(worker_pyspark.__file__).resolve()), gc.get_freeze_count(),
                "kdissect.spark.dissect" in sys.modules, gc.get_threshold()[0],
                [entry for entry in sys.path if entry.endswith((".zip", ".jar")) and Path(entry).exists()])

    with local_session(cores=1, shuffle_partitions=1) as spark:
        where, frozen, preloaded, threshold, archives = spark.sparkContext.parallelize([0], 1).map(probe).collect()[0]
    assert where == installed
    assert archives == []  # no zip or jar left for zipimport to read
    assert frozen > 10_000 and preloaded
    assert threshold == worker_daemon.FEWER_COLLECTIONS


def test_what_survives_a_collection_after_a_task_is_frozen():
    import gc

    survivors = [[index] for index in range(1000)]  # containers the collector tracks
    before = gc.get_freeze_count()
    try:
        worker_daemon._CollectThenFreeze().collect()
        assert gc.get_freeze_count() >= before + len(survivors)
        assert gc.get_threshold() == worker_daemon._CollectThenFreeze().get_threshold()  # the rest is gc's
    finally:
        gc.unfreeze()


def test_rdd_and_arrow_tasks_fork_from_one_daemon_with_the_task_modules_loaded():
    """Spark keys worker daemons by the workers' environment: the RDD job and
    the mapInArrow job must get the same one (one daemon started per run)."""
    import os

    def parent(_):
        return os.getppid(), "kdissect.forensics.core" in sys.modules, "pyarrow.dataset" in sys.modules

    def parents(batches):
        import pyarrow as pa

        for batch in batches:
            yield pa.RecordBatch.from_pylist([{"pid": os.getppid()} for _ in range(batch.num_rows)])

    with local_session(cores=1, shuffle_partitions=1) as spark:
        rdd_parent, forensics_loaded, dataset_loaded = spark.sparkContext.parallelize([0], 1).map(parent).collect()[0]
        arrow_parents = {row["pid"] for row in spark.range(0, 1, 1, 1).mapInArrow(parents, "pid long").collect()}
    assert arrow_parents == {rdd_parent}
    assert rdd_parent != os.getpid()  # a forked worker's daemon, not this process
    assert forensics_loaded and dataset_loaded
