"""Proof that no task touches the driver's disk: a standalone Spark cluster
(master and two workers from pyspark's spark-class, tools/lab/spark_cluster.py)
whose workers run as `nobody`, who can neither read the local copies of the
captures nor write anything of the driver's user. The captures live only in
HDFS (MiniDFSCluster, through WebHDFS), then only in S3 (SeaweedFS); the
tables go to the same store and must equal `kdissect export` on the local
copies (rows and columns), with the packet count tshark gives."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kdissect.model.exchange import SCHEMA
from tests.support.spark import REPO, canonical, export_rows, tshark_frame_count, write_mixed_archive

pytestmark = [pytest.mark.slow, pytest.mark.minutes]

WORKER_USER = "nobody"


@pytest.fixture(scope="module")
def cluster():
    if os.geteuid() != 0:
        pytest.fail("the cluster proof runs its workers as another user: it needs root (setpriv)")
    from tools.lab.spark_cluster import standalone_cluster

    with standalone_cluster(workers=2, user=WORKER_USER) as running:
        yield running


@pytest.fixture(scope="module")
def archive(tmp_path_factory, captures_dir):
    """Local copies in a directory only the driver's user may enter."""
    local = tmp_path_factory.mktemp("private-archive")
    local.chmod(0o700)
    write_mixed_archive(captures_dir, local)
    captures = sorted(p for p in local.rglob("*") if p.is_file())
    # the workers' user cannot read them, nor write beside them
    for probe in (["test", "-r", str(captures[0])], ["touch", str(local / "probe")]):
        assert subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", *probe],
                              capture_output=True).returncode != 0
    expected = export_rows(captures, local / "export.parquet")
    assert expected
    return local, captures, expected


def _run_on_cluster(cluster, inputs: str, outdir: str, env: dict[str, str], local_out) -> None:
    env = dict(env, PYTHONPATH=str(REPO), SPARK_CONF_DIR=str(cluster.conf_dir))
    done = subprocess.run([sys.executable, "-m", "kdissect", "spark", inputs, "-o", outdir, "--master",
                           cluster.master, "--split-size", "96k"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-4000:] + cluster.logs()[-4000:]
    assert not local_out.exists()


def _check(tree, captures, expected) -> None:
    import pyarrow.dataset as ds

    assert tree.exists("_SUCCESS")
    manifest = json.loads(tree.read_bytes("manifest.json"))
    by_name = {entry["name"]: entry for entry in manifest["inputs"]}
    assert by_name["big.pcap"]["read_tasks"] >= 3 and by_name["group.pcapng"]["format"] == "pcapng"
    assert manifest["master"].startswith("spark://")
    assert manifest["read"]["packets"] == sum(tshark_frame_count(p) for p in captures)
    table = ds.dataset(tree.path("exchanges"), filesystem=tree.fs, format="parquet").to_table()
    assert [(f.name, f.type) for f in table.schema] == [(f.name, f.type) for f in SCHEMA]
    assert canonical(table.to_pylist()) == canonical(expected)
    assert manifest["counts"]["exchanges"] == manifest["accounting"]["exchanges"] == len(expected)


def run_in_hdfs(cluster, archive, tmp_path, scheme: str, env: dict[str, str]) -> None:
    """The archive uploaded to a fresh HDFS, the job run on the cluster from
    and to `scheme` ("webhdfs" or "rpc": the HDFS address the job is given),
    the tables read back through WebHDFS (a second client) and checked."""
    from kdissect.shared.outdir_tree import Tree
    from tools.lab.hdfs import hdfs_cluster, upload

    local, captures, expected = archive
    with hdfs_cluster() as hdfs:
        for path in captures:
            upload(hdfs, path, f"/captures/{path.relative_to(local)}")
        address = getattr(hdfs, scheme)
        _run_on_cluster(cluster, f"{address}/captures", f"{address}/lake", env, tmp_path / "lake")
        os.environ["HADOOP_USER_NAME"] = "root"
        try:
            _check(Tree(f"{hdfs.webhdfs}/lake"), captures, expected)
        finally:
            del os.environ["HADOOP_USER_NAME"]


def test_captures_only_in_hdfs(cluster, archive, tmp_path):
    run_in_hdfs(cluster, archive, tmp_path, "webhdfs", dict(os.environ, HADOOP_USER_NAME="root"))


def test_captures_only_in_s3(cluster, archive, tmp_path):
    from kdissect.wire import stores
    from kdissect.shared.outdir_tree import Tree
    from tools.lab.seaweedfs import s3_server

    local, captures, expected = archive
    with s3_server() as s3:
        s3.make_bucket("captures")
        for path in captures:
            s3.upload(path, f"captures/archive/{path.relative_to(local)}")
        env = s3.env("writer")
        # (beside the captures, not around them: an OUTDIR inside an input is refused)
        _run_on_cluster(cluster, "s3://captures/archive/", "s3a://captures/lake", env, tmp_path / "lake")
        access, secret = s3.keys["writer"]
        stores.configure(stores.StoreSettings(stores.S3Settings(endpoint=s3.endpoint, access_key=access,
                                                                secret_key=secret)))
        try:
            _check(Tree("s3a://captures/lake"), captures, expected)
        finally:
            stores.configure(stores.StoreSettings())
