"""Compiled builds of the per-packet modules, used only when they match the source.

The modules in `NATIVE_MODULES` (capture reading, link layers, TCP
reassembly, Kafka framing) run once per packet or per piece of a stream;
pairing and its per-exchange collaborators (the Produce-arrival rule, the
wait timer, the record-batch counting, the skim decoders: the lookup of a
frame's skim and the skims of Produce and Fetch written ahead of time) once
or twice per exchange.
`tools/build_native.py` compiles them with mypyc, unchanged, into C
extension modules under `build/native/kdissect/`, and writes there a stamp
(`STAMP`, last, so a failed build has none) naming what the build was made
from: the interpreter, the compiler (mypy's version) and every source it
compiled against -- the compiled modules and every kdissect module they
import, transitively (`packet.py`'s `TcpSegment` is compiled into them as
much as their own code). For each source the stamp records its size,
modification time (ns) and content digest.

At import, `kdissect/__init__.py` calls `activate`: the compiled directory
goes ahead of the sources only when the stamp is for this interpreter and
every source listed has the size and modification time recorded. That is
one small file read and a `stat` per source: nothing is hashed or parsed at
import. The trade-off of comparing stat data instead of contents: touching
a file without changing it (or a fresh clone) makes the build look stale,
which is safe (plain Python runs; `tools/build_native.py` then sees the
digests still match and rewrites the stamp without compiling); a different
content with the same size and nanosecond mtime would be missed, which
editors, git and cp (without -p) do not produce. The set of sources cannot
go stale by itself: a compiled module that starts importing another module
has been edited, so its own stat changed.

The same build compiles `C_EXTENSIONS`, small C extension modules written
for one job each (the broker log's native reader and the JSONL text of its
columns), whose `.c` sources are in the stamp as well; the modules using
them import them inside `try` and keep their Python path for when they are
not there.

An edited source, a checkout without a build, another Python or
`KDISSECT_PURE_PYTHON=1` run the plain Python modules. There is one source
for each module either way; the build changes speed, not behaviour
(tests/package/test_native.py compares the two).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# the modules compiled (dotted names below the package: a module of a
# subpackage is found by that subpackage's `__init__`, which calls `extend`)
NATIVE_MODULES = ("wire.linklayers", "wire.capture", "wire.reassembly", "conn.framing", "conn.pairing", "conn.arrivals", "conn.waits", "records.counts", "records.access", "conn.detect", "conn.pipeline", "protocol._generated.skims", "protocol.skim", "protocol.apis", "conn.kept_produce", "records.unsnappy", "records.quick_spans", "conn.kept_fetch", "conn.kept_metadata", "conn.kept_offset_commit", "conn.kept_api_versions", "conn.kept_join_group", "conn.kept_create_topics", "conn.kept_reading", "forensics.common", "forensics.batches", "forensics.topics", "forensics.lag_history", "forensics.clients", "forensics.transactions", "forensics.groups", "forensics.share", "forensics.latency", "forensics.core", "protocol.topics", "sketch")
# extension modules written in C for one job each (their source: the same
# path with ".c"), built beside the mypyc group into the same directory and
# under the same stamp; a module imports one inside `try`, and runs its
# Python path when it is not there (no build, a stale one, KDISSECT_PURE_PYTHON)
C_EXTENSIONS = ("conn.brokerlog._native_lines", "shared._native_text")
# where the build goes, relative to the checkout (the parent of the package)
NATIVE_SUBDIR = ("build", "native", "kdissect")
STAMP_FILE = "STAMP"


def interpreter_line() -> str:
    """The interpreter a build is for (its extension modules load only there)."""
    version = " ".join(sys.version.split())
    return f"interpreter {sys.implementation.cache_tag} {sys.platform} {version}"


def native_dir(package_dir: Path) -> Path:
    return package_dir.parent.joinpath(*NATIVE_SUBDIR)


def stamp_text(interpreter: str, compiler: str, sources: list[tuple[str, int, int, str]]) -> str:
    """The stamp: the interpreter line, the compiler, then one line per
    source (path relative to the checkout, size, mtime in ns, digest)."""
    lines = [interpreter, f"compiler {compiler}"]
    lines += [f"source {path} {size} {mtime_ns} {digest}" for path, size, mtime_ns, digest in sources]
    return "\n".join(lines) + "\n"


def read_stamp(package_dir: Path) -> tuple[str, str, list[tuple[str, int, int, str]]] | None:
    """(interpreter line, compiler, sources) from a build's stamp, or None
    when there is no build or the stamp is not one this module wrote."""
    try:
        lines = (native_dir(package_dir) / STAMP_FILE).read_text().splitlines()
        interpreter, compiler = lines[0], lines[1].split(" ", 1)[1]
        sources = []
        for line in lines[2:]:
            kind, path, size, mtime_ns, digest = line.split(" ")
            if kind != "source":
                return None
            sources.append((path, int(size), int(mtime_ns), digest))
    except (OSError, IndexError, ValueError):
        return None
    if not interpreter.startswith("interpreter ") or not sources:
        return None
    return interpreter, compiler, sources


def is_current(package_dir: Path) -> bool:
    """Whether a build exists for this interpreter and for the sources as
    they are (size and mtime of each source it was compiled from)."""
    stamp = read_stamp(package_dir)
    if stamp is None or stamp[0] != interpreter_line():
        return False
    root = package_dir.parent
    for path, size, mtime_ns, _digest in stamp[2]:
        try:
            status = os.stat(root / path)
        except OSError:
            return False
        if status.st_size != size or status.st_mtime_ns != mtime_ns:
            return False
    return True


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


def extend(package_path: list[str], package_name: str) -> None:
    """In a subpackage's `__init__`: put its compiled modules ahead of its
    sources on its `__path__` when the package's build is in use."""
    if not active:
        return
    relative = package_name.split(".")[1:]
    package_dir = Path(package_path[0]).parents[len(relative) - 1]
    compiled = native_dir(package_dir).joinpath(*relative)
    if compiled.is_dir():
        package_path.insert(0, str(compiled))


def running_native() -> list[str]:
    """The NATIVE_MODULES imported so far from their compiled builds."""
    names = []
    for name in NATIVE_MODULES:
        module = sys.modules.get(f"kdissect.{name}")
        if module is not None and not str(getattr(module, "__file__", "")).endswith(".py"):
            names.append(name)
    return names
