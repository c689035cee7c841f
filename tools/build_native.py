"""Compile kdissect's per-packet modules with mypyc, and its C extensions (see kdissect/native.py).

    .venv/bin/python tools/build_native.py [--force]

Builds `kdissect.native.NATIVE_MODULES` into build/native/kdissect/ and
writes its stamp (STAMP) last, so a failed or interrupted build is never
used. The stamp names the interpreter, mypy's version and every source the
build compiled against: the compiled modules and the kdissect modules they
import, transitively, read from their import statements (`compiled_sources`).
Does nothing when the build there is current (same interpreter, same mypy,
same set of sources with the same contents); when only the sources' stat
data changed (a touch, a fresh clone) it rewrites the stamp without
compiling. Needs mypy (the `native` extra), a
C compiler and the interpreter's headers (Debian: gcc, python3-dev). Exits
non-zero with a one-line reason when it cannot build; kdissect then runs
its plain Python modules.
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kdissect import native  # noqa: E402
from kdissect.blake2 import blake2b  # noqa: E402

PACKAGE = ROOT / "kdissect"
# one shared library for the group: calls between the modules stay C calls
GROUP = "kdissect.native_group"

SETUP = """\
from setuptools import Extension, setup
from mypyc.build import mypycify

setup(name="kdissect-native", py_modules=[],
      ext_modules=mypycify({paths!r}, opt_level="3", group_name={group!r})
      + [Extension(name, [source], extra_compile_args=["-O2"]) for name, source in {extensions!r}])
"""


def _kdissect_imports(path: Path, package: str) -> set[str]:
    """The kdissect modules one source imports (any import statement, at
    any level, TYPE_CHECKING ones included: mypyc reads them for types)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name.startswith(package + ".")}


def compiled_sources(package_dir: Path) -> list[Path]:
    """The compiled modules and every kdissect module they import, directly
    or through each other, sorted: what a build is compiled against."""
    package = package_dir.name
    pending = [package_dir.joinpath(*name.split(".")).with_suffix(".py") for name in native.NATIVE_MODULES]
    seen: set[Path] = set()
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        # the subpackages holding it run first: their __init__ is part of what loads
        for parent in path.parents:
            if parent == package_dir:
                break
            if (parent / "__init__.py").is_file():
                pending.append(parent / "__init__.py")
        for name in _kdissect_imports(path, package):
            parts = name.split(".")[1:]
            for candidate in (package_dir.joinpath(*parts).with_suffix(".py"),
                              package_dir.joinpath(*parts, "__init__.py")):
                if candidate.is_file():
                    pending.append(candidate)
    return sorted(seen)


def extension_sources(package_dir: Path) -> list[Path]:
    """The C sources of `native.C_EXTENSIONS`, sorted."""
    return sorted(package_dir.joinpath(*name.split(".")).with_suffix(".c") for name in native.C_EXTENSIONS)


def compiler_version() -> str:
    """The compiler, as the stamp records it."""
    try:
        return f"mypy-{importlib.metadata.version('mypy')}"
    except importlib.metadata.PackageNotFoundError:
        return "mypy-none"


def source_entries(package_dir: Path) -> list[tuple[str, int, int, str]]:
    """(path from the checkout, size, mtime in ns, digest) of every source a build compiles against."""
    entries = []
    for path in compiled_sources(package_dir) + extension_sources(package_dir):
        status = path.stat()
        digest = blake2b(path.read_bytes(), digest_size=16).hexdigest()
        entries.append((path.relative_to(package_dir.parent).as_posix(), status.st_size, status.st_mtime_ns, digest))
    return entries


def current_stamp(package_dir: Path) -> str:
    """The stamp a build made now, from these sources, would carry."""
    return native.stamp_text(native.interpreter_line(), compiler_version(), source_entries(package_dir))


def build_matches(package_dir: Path) -> bool:
    """Whether the build there was made by this interpreter and compiler
    from sources with these very contents (the stat data aside)."""
    stamp = native.read_stamp(package_dir)
    if stamp is None:
        return False
    interpreter, compiler, recorded = stamp
    now = source_entries(package_dir)
    return (interpreter == native.interpreter_line() and compiler == compiler_version()
            and [(path, digest) for path, _size, _mtime, digest in recorded]
            == [(path, digest) for path, _size, _mtime, digest in now])


def missing_tools() -> str | None:
    """Why this machine cannot build, or None."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        return "no C compiler (Debian: apt-get install gcc)"
    if not Path(sysconfig.get_paths()["include"], "Python.h").exists():
        return "no Python headers (Debian: apt-get install python3-dev)"
    try:
        import mypyc  # noqa: F401
    except ImportError:
        return "mypy is not installed (pip install -e '.[native]')"
    return None


def build() -> None:
    out = native.native_dir(PACKAGE)
    stamp = current_stamp(PACKAGE)
    with tempfile.TemporaryDirectory(prefix="kdissect-native-") as work:
        # build from a copy of the package: setuptools then runs outside the
        # checkout (whose pyproject.toml it would read as its own project)
        # and writes nothing into it but the finished libraries
        shutil.copytree(PACKAGE, Path(work) / "kdissect",
                        ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        # (the modules they import are read for their types, not checked)
        paths = ["--follow-imports=silent", *(f"kdissect/{name.replace('.', '/')}.py" for name in native.NATIVE_MODULES)]
        extensions = [(f"kdissect.{name}", f"kdissect/{name.replace('.', '/')}.c") for name in native.C_EXTENSIONS]
        Path(work, "setup.py").write_text(SETUP.format(paths=paths, group=GROUP, extensions=extensions))
        result = subprocess.run([sys.executable, "setup.py", "build_ext", "--build-lib", "lib", "--build-temp", "tmp"],
                                cwd=work, capture_output=True, text=True)
        if result.returncode != 0:
            errors = [line for line in (result.stdout + result.stderr).splitlines() if "error" in line.lower()]
            raise SystemExit("build_native: mypyc failed: " + ("; ".join(errors[:3]) or "see setup.py output"))
        lib = Path(work, "lib", "kdissect")
        built = sorted(lib.rglob("*.so"))
        expected = len(native.NATIVE_MODULES) + 1 + len(native.C_EXTENSIONS)  # the modules, their shared library
        if len(built) != expected:
            raise SystemExit(f"build_native: expected {expected} libraries, got "
                             f"{[path.name for path in built]}")
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        for path in built:
            target = out / path.relative_to(lib)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    # last: the build is used only once this names the sources it was made
    # from (their stat data as read before compiling: an edit made meanwhile
    # leaves the build stale)
    (out / native.STAMP_FILE).write_text(stamp)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="build even when the build is current")
    args = parser.parse_args()
    if not args.force and native.is_current(PACKAGE) and build_matches(PACKAGE):
        print("build_native: compiled modules are current")
        return
    if not args.force and build_matches(PACKAGE):
        # same contents, other stat data (a touch, a checkout): no need to compile
        (native.native_dir(PACKAGE) / native.STAMP_FILE).write_text(current_stamp(PACKAGE))
        print("build_native: compiled modules are current (stamp renewed)")
        return
    problem = missing_tools()
    if problem:
        raise SystemExit(f"build_native: cannot build: {problem}")
    stamp = native.native_dir(PACKAGE) / native.STAMP_FILE
    if stamp.exists():
        stamp.unlink()  # the old build must not be used while this one is made
    build()
    print(f"build_native: compiled {', '.join(native.NATIVE_MODULES + native.C_EXTENSIONS)} into "
          f"{native.native_dir(PACKAGE).relative_to(ROOT)}")


if __name__ == "__main__":
    main()
