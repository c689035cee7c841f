"""The cost of joining the broker's request log: `kdissect export` with and
without `--broker-log`, on the same capture and log, paired runs alternating.

    python3 benchmarks/bench_brokerlog.py --rounds 7            # records the input on first use (root)
    python3 benchmarks/bench_brokerlog.py --rounds 7 --regenerate

Input (benchmarks/out/brokerlog/, never committed): one Apache Kafka 4.4.0
node with `kafka.request.logger` at DEBUG into request.log (rolled at 8 MiB),
tcpdump on its client port, and a confluent-kafka producer sending
`--exchanges` single-record Produce requests (batch.num.messages=1, linger 0,
5 in flight), so the capture and the log hold about that many exchanges.

Each round runs both commands as child processes (order alternating) and
measures wall and CPU time with wait4; the figure is the median over rounds
of the per-round ratio (with the log / without), with its range. kdissect
runs as installed, as in bench_pipeline.py: its bytecode compiled (into
benchmarks/out/pycache; PYTHONDONTWRITEBYTECODE is dropped for the children)
by the unmeasured warm-up runs; `--cold` keeps the caller's environment.
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

from bench_files import write_result

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "out" / "brokerlog"


def record(exchanges: int) -> None:
    sys.path.insert(0, str(ROOT))
    from confluent_kafka import Producer

    from tools.lab.apache_kafka import kafka_broker
    from tools.lab.clients import kp_create_topics
    from tools.lab.tcpdump import tcpdump

    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.glob("request.log*"):
        old.unlink()
    with kafka_broker("4", request_log="DEBUG", request_log_roll_bytes=8 << 20, heap_mb=768) as broker:
        kp_create_topics(broker.internal_bootstrap, {"bench": 1})
        with tcpdump(OUT / "capture.pcap", broker.port):
            producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "bench", "linger.ms": 0,
                                 "batch.num.messages": 1, "max.in.flight": 5, "acks": 1})
            for i in range(exchanges):
                while True:
                    try:
                        producer.produce("bench", value=b"v%08d" % i, partition=0)
                        break
                    except BufferError:
                        producer.poll(0.01)
                producer.poll(0)
            producer.flush(60)
        time.sleep(1)
        for path in broker.request_log_files():
            (OUT / path.name).write_bytes(path.read_bytes())
        (OUT / "port").write_text(str(broker.port))


def warm_env() -> dict[str, str]:
    """The children's environment: bytecode written and read, as an installed package has it."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(OUT.parent / "pycache")
    return env


def timed(command: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        raise SystemExit(f"{' '.join(command)} failed ({status})")
    return time.monotonic() - started, usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--exchanges", type=int, default=20000)
    parser.add_argument("--regenerate", action="store_true")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--cold", action="store_true", help="the caller's environment (bytecode as it sets)")
    args = parser.parse_args()
    if args.regenerate or not (OUT / "capture.pcap").exists():
        record(args.exchanges)
    port = (OUT / "port").read_text().strip()
    base = [args.python, "-m", "kdissect", "export", str(OUT / "capture.pcap"), "-p", port, "-q", "-o", os.devnull]
    joined = [*base, "--broker-log", str(OUT)]
    env = None if args.cold else warm_env()
    timed(base, env), timed(joined, env)  # warm: bytecode, page cache
    walls, cpus = [], []
    for round_ in range(args.rounds):
        pair = [(base, "plain"), (joined, "joined")]
        if round_ % 2:
            pair.reverse()
        result = {name: timed(command, env) for command, name in pair}
        walls.append(result["joined"][0] / result["plain"][0])
        cpus.append(result["joined"][1] / result["plain"][1])
        print(f"round {round_ + 1}: plain {result['plain'][0]:.3f}s wall {result['plain'][1]:.3f}s cpu; "
              f"joined {result['joined'][0]:.3f}s wall {result['joined'][1]:.3f}s cpu", flush=True)
    lines = sum(1 for p in OUT.glob("request.log*") for _ in p.open(errors="replace"))
    summary = {"capture_bytes": (OUT / "capture.pcap").stat().st_size, "log_lines": lines,
               "log_bytes": sum(p.stat().st_size for p in OUT.glob("request.log*")), "rounds": args.rounds,
               "wall_ratio_median": statistics.median(walls), "wall_ratio_range": [min(walls), max(walls)],
               "cpu_ratio_median": statistics.median(cpus), "cpu_ratio_range": [min(cpus), max(cpus)],
               "load_average": os.getloadavg(), "bytecode": "caller's environment" if args.cold else "compiled"}
    print(json.dumps(summary, indent=1))
    write_result(OUT.parent / "brokerlog.json", json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
