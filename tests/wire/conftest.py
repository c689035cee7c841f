"""Fixtures for the capture-reading tests: the shared loopback recording and
its packets, loaded once per test module."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import impair
from tests.support.pcaps import shared_recording


@pytest.fixture(scope="module")
def clean() -> Path:
    return shared_recording()


@pytest.fixture(scope="module")
def trace(clean: Path) -> impair.Trace:
    return impair.load_pcap(clean)
