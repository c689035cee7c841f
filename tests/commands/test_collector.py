"""The command line's cyclic-collector setting (kdissect.cli._fewer_collections):
the process `kdissect` runs in is its own, so its entry point raises the
young generation's threshold for the whole run; `main` (in-process, as the
tests and the Python API's callers run it) leaves the caller's setting alone."""

from __future__ import annotations

import subprocess
import sys

from tests.support.paths import REPO

_AFTER_ENTRY = """
import gc, sys
from kdissect import cli
before = gc.get_threshold()
sys.argv = ["kdissect", "--version"]
try:
    cli.entry()
except SystemExit:
    pass
print(*before, *gc.get_threshold())
"""

_AFTER_MAIN = """
import gc
from kdissect import cli
gc.set_threshold(1000, 20, 30)
cli.main(["--version"])
print(*gc.get_threshold())
"""


def _run(code: str) -> list[int]:
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [int(word) for word in done.stdout.split()[-6:] if word.isdigit()]


def test_entry_raises_the_young_threshold_only() -> None:
    from kdissect.cli import CLI_COLLECTION_THRESHOLD

    *before, young, middle, old = _run(_AFTER_ENTRY)
    assert before == [700, 10, 10]  # (the interpreter's defaults: the test means something)
    assert young == CLI_COLLECTION_THRESHOLD > before[0]
    assert (middle, old) == tuple(before[1:])


def test_main_leaves_the_callers_setting() -> None:
    assert _run(_AFTER_MAIN)[-3:] == [1000, 20, 30]
