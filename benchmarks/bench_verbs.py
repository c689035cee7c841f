#!/usr/bin/env python3
"""CPU time of the verbs that print tables (stats, clients, report) and of
`export` writing Parquet against `export`'s (JSONL) on the record-heavy and
chatty shapes, and optionally against another checkout's same verbs (an A/B).

    python3 benchmarks/bench_verbs.py --rounds 5
    python3 benchmarks/bench_verbs.py --rounds 5 --checkout /path/to/other/checkout [--verb export-parquet]

Captures: bench_pipeline's `records` and `chatty` captures
(benchmarks/out/records.pcap, chatty.pcap; recorded by its generator if
missing), or those given. Each round runs every verb on every capture, in
turn, as a child process (`python -m kdissect VERB CAPTURE`, the verbs of
bench_summary_memory.py, output thrown away, and `export -o FILE.parquet`)
and takes its CPU time (user +
system, from `wait4`); with `--checkout`, each verb runs right after the
same verb of the other checkout, so the pair shares the machine's moment.
Figures, each the median of the rounds with their range (flagged when the
range is over a quarter of the median): a verb's CPU over export's in the
same round, and with `--checkout` this checkout's CPU over the other's.
Results go to benchmarks/out/verbs[_CHECKOUT].json.
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

# export's JSONL (the base of the ratios) and the summary verbs, then export writing Parquet
VERBS = {**SUMMARY_VERBS, "export-parquet": ["export", "{capture}", "-q", "-o", "{out}/verbs_export.parquet"]}


def cpu_seconds(python: str, checkout: Path, args: list[str]) -> float:
    """User + system CPU seconds of `python -m kdissect ARGS` run from `checkout`."""
    process = subprocess.Popen([python, "-m", "kdissect", *args], cwd=checkout, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=str(checkout)))
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"kdissect {' '.join(args)} in {checkout}: exit {os.waitstatus_to_exitcode(status)}: "
                         f"{process.stderr.read().decode(errors='replace')}")
    return usage.ru_utime + usage.ru_stime


def summarized(values: list[float]) -> dict[str, object]:
    median = statistics.median(values)
    return {"median": round(median, 3), "range": [round(min(values), 3), round(max(values), 3)],
            "spread_too_wide": max(values) - min(values) > median / 4}


def said(summary: dict) -> str:
    low, high = summary["range"]
    return f"{summary['median']:.2f}x ({low:.2f}-{high:.2f})" + ("  SPREAD TOO WIDE" if summary["spread_too_wide"] else "")


def default_captures() -> list[Path]:
    import bench_pipeline

    OUT.mkdir(parents=True, exist_ok=True)
    paths = []
    for shape in ("records", "chatty"):
        path = OUT / f"{shape}.pcap"
        bench_pipeline.generate(shape, path, False, bench_pipeline.TCPDUMP_BUFFER_KIB)
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("captures", nargs="*", type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--checkout", type=Path, help="another kdissect checkout to run the same verbs of (A/B)")
    parser.add_argument("--verb", action="append", choices=list(VERBS),
                        help="only this verb (repeatable; export, the ratios' base, always runs)")
    args = parser.parse_args()
    verbs = {verb: VERBS[verb] for verb in VERBS if not args.verb or verb == "export" or verb in args.verb}
    captures = [path.resolve() for path in args.captures] or default_captures()
    checkouts = {"this": REPO, **({"other": args.checkout.resolve()} if args.checkout else {})}
    python = sys.executable
    cpu: dict[tuple[str, str, str], list[float]] = {}
    for round_number in range(args.rounds):
        for capture in captures:
            for verb, template in verbs.items():
                command = [part.format(capture=capture, out=OUT) for part in template]
                # alternate which checkout goes first, so neither always runs on a warmer machine
                order = list(checkouts.items())[:: 1 if round_number % 2 == 0 else -1]
                for name, checkout in order:
                    cpu.setdefault((capture.name, verb, name), []).append(cpu_seconds(python, checkout, command))
            shown = ", ".join(f"{verb} {cpu[(capture.name, verb, 'this')][-1]:.2f}s" for verb in verbs)
            print(f"round {round_number + 1}: {capture.name}: {shown}", flush=True)
    results: dict = {"captures": [str(c) for c in captures], "rounds": args.rounds,
                     "checkout": str(args.checkout.resolve()) if args.checkout else None, "cpu_seconds": {}}
    for capture in captures:
        entry: dict = {}
        for verb in verbs:
            mine = cpu[(capture.name, verb, "this")]
            exports = cpu[(capture.name, "export", "this")]
            entry[verb] = {"cpu_s": summarized(mine), "vs_export": summarized([a / b for a, b in zip(mine, exports)])}
            line = f"{capture.name}: {verb}: CPU {statistics.median(mine):.2f}s, {said(entry[verb]['vs_export'])} export's"
            if args.checkout:
                other = cpu[(capture.name, verb, "other")]
                entry[verb]["vs_other_checkout"] = summarized([a / b for a, b in zip(mine, other)])
                line += (f"; the other checkout's {statistics.median(other):.2f}s: this one takes "
                         f"{said(entry[verb]['vs_other_checkout'])} its CPU")
            print(line, flush=True)
        results["cpu_seconds"][capture.name] = entry
    suffix = f"_{args.checkout.resolve().name}" if args.checkout else ""
    write_result(OUT / f"verbs{suffix}.json", json.dumps(results, indent=2) + "\n")
    print(f"results in {OUT / f'verbs{suffix}.json'}")


if __name__ == "__main__":
    main()
