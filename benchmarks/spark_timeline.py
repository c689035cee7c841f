"""Timeline of one `kdissect spark` run from Spark's event log and its manifest.

    mkdir -p /tmp/conf /tmp/events
    printf 'spark.eventLog.enabled true\\nspark.eventLog.dir file:///tmp/events\\nspark.eventLog.compress false\\n' \\
        > /tmp/conf/spark-defaults.conf
    SPARK_CONF_DIR=/tmp/conf python -m kdissect spark ARCHIVE -o OUT --master 'local[2]' --overwrite
    python benchmarks/spark_timeline.py /tmp/events/local-NNNN OUT/manifest.json [--slots 2]

Prints, in seconds from the start of `run_job` (the manifest's `seconds`
before the manifest file's modification time): the manifest's steps, each
Spark job and stage (start, end, tasks), each task (start, end, the slot it
ran in: a slot is taken by the first task launched after it came free), and
the idle slot-seconds of the run between the first job's start and the
manifest: inside stages (slots waiting on the stage's last tasks), between
jobs (the driver's own steps) and after the last job. The event log costs
start-up time: use it for where the time goes, not for totals.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass, field


@dataclass
class Task:
    stage: int
    index: int
    start: float
    end: float
    slot: int = -1


@dataclass
class Stage:
    stage_id: int
    name: str
    tasks: int
    start: float = 0.0
    end: float = 0.0
    ran: list[Task] = field(default_factory=list)


def read_events(path: str) -> tuple[list[tuple[int, float, float, list[int]]], dict[int, Stage]]:
    """(job id, start, end, stage ids) of each job and the stages by id, times in epoch seconds."""
    jobs: dict[int, list] = {}
    stages: dict[int, Stage] = {}
    with open(path) as lines:
        for line in lines:
            event = json.loads(line)
            kind = event["Event"]
            if kind == "SparkListenerJobStart":
                jobs[event["Job ID"]] = [event["Submission Time"] / 1e3, None, event["Stage IDs"]]
            elif kind == "SparkListenerJobEnd":
                jobs[event["Job ID"]][1] = event["Completion Time"] / 1e3
            elif kind == "SparkListenerStageCompleted":
                info = event["Stage Info"]
                stage = stages.setdefault(info["Stage ID"], Stage(info["Stage ID"], info["Stage Name"],
                                                                  info["Number of Tasks"]))
                stage.start = info["Submission Time"] / 1e3
                stage.end = info["Completion Time"] / 1e3
            elif kind == "SparkListenerTaskEnd":
                info = event["Task Info"]
                stage = stages.setdefault(event["Stage ID"], Stage(event["Stage ID"], "", 0))
                stage.ran.append(Task(event["Stage ID"], info["Index"], info["Launch Time"] / 1e3,
                                      info["Finish Time"] / 1e3))
    return [(job, start, end, ids) for job, (start, end, ids) in sorted(jobs.items())], stages


def place(tasks: list[Task], slots: int) -> None:
    """Each task's slot: the lowest one free when it was launched."""
    free_at = [float("-inf")] * slots
    for task in sorted(tasks, key=lambda t: (t.start, t.end)):
        candidates = [slot for slot in range(slots) if free_at[slot] <= task.start + 1e-3] or [
            min(range(slots), key=lambda slot: free_at[slot])]
        task.slot = candidates[0]
        free_at[task.slot] = task.end


def busy_between(tasks: list[Task], start: float, end: float) -> float:
    return sum(max(0.0, min(task.end, end) - max(task.start, start)) for task in tasks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("event_log")
    parser.add_argument("manifest")
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--tasks", action="store_true", help="print every task")
    parser.add_argument("--stamps", help="a log of '@EPOCH_SECONDS message' lines (the driver's steps) to print "
                                         "relative to the run's start")
    args = parser.parse_args()
    manifest = json.load(open(args.manifest))
    origin = os.stat(args.manifest).st_mtime - manifest["seconds"]
    jobs, stages = read_events(args.event_log)
    tasks = [task for stage in stages.values() for task in stage.ran]
    place(tasks, args.slots)

    def at(moment: float) -> str:
        return f"{moment - origin:6.2f}"

    print("manifest steps:", ", ".join(f"{step} {seconds}" for step, seconds in manifest["seconds_since_start_at"].items()),
          f"| end {manifest['seconds']}")
    for job, start, end, ids in jobs:
        print(f"job {job}: {at(start)} -> {at(end)} ({end - start:.2f} s)")
        for stage_id in ids:
            stage = stages.get(stage_id)
            if stage is None or not stage.ran:
                continue
            ran = sorted(stage.ran, key=lambda t: t.start)
            durations = sorted((t.end - t.start for t in ran), reverse=True)
            last_start = max(t.start for t in ran)
            lone_tail = stage.end - max(t.end for t in ran if t.end < max(x.end for x in ran)) if len(ran) > 1 else 0.0
            idle = args.slots * (stage.end - stage.start) - busy_between(ran, stage.start, stage.end)
            print(f"  stage {stage_id} {stage.name[:40]!r}: {at(stage.start)} -> {at(stage.end)} "
                  f"({stage.end - stage.start:.2f} s), {len(ran)} tasks, longest {', '.join(f'{d:.2f}' for d in durations[:4])}"
                  f"; last launched {at(last_start)}; one slot alone at the end {lone_tail:.2f} s; idle slot-s {idle:.2f}")
            if args.tasks:
                for t in ran:
                    print(f"    task {t.index:3d} slot {t.slot}: {at(t.start)} -> {at(t.end)} ({t.end - t.start:.2f} s)")
    if args.stamps:
        for line in open(args.stamps):
            if line.startswith("@"):
                moment, _, message = line[1:].partition(" ")
                print(f"  driver {at(float(moment))} {message.rstrip()}")
    first = min(start for _, start, _, _ in jobs)
    last = max(end for _, _, end, _ in jobs)
    end = origin + manifest["seconds"]
    in_jobs = 0.0
    between = 0.0
    previous_end = None
    for _, start, finish, _ in sorted(jobs, key=lambda j: j[1]):
        if previous_end is not None and start > previous_end:
            between += args.slots * (start - previous_end) - busy_between(tasks, previous_end, start)
        span_start = max(start, previous_end) if previous_end is not None else start
        if finish > span_start:
            in_jobs += args.slots * (finish - span_start) - busy_between(tasks, span_start, finish)
        previous_end = finish if previous_end is None else max(previous_end, finish)
    after = args.slots * (end - last)
    total = args.slots * (end - first) - busy_between(tasks, first, end)
    print(f"from the first job ({at(first)}) to the manifest ({at(end)}): {end - first:.2f} s; idle slot-s {total:.2f}: "
          f"inside jobs {in_jobs:.2f}, between jobs {between:.2f}, after the last job {after:.2f}; "
          f"task time {busy_between(tasks, first, end):.2f} slot-s")


if __name__ == "__main__":
    main()
