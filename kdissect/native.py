"""Compiled builds of the per-packet modules, used only when they match the source.

The modules in `NATIVE_MODULES` (capture reading, link layers, TCP
reassembly, Kafka framing) run once per packet or per piece of a stream.
`tools/build_native.py` compiles them with mypyc, unchanged, into C
extension modules under `build/native/kdissect/`, and records there the
digest of each source file it compiled (`SOURCES`). At import,
`kdissect/__init__.py` calls `activate` on the package's path: the compiled
directory goes ahead of the sources only when every recorded digest matches
the source in the checkout and the build is for this interpreter. An edited
module, a checkout without a build, another Python or
`KDISSECT_PURE_PYTHON=1` run the plain Python modules. There is one source
for each module either way; the build changes speed, not behaviour
(tests/test_native.py compares the two).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from kdissect.blake2 import blake2b as _blake2b

# the modules compiled, in the order they are listed in SOURCES
NATIVE_MODULES = ("linklayers", "capture", "reassembly", "framing")
# where the build goes, relative to the checkout (the parent of the package)
NATIVE_SUBDIR = ("build", "native", "kdissect")
SOURCES_FILE = "SOURCES"


def source_digest(path: Path) -> str:
    """The digest SOURCES records for one source file."""
    return _blake2b(path.read_bytes(), digest_size=16).hexdigest()


def build_tag() -> str:
    """The interpreter a build is for (its extension modules load only there)."""
    return f"{sys.implementation.cache_tag} {sys.platform}"


def native_dir(package_dir: Path) -> Path:
    return package_dir.parent.joinpath(*NATIVE_SUBDIR)


def sources_text(package_dir: Path) -> str:
    """What SOURCES holds for the sources as they are now."""
    lines = [build_tag()]
    lines += [f"{name} {source_digest(package_dir / (name + '.py'))}" for name in NATIVE_MODULES]
    return "\n".join(lines) + "\n"


def is_current(package_dir: Path) -> bool:
    """Whether a build exists for this interpreter and these very sources."""
    try:
        recorded = (native_dir(package_dir) / SOURCES_FILE).read_text()
        return recorded == sources_text(package_dir)
    except OSError:
        return False


# whether this process put the compiled build on the package path (activate)
active = False


def activate(package_path: list[str]) -> bool:
    """Put the compiled modules ahead of the sources on the package's
    `__path__` when `is_current`; True when they will be used."""
    global active
    if os.environ.get("KDISSECT_PURE_PYTHON"):
        return False
    package_dir = Path(package_path[0])
    if is_current(package_dir):
        package_path.insert(0, str(native_dir(package_dir)))
        active = True
    return active


def running_native() -> list[str]:
    """The NATIVE_MODULES imported so far from their compiled builds."""
    names = []
    for name in NATIVE_MODULES:
        module = sys.modules.get(f"kdissect.{name}")
        if module is not None and not str(getattr(module, "__file__", "")).endswith(".py"):
            names.append(name)
    return names
