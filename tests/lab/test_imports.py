"""The capture lab (tools/lab) imports without cycles: a module that needs a
version or a helper takes it from the module below it, never from one that
imports it back (read from the source as tests/protocol/test_imports.py
reads the protocol package, function-level imports included)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.protocol.test_imports import _imports, find_cycle, module_names
from tests.support.paths import REPO

LAB = module_names(REPO / "tools" / "lab", "tools.lab")


def _graph() -> dict[str, set[str]]:
    graph = {}
    for name, path in LAB.items():
        found: set[str] = set()
        _imports(ast.parse(path.read_text()), found, [], 0, LAB, "tools.lab")
        graph[name] = {target for target in found if target not in (name, "tools.lab")}
    return graph


def test_the_lab_has_no_import_cycle() -> None:
    graph = _graph()
    assert "tools.lab.java_client" in graph["tools.lab.apache_kafka"]  # the reader sees the lab's imports
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


@pytest.mark.parametrize("name", sorted(name for name in LAB if not name.endswith("__main__")))
def test_each_lab_module_imports_first(name: str) -> None:
    run = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
