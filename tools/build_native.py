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
compiling. A finished build is also kept outside the checkout
(~/.cache/kdissect-native/KEY, the newest few), KEY a digest of everything
the compiled code depends on (interpreter, mypy, the C compiler's version,
the setup text, every source's contents): a fresh clone of sources built
before on this machine copies it instead of compiling again (a cache like
ccache's; `--force` always compiles). Needs mypy (the `native` extra), a
C compiler and the interpreter's headers (Debian: gcc, python3-dev). Exits
non-zero with a one-line reason when it cannot build; kdissect then runs
its plain Python modules.
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import os
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


def cache_root() -> Path:
    """Where finished builds are kept, outside any checkout."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kdissect-native"


def c_compiler_version() -> str:
    """The C compiler's first line of `--version` ("" when it cannot say)."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    try:
        result = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ""
    return result.stdout.splitlines()[0] if result.stdout else ""


def cache_key(package_dir: Path) -> str:
    """A digest of everything a build's libraries depend on: the interpreter,
    mypy, the C compiler, the setup text and the sources' contents (not their
    stat data)."""
    parts = [native.interpreter_line(), compiler_version(), c_compiler_version(), SETUP,
             *native.NATIVE_MODULES, *native.C_EXTENSIONS]
    parts += [f"{path} {digest}" for path, _size, _mtime, digest in source_entries(package_dir)]
    return blake2b("\n".join(parts).encode(), digest_size=16).hexdigest()


def _libraries(lib: Path) -> list[Path]:
    return sorted(lib.rglob("*.so"))


def _expected_libraries() -> int:
    return len(native.NATIVE_MODULES) + 1 + len(native.C_EXTENSIONS)  # the modules, their shared library


def _install(lib: Path, out: Path) -> None:
    """Copy a build's libraries (under `lib`, laid out as the package) into `out`."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for path in _libraries(lib):
        target = out / path.relative_to(lib)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)


def restore_cached(package_dir: Path, root: Path, key: str) -> bool:
    """Install the build kept under `root` for `key`, if there is a whole one."""
    kept = root / key
    if not kept.is_dir() or len(_libraries(kept)) != _expected_libraries():
        return False
    _install(kept, native.native_dir(package_dir))
    os.utime(kept)  # recently used: kept longest
    return True


def keep_in_cache(lib: Path, root: Path, key: str, keep: int = 3) -> None:
    """Keep a finished build's libraries for `key` (written beside, then
    renamed: a reader never sees half of one), and only the newest `keep`."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        if (root / key).exists():
            return
        partial = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root))
        _install(lib, partial)
        partial.rename(root / key)
        kept = sorted((path for path in root.iterdir() if path.is_dir() and not path.name.startswith(".")),
                      key=lambda path: path.stat().st_mtime, reverse=True)
        for old in kept[keep:]:
            shutil.rmtree(old, ignore_errors=True)
    except OSError as error:  # a cache: the build itself is done
        print(f"build_native: could not keep the build in {root}: {error.strerror}", file=sys.stderr)


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
    key = cache_key(PACKAGE)
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
        built = _libraries(lib)
        if len(built) != _expected_libraries():
            raise SystemExit(f"build_native: expected {_expected_libraries()} libraries, got "
                             f"{[path.name for path in built]}")
        _install(lib, out)
        if cache_key(PACKAGE) == key:  # a source edited while compiling: not kept under the old key
            keep_in_cache(lib, cache_root(), key)
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
    if not args.force:
        text = current_stamp(PACKAGE)
        if restore_cached(PACKAGE, cache_root(), cache_key(PACKAGE)):
            stamp.write_text(text)  # last, as after a build
            print(f"build_native: the build of these sources kept in {cache_root()} installed "
                  f"into {native.native_dir(PACKAGE).relative_to(ROOT)}")
            return
    build()
    print(f"build_native: compiled {', '.join(native.NATIVE_MODULES + native.C_EXTENSIONS)} into "
          f"{native.native_dir(PACKAGE).relative_to(ROOT)}")


if __name__ == "__main__":
    main()
