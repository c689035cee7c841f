"""Captures in a real HDFS (Hadoop's MiniDFSCluster, tools/lab/hdfs.py), read
by the Spark job through WebHDFS (webhdfs://) and its tables written back
there. Expected tables come from `kdissect export` on local copies."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess

import pytest

from kdissect.spark.job import JobOptions, run_job
from kdissect.shared.outdir_tree import Tree
from tests.support.spark import canonical, editcap_split, export_rows, local_session, tshark_frame_count

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]


@pytest.fixture(scope="module")
def hdfs():
    from tools.lab.hdfs import hdfs_cluster

    with hdfs_cluster() as cluster:
        yield cluster


@pytest.fixture(scope="module")
def spark():
    with local_session(cores=2, shuffle_partitions=4) as session:
        yield session


def test_job_from_hdfs_to_hdfs_equals_export(spark, hdfs, captures_dir, tmp_path):
    import pyarrow.dataset as ds

    from tools.lab.hdfs import upload

    local = tmp_path / "archive"
    local.mkdir()
    source = max(captures_dir.glob("*.pcap"), key=lambda p: p.stat().st_size)
    shutil.copy(source, local / "big.pcap")
    subprocess.run(["editcap", "-F", "pcapng", str(captures_dir / "consume_group.pcap"), str(local / "group.pcapng")],
                   check=True, capture_output=True)
    (local / "admin.pcap.gz").write_bytes(gzip.compress((captures_dir / "admin.pcap").read_bytes()))
    rotated_source = captures_dir / "consume_group_kafka.pcap"
    editcap_split(rotated_source, max(2, tshark_frame_count(rotated_source) // 4), local / "rotated")
    captures = sorted(p for p in local.rglob("*") if p.is_file())
    for path in captures:
        upload(hdfs, path, f"/captures/{path.relative_to(local)}")
    outdir = f"{hdfs.webhdfs}/lake/kafka"
    split_size = max(4096, (local / "big.pcap").stat().st_size // 4)
    run_job(JobOptions(inputs=[f"{hdfs.webhdfs}/captures"], outdir=outdir, master=None, split_size=split_size),
            spark=spark)
    tree = Tree(outdir)
    assert tree.exists("_SUCCESS") and not tree.exists("_work") and not tree.exists("_KDISSECT_RUNNING")
    manifest = json.loads(tree.read_bytes("manifest.json"))
    by_name = {entry["name"]: entry for entry in manifest["inputs"]}
    assert by_name["big.pcap"]["read_tasks"] >= 3 and by_name["admin.pcap.gz"]["read_tasks"] == 1
    assert manifest["files_read_whole_after_boundary_check"] == []
    assert manifest["read"]["packets"] == sum(tshark_frame_count(p) for p in captures)
    expected = export_rows(captures, tmp_path / "export.parquet")
    lake = ds.dataset(tree.path("exchanges"), filesystem=tree.fs, format="parquet", partitioning="hive")
    got = lake.to_table().drop_columns(["capture_date"]).to_pylist()
    assert expected and canonical(got) == canonical(expected)
    assert manifest["counts"]["exchanges"] == len(expected)
