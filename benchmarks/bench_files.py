"""A benchmark's files written whole or not at all, through kdissect's own
atomic write: an interrupted run leaves the earlier results, never half a file."""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import AbstractContextManager
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parent.parent


def _atomic() -> Any:
    if str(REPO) not in sys.path:
        sys.path.append(str(REPO))  # after any PYTHONPATH, as the code under test comes first
    # imported here, not at the top: a benchmark timing another checkout in-process
    # must not have this checkout's kdissect imported before it starts
    from kdissect.shared import atomic

    return atomic


def write_result(path: Path | str, data: str | bytes) -> None:
    """Replace `path` with `data` atomically (its directory made if missing)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    _atomic().write_atomically(path, data)


def open_result(path: Path | str) -> AbstractContextManager[IO[bytes]]:
    """A binary stream that replaces `path` when its `with` block ends without an error."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return _atomic().atomic_file(path, "wb")


_COMPILED_PROBE = ("import json, kdissect.conn.pipeline, kdissect.wire.capture; from kdissect import native; "
                   "print(json.dumps(native.running_native()))")


def compiled_modules(python: str, env: dict[str, str], checkout: Path = REPO) -> list[str]:
    """The per-packet modules `python` runs from their compiled build with
    `env` in `checkout` (none: a missing or stale build, kdissect/native.py,
    e.g. a new worktree whose copied build/ has not been renewed by
    tools/build_native.py)."""
    out = subprocess.run([python, "-c", _COMPILED_PROBE], capture_output=True, text=True, check=True,
                         cwd=checkout, env=env)
    return json.loads(out.stdout)


# above this share of the CPU time taken by the host, a stretch's figures are
# the host's noise as much as the code's (wall times most, CPU times through caches)
STEAL_WARN_SHARE = 0.05


def cpu_ticks(stat_text: str) -> tuple[int, int]:
    """(steal ticks, all ticks) of the machine from /proc/stat's text: its
    first line, `cpu user nice system idle iowait irq softirq steal guest
    guest_nice` (proc(5)); guest time is already counted in user time, so
    the total is the first eight columns."""
    first = stat_text.split("\n", 1)[0].split()
    if not first or first[0] != "cpu":
        raise ValueError("no cpu line first in /proc/stat")
    columns = [int(value) for value in first[1:9]]
    columns += [0] * (8 - len(columns))  # kernels before 2.6.11 had no steal column
    return columns[7], sum(columns)


class StealClock:
    """The CPU time the host took from this virtual machine (steal) while a
    stretch of a benchmark ran, as a share of all the machine's CPU time
    then: the noise a shared host adds, said beside the figures it moves."""

    def __init__(self) -> None:
        self._start = self._now()

    @staticmethod
    def _now() -> tuple[int, int] | None:
        try:
            with open("/proc/stat") as stat:
                return cpu_ticks(stat.read())
        except (OSError, ValueError):
            return None  # not Linux: no figure

    def share(self) -> float | None:
        """The steal share since the clock was made (None without /proc/stat)."""
        end = self._now()
        if self._start is None or end is None or end[1] <= self._start[1]:
            return None
        return (end[0] - self._start[0]) / (end[1] - self._start[1])


def steal_said(share: float | None) -> str:
    """A steal share as a run's line says it."""
    if share is None:
        return "steal unknown"
    return f"steal {share:.1%}" + ("  HOST BUSY: FIGURES MOVED BY IT" if share > STEAL_WARN_SHARE else "")
