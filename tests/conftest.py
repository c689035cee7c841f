"""Shared test fixtures. Helpers for one area live in tests/support/."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parent.parent
CAPTURES = REPO / "captures"
# ../shared beside the checkout holds the Kafka spec; absent on a user's machine.
SHARED = REPO.parent / "shared"

# The text faces fit COLUMNS when it is set, even on a pipe (as `ls` does):
# the commands the tests run see no width from the shell that ran pytest; a
# test that wants one sets it for its own child.
os.environ.pop("COLUMNS", None)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files whose tests take minutes (marked `minutes`: Spark clusters,
    stores) come first, then the files holding slow tests (Spark,
    notebooks), each file's tests in their own order: with
    --no-loadscope-reorder (pyproject's addopts) xdist hands the files to
    its workers in this order, so the longest do not start last."""
    def rank(marker: str) -> set:
        return {item.path for item in items if item.get_closest_marker(marker)}

    minutes_files, slow_files = rank("minutes"), rank("slow")
    items.sort(key=lambda item: 0 if item.path in minutes_files else 1 if item.path in slow_files else 2)  # stable


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def captures_dir() -> Path:
    return CAPTURES


@pytest.fixture(scope="session")
def tshark() -> str:
    path = shutil.which("tshark")
    if path is None:
        pytest.fail("tshark is not installed: run tools/setup.sh (it installs Debian's tshark)")
    return path


@contextlib.contextmanager
def small_tmpfs(mount_point: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (e.g. "64k") mounted at `mount_point` (created): a
    real file system that fills up. The tests run as root in CI; elsewhere
    mounting may not be permitted, and the test is skipped."""
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        # lazy: a failing test may still hold a file open there (in its traceback)
        subprocess.run(["umount", "--lazy", str(mount_point)], check=True)


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs under tmp_path (see `small_tmpfs`)."""
    with small_tmpfs(tmp_path / "full", "64k") as mount_point:
        yield mount_point
