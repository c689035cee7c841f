"""Loopback plumbing shared by the lab's brokers and recorders: free ports,
waiting for a listener, and a private network namespace for recordings."""

from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


class LabError(RuntimeError):
    """A broker, tcpdump or a build step of the lab could not be run."""


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


def run_in_private_network(python_args: list[str], cwd: str | os.PathLike | None = None) -> int | None:
    """Re-run `python python_args...` (e.g. ["-m", "tools.lab", "record"])
    inside a new network namespace, so the lab's loopback traffic cannot mix
    with anyone else's (another broker on 9092, other tests). Returns the
    child's exit status, or None when already inside one or namespaces are
    not available (the caller then goes on in the shared network)."""
    if os.environ.get(NETNS_ENV) == "1" or not private_network_available():
        return None
    env = dict(os.environ, **{NETNS_ENV: "1"})
    return subprocess.run(["unshare", "--net", sys.executable, *python_args], env=env, cwd=cwd).returncode


def family(host: str) -> int:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the kernel picks it)."""
    with socket.socket(family(host), socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(family(host), socket.SOCK_STREAM) as sock:
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


def stop_process(proc: subprocess.Popen, sig: int, timeout: float) -> None:
    """Send `sig`, wait up to `timeout` seconds, then kill."""
    if proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def address(host: str, port: int) -> str:
    """host:port, with brackets around an IPv6 host."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def send_frame(sock: socket.socket, frame: bytes) -> bytes:
    """Send one size-prefixed Kafka frame and return the size-prefixed answer's body."""
    sock.sendall(struct.pack(">i", len(frame)) + frame)
    size = struct.unpack(">i", _recv_exact(sock, 4))[0]
    return _recv_exact(sock, size)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return bytes(buf)


@dataclass(frozen=True)
class Broker:
    """A running broker as clients see it: where to connect, and its log."""

    host: str
    port: int
    log_path: Path
    name: str = "broker"  # e.g. "tansu 0.6.0", "apache-kafka 4.4.0"

    @property
    def bootstrap(self) -> str:
        return address(self.host, self.port)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def _queued_bytes(port: int) -> int:
    """Bytes waiting in send or receive queues of TCP sockets with `port` at
    either end (from /proc/net/tcp and tcp6: this network namespace only)."""
    total = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, remote, queues = fields[1], fields[2], fields[4]
            if int(local.rsplit(":", 1)[1], 16) == port or int(remote.rsplit(":", 1)[1], 16) == port:
                tx, rx = queues.split(":")
                total += int(tx, 16) + int(rx, 16)
    return total


def wait_until_drained(port: int, timeout: float = 60.0, quiet: float = 0.5) -> bool:
    """Wait until no TCP socket on `port` has bytes queued, for `quiet`
    seconds in a row: what a client wrote without waiting for an answer
    (acks=0) has reached the broker, and the broker's answers the client.
    False if that did not happen within `timeout`."""
    deadline = time.monotonic() + timeout
    calm_since = None
    while time.monotonic() < deadline:
        if _queued_bytes(port) == 0:
            calm_since = calm_since or time.monotonic()
            if time.monotonic() - calm_since >= quiet:
                return True
        else:
            calm_since = None
        time.sleep(0.05)
    return False
