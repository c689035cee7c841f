#!/usr/bin/env python3
"""What a connection costs each CLI verb on the many-connections shape, and
whether that cost stays the same as connections grow (issue #29: a
connection should cost microseconds, linear in connections).

    python3 benchmarks/bench_verbs_connections.py --rounds 3
    python3 benchmarks/bench_verbs_connections.py --counts 10000 20000 40000 --verbs clients --checkout DIR

Captures: `benchmarks/out/connections-syn-N.pcap` (benchmarks/manyconn.py's
`syn-data` shape: each client connection a SYN and one data segment with the
start of a Metadata request, none answered, none closed; one client id,
"client", from N hosts), made on first use. Each round runs every verb on
every count, in turn, as a child process (`python -m kdissect VERB CAPTURE`,
its output to /dev/null) and takes its CPU time (user + system, from
`wait4`). A verb's cost per connection between two counts is the difference
of its CPU times over the difference of the counts (start-up cancels out);
the figure is the median over the rounds. `growth` is the cost between the
two largest counts over the cost between the two smallest: about 1 when the
cost per connection does not depend on how many there are, flagged past 1.5.
Results go to benchmarks/out/verbs_connections[_CHECKOUT].json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUT = HERE / "out"
sys.path.insert(0, str(HERE))

from bench_files import write_result  # noqa: E402
from bench_summary_memory import VERBS as SUMMARY_VERBS  # noqa: E402
from manyconn import write_capture  # noqa: E402

# export, stats and clients as the summary verbs' memory benchmark runs them
VERBS = {**{verb: SUMMARY_VERBS[verb] for verb in ("export", "stats", "clients")},
         "show": ["show", "{capture}"], "topics": ["topics", "{capture}", "-q"], "groups": ["groups", "{capture}", "-q"]}
GROWTH_FLAG = 1.5


def cpu_seconds(python: str, checkout: Path, args: list[str]) -> float:
    """User + system CPU seconds of `python -m kdissect ARGS` run in `checkout`."""
    environment = {**os.environ, "PYTHONPATH": str(checkout)}
    process = subprocess.Popen([python, "-m", "kdissect", *args], cwd=checkout, env=environment,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    error = process.stderr.read().decode(errors="replace") if process.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"kdissect {' '.join(args)} failed: {error.strip().splitlines()[-1:]}")
    return usage.ru_utime + usage.ru_stime


def capture_for(count: int) -> Path:
    path = OUT / f"connections-syn-{count}.pcap"
    if not path.exists():
        OUT.mkdir(exist_ok=True)
        write_capture(path, count, "syn-data")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", type=int, nargs="+", default=[25000, 50000, 100000, 200000])
    parser.add_argument("--verbs", nargs="+", choices=list(VERBS), default=list(VERBS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--checkout", type=Path, default=REPO,
                        help="run this kdissect checkout (with its own compiled build)")
    args = parser.parse_args()
    counts = sorted(set(args.counts))
    if len(counts) < 2:
        raise SystemExit("--counts: give at least two counts")
    checkout = args.checkout.resolve()
    captures = {count: capture_for(count) for count in counts}
    times: dict[str, dict[int, list[float]]] = {verb: {count: [] for count in counts} for verb in args.verbs}
    for round_number in range(args.rounds):
        for verb in args.verbs:
            for count in counts:
                command = [part.replace("{capture}", str(captures[count])) for part in VERBS[verb]]
                times[verb][count].append(cpu_seconds(sys.executable, checkout, command))
        print(f"round {round_number + 1} of {args.rounds} done", flush=True)
    results: dict = {"checkout": str(checkout), "counts": counts, "rounds": args.rounds, "verbs": {}}
    print(f"{checkout}: CPU microseconds per connection between counts (median of {args.rounds} rounds)")
    for verb in args.verbs:
        steps = []
        for low, high in zip(counts, counts[1:]):
            per_round = [(b - a) / (high - low) * 1e6 for a, b in zip(times[verb][low], times[verb][high])]
            steps.append({"from": low, "to": high, "us_per_connection": round(statistics.median(per_round), 2),
                          "range": [round(min(per_round), 2), round(max(per_round), 2)]})
        # (None when the smallest step is lost in noise: counts too close together)
        growth = steps[-1]["us_per_connection"] / steps[0]["us_per_connection"] \
            if steps[0]["us_per_connection"] > 0 else None
        flagged = growth is not None and growth > GROWTH_FLAG
        results["verbs"][verb] = {"cpu_seconds": {str(c): times[verb][c] for c in counts}, "steps": steps,
                                  "growth": None if growth is None else round(growth, 2), "flagged": flagged}
        line = ", ".join(f"{s['from']}->{s['to']}: {s['us_per_connection']:.1f} us" for s in steps)
        medians = ", ".join(f"{c}: {statistics.median(times[verb][c]):.2f} s" for c in counts)
        flag = "  FLAGGED: the cost per connection grows" if flagged else ""
        shown = "unknown (the first step is not above noise)" if growth is None else f"{growth:.2f}"
        print(f"  {verb:8} {line}; growth {shown}{flag}  (CPU {medians})", flush=True)
    suffix = "" if checkout == REPO else f"_{checkout.name}"
    write_result(OUT / f"verbs_connections{suffix}.json", json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
