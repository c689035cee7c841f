"""The optional extras declared in pyproject.toml cover what each face imports.

Read from the source (`ast`, imports at any depth, except under
``if TYPE_CHECKING:``): every third-party module a kdissect module imports is
installed by the base dependencies, or, inside a face that needs an extra
(`FACES`), by that extra, and is then named in `kdissect.shared.extras.EXTRAS` so the
face stops with one line naming the extra instead of an internal error. The
distribution that installs a module is asked of this environment's metadata
(`importlib.metadata.packages_distributions`), not written down here.
"""

from __future__ import annotations

import ast
import re
import sys
from functools import cache
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from kdissect.shared.extras import EXTRAS
from tests.support.paths import REPO

tomllib = pytest.importorskip("tomllib")  # (Python 3.11+)

PACKAGE = REPO / "kdissect"

# extra -> the parts of the package that run only with it installed
FACES: dict[str, tuple[str, ...]] = {
    "spark": ("kdissect/spark/", "kdissect/commands/spark.py"),
    "scapy": ("kdissect/scapy/",),
    "report": ("kdissect/report/", "kdissect/commands/report.py"),
    "webhdfs": ("kdissect/wire/webhdfs.py",),
}


def _name(requirement: str) -> str:
    """The normalised distribution name of a requirement ("vl-convert-python>=1.7" -> "vl-convert-python")."""
    return re.sub(r"[-_.]+", "-", re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0]).lower()


def _declared() -> tuple[set[str], dict[str, set[str]]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    base = {_name(r) for r in project["dependencies"]}
    extras = {extra: {_name(r) for r in reqs} for extra, reqs in project["optional-dependencies"].items()}
    return base, extras


def _third_party_imports(path: Path) -> set[str]:
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name.split(".")[0] for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and not child.level and child.module:
                found.add(child.module.split(".")[0])
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return {m for m in found if m not in sys.stdlib_module_names and m not in ("kdissect", "__future__")}


def _face(relative: str) -> str | None:
    return next((extra for extra, parts in FACES.items() if relative.startswith(parts)), None)


@cache
def _installed() -> dict[str, list[str]]:
    return packages_distributions()  # (a walk over every installed distribution)


def _distributions(module: str) -> set[str]:
    names = _installed().get(module)
    assert names, f"{module} is imported by kdissect but not installed here (tools/setup.sh installs every extra)"
    return {_name(n) for n in names}


def test_every_import_is_installed_by_the_base_or_the_faces_extra() -> None:
    base, extras = _declared()
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(REPO).as_posix()
        extra = _face(relative)
        for module in sorted(_third_party_imports(path)):
            dists = _distributions(module)
            if dists & base:
                continue
            if extra is None:
                wrong.append(f"{relative}: {module} is in no base dependency")
            elif not dists & extras[extra]:
                wrong.append(f"{relative}: {module} is not installed by kdissect[{extra}]")
            elif module not in EXTRAS[extra]:
                wrong.append(f"{relative}: {module} is not named in EXTRAS[{extra!r}] (no one-line message)")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_each_extra_installs_the_modules_its_check_names(extra: str) -> None:
    _, extras = _declared()
    for module in EXTRAS[extra]:
        assert _distributions(module) & extras[extra], f"kdissect[{extra}] does not install {module}"


def test_the_faces_are_the_extras() -> None:
    assert set(FACES) == set(EXTRAS)
