#!/usr/bin/env python3
"""Peak memory of the summary verbs (stats, clients, report) against
`export`'s, on captures with many distinct client ids and with many
exchanges for few ids (issue #23, item 7).

    .venv/bin/python benchmarks/bench_summary_memory.py --rounds 3
    .venv/bin/python benchmarks/bench_summary_memory.py --rounds 3 --clients 300000 --exchanges 1000000

Inputs (made in benchmarks/out/ on the first run by manyclients.py):
`manyclients-<N>.pcap` (N distinct ids, one ApiVersions exchange each) and
`fewclients-<M>.pcap` (100 ids, M exchanges between them). Each round runs
every verb once, in turn, as a child process measured with `wait4` (peak
RSS); the median of the rounds is reported, with the ratio to export's
median, in `benchmarks/out/summary_memory.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUT = HERE / "out"
sys.path.insert(0, str(HERE))

from bench_files import write_result  # noqa: E402
from manyclients import write_capture  # noqa: E402

VERBS = {
    "export": ["export", "{capture}", "-q", "-o", os.devnull],
    "stats": ["stats", "{capture}"],
    "clients": ["clients", "{capture}", "-q"],
    "report": ["report", "{capture}", "-q", "-o", "{out}/summary_memory_report.html"],
}


def peak_rss_mb(python: str, args: list[str]) -> tuple[float, float]:
    """(peak RSS in MB, wall seconds) of `python -m kdissect ARGS`."""
    started = time.monotonic()
    process = subprocess.Popen([python, "-m", "kdissect", *args], cwd=REPO, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"kdissect {' '.join(args)}: exit {process.returncode}: {process.stderr.read().decode()}")
    return usage.ru_maxrss / 1024, time.monotonic() - started


def measure(python: str, capture: Path, rounds: int) -> dict[str, dict[str, float]]:
    runs: dict[str, list[tuple[float, float]]] = {verb: [] for verb in VERBS}
    for _ in range(rounds):
        for verb, template in VERBS.items():
            args = [a.format(capture=capture, out=OUT) for a in template]
            runs[verb].append(peak_rss_mb(python, args))
    export = statistics.median(r[0] for r in runs["export"])
    return {verb: {"peak_rss_mb": round(statistics.median(r[0] for r in values), 1),
                   "wall_s": round(statistics.median(r[1] for r in values), 2),
                   "vs_export": round(statistics.median(r[0] for r in values) / export, 2)}
            for verb, values in runs.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=300_000, help="distinct client ids (default 300000)")
    parser.add_argument("--exchanges", type=int, nargs="*", default=[200_000, 800_000],
                        help="exchanges of the few-client-ids captures (default 200000 800000)")
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    OUT.mkdir(exist_ok=True)
    captures = [(OUT / f"manyclients-{args.clients}.pcap", args.clients, 1)]
    captures += [(OUT / f"fewclients-{n}.pcap", 100, n // 100) for n in args.exchanges]
    results = {"load_average": os.getloadavg(), "rounds": args.rounds, "captures": {}}
    for path, clients, each in captures:
        if not path.exists():
            write_capture(path, clients, each=each, connections=min(1000, clients))
        figures = measure(args.python, path, args.rounds)
        results["captures"][path.name] = {"bytes": path.stat().st_size, "client_ids": clients,
                                          "exchanges": clients * each, "verbs": figures}
        print(f"{path.name} ({path.stat().st_size / 1e6:.1f} MB, {clients} ids, {clients * each} exchanges)")
        for verb, row in figures.items():
            print(f"  {verb:8} {row['peak_rss_mb']:8.1f} MB  {row['vs_export']:5.2f}x export  {row['wall_s']:7.2f} s")
    results["load_average_after"] = os.getloadavg()
    write_result(OUT / "summary_memory.json", json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
