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
