"""A real HDFS for the store tests: Apache Hadoop's MiniDFSCluster (one
NameNode, one DataNode) from `org.apache.hadoop:hadoop-client-minicluster`
on Maven Central, the version of pyspark's bundled Hadoop client.

    with hdfs_cluster() as hdfs:
        hdfs.webhdfs          # "webhdfs://127.0.0.1:HTTP_PORT" (the REST face kdissect's tests use)
        hdfs.rpc              # "hdfs://127.0.0.1:RPC_PORT" (libhdfs, Spark's JVM)

Started from a tiny Java main (tools/lab/java/MiniHdfs.java, compiled once
and cached beside the jars); it prints READY when the DataNode has
registered and stops when its standard input closes.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from tools.lab import maven
from tools.lab.net import LabError, free_port

SOURCE = Path(__file__).resolve().parent / "java" / "MiniHdfs.java"


def hadoop_version() -> str:
    """The Hadoop client version pyspark bundles (hadoop-client-api-X.Y.Z.jar)."""
    import pyspark

    found = glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "hadoop-client-api-*.jar"))
    if not found:
        raise LabError("pyspark bundles no hadoop-client-api jar")
    return Path(found[0]).name.removeprefix("hadoop-client-api-").removesuffix(".jar")


def minicluster_jars(version: str | None = None) -> list[Path]:
    version = version or hadoop_version()
    return maven.resolve(f"hadoop-minicluster-{version}", [
        f"org.apache.hadoop:hadoop-client-minicluster:{version}",
        f"org.apache.hadoop:hadoop-client-runtime:{version}",
        f"org.apache.hadoop:hadoop-client-api:{version}",
    ])


def compiled_classes(version: str | None = None) -> Path:
    version = version or hadoop_version()
    return maven.compile_java(SOURCE, minicluster_jars(version), f"hadoop-minicluster-{version}")


@dataclass
class Hdfs:
    rpc: str
    webhdfs: str
    directory: Path


@contextlib.contextmanager
def hdfs_cluster(timeout: float = 180.0) -> Iterator[Hdfs]:
    version = hadoop_version()
    classpath = ":".join([str(compiled_classes(version)), *map(str, minicluster_jars(version))])
    directory = Path(tempfile.mkdtemp(prefix="minihdfs-"))
    rpc_port, http_port = free_port(), free_port()
    java = shutil.which("java") or "java"
    cmd = [java, "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", classpath, "MiniHdfs",
           str(directory / "data"), str(rpc_port), str(http_port)]
    log_path = directory / "minihdfs.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, start_new_session=True)
    ready = threading.Event()
    first_line: list[bytes] = []

    def watch() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(b"READY"):
                first_line.append(line)
                ready.set()

    threading.Thread(target=watch, daemon=True).start()
    try:
        if not ready.wait(timeout):
            raise LabError(f"MiniDFSCluster not ready after {timeout:.0f}s:\n"
                           f"{log_path.read_text(errors='replace')[-3000:]}")
        yield Hdfs(f"hdfs://127.0.0.1:{rpc_port}", f"webhdfs://127.0.0.1:{http_port}", directory)
    finally:
        with contextlib.suppress(OSError):
            proc.stdin.close()  # type: ignore[union-attr]
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
        shutil.rmtree(directory, ignore_errors=True)


def upload(hdfs: Hdfs, local: str | os.PathLike, path: str) -> None:
    """Copy a local file to `path` (absolute) in the cluster, through WebHDFS."""
    from kdissect.shared.outdir_tree import Tree

    Tree(hdfs.webhdfs + "/").write_bytes(Path(local).read_bytes(), path.lstrip("/"))
