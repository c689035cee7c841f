#!/usr/bin/env python3
"""kdissect export vs tshark, side by side, on five shapes of traffic.

    python3 benchmarks/bench_pipeline.py [--rounds 3] [--regenerate] [--only SHAPE ...]

Generates (once, into benchmarks/out/; never committed):

* bulk: large produce batches and fetches, >= 50 MB (`python3 -m tools.lab bulk`);
* chatty: 30,300 small pipelined produce exchanges, one record each (`... chatty`);
* records: about 20,000 mid-size Produce and Fetch exchanges whose batches
  carry records, about 58 MB (`... records`);
* connections: 200,000 client connections, each a SYN, SYN-ACK, ACK and a
  partial request, none closed (`benchmarks/manyconn.py`, --connections N);
* connections-syn: 200,000 client connections, each a single SYN then one
  data segment with the first bytes of a request whose size prefix promises
  more, no handshake reply, none closed (`manyconn.py --shape syn-data`);

the lab ones with real clients against Tansu, as root, in the lab's private
network namespace. Then it runs, alternating, in the same run:

    python3 -m kdissect export F -o /dev/null
    tshark -r F -T fields -e frame.number -e kafka.api_key -e kafka.correlation_id \
           -e kafka.error -e kafka.throttle_time

Each run is a child process measured with wait4: wall time, CPU time
(user + sys) and peak resident memory. kdissect runs as an installed package
would: with its bytecode compiled (PYTHONDONTWRITEBYTECODE is dropped for the
child and bytecode goes to benchmarks/out/pycache) and its codec cache
filled, both by one unmeasured warm-up run (--cold: neither).

Each round runs every command once, in turns (the order reversed every other
round), so a round is a pair of runs made under the same load. The figure
reported is the median over the rounds of each round's CPU-time ratio
tshark / kdissect (> 1 means kdissect is faster), with the range of those
ratios; a shape whose ratios spread by more than SPREAD_LIMIT of the median
is flagged "too wide to trust" (rerun it on a quieter machine). Median
CPU and wall times and the greatest peak RSS are reported beside it, and
the share of the machine's CPU time its host took during the rounds (steal,
/proc/stat; flagged over 5%: a busy host, not the code, moved them). Results
also go to benchmarks/out/results.json.

`--per-connection` measures what one more connection costs: kdissect on the
connections-syn shape (2 packets per connection) at 50,000 and 200,000
connections, paired; the difference of CPU time and of peak RSS divided by
the 150,000 connections between them.

kdissect runs on this script's interpreter; `--python PATH` (repeatable)
names the interpreters to run it on instead, each importing this checkout,
alternating with each other and with tshark in the same run (how much the
interpreter's build matters: benchmarks/README.md, "Which Python").
`--plain-too` adds runs of the first interpreter with KDISSECT_PURE_PYTHON=1
(the per-packet modules as plain Python, not their compiled build:
kdissect/native.py). Each run's record names the modules it ran compiled.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_files import StealClock, compiled_modules, steal_said, write_result

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUT = HERE / "out"

TSHARK_FIELDS = ["-e", "frame.number", "-e", "kafka.api_key", "-e", "kafka.correlation_id",
                 "-e", "kafka.error", "-e", "kafka.throttle_time"]


def _tcpdump_with_buffer(kib: int) -> dict[str, str]:
    """Environment whose PATH finds a `tcpdump` that asks for a `kib` KiB kernel
    buffer. At loopback speed the default 2 MiB buffer overflows on the bulk
    workload and tcpdump silently loses about half the packets (a lossy
    capture would make both tools do less work and the comparison meaningless)."""
    real = shutil.which("tcpdump")
    if real is None:
        raise SystemExit("tcpdump is not installed")
    wrapper_dir = OUT / "tcpdump-wrapper"
    wrapper_dir.mkdir(parents=True, exist_ok=True)
    wrapper = wrapper_dir / "tcpdump"
    wrapper.write_text(f'#!/bin/sh\nexec {real} -B {kib} "$@"\n')
    wrapper.chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = f"{wrapper_dir}{os.pathsep}{env.get('PATH', '')}"
    return env


SHAPES = ("bulk", "chatty", "records", "connections", "connections-syn")
# kernel capture buffer for recording (see _tcpdump_with_buffer)
TCPDUMP_BUFFER_KIB = 262144
# a shape whose paired ratios spread (max - min) by more than this share of
# their median is flagged: its median is not to be trusted
SPREAD_LIMIT = 0.25


def capture_name(kind: str, connections: int) -> str:
    return f"{kind}-{connections}" if kind.startswith("connections") else kind


def generate(kind: str, path: Path, regenerate: bool, buffer_kib: int, connections: int = 200_000) -> None:
    if path.exists() and not regenerate:
        return
    if kind.startswith("connections"):
        shape = "syn-data" if kind == "connections-syn" else "handshake"
        print(f"generating: {path} ({connections} connections, {shape})", flush=True)
        subprocess.run([sys.executable, str(HERE / "manyconn.py"), str(path), str(connections), "--shape", shape],
                       check=True)
        return
    if kind == "bulk":
        extra = ["--mb", "60"]
    elif kind == "records":
        extra = ["--exchanges", "20000"]
    else:
        # A few hundred over 30,000: the connection's ApiVersions/Metadata
        # exchanges are not produce, and a capture must hold >= 30,000 Produce.
        extra = ["--exchanges", "30300"]
    command = [sys.executable, "-m", "tools.lab", kind, str(path.resolve()), *extra]
    print("generating:", " ".join(command), flush=True)
    env = _tcpdump_with_buffer(buffer_kib) if buffer_kib else None
    subprocess.run(command, check=True, cwd=REPO, env=env)


def measure(command: list[str], env: dict[str, str] | None = None) -> dict[str, float]:
    """Run `command` with stdout to /dev/null; wall, CPU seconds and peak RSS (MiB)."""
    with open(os.devnull, "wb") as sink:
        start = time.perf_counter()
        proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.PIPE, cwd=REPO, env=env)
        assert proc.stderr is not None
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{command[0]} failed ({proc.returncode}): {err.decode(errors='replace')[-400:]}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_mib": usage.ru_maxrss / 1024,
            "stderr": err.decode(errors="replace")}


def kdissect_env(cold: bool) -> dict[str, str]:
    """The environment of the kdissect runs (see the module docstring)."""
    env = dict(os.environ)
    if cold:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["KDISSECT_CACHE_DIR"] = ""
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(OUT / "pycache")
    return env


def interpreter_version(python: str) -> str:
    """`python`'s version line, as `python -VV` prints it."""
    return subprocess.run([python, "-VV"], capture_output=True, text=True, check=True).stdout.strip()


def bench(path: Path, rounds: int, cold: bool = False, pythons: list[str] | None = None,
          plain_too: bool = False) -> dict:
    pythons = pythons or [sys.executable]
    tshark = [shutil.which("tshark") or "tshark", "-r", str(path), "-T", "fields", *TSHARK_FIELDS]
    env = kdissect_env(cold)
    if len(pythons) > 1 or pythons[0] != sys.executable:
        env["PYTHONPATH"] = str(REPO)  # every interpreter runs this checkout's kdissect
    env.pop("KDISSECT_PURE_PYTHON", None)
    # label -> (interpreter, its environment); the first is the headline
    runners = {python: (python, env) for python in pythons}
    if plain_too:
        runners[f"{pythons[0]} (plain Python modules)"] = (pythons[0], env | {"KDISSECT_PURE_PYTHON": "1"})
    commands = {label: [python, "-m", "kdissect", "export", str(path), "-o", os.devnull]
                for label, (python, _) in runners.items()}
    if not cold:
        for label, command in commands.items():
            measure(command, runners[label][1])  # warm-up: bytecode and codec cache
    runs: dict[str, list[dict]] = {label: [] for label in runners} | {"tshark": []}
    steal = StealClock()
    for i in range(rounds):
        order = [(label, command, runners[label][1]) for label, command in commands.items()]
        order.append(("tshark", tshark, None))
        if i % 2:
            order.reverse()
        for name, command, command_env in order:
            runs[name].append(measure(command, command_env))
    best = {name: {key: statistics.median(r[key] for r in results) for key in ("wall_s", "cpu_s")} |
            {"peak_rss_mib": max(r["peak_rss_mib"] for r in results)}
            for name, results in runs.items()}
    first = pythons[0]
    accounting = [line.removeprefix("kdissect: ") for line in runs[first][0]["stderr"].splitlines()]
    t = best["tshark"]
    paired = {label: paired_ratios(runs["tshark"], runs[label]) for label in runners}
    return {
        "capture": path.name,
        "size_mib": path.stat().st_size / (1 << 20),
        "rounds": rounds,
        "kdissect_start": "cold (no bytecode, no codec cache)" if cold else "warm (bytecode and codec cache)",
        # the first interpreter's figures (the script's own unless --python names others)
        "kdissect": best[first],
        "python": interpreter_version(first),
        "compiled_modules": compiled_modules(first, env),
        "tshark": t,
        "speedup_wall": paired[first]["wall_median"],
        "speedup_cpu": paired[first]["cpu_median"],
        "interpreters": [{"python": label, "version": interpreter_version(python),
                          "compiled_modules": compiled_modules(python, run_env), **best[label],
                          "speedup_wall": paired[label]["wall_median"],
                          "speedup_cpu": paired[label]["cpu_median"], "paired": paired[label]}
                         for label, (python, run_env) in runners.items()],
        "kdissect_accounting": accounting,
        "steal_share": steal.share(),  # of the paired rounds, warm-up left out
    }


def paired_ratios(tshark_runs: list[dict], kdissect_runs: list[dict]) -> dict:
    """Round by round tshark / kdissect ratios of CPU and wall time: their
    medians, ranges, and whether the CPU ratios spread too widely to trust."""
    out: dict = {}
    for key in ("cpu", "wall"):
        ratios = [t[f"{key}_s"] / k[f"{key}_s"] for t, k in zip(tshark_runs, kdissect_runs)]
        median = statistics.median(ratios)
        out[f"{key}_ratios"] = ratios
        out[f"{key}_median"] = median
        out[f"{key}_range"] = (min(ratios), max(ratios))
        out[f"{key}_too_wide"] = (max(ratios) - min(ratios)) > SPREAD_LIMIT * median
    return out


def per_connection(rounds: int, small: int = 50_000, large: int = 200_000) -> dict:
    """CPU microseconds and peak-RSS bytes one more 2-packet connection costs
    kdissect: the syn-data shape at `small` and `large` connections, paired."""
    paths = {}
    for n in (small, large):
        paths[n] = OUT / f"{capture_name('connections-syn', n)}.pcap"
        generate("connections-syn", paths[n], False, 0, n)
    env = kdissect_env(False)
    env.pop("KDISSECT_PURE_PYTHON", None)
    commands = {n: [sys.executable, "-m", "kdissect", "export", str(p), "-o", os.devnull] for n, p in paths.items()}
    measure(commands[small], env)
    us, rss = [], []
    for i in range(rounds):
        order = [small, large] if i % 2 == 0 else [large, small]
        got = {n: measure(commands[n], env) for n in order}
        us.append((got[large]["cpu_s"] - got[small]["cpu_s"]) / (large - small) * 1e6)
        rss.append((got[large]["peak_rss_mib"] - got[small]["peak_rss_mib"]) * (1 << 20) / (large - small))
    return {"connections": (small, large), "us_per_connection": us, "bytes_per_connection": rss,
            "us_median": statistics.median(us), "bytes_median": statistics.median(rss)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--regenerate", action="store_true", help="re-record the captures")
    parser.add_argument("--tcpdump-buffer-kib", type=int, default=TCPDUMP_BUFFER_KIB,
                        help="kernel capture buffer for recording (0: tcpdump's default)")
    parser.add_argument("--cold", action="store_true",
                        help="run kdissect without bytecode files or codec cache (every start compiles)")
    parser.add_argument("--only", nargs="+", choices=SHAPES, help="only these shapes")
    parser.add_argument("--connections", type=int, default=200_000,
                        help="connections in the connections shape (its file: connections-N.pcap)")
    parser.add_argument("--python", action="append", metavar="PATH",
                        help="run kdissect on this interpreter (repeatable; default: this script's)")
    parser.add_argument("--plain-too", action="store_true",
                        help="also run the first interpreter with the per-packet modules as plain Python")
    parser.add_argument("--per-connection", action="store_true",
                        help="only measure the cost of one more 2-packet connection (50,000 against 200,000)")
    parser.add_argument("captures", nargs="*", type=Path, help="benchmark these files instead")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    if args.per_connection:
        got = per_connection(args.rounds)
        print(f"per connection (syn-data, {got['connections'][0]} against {got['connections'][1]}, "
              f"{args.rounds} paired rounds, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}): "
              f"{got['us_median']:.1f} us CPU (range {min(got['us_per_connection']):.1f}-"
              f"{max(got['us_per_connection']):.1f}), {got['bytes_median']:.0f} bytes of peak RSS "
              f"(range {min(got['bytes_per_connection']):.0f}-{max(got['bytes_per_connection']):.0f})")
        write_result(OUT / "per_connection.json", json.dumps(got, indent=2))
        return 0
    paths = args.captures
    if not paths:
        paths = []
        for kind in args.only or SHAPES:
            name = capture_name(kind, args.connections)
            path = OUT / f"{name}.pcap"
            generate(kind, path, args.regenerate, args.tcpdump_buffer_kib, args.connections)
            paths.append(path)
    results = []
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"started {started}, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    for path in paths:
        result = bench(path, args.rounds, args.cold, args.python, args.plain_too)
        result["load_average_after"] = os.getloadavg()
        results.append(result)
        t = result["tshark"]
        print(f"\n{result['capture']} ({result['size_mib']:.1f} MiB), median of {args.rounds} paired rounds, "
              f"kdissect start {result['kdissect_start']}:")
        print(f"  tshark    wall {t['wall_s']:7.2f} s  cpu {t['cpu_s']:7.2f} s  peak RSS {t['peak_rss_mib']:7.1f} MiB")
        for k in result["interpreters"]:
            print(f"  kdissect  wall {k['wall_s']:7.2f} s  cpu {k['cpu_s']:7.2f} s  peak RSS {k['peak_rss_mib']:7.1f} MiB"
                  f"  ({k['python']}: {k['version']}; compiled: {', '.join(k['compiled_modules']) or 'none'})")
            p = k["paired"]
            print(f"    speed-up (tshark / kdissect, paired): cpu {p['cpu_median']:.2f}x "
                  f"(range {p['cpu_range'][0]:.2f}-{p['cpu_range'][1]:.2f})"
                  f"{'  SPREAD TOO WIDE TO TRUST' if p['cpu_too_wide'] else ''}, wall {p['wall_median']:.2f}x "
                  f"(range {p['wall_range'][0]:.2f}-{p['wall_range'][1]:.2f}); "
                  f"peak RSS kdissect / tshark: {k['peak_rss_mib'] / t['peak_rss_mib']:.2f}")
        print(f"  rounds: {steal_said(result['steal_share'])} of this machine's CPU time taken by its host")
        for line in result["kdissect_accounting"]:
            print(f"  | {line}")
    print(f"ended {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    write_result(OUT / "results.json", json.dumps({"started": started, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
