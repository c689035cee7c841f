"""A standalone Spark cluster on loopback from pyspark's own `spark-class`:
one master and N workers, the workers (and so the executors and their Python
workers) running as an unprivileged user.

    with standalone_cluster(workers=2, user="nobody") as cluster:
        cluster.master        # "spark://127.0.0.1:PORT"

Running the workers as another user is how the store tests prove that no
task touches the driver's disk: that user can neither read the local copies
of the captures nor write the local output folder (the caller makes them
private to its own user). Needs root for `setpriv` to change user; without
root, the workers run as the caller (and prove less).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from tools.lab.net import LabError, free_port, stop_process, wait_for_listener


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@dataclass
class Cluster:
    master: str
    web_ui: str
    directory: Path
    worker_user: str | None

    @property
    def conf_dir(self) -> Path:
        """Spark configuration for the jobs a driver submits here (give it as
        SPARK_CONF_DIR): the executors' JVM options."""
        return self.directory / "conf"

    def logs(self) -> str:
        return "\n".join(f"== {p.name}\n{p.read_text(errors='replace')[-2000:]}"
                         for p in sorted(self.directory.glob("*.log")))


def _alive_workers(web_ui: str) -> int:
    import json

    try:
        with urllib.request.urlopen(web_ui + "/json/", timeout=2) as answer:
            state = json.loads(answer.read())
    except (OSError, ValueError):
        return 0
    return sum(1 for worker in state.get("workers", []) if worker.get("state") == "ALIVE")


@contextlib.contextmanager
def standalone_cluster(workers: int = 2, cores: int = 1, memory: str = "1g", user: str | None = "nobody",
                       timeout: float = 120.0, node_env: dict[str, str] | None = None) -> Iterator[Cluster]:
    """`node_env`: variables of the workers' nodes (what is installed there,
    e.g. a Hadoop client: tools.lab.libhdfs.node_install), which their
    executors and Python workers inherit."""
    home = spark_home()
    spark_class = home / "bin" / "spark-class"
    if not spark_class.exists():
        raise LabError(f"{spark_class} is missing: pyspark ships spark-class in its bin/")
    directory = Path(tempfile.mkdtemp(prefix="spark-cluster-"))
    directory.chmod(0o755)
    port, ui_port = free_port(), free_port()
    # C1-only JIT for the master, the workers and (through the jobs' conf) the
    # executors, as kdissect's local driver runs: six JVMs start on the lab's
    # two CPUs, and C2's compiler threads slowed them all (a cluster test's
    # job took 41 s instead of 49 s with the executors' option)
    quick_jit = "-XX:TieredStopAtLevel=1"
    (directory / "conf").mkdir()
    (directory / "conf" / "spark-defaults.conf").write_text(f"spark.executor.extraJavaOptions {quick_jit}\n")
    env = dict(os.environ, SPARK_HOME=str(home), SPARK_NO_DAEMONIZE="1", SPARK_LOG_DIR=str(directory),
               SPARK_DAEMON_JAVA_OPTS=quick_jit)
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    processes: list[subprocess.Popen] = []
    switch: list[str] = []
    if user is not None and os.geteuid() == 0:
        entry = pwd.getpwnam(user)
        switch = [shutil.which("setpriv") or "setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}",
                  "--clear-groups", "--"]
    else:
        user = None
    try:
        with open(directory / "master.log", "wb") as log:
            processes.append(subprocess.Popen(
                [str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(port), "--webui-port", str(ui_port)],
                env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True))
        wait_for_listener("127.0.0.1", port, timeout)
        master = f"spark://127.0.0.1:{port}"
        for index in range(workers):
            work = directory / f"worker-{index}"
            work.mkdir()
            if user is not None:
                entry = pwd.getpwnam(user)
                os.chown(work, entry.pw_uid, entry.pw_gid)
            worker_env = dict(env, HOME=str(work), SPARK_LOG_DIR=str(work), XDG_CACHE_HOME=str(work / "cache"),
                              SPARK_WORKER_DIR=str(work / "apps"), TMPDIR=str(work), **(node_env or {}))
            with open(directory / f"worker-{index}.log", "wb") as log:
                processes.append(subprocess.Popen(
                    [*switch, str(spark_class), "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                     "--cores", str(cores), "--memory", memory, "--webui-port", "0",
                     "--work-dir", str(work / "apps"), master],
                    env=worker_env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True, cwd=work))
        web_ui = f"http://127.0.0.1:{ui_port}"
        deadline = time.monotonic() + timeout
        cluster = Cluster(master, web_ui, directory, user)
        while _alive_workers(web_ui) < workers:
            if time.monotonic() > deadline or any(p.poll() is not None for p in processes):
                raise LabError(f"the standalone cluster did not get {workers} workers:\n{cluster.logs()}")
            time.sleep(0.5)
        yield cluster
    finally:
        for proc in reversed(processes):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 15)
            stop_process(proc, 15, timeout=20)
        shutil.rmtree(directory, ignore_errors=True)
