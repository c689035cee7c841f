"""Problem codes (kdissect.model.problems): the catalog, the README's table and the
code that writes them agree.

The codes written are read from the source (`ast`): the first argument of
every `add_problem(...)` call in the package. A code in the catalog that no
call writes would be documented but never seen; a call whose code is not in
the catalog would fail only when that path runs (`code_of`).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from kdissect.model.problems import CATALOG, code_of
from tests.support.paths import REPO



def _written_codes() -> dict[str, list[str]]:
    """code -> the places (file:line) whose add_problem call writes it."""
    written: dict[str, list[str]] = {}
    for path in sorted((REPO / "kdissect").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_problem":
                first = node.args[0] if node.args else None
                where = f"{path.relative_to(REPO)}:{node.lineno}"
                assert isinstance(first, ast.Constant) and isinstance(first.value, str), \
                    f"{where}: the code is not a literal, so it cannot be checked here"
                written.setdefault(first.value, []).append(where)
    return written


def test_every_code_written_is_in_the_catalog_and_every_catalog_code_is_written() -> None:
    written = _written_codes()
    assert sorted(set(written) - set(CATALOG)) == []
    assert sorted(set(CATALOG) - set(written)) == []


def test_the_readme_table_is_the_catalog() -> None:
    text = (REPO / "README.md").read_text()
    section = text.split("#### Problem codes", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| `([a-z0-9-]+)` \| (.+?) \|$", section, re.MULTILINE)
    assert rows == list(CATALOG.items())


def test_an_unknown_code_is_refused() -> None:
    with pytest.raises(KeyError):
        code_of("no-such-problem")
    assert code_of("no-response") == "no-response"
