"""Where a `kdissect spark` run's CPU goes: by process, thread and phase.

    python benchmarks/spark_cpu_sampler.py [--event-log DIR] [--json OUT] -- \
        taskset -c 0 python -m kdissect spark ARCHIVE -o OUT --master 'local[1]' --overwrite

Runs the command and reads its whole process tree's threads from
/proc/PID/task/TID/stat every --interval seconds (user + system ticks of each
thread). Each thread is put in a group: the Python driver (the tree's first
Python process), the worker daemon, the Python workers (the daemon's
children), and the JVM's threads by name (compiler, GC and VM, executor
task threads, py4j connection threads, the rest). Phases are cut at the
job's own log lines (`kdissect: ...` on stderr, timed as they arrive) and,
with --event-log DIR (Spark's event log, `spark.eventLog.enabled`, e.g.
through SPARK_CONF_DIR), at each stage's submission and completion.

The sampler itself is not in the tree: run it on another CPU than the job
(it reads /proc, a few ms a sample). A thread's CPU after its last sample
is lost (a process that exits less than an interval after it worked).
Output: a table of groups by phase on stdout; with --json the same as JSON.
(Written for branch spark-fixed's figures, benchmarks/README.md.)
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench_files import write_result

TICK = os.sysconf("SC_CLK_TCK")


def _stat(path: str) -> tuple[str, int, int] | None:
    """(comm, ppid, user + system ticks) of /proc/.../stat."""
    try:
        with open(path, "rb") as f:
            data = f.read().decode(errors="replace")
    except OSError:
        return None
    close = data.rfind(")")
    comm = data[data.find("(") + 1:close]
    fields = data[close + 2:].split()
    return comm, int(fields[1]), int(fields[11]) + int(fields[12])


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _thread_group(thread_comm: str, role: str) -> str:
    if role == "jvm":
        if thread_comm.startswith(("C1 Compiler", "C2 Compiler")):
            return "jvm compiler"
        if thread_comm.startswith(("GC Thread", "G1 ", "VM Thread", "VM Periodic")):
            return "jvm gc+vm"
        if thread_comm.startswith("Executor task") or thread_comm.startswith("Executor"):
            return "jvm executor tasks"
        if thread_comm.startswith("Thread-"):
            return "jvm py4j threads"
        if thread_comm in ("java", "main") or not thread_comm:
            return "jvm main"
        return "jvm other"
    return role


class Sampler:
    def __init__(self, root: int, interval: float) -> None:
        self.root = root
        self.interval = interval
        self.samples: list[tuple[float, dict[tuple[int, int], int]]] = []
        self.groups: dict[tuple[int, int], str] = {}
        self.roles: dict[int, str] = {}
        self.parents: dict[int, int] = {}
        self.known: set[int] = set()
        self.comms: dict[int, str] = {}
        self.stop = False

    def _tree(self) -> list[int]:
        children: dict[int, list[int]] = {}
        self.parents = {}
        for path in glob.glob("/proc/[0-9]*/stat"):
            found = _stat(path)
            if found is not None:
                pid = int(path.split("/")[2])
                children.setdefault(found[1], []).append(pid)
                self.parents[pid] = found[1]
        # a process once in the tree stays in it (the JVM is re-parented when its launcher exits)
        tree, todo = [], [self.root, *(pid for pid in self.known if pid in self.parents)]
        while todo:
            pid = todo.pop()
            if pid in self.known and pid in tree:
                continue
            tree.append(pid)
            self.known.add(pid)
            todo.extend(children.get(pid, ()))
        return tree

    def _role(self, pid: int) -> str:
        role = self.roles.get(pid)
        if role is None:
            command = _cmdline(pid)
            words = command.split()
            if not words or not any(name in words[0] for name in ("java", "python")):
                return "other"  # not exec'd yet (taskset, a launcher script): asked again at the next sample
            parent = self.roles.get(self.parents.get(pid, -1))
            if words[0].endswith("java"):
                role = "jvm"
            elif parent in ("python daemon", "python workers"):
                role = "python workers"  # forked by the daemon (same command line)
            elif "worker_daemon" in command or "pyspark.daemon" in command:
                role = "python daemon"
            elif "python" in words[0] and "kdissect" in command and parent != "jvm":
                role = "python driver"
            elif "python" in words[0]:
                role = "python other"
            else:
                role = "other"
            self.roles[pid] = role
        return role

    def sample(self) -> None:
        now = time.time()
        ticks: dict[tuple[int, int], int] = {}
        for pid in self._tree():
            role = self._role(pid)
            process = _stat(f"/proc/{pid}/stat")
            if process is None:
                continue
            for path in glob.glob(f"/proc/{pid}/task/[0-9]*/stat"):
                found = _stat(path)
                if found is None:
                    continue
                tid = int(path.split("/")[4])
                key = (pid, tid)
                if self.groups.get(key, "other") == "other":
                    self.groups[key] = _thread_group(found[0], role)
                ticks[key] = found[2]
        self.samples.append((now, ticks))

    def run(self) -> None:
        while not self.stop:
            self.sample()
            time.sleep(self.interval)


def _at(samples: list[tuple[float, dict]], when: float) -> dict[tuple[int, int], int]:
    """Each thread's ticks at the last sample at or before `when` (threads
    keep their last value once gone)."""
    seen: dict[tuple[int, int], int] = {}
    for stamp, ticks in samples:
        if stamp > when:
            break
        seen.update(ticks)
    return seen


def _stages(directory: str, since: float) -> list[tuple[str, float, float]]:
    """(name, start, end) of each stage in the newest event log written after `since`."""
    logs = [p for p in Path(directory).glob("*") if p.stat().st_mtime >= since]
    if not logs:
        return []
    newest = max(logs, key=lambda p: p.stat().st_mtime)
    parts = sorted(newest.glob("events_*")) if newest.is_dir() else [newest]  # (a rolling log's directory)
    stages = []
    for line in (line for part in parts for line in part.read_text().splitlines()):
        event = json.loads(line)
        if event.get("Event") == "SparkListenerStageCompleted":
            info = event["Stage Info"]
            stages.append((f"stage {info['Stage ID']} ({info['Number of Tasks']} tasks)",
                           info["Submission Time"] / 1000, info["Completion Time"] / 1000))
    return sorted(stages, key=lambda s: s[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval", type=float, default=0.05)
    parser.add_argument("--event-log", help="Spark event log directory (stage times)")
    parser.add_argument("--json", help="write the figures here too")
    parser.add_argument("--processes", action="store_true", help="also list each process, its group and CPU")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    started = time.time()
    process = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    marks: list[tuple[float, str]] = [(started, "start")]

    def read_log() -> None:
        for line in process.stderr:  # type: ignore[union-attr]
            if line.startswith("kdissect: "):
                marks.append((time.time(), line[10:].strip()[:60]))

    reader = threading.Thread(target=read_log, daemon=True)
    reader.start()
    sampler = Sampler(process.pid, args.interval)
    thread = threading.Thread(target=sampler.run, daemon=True)
    thread.start()
    code = process.wait()
    sampler.sample()
    sampler.stop = True
    thread.join()
    reader.join(timeout=5)
    ended = time.time()
    cuts = list(marks)
    if args.event_log:
        for name, start, end in _stages(args.event_log, started):
            cuts.append((start, f"{name} begins"))
            cuts.append((end, f"{name} ends"))
    cuts.sort()
    cuts.append((ended, "exit"))
    groups = sorted(set(sampler.groups.values()))
    phases: list[dict[str, Any]] = []
    before = _at(sampler.samples, cuts[0][0])
    for (start, name), (end, _) in zip(cuts, cuts[1:]):
        after = _at(sampler.samples, end) if end < ended else _at(sampler.samples, float("inf"))
        by_group = {group: 0.0 for group in groups}
        for key, ticks in after.items():
            by_group[sampler.groups[key]] += (ticks - before.get(key, 0)) / TICK
        phases.append({"phase": name, "wall": end - start, "cpu": by_group})
        before = after
    totals = {group: sum(phase["cpu"][group] for phase in phases) for group in groups}
    print(f"{'phase (from)':<62} {'wall':>6} {'cpu':>6}  " + " ".join(groups))
    for phase in phases:
        print(f"{phase['phase']:<62} {phase['wall']:6.2f} {sum(phase['cpu'].values()):6.2f}  "
              + " ".join(f"{phase['cpu'][g]:>{len(g)}.2f}" for g in groups))
    print(f"{'total':<62} {ended - started:6.2f} {sum(totals.values()):6.2f}  "
          + " ".join(f"{totals[g]:>{len(g)}.2f}" for g in groups))
    if args.processes:
        last = _at(sampler.samples, float("inf"))
        for pid, role in sampler.roles.items():
            cpu = sum(t for (p, _), t in last.items() if p == pid) / TICK
            print(pid, sampler.parents.get(pid), role, f"{cpu:.2f}", _cmdline(pid)[:80])
    if args.json:
        write_result(args.json, json.dumps({"command": command, "rc": code, "wall": ended - started,
                                            "totals": totals, "phases": phases}, indent=1))
    sys.exit(code)


if __name__ == "__main__":
    main()
