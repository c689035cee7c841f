"""Shared test fixtures. Helpers for one area live in tests/support/."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CAPTURES = REPO / "captures"
# ../shared beside the checkout holds the Kafka spec; absent on a user's machine.
SHARED = REPO.parent / "shared"


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
