"""`python3 -m tools.lab kafka start|status|stop`: an Apache Kafka node
that outlives the command, for a person to point clients at.

    python3 -m tools.lab kafka start                       # 4.x on 127.0.0.1:9092, PLAINTEXT
    python3 -m tools.lab kafka start --version 3 --port 9192 --listener SASL_PLAINTEXT
    python3 -m tools.lab kafka status
    python3 -m tools.lab kafka stop [--port 9092]

Each running node is described by `<cache>/run/kafka-<port>.json` (pid,
work directory, listeners); `stop` ends it with SIGTERM and removes its work
directory.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tools.lab import maven
from tools.lab.apache_kafka import (
    DEFAULT_USERS, SECURITY_PROTOCOLS, KafkaBroker, metadata_brokers, pid_alive, start_kafka, stop_kafka,
)
from tools.lab.net import LabError, address
from tools.lab.tls import Certificate


def _state_dir() -> Path:
    return maven.cache_dir() / "run"


def _state_file(port: int) -> Path:
    return _state_dir() / f"kafka-{port}.json"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("kafka", help="start, inspect or stop an Apache Kafka node (KRaft, one process)")
    actions = p.add_subparsers(dest="action", required=True)
    start = actions.add_parser("start", help="start a node in the background and wait until it is ready")
    start.add_argument("--version", default="4", help="4 (4.4.0), 3 (3.9.2) or an exact version (default 4)")
    start.add_argument("--host", default="127.0.0.1")
    start.add_argument("--port", type=int, default=9092, help="port of the first listener (default 9092)")
    start.add_argument("--listener", action="append", choices=SECURITY_PROTOCOLS,
                       help="security protocol of a client listener (repeatable; default PLAINTEXT)")
    start.add_argument("--user", action="append", metavar="NAME:PASSWORD",
                       help=f"SASL user (repeatable; default {next(iter(DEFAULT_USERS))})")
    start.add_argument("--auto-create-topics", action="store_true")
    start.add_argument("--rebalance-delay-ms", type=int, default=0, help="group.initial.rebalance.delay.ms")
    start.add_argument("--config", action="append", metavar="KEY=VALUE", help="extra server.properties entry")
    start.add_argument("--log-level", default="warn", help="broker log level (default warn)")
    for name in ("status", "stop"):
        action = actions.add_parser(name, help=f"{name} the node(s) started with `kafka start`")
        action.add_argument("--port", type=int, help="only the node whose first listener has this port")


def run(args: argparse.Namespace) -> int:
    try:
        return {"start": _start, "status": _status, "stop": _stop}[args.action](args)
    except LabError as exc:
        print(f"lab: error: {exc}", file=sys.stderr)
        return 2


def _parse_pairs(items: list[str] | None, sep: str, what: str, form: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, found, value = item.partition(sep)
        if not found or not key:
            raise LabError(f"{what} must look like {form}: {item!r}")
        out[key] = value
    return out


def _start(args: argparse.Namespace) -> int:
    state = _state_file(args.port)
    if state.exists() and pid_alive(json.loads(state.read_text())["pid"]):
        raise LabError(f"a node started here already runs on port {args.port} (kafka stop --port {args.port})")
    users = _parse_pairs(args.user, ":", "--user", "NAME:PASSWORD") or None
    broker = start_kafka(
        args.version, args.port, host=args.host, listeners=tuple(args.listener or ("PLAINTEXT",)), users=users,
        auto_create_topics=args.auto_create_topics, group_initial_rebalance_delay_ms=args.rebalance_delay_ms,
        config=_parse_pairs(args.config, "=", "--config", "KEY=VALUE"), log_level=args.log_level, detach=True)
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text(json.dumps({
        "pid": broker.pid, "version": broker.version, "host": broker.host, "port": broker.port,
        "ports": broker.ports, "internal_port": broker.internal_port, "controller_port": broker.controller_port,
        "workdir": str(broker.workdir), "log": str(broker.log_path),
        "certificate": str(broker.certificate.cert) if broker.certificate else None,
        "users": sorted(broker.users),
    }, indent=1) + "\n")
    print(f"Apache Kafka {broker.version} ready in {broker.startup_seconds:.1f}s (pid {broker.pid})")
    _describe(json.loads(state.read_text()))
    return 0


def _describe(data: dict) -> None:
    for protocol, port in data["ports"].items():
        print(f"  {protocol:15} {address(data['host'], port)}")
    if data.get("certificate"):
        print(f"  CA certificate  {data['certificate']}")
    if any(p.startswith("SASL") for p in data["ports"]):
        print(f"  SASL users      {', '.join(data['users'])} (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)")
    print(f"  log             {data['log']}")


def _states(port: int | None) -> list[Path]:
    if port is not None:
        return [p for p in [_state_file(port)] if p.exists()]
    return sorted(_state_dir().glob("kafka-*.json")) if _state_dir().exists() else []


def _status(args: argparse.Namespace) -> int:
    states = _states(args.port)
    if not states:
        print("no Apache Kafka node started with `kafka start`")
        return 1
    status = 0
    for path in states:
        data = json.loads(path.read_text())
        alive = pid_alive(data["pid"])
        try:
            ready = alive and metadata_brokers(data["internal_port"]) > 0
        except OSError:
            ready = False
        print(f"Apache Kafka {data['version']} pid {data['pid']}: "
              f"{'ready' if ready else 'running, not answering' if alive else 'not running'}")
        _describe(data)
        status = status or (0 if ready else 1)
    return status


def _stop(args: argparse.Namespace) -> int:
    states = _states(args.port)
    if not states:
        print("no Apache Kafka node started with `kafka start`")
        return 1
    for path in states:
        data = json.loads(path.read_text())
        certificate = None
        if data.get("certificate"):
            cert = Path(data["certificate"])
            certificate = Certificate(cert.with_name("broker.key.pem"), cert, cert.with_name("broker.pem"))
        broker = KafkaBroker(data["host"], data["port"], Path(data["log"]), data["version"], data["ports"],
                             data["internal_port"], data["controller_port"], Path(data["workdir"]), data["pid"],
                             certificate=certificate)
        stop_kafka(broker)
        path.unlink()
        print(f"stopped Apache Kafka {data['version']} (pid {data['pid']}, port {data['port']})")
    return 0
