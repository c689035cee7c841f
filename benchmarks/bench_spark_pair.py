"""Two checkouts' one-core Spark jobs at the same time, each on its own CPU.

    python3 benchmarks/bench_spark_pair.py ARCHIVE --checkout OTHER [--pairs 6] [-- SPARK OPTIONS...]

`kdissect spark ARCHIVE --master local[1] --no-forensic-tables` of this
script's checkout and of OTHER (each with its compiled build) start
together, each process tree confined to one of CPUs 0 and 1, and the CPUs
swap every pair. Both runs meet the machine's fast and slow phases alike,
which runs one after another do not (this machine's speed moves by a fifth
to a half within minutes). Printed per pair: each run's CPU seconds of its
whole process tree (start-up included; sampled from /proc as bench_spark.py
does) and OTHER's over this checkout's; then the median and range of those
ratios. Needs two CPUs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_spark import _tree_cpu  # noqa: E402  (the same CPU sampling)

REPO = HERE.parent


def run(checkout: Path, archive: str, outdir: Path, cpu: int, extra: list[str]) -> tuple[float, float]:
    """(wall, CPU seconds) of one job of `checkout`, its process tree on `cpu`."""
    command = [sys.executable, "-m", "kdissect", "spark", archive, "-o", str(outdir), "--master", "local[1]",
               "--overwrite", "--no-forensic-tables", *extra]
    env = dict(os.environ, PYTHONPATH=str(checkout))
    seen: dict[int, float] = {}
    started = time.monotonic()
    with open(outdir.with_suffix(".log"), "w") as log:
        child = subprocess.Popen(command, cwd=checkout, env=env, stdout=log, stderr=subprocess.STDOUT,
                                 preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
        while child.poll() is None:
            _tree_cpu(child.pid, seen)
            time.sleep(0.1)
    if child.returncode:
        raise SystemExit(f"{checkout}: kdissect spark exited {child.returncode} (see {outdir.with_suffix('.log')})")
    return time.monotonic() - started, sum(seen.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("archive")
    parser.add_argument("--checkout", type=Path, required=True, help="the other kdissect checkout")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--out", type=Path, default=HERE / "out" / "spark_pair")
    parser.add_argument("extra", nargs="*", help="more kdissect spark options (after --)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if "://" not in args.archive:  # (each job runs in its own checkout)
        args.archive = str(Path(args.archive).resolve())
    checkouts = {"this": REPO, "other": args.checkout.resolve()}
    ratios = []
    for pair in range(args.pairs):
        cpus = {"this": pair % 2, "other": 1 - pair % 2}
        found: dict[str, tuple[float, float]] = {}

        def one(name: str) -> None:
            found[name] = run(checkouts[name], args.archive, args.out / name, cpus[name], args.extra)

        threads = [threading.Thread(target=one, args=(name,)) for name in checkouts]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if len(found) < 2:
            raise SystemExit("a run failed")
        ratio = found["other"][1] / found["this"][1]
        ratios.append(ratio)
        print(f"pair {pair + 1}: this (CPU {cpus['this']}) {found['this'][1]:.2f} s, other (CPU {cpus['other']}) "
              f"{found['other'][1]:.2f} s: other / this {ratio:.3f}", flush=True)
    print(f"other / this, CPU of the whole job: median {statistics.median(ratios):.3f} "
          f"(range {min(ratios):.3f}-{max(ratios):.3f}, {len(ratios)} pairs)")


if __name__ == "__main__":
    main()
