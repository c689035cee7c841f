"""Captures in a real HDFS (Hadoop's MiniDFSCluster, tools/lab/hdfs.py), read
by the Spark job through WebHDFS (webhdfs://) and through HDFS's RPC
protocol (hdfs://: pyarrow's HadoopFileSystem over libhdfs, built by
tools/lab/libhdfs.py), and its tables written back there. Expected tables
come from `kdissect export` on local copies."""

from __future__ import annotations

import json

import pytest

from kdissect.spark.job import JobOptions, run_job
from kdissect.shared.outdir_tree import Tree
from tests.support.spark import canonical, export_rows, run_cli, tshark_frame_count, write_mixed_archive

pytestmark = [pytest.mark.slow, pytest.mark.minutes, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]


@pytest.fixture(scope="module")
def hdfs():
    from tools.lab.hdfs import hdfs_cluster

    with hdfs_cluster() as cluster:
        yield cluster


@pytest.fixture(scope="module")
def archive(hdfs, captures_dir, tmp_path_factory):
    """Local copies and their HDFS twins under /captures: one pcap cut into
    byte ranges, a pcapng, a gzip file and a rotated set whose connections
    span files."""
    from tools.lab.hdfs import upload

    local = tmp_path_factory.mktemp("archive")
    write_mixed_archive(captures_dir, local)
    captures = sorted(p for p in local.rglob("*") if p.is_file())
    for path in captures:
        upload(hdfs, path, f"/captures/{path.relative_to(local)}")
    expected = export_rows(captures, tmp_path_factory.mktemp("export") / "export.parquet")
    return local, captures, expected


def _check_lake(tree: Tree, local, captures, expected) -> None:
    """A committed OUTDIR whose exchanges equal `kdissect export` of the local copies."""
    import pyarrow.dataset as ds

    assert tree.exists("_SUCCESS") and not tree.exists("_work") and not tree.exists("_KDISSECT_RUNNING")
    manifest = json.loads(tree.read_bytes("manifest.json"))
    by_name = {entry["name"]: entry for entry in manifest["inputs"]}
    assert by_name["big.pcap"]["read_tasks"] >= 3 and by_name["admin.pcap.gz"]["read_tasks"] == 1
    assert manifest["files_read_whole_after_boundary_check"] == []
    assert manifest["read"]["packets"] == sum(tshark_frame_count(p) for p in captures)
    lake = ds.dataset(tree.path("exchanges"), filesystem=tree.fs, format="parquet", partitioning="hive")
    got = lake.to_table().drop_columns(["capture_date"]).to_pylist()
    assert expected and canonical(got) == canonical(expected)
    assert manifest["counts"]["exchanges"] == len(expected)


def test_job_from_hdfs_to_hdfs_equals_export(spark, hdfs, archive):
    local, captures, expected = archive
    outdir = f"{hdfs.webhdfs}/lake/kafka"
    split_size = max(4096, (local / "big.pcap").stat().st_size // 4)
    run_job(JobOptions(inputs=[f"{hdfs.webhdfs}/captures"], outdir=outdir, master=None, split_size=split_size),
            spark=spark)
    _check_lake(Tree(outdir), local, captures, expected)


# -- hdfs:// (HDFS's RPC protocol through libhdfs, tools/lab/libhdfs.py) ------------------------


@pytest.fixture(scope="module")
def libhdfs_env():
    """The environment of a node with a Hadoop client: libhdfs, a JDK, the Hadoop jars on CLASSPATH."""
    from tools.lab.libhdfs import client_env

    return client_env()


def test_spark_cli_from_hdfs_rpc_to_hdfs_rpc_equals_export(hdfs, archive, libhdfs_env):
    """`kdissect spark hdfs://... -o hdfs://...`: listing, ranged reads and the
    tables through libhdfs in the driver and the tasks; read back through
    WebHDFS (the other client)."""
    local, captures, expected = archive
    split_size = max(4096, (local / "big.pcap").stat().st_size // 4)
    done = run_cli(["spark", f"{hdfs.rpc}/captures", "-o", f"{hdfs.rpc}/lake/rpc", "--master", "local[2]",
                    "--split-size", str(split_size)], libhdfs_env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    _check_lake(Tree(f"{hdfs.webhdfs}/lake/rpc"), local, captures, expected)


def test_cli_export_reads_hdfs_rpc_like_local_paths(hdfs, archive, libhdfs_env, tmp_path):
    import pyarrow.parquet as pq

    local, captures, _expected = archive
    names = ["big.pcap", "group.pcapng", "admin.pcap.gz"]
    done = run_cli(["export", *(f"{hdfs.rpc}/captures/{name}" for name in names), "-o", str(tmp_path / "rpc.parquet"),
                    "--quiet"], libhdfs_env)
    assert done.returncode == 0, done.stderr[-3000:]
    got = pq.read_table(tmp_path / "rpc.parquet").to_pylist()
    assert got and canonical(got) == canonical(export_rows([local / name for name in names],
                                                           tmp_path / "local.parquet"))


def test_hdfs_rpc_errors_are_one_line(hdfs, libhdfs_env, tmp_path):
    missing = run_cli(["export", f"{hdfs.rpc}/captures/no-such.pcap", "-o", str(tmp_path / "x.parquet")],
                      libhdfs_env)
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1, missing.stderr[-2000:]
    assert f"{hdfs.rpc}/captures/no-such.pcap" in missing.stderr and "Traceback" not in missing.stderr
    assert not (tmp_path / "x.parquet").exists()
