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
