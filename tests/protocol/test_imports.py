"""The protocol package imports without cycles.

The graph is read from the source (`ast`), not from a running interpreter:
every import statement of a kdissect.protocol module counts, at module level
or inside a function (a function-level import can hide a cycle that only
shows on the path that runs it), except those under ``if TYPE_CHECKING:``.
`importlib.import_module` calls on a constant prefix count as imports of
every module under that prefix. Then each module is imported first thing in
a fresh interpreter: any import order works.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.paths import REPO

PACKAGE = REPO / "kdissect" / "protocol"
PREFIX = "kdissect.protocol"


def module_names(package: Path = PACKAGE, prefix: str = PREFIX) -> dict[str, Path]:
    """Dotted name -> file of every module of the package (generated ones included)."""
    names = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join([prefix, *parts])] = path
    return names


MODULES = module_names()


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(tree: ast.AST, found: set[str], nested: list[str], depth: int = 0,
             modules: dict[str, Path] = MODULES, prefix: str = PREFIX) -> None:
    """Collect imported modules under `prefix`; note imports below module level."""
    for node in ast.iter_child_nodes(tree):
        if _is_type_checking(node):
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                targets.append(candidate if candidate in modules else node.module)
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("importlib.import_module", "import_module"):
            argument = node.args[0] if node.args else None
            if isinstance(argument, ast.JoinedStr) and argument.values and \
                    isinstance(argument.values[0], ast.Constant):
                targets = [name for name in modules if name.startswith(argument.values[0].value)]
            elif isinstance(argument, ast.Constant):
                targets = [argument.value]
        for target in targets:
            if target == prefix or target.startswith(prefix + "."):
                found.add(target)
                if depth and isinstance(node, (ast.Import, ast.ImportFrom)):
                    nested.append(target)
        inner = depth + isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))
        _imports(node, found, nested, inner, modules, prefix)


def import_graph() -> tuple[dict[str, set[str]], dict[str, list[str]]]:
    """(module -> modules it imports, module -> imports below module level)."""
    graph: dict[str, set[str]] = {}
    nested: dict[str, list[str]] = {}
    for name, path in MODULES.items():
        found: set[str] = set()
        below: list[str] = []
        _imports(ast.parse(path.read_text()), found, below)
        found.discard(name)
        graph[name] = {target for target in found if target != PREFIX}  # the package runs first anyway
        if below:
            nested[name] = below
    return graph, nested


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (as a path that ends where it starts), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_graph_reader_sees_cycles_and_nested_imports() -> None:
    """The checker itself can fail: a made-up cycle and a function-level import are found."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None
    found: set[str] = set()
    nested: list[str] = []
    source = ("from kdissect.protocol import primitives\n"
              "def f():\n    from kdissect.protocol.codec import decode_request\n"
              "if TYPE_CHECKING:\n    from kdissect.protocol.skim import skim_request\n")
    _imports(ast.parse(source), found, nested)
    assert found == {f"{PREFIX}.primitives", f"{PREFIX}.codec"} and nested == [f"{PREFIX}.codec"]


def test_the_package_has_no_import_cycle() -> None:
    graph, _nested = import_graph()
    assert graph[PREFIX] >= {f"{PREFIX}.codec", f"{PREFIX}.headers", f"{PREFIX}.apis"}  # loaded on demand
    assert graph[f"{PREFIX}.codec"] >= {f"{PREFIX}.objects", f"{PREFIX}.consumer", f"{PREFIX}.headers"}
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_the_model_is_plain_data() -> None:
    """The model imports nothing that decodes or encodes."""
    graph, _nested = import_graph()
    reachable: set[str] = set()
    pending = [f"{PREFIX}.model"]
    while pending:
        for target in graph[pending.pop()]:
            if target not in reachable:
                reachable.add(target)
                pending.append(target)
    assert not reachable & {f"{PREFIX}.{m}" for m in ("codec", "objects", "generator", "consumer", "headers", "skim")}


def test_no_function_level_imports_inside_the_package() -> None:
    _graph, nested = import_graph()
    assert nested == {}


@pytest.mark.parametrize("name", sorted(n for n in MODULES if not any(f"._generated.{kind}_" in n for kind in ("api", "bodies"))
                                         or n.endswith(("api_000", "bodies_000", "bodies_embedded"))))
def test_each_module_imports_first_in_a_fresh_interpreter(name: str) -> None:
    code = f"import {name}"
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
