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
    """The files holding slow tests (Spark, the clusters, notebooks) come
    first, each file's tests in their own order. Under xdist's default
    --loadscope-reorder the files are handed out largest (most tests) first
    and this order only breaks ties; with --no-loadscope-reorder they would
    go out in this order (not yet measured in a full run:
    benchmarks/README.md, "branch ci-time")."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)  # a stable sort


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
