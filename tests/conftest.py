"""Shared test fixtures. Helpers for one area live in tests/support/."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

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
