"""tcpdump on loopback while a block of code runs."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

from tools.lab.net import LabError, stop_process


@contextlib.contextmanager
def tcpdump(
    out: str | os.PathLike, port: int | tuple[int, ...], interface: str = "lo", snaplen: int = 0,
    settle: float = 0.3,
) -> Iterator[Path]:
    """Capture `tcp port PORT` (several ports: any of them) on `interface`
    into `out` while the block runs.

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
    ports = (port,) if isinstance(port, int) else tuple(port)
    bpf = " or ".join(f"tcp port {p}" for p in ports)
    # -Z root: Debian's tcpdump otherwise drops to user 'tcpdump', which may not
    # be allowed to write into the checkout. -U: write packet by packet.
    # --immediate-mode: without it packets wait in a TPACKET_V3 block and a
    # SIGINT soon after the workload loses them.
    cmd = [tcpdump_path, "-i", interface, "-s", str(snaplen), "-U", "--immediate-mode", "-B", "262144",
           "-Z", "root", "-w", str(out), bpf]
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
        stop_process(proc, signal.SIGINT, timeout=15)
        dropped = dropped_packets(stderr_text())
        err.close()
    if dropped:
        # The capture is missing packets: say so loudly rather than hand out a lossy file.
        print(f"tcpdump: {dropped} packets dropped by the kernel while writing {out}", file=sys.stderr)


def dropped_packets(tcpdump_stderr: str) -> int:
    """Sum of tcpdump's 'N packets dropped by kernel/interface' lines."""
    total = 0
    for line in tcpdump_stderr.splitlines():
        words = line.split()
        if len(words) >= 4 and words[1:3] == ["packets", "dropped"] and words[0].isdigit():
            total += int(words[0])
    return total
