"""Compile kdissect's per-packet modules with mypyc (see kdissect/native.py).

    .venv/bin/python tools/build_native.py [--force]

Builds `kdissect.native.NATIVE_MODULES` into build/native/kdissect/ and
writes SOURCES last, so a failed or interrupted build is never used. Does
nothing when the build there is current. Needs mypy (the `native` extra), a
C compiler and the interpreter's headers (Debian: gcc, python3-dev). Exits
non-zero with a one-line reason when it cannot build; kdissect then runs
its plain Python modules.
"""

from __future__ import annotations

import argparse
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

PACKAGE = ROOT / "kdissect"
# one shared library for the group: calls between the modules stay C calls
GROUP = "kdissect.native_group"

SETUP = """\
from setuptools import setup
from mypyc.build import mypycify

setup(name="kdissect-native", py_modules=[],
      ext_modules=mypycify({paths!r}, opt_level="3", group_name={group!r}))
"""


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
    with tempfile.TemporaryDirectory(prefix="kdissect-native-") as work:
        # build from a copy of the package: setuptools then runs outside the
        # checkout (whose pyproject.toml it would read as its own project)
        # and writes nothing into it but the finished libraries
        shutil.copytree(PACKAGE, Path(work) / "kdissect",
                        ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        # (the modules they import are read for their types, not checked)
        paths = ["--follow-imports=silent", *(f"kdissect/{name}.py" for name in native.NATIVE_MODULES)]
        Path(work, "setup.py").write_text(SETUP.format(paths=paths, group=GROUP))
        result = subprocess.run([sys.executable, "setup.py", "build_ext", "--build-lib", "lib", "--build-temp", "tmp"],
                                cwd=work, capture_output=True, text=True)
        if result.returncode != 0:
            errors = [line for line in (result.stdout + result.stderr).splitlines() if "error" in line.lower()]
            raise SystemExit("build_native: mypyc failed: " + ("; ".join(errors[:3]) or "see setup.py output"))
        built = sorted(Path(work, "lib", "kdissect").glob("*.so"))
        if len(built) != len(native.NATIVE_MODULES) + 1:  # the modules and their shared library
            raise SystemExit(f"build_native: expected {len(native.NATIVE_MODULES) + 1} libraries, got "
                             f"{[path.name for path in built]}")
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        for path in built:
            shutil.copy2(path, out / path.name)
    # last: the build is used only once this names the sources it was made from
    (out / native.SOURCES_FILE).write_text(native.sources_text(PACKAGE))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="build even when the build is current")
    args = parser.parse_args()
    if not args.force and native.is_current(PACKAGE):
        print("build_native: compiled modules are current")
        return
    problem = missing_tools()
    if problem:
        raise SystemExit(f"build_native: cannot build: {problem}")
    sources = native.native_dir(PACKAGE) / native.SOURCES_FILE
    if sources.exists():
        sources.unlink()  # the old build must not be used while this one is made
    build()
    print(f"build_native: compiled {', '.join(native.NATIVE_MODULES)} into "
          f"{native.native_dir(PACKAGE).relative_to(ROOT)}")


if __name__ == "__main__":
    main()
