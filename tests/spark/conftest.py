"""Fixtures for the Spark job tests."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from tests.support.spark import local_session


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """One small local SparkSession per test module (a module that needs
    another shape defines its own)."""
    with local_session(cores=2, shuffle_partitions=4) as session:
        yield session
