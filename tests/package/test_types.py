"""mypy checks the package (configuration: pyproject.toml's [tool.mypy]),
strict for the modules mypyc compiles: their annotations are what the
compiled build enforces at run time (kdissect/native.py). mypy comes with the
`native` extra (`make test` installs every extra)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kdissect import native
from tests.support.paths import REPO

pytestmark = pytest.mark.minutes  # mypy over the package: over a minute, so handed out first


def _cache_dir() -> Path:
    """mypy's incremental cache, outside the checkout (as the compiled build's,
    tools/build_native.py): a fresh clone then re-checks only what changed
    (~50 s cold, ~1 s warm here). mypy validates every entry against the
    source's hash and its own version, so a stale entry is re-checked."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kdissect-mypy"


def _mypy(*args: str) -> subprocess.CompletedProcess[str]:
    try:
        import mypy  # noqa: F401
    except ImportError:  # pragma: no cover
        raise AssertionError("mypy is not installed: pip install -e '.[native]'") from None
    return subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(_cache_dir()), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=1800)


def test_the_strict_modules_are_the_compiled_ones() -> None:
    config = (REPO / "pyproject.toml").read_text()
    strict = re.search(r'module = \[([^\]]*)\]\s*\ndisallow_untyped_defs = true', config)
    assert strict is not None, "the strict override of [tool.mypy] is missing"
    assert sorted(re.findall(r'"kdissect\.([\w.]+)"', strict.group(1))) == sorted(native.NATIVE_MODULES)


def test_mypy_finds_a_type_error(tmp_path: Path) -> None:
    """The checker can fail (the same interpreter, mypy and configuration as below)."""
    wrong = tmp_path / "wrong.py"
    wrong.write_text("count: int = 'three'\n")
    result = _mypy(str(wrong))
    assert result.returncode == 1 and "Incompatible types in assignment" in result.stdout


def test_the_package_type_checks() -> None:
    result = _mypy()  # files and options from pyproject.toml
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "Success" in result.stdout
