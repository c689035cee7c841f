"""The benchmarks run kdissect's own functions, but no test runs them: every
name a benchmark script imports from kdissect must still exist, so a change
that renames or removes one fails here, not in the next benchmark run (a
removed `kdissect.spark.dissect.ACCOUNTING` broke bench_read_stage.py
unnoticed for a day)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _kdissect_imports(script: Path) -> list[tuple[str, str]]:
    """(module, name) of every `from kdissect... import name` in `script`, at any depth."""
    found = []
    for node in ast.walk(ast.parse(script.read_text(), str(script))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "kdissect":
            found.extend((node.module, alias.name) for alias in node.names)
    return found


@pytest.mark.parametrize("script", sorted(BENCHMARKS.glob("*.py")), ids=lambda path: path.name)
def test_benchmark_imports_resolve(script: Path) -> None:
    missing = []
    for module_name, name in _kdissect_imports(script):
        module = importlib.import_module(module_name)
        if hasattr(module, name):
            continue
        try:  # a submodule imported by name
            importlib.import_module(f"{module_name}.{name}")
        except ImportError:
            missing.append(f"{module_name}.{name}")
    assert not missing, f"{script.name} imports names kdissect no longer has: {missing}"
