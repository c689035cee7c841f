"""hdfs:// (libhdfs over JNI) on the standalone cluster whose workers run as
`nobody`: the workers' nodes have a Hadoop client installed where that user
can read it (libhdfs.so, Hadoop's client jars on CLASSPATH, the system's
JDK), and nothing of the driver's: neither the local copies of the captures
nor the lab cache nor the local output folder. The captures live only in
HDFS (MiniDFSCluster); the tables go there too and must equal `kdissect
export` on the local copies, with the packet count tshark gives."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.spark.test_cluster_stores import WORKER_USER, archive, run_in_hdfs  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.slow, pytest.mark.minutes]


@pytest.fixture(scope="module")
def node_client():
    """The Hadoop client install of the workers' nodes, outside the driver user's home."""
    from tools.lab.libhdfs import node_install

    directory = Path(tempfile.mkdtemp(prefix="hadoop-client-"))
    try:
        env = node_install(directory)
        # the workers' user reads it
        for path in (Path(env["ARROW_LIBHDFS_DIR"]) / "libhdfs.so", *env["CLASSPATH"].split(":")):
            assert subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
                                   "test", "-r", str(path)]).returncode == 0, path
        yield env
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(node_client):
    if os.geteuid() != 0:
        pytest.fail("the cluster proof runs its workers as another user: it needs root (setpriv)")
    from tools.lab.spark_cluster import standalone_cluster

    with standalone_cluster(workers=2, user=WORKER_USER, node_env=node_client) as running:
        yield running


def test_captures_only_in_hdfs_read_through_libhdfs(cluster, archive, tmp_path):  # noqa: F811
    from tools.lab.libhdfs import build, client_env

    lab_cache = build()  # (not readable by the workers' user)
    assert subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
                           "test", "-r", str(lab_cache / "libhdfs.so")]).returncode != 0
    # the driver (this machine's user) has its own client: the lab's
    env = client_env(dict(os.environ, HADOOP_USER_NAME="root"))
    run_in_hdfs(cluster, archive, tmp_path, "rpc", env)
