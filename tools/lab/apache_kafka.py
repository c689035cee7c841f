"""Apache Kafka, the reference broker, on loopback: one KRaft node that is
both broker and controller, from the jars on Maven Central.

    with kafka_broker() as broker:                     # 4.x, PLAINTEXT, free port
        ... clients talk to broker.bootstrap ...
    with kafka_broker("3", port=9092) as broker:      # 3.9: still has the pre-2.1 API versions
    with kafka_broker(listeners=("SASL_SSL",)) as broker:
        conf = broker.kafka_python_config(mechanism="SCRAM-SHA-512")
    broker.set_client_quota("slow-client", producer_byte_rate=2048)

What happens on a start:

- `org.apache.kafka:kafka_2.13:<version>` and its runtime dependencies are
  resolved once with Maven into `<cache>/kafka-<version>/lib` (see
  `tools.lab.maven`), plus slf4j-simple so the broker can log.
- Storage is formatted once per (version, SCRAM users, features) into a
  template under the cache and copied for each broker (formatting is a JVM
  start of its own). The voters are static (`controller.quorum.voters`), so
  nothing in the formatted storage depends on ports.
- The JVM (Java 17+) starts with a small fixed heap, serial GC, C1 only, and
  a class-data-sharing archive that the first clean stop of each version
  writes into the cache (it halves the start-up time).
- Ready means a Metadata round trip on the internal listener lists the
  broker (it is registered and unfenced), not just an open socket.

Listeners: one per security protocol asked for (`PLAINTEXT`, `SSL`,
`SASL_PLAINTEXT`, `SASL_SSL`; the first gets `port`, the others free ports),
plus `INTERNAL` (PLAINTEXT, inter-broker traffic, readiness and admin calls
of the lab) and `CONTROLLER`, each on its own port so a capture of the
client port sees only the clients. TLS uses a self-signed certificate made
at start (`broker.certificate.cert` is what clients trust). SASL offers PLAIN,
SCRAM-SHA-256 and SCRAM-SHA-512 for the same users (default alice /
alice-secret), SCRAM credentials written at format time.

Kafka 4.4's default features enable KIP-848 consumer groups
(`group.version=1`) and share groups (`share.version=2`); `features=`
sets others at format time (e.g. `{"share.version": 1}` on 4.1).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from tools.lab import maven
from tools.lab.java_client import run_java_helper
from tools.lab.kafka_versions import SLF4J_BINDING, full_version, java_binary
from tools.lab.net import LabError, address, free_port, port_is_free, send_frame, stop_process, wait_for_listener
from tools.lab.tls import Certificate, self_signed

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_USERS = {"alice": "alice-secret"}
# With a request log, slf4j goes to log4j2 instead (slf4j-simple has one
# output for every logger; log4j2 can send kafka.request.logger to a file of its own).
LOG4J2_BINDING = "org.apache.logging.log4j:log4j-slf4j-impl:2.25.5"
REQUEST_LOG_LEVELS = ("DEBUG", "TRACE")
# A fixed cluster id (base64url of 16 bytes) so captures are reproducible.
CLUSTER_ID = base64.urlsafe_b64encode(b"kdissect-lab-001").decode().rstrip("=")
_SAFE = re.compile(r"^[A-Za-z0-9._-]+$")


def kafka_jars(version: str, log4j2: bool = False) -> list[Path]:
    version = full_version(version)
    if log4j2:
        return maven.resolve(f"kafka-{version}-log4j2", [f"org.apache.kafka:kafka_2.13:{version}", LOG4J2_BINDING])
    return maven.resolve(f"kafka-{version}", [f"org.apache.kafka:kafka_2.13:{version}", SLF4J_BINDING])


def request_log_config(request_log: Path, level: str, log_level: str, roll_bytes: int = 0) -> str:
    """A log4j2 configuration (XML): everything at `log_level` on stdout as
    before, and `kafka.request.logger` at `level` (DEBUG: one "Completed
    request:" JSON line per request; TRACE: with the request and response
    bodies) in `request_log` only, times in UTC with milliseconds. With
    `roll_bytes`, the file rolls over at that size into request_log.1, .2, ..."""
    from xml.sax.saxutils import quoteattr

    pattern = "[%d{yyyy-MM-dd HH:mm:ss,SSS}{UTC}] %p %m (%c)%n"
    if roll_bytes:
        appender = (f'<RollingFile name="requests" fileName={quoteattr(str(request_log))} '
                    f'filePattern={quoteattr(str(request_log) + ".%i")} immediateFlush="true">'
                    f'<PatternLayout pattern={quoteattr(pattern)}/>'
                    f'<Policies><SizeBasedTriggeringPolicy size="{roll_bytes} B"/></Policies>'
                    '<DefaultRolloverStrategy fileIndex="min" max="50"/></RollingFile>')
    else:
        appender = (f'<File name="requests" fileName={quoteattr(str(request_log))} immediateFlush="true">'
                    f'<PatternLayout pattern={quoteattr(pattern)}/></File>')
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<Configuration status="warn">\n<Appenders>\n'
            f'<Console name="stdout" target="SYSTEM_OUT"><PatternLayout pattern={quoteattr(pattern)}/></Console>\n'
            f'{appender}\n</Appenders>\n<Loggers>\n'
            f'<Logger name="kafka.request.logger" level="{level}" additivity="false">'
            '<AppenderRef ref="requests"/></Logger>\n'
            f'<Root level="{log_level.upper()}"><AppenderRef ref="stdout"/></Root>\n</Loggers>\n</Configuration>\n')


@dataclass(frozen=True)
class KafkaBroker:
    """A running Apache Kafka node, as the lab's clients and tests see it."""

    host: str
    port: int  # the first client listener's port
    log_path: Path
    version: str  # e.g. "4.4.0"
    ports: dict[str, int]  # security protocol -> port of its listener
    internal_port: int  # PLAINTEXT, for the lab's own admin calls (never in a capture)
    controller_port: int
    workdir: Path
    pid: int
    users: dict[str, str] = field(default_factory=dict, repr=False)
    certificate: Certificate | None = None
    startup_seconds: float = 0.0
    request_log: Path | None = None  # kafka.request.logger's file, when asked for

    def request_log_files(self) -> list[Path]:
        """The request log and its rolled-over files (.1 newest), oldest first."""
        if self.request_log is None:
            return []
        rolled = sorted(self.request_log.parent.glob(self.request_log.name + ".*"),
                        key=lambda p: int(p.suffix[1:]) if p.suffix[1:].isdigit() else 0, reverse=True)
        return [*rolled, self.request_log] if self.request_log.exists() else rolled

    @property
    def name(self) -> str:
        return f"apache-kafka {self.version}"

    @property
    def bootstrap(self) -> str:
        return address(self.host, self.port)

    @property
    def internal_bootstrap(self) -> str:
        return address("127.0.0.1", self.internal_port)

    def bootstrap_for(self, protocol: str) -> str:
        return address(self.host, self.ports[protocol])

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def _login(self, protocol: str, user: str | None) -> tuple[str, str]:
        user = user or next(iter(self.users))
        return user, self.users[user]

    def kafka_python_config(self, protocol: str | None = None, mechanism: str = "SCRAM-SHA-256",
                            user: str | None = None) -> dict[str, Any]:
        """Keyword arguments for kafka-python clients on one listener."""
        protocol = protocol or next(iter(self.ports))
        conf: dict[str, Any] = {"bootstrap_servers": self.bootstrap_for(protocol), "security_protocol": protocol}
        if protocol in ("SSL", "SASL_SSL"):
            conf["ssl_cafile"] = str(self.certificate.cert)
        if protocol.startswith("SASL"):
            name, password = self._login(protocol, user)
            conf.update(sasl_mechanism=mechanism, sasl_plain_username=name, sasl_plain_password=password)
        return conf

    def librdkafka_config(self, protocol: str | None = None, mechanism: str = "SCRAM-SHA-256",
                          user: str | None = None) -> dict[str, Any]:
        """Settings for confluent-kafka (librdkafka) clients on one listener."""
        protocol = protocol or next(iter(self.ports))
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_for(protocol), "security.protocol": protocol}
        if protocol in ("SSL", "SASL_SSL"):
            conf["ssl.ca.location"] = str(self.certificate.cert)
        if protocol.startswith("SASL"):
            name, password = self._login(protocol, user)
            conf.update({"sasl.mechanism": mechanism, "sasl.username": name, "sasl.password": password})
        return conf

    def set_client_quota(self, client_id: str, *, producer_byte_rate: float | None = None,
                         consumer_byte_rate: float | None = None, request_percentage: float | None = None) -> None:
        """Set (or, with None everywhere, remove) the quotas of a client id,
        through Kafka's own Admin API (the lab's Java helper)."""
        settings = {"producer_byte_rate": producer_byte_rate, "consumer_byte_rate": consumer_byte_rate,
                    "request_percentage": request_percentage}
        args = ["quota", self.internal_bootstrap, client_id]
        args += [f"{key}={'' if value is None else value}" for key, value in settings.items()]
        run_java_helper(args)


# ---------------------------------------------------------------- config --

@dataclass
class _Plan:
    version: str
    host: str
    ports: dict[str, int]
    internal_port: int
    controller_port: int
    workdir: Path
    users: dict[str, str]
    sasl_mechanisms: tuple[str, ...]
    settings: dict[str, str]
    features: dict[str, int]
    certificate: Certificate | None = None


def _server_properties(plan: _Plan, log_dirs: Path) -> str:
    major = int(plan.version.split(".")[0])
    names = {**{p: p for p in plan.ports}, "INTERNAL": "PLAINTEXT", "CONTROLLER": "PLAINTEXT"}
    client = [f"{p}://{address(plan.host, port)}" for p, port in plan.ports.items()]
    internal = f"INTERNAL://127.0.0.1:{plan.internal_port}"
    props: dict[str, str] = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{plan.controller_port}",
        "controller.listener.names": "CONTROLLER",
        "listeners": ",".join(client + [internal, f"CONTROLLER://127.0.0.1:{plan.controller_port}"]),
        "advertised.listeners": ",".join(client + [internal]),
        "listener.security.protocol.map": ",".join(f"{n}:{p}" for n, p in names.items()),
        "inter.broker.listener.name": "INTERNAL",
        "log.dirs": str(log_dirs),
        "num.partitions": "1",
        "default.replication.factor": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        "auto.create.topics.enable": "false",
        "group.initial.rebalance.delay.ms": "0",
    }
    if major >= 4:
        props.update({
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "share.coordinator.state.topic.num.partitions": "1",
        })
    if plan.certificate is not None:
        props.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(plan.certificate.bundle)})
    sasl = [p for p in plan.ports if p.startswith("SASL")]
    if sasl:
        props["sasl.enabled.mechanisms"] = ",".join(plan.sasl_mechanisms)
        for protocol in sasl:
            prefix = f"listener.name.{protocol.lower()}"
            if "PLAIN" in plan.sasl_mechanisms:
                users = " ".join(f'user_{u}="{pw}"' for u, pw in plan.users.items())
                props[f"{prefix}.plain.sasl.jaas.config"] = (
                    f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};")
            for mechanism in plan.sasl_mechanisms:
                if mechanism.startswith("SCRAM"):
                    props[f"{prefix}.{mechanism.lower()}.sasl.jaas.config"] = (
                        "org.apache.kafka.common.security.scram.ScramLoginModule required;")
    props.update(plan.settings)
    return "".join(f"{key}={value}\n" for key, value in props.items())


def _format_args(plan: _Plan) -> list[str]:
    args = []
    if any(p.startswith("SASL") for p in plan.ports):
        for mechanism in plan.sasl_mechanisms:
            if mechanism.startswith("SCRAM"):
                for user, password in plan.users.items():
                    args += ["--add-scram", f"{mechanism}=[name={user},password={password}]"]
    for name, level in sorted(plan.features.items()):
        args += ["--feature", f"{name}={level}"]
    return args


def _jvm_command(plan: _Plan, main: list[str], archive: list[str], heap_mb: int, log_level: str,
                 log4j2_config: Path | None = None) -> list[str]:
    classpath = ":".join(str(j) for j in kafka_jars(plan.version, log4j2=log4j2_config is not None))
    logging = [f"-Dlog4j2.configurationFile={log4j2_config}"] if log4j2_config is not None else []
    return [
        java_binary(), f"-Xms{heap_mb}m", f"-Xmx{heap_mb}m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
        "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true", *archive, *logging,
        f"-Dorg.slf4j.simpleLogger.defaultLogLevel={log_level}", "-Dorg.slf4j.simpleLogger.showDateTime=true",
        "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS", "-cp", classpath, *main,
    ]


def _formatted_storage(plan: _Plan, target: Path) -> None:
    """Copy a formatted storage template into `target`, formatting it first
    if this (version, users, features) has none yet."""
    args = _format_args(plan)
    key = hashlib.sha256(json.dumps([plan.version, CLUSTER_ID, args]).encode()).hexdigest()[:16]
    entry = maven.cache_dir() / f"kafka-{plan.version}" / "storage" / key
    with maven.locked(entry.with_name(key + ".lock")):
        if not (entry / "meta.properties").exists():
            staging = Path(tempfile.mkdtemp(prefix="format.", dir=entry.parent))
            config = staging / "format.properties"
            data = staging / "data"
            config.write_text(_server_properties(plan, data))
            cmd = _jvm_command(plan, ["kafka.tools.StorageTool", "format", "-t", CLUSTER_ID, "-c", str(config),
                                      *args], [], 256, "warn")
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0 or not (data / "meta.properties").exists():
                shutil.rmtree(staging, ignore_errors=True)
                # the arguments hold the SCRAM passwords: report the tool's last line only
                last = (done.stdout + done.stderr).strip().splitlines()[-1:] or ["no output"]
                raise LabError(f"kafka StorageTool format failed ({done.returncode}): {last[0][:300]}")
            shutil.rmtree(entry, ignore_errors=True)
            data.rename(entry)
            shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(entry, target)


# -------------------------------------------------------------- readiness --

def metadata_brokers(port: int, host: str = "127.0.0.1", timeout: float = 2.0) -> int:
    """Number of live brokers in a Metadata v1 response from host:port."""
    header = struct.pack(">hhih", 3, 1, 1, 9) + b"lab-ready"
    frame = header + struct.pack(">i", 0)  # no topics
    with socket.create_connection((host, port), timeout=timeout) as sock:
        body = send_frame(sock, frame)
    return struct.unpack_from(">i", body, 4)[0]



def _wait_ready(proc: subprocess.Popen, plan: _Plan, log_path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise LabError(f"Kafka {plan.version} exited with {proc.returncode} while starting; log:\n"
                           + _log_tail(log_path))
        try:
            if metadata_brokers(plan.internal_port) > 0:
                break
        except (OSError, struct.error):
            pass
        if time.monotonic() > deadline:
            raise LabError(f"Kafka {plan.version} not ready after {timeout:.0f}s; log:\n" + _log_tail(log_path))
        time.sleep(0.05)
    for port in plan.ports.values():  # started with the internal one; cheap to confirm
        wait_for_listener(plan.host, port, timeout=10)


def _log_tail(path: Path, chars: int = 3000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"


# ------------------------------------------------------------------ start --

def _plan(version: str, host: str, port: int | None, listeners: tuple[str, ...], users: dict[str, str] | None,
          sasl_mechanisms: tuple[str, ...], settings: dict[str, str], features: dict[str, int],
          workdir: Path) -> _Plan:
    version = full_version(version)
    if not listeners:
        raise LabError("at least one listener is needed")
    for protocol in listeners:
        if protocol not in SECURITY_PROTOCOLS:
            raise LabError(f"unknown listener {protocol!r} (one of {', '.join(SECURITY_PROTOCOLS)})")
    if len(set(listeners)) != len(listeners):
        raise LabError("each security protocol can have one listener")
    for mechanism in sasl_mechanisms:
        if mechanism not in SASL_MECHANISMS:
            raise LabError(f"unknown SASL mechanism {mechanism!r} (one of {', '.join(SASL_MECHANISMS)})")
    users = dict(DEFAULT_USERS if users is None else users)
    for name, password in users.items():
        if not (_SAFE.match(name) and _SAFE.match(password)):
            raise LabError(f"user names and passwords may hold letters, digits and ._- only (user {name!r})")
    if any(p.startswith("SASL") for p in listeners) and not users:
        raise LabError("a SASL listener needs at least one user")
    ports: dict[str, int] = {}
    for i, protocol in enumerate(listeners):
        chosen = port if (i == 0 and port is not None) else free_port(host)
        if not port_is_free(chosen, host):
            raise LabError(f"port {chosen} is already in use on {host}")
        ports[protocol] = chosen
    internal, controller = free_port(), free_port()
    while controller == internal:
        controller = free_port()
    return _Plan(version, host, ports, internal, controller, workdir, users, tuple(sasl_mechanisms),
                 dict(settings), dict(features))


def _settings(auto_create_topics: bool, group_initial_rebalance_delay_ms: int,
              config: dict[str, Any] | None) -> dict[str, str]:
    settings = {
        "auto.create.topics.enable": "true" if auto_create_topics else "false",
        "group.initial.rebalance.delay.ms": str(int(group_initial_rebalance_delay_ms)),
    }
    for key, value in (config or {}).items():
        settings[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return settings


def start_kafka(
    version: str = "4",
    port: int | None = None,
    *,
    host: str = "127.0.0.1",
    listeners: tuple[str, ...] = ("PLAINTEXT",),
    users: dict[str, str] | None = None,
    sasl_mechanisms: tuple[str, ...] = SASL_MECHANISMS,
    auto_create_topics: bool = False,
    group_initial_rebalance_delay_ms: int = 0,
    config: dict[str, Any] | None = None,
    features: dict[str, int] | None = None,
    workdir: str | os.PathLike | None = None,
    heap_mb: int = 384,
    log_level: str = "warn",
    startup_timeout: float = 90.0,
    detach: bool = False,
    request_log: str | None = None,
    request_log_roll_bytes: int = 0,
) -> KafkaBroker:
    """Start a node and wait until it is ready; `stop_kafka(broker)` ends it.
    With `detach`, the JVM gets its own session (it outlives the caller).
    `request_log` ("DEBUG" or "TRACE"): log4j2 instead of slf4j-simple, and
    kafka.request.logger at that level into `broker.request_log`
    (workdir/request.log; rolled over at `request_log_roll_bytes` if given)."""
    if request_log is not None and request_log.upper() not in REQUEST_LOG_LEVELS:
        raise LabError(f"request_log is one of {', '.join(REQUEST_LOG_LEVELS)}, not {request_log!r}")
    own_workdir = workdir is None
    work = Path(tempfile.mkdtemp(prefix="kdissect-kafka-")) if own_workdir else Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    try:
        return _start(version, port, host, listeners, users, sasl_mechanisms, auto_create_topics,
                      group_initial_rebalance_delay_ms, config, features, work, heap_mb, log_level,
                      startup_timeout, detach, request_log, request_log_roll_bytes)
    except BaseException:
        if own_workdir:
            shutil.rmtree(work, ignore_errors=True)
        raise


def _start(version: str, port: int | None, host: str, listeners: tuple[str, ...], users: dict[str, str] | None,
           sasl_mechanisms: tuple[str, ...], auto_create_topics: bool, group_initial_rebalance_delay_ms: int,
           config: dict[str, Any] | None, features: dict[str, int] | None, work: Path, heap_mb: int,
           log_level: str, startup_timeout: float, detach: bool, request_log: str | None = None,
           request_log_roll_bytes: int = 0) -> KafkaBroker:
    plan = _plan(version, host, port, tuple(listeners), users, tuple(sasl_mechanisms),
                 _settings(auto_create_topics, group_initial_rebalance_delay_ms, config), dict(features or {}), work)
    if any(p in ("SSL", "SASL_SSL") for p in plan.ports):
        plan.certificate = self_signed(work / "tls")
    data = work / "data"
    shutil.rmtree(data, ignore_errors=True)
    _formatted_storage(plan, data)
    properties = work / "server.properties"
    properties.write_text(_server_properties(plan, data))
    properties.chmod(0o600)  # it holds the PLAIN users' passwords

    archive_dir = maven.cache_dir() / f"kafka-{plan.version}"
    archive = archive_dir / "broker.jsa"
    log4j2_config = request_log_path = None
    if request_log is not None:
        request_log_path = work / "request.log"
        log4j2_config = work / "log4j2.xml"
        log4j2_config.write_text(request_log_config(request_log_path, request_log.upper(), log_level,
                                                    request_log_roll_bytes))
    if log4j2_config is not None:
        archive_flags = []  # the class-data archive belongs to the slf4j-simple class path
    elif archive.exists():
        archive_flags = [f"-XX:SharedArchiveFile={archive}"]
    else:  # this run's clean stop writes the class-data archive the next starts use
        archive_flags = [f"-XX:ArchiveClassesAtExit={work / 'broker.jsa.new'}"]
    cmd = _jvm_command(plan, ["kafka.Kafka", str(properties)], archive_flags, heap_mb, log_level, log4j2_config)
    log_path = work / "broker.log"
    started = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=work, start_new_session=detach)
    try:
        _wait_ready(proc, plan, log_path, startup_timeout)
    except BaseException:
        stop_process(proc, signal.SIGKILL, timeout=10)
        raise
    broker = KafkaBroker(plan.host, next(iter(plan.ports.values())), log_path, plan.version, dict(plan.ports),
                         plan.internal_port, plan.controller_port, work, proc.pid, users=plan.users,
                         certificate=plan.certificate, startup_seconds=time.monotonic() - started,
                         request_log=request_log_path)
    _PROCESSES[proc.pid] = proc
    return broker


_PROCESSES: dict[int, subprocess.Popen] = {}


def stop_kafka(broker: KafkaBroker, *, remove_workdir: bool = True, timeout: float = 30.0) -> None:
    """Stop the node cleanly (SIGTERM: controlled shutdown), killing it after
    `timeout` seconds; keep the class-data archive its first stop wrote."""
    proc = _PROCESSES.pop(broker.pid, None)
    if proc is not None:
        stop_process(proc, signal.SIGTERM, timeout=timeout)
    else:  # started by another process (the command line): only the pid is known
        _stop_pid(broker.pid, timeout)
    new_archive = broker.workdir / "broker.jsa.new"
    if new_archive.exists() and new_archive.stat().st_size > 0:
        target = maven.cache_dir() / f"kafka-{broker.version}" / "broker.jsa"
        with contextlib.suppress(OSError):
            if not target.exists():
                shutil.move(str(new_archive), str(target))
    if remove_workdir:
        shutil.rmtree(broker.workdir, ignore_errors=True)


def _stop_pid(pid: int, timeout: float) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (exited, not yet reaped) is not alive
    with contextlib.suppress(OSError):
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    return True


@contextlib.contextmanager
def kafka_broker(version: str = "4", port: int | None = None, **options: Any) -> Iterator[KafkaBroker]:
    """Run an Apache Kafka node while the block runs (options: `start_kafka`).
    Its work directory (config, data, log, certificate) is removed after,
    unless it was given as `workdir=`."""
    broker = start_kafka(version, port, **options)
    try:
        yield broker
    finally:
        stop_kafka(broker, remove_workdir=options.get("workdir") is None)
