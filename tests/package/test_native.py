"""The compiled per-packet modules (kdissect/native.py, tools/build_native.py):
used only when built from the sources in the checkout, and the same output
as the plain Python modules, byte for byte, on every bundled capture and
impaired variants of some."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from kdissect import native
from tests.support import impair
from tests.support.variants import VARIANTS, write_variant
from tests.support.paths import REPO

PACKAGE = REPO / "kdissect"

sys.path.insert(0, str(REPO / "tools"))
import build_native  # noqa: E402  (tools/build_native.py: the build-time half)

# Run in a fresh interpreter: every capture's rows and accounting, then which
# per-packet modules were compiled ones (the last line).
_EXPORT_ALL = """
import io, json, sys
from kdissect import native
from kdissect.shared.output import JsonlWriter
from kdissect.conn.pipeline import Analysis

for job in json.loads(sys.argv[1]):
    if job.get("forensic"):  # the forensic tables (kept Produce frames, the quick walk of record sets)
        from kdissect.forensics import forensic_tables
        tables, _accounting = forensic_tables(job["paths"], (9092,))
        sys.stdout.write(json.dumps(tables.to_dict(), sort_keys=True, default=str) + "\\n")
        continue
    analysis = Analysis(job["paths"], (9092,), True, job["kept"], tls_keylogs=job["keys"])
    out = io.StringIO()
    if job["kept"]:  # the decoded messages kept: their reprs too
        for ex in analysis:
            out.write(repr((ex.to_row(), ex.request, ex.response, ex.request_offset, ex.response_offset)) + "\\n")
    else:
        JsonlWriter(out, ts_unit=analysis.ts_unit).write_exchanges(analysis)
    sys.stdout.write(out.getvalue() + "".join(f"# {line}\\n" for line in analysis.summary_lines()))
    sys.stdout.write("".join(f"# {line}\\n" for line in analysis.read_stats.problems))
print(json.dumps(native.running_native()))
"""


def _toolchain() -> bool:
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    headers = Path(sysconfig.get_paths()["include"], "Python.h").exists()
    try:
        import mypyc  # noqa: F401
    except ImportError:
        return False
    return shutil.which(cc) is not None and headers


def _export_all(jobs: list[dict], pure: bool) -> tuple[str, list[str]]:
    env = {k: v for k, v in os.environ.items() if k != "KDISSECT_PURE_PYTHON"}
    if pure:
        env["KDISSECT_PURE_PYTHON"] = "1"
    result = subprocess.run([sys.executable, "-c", _EXPORT_ALL, json.dumps(jobs)], capture_output=True, text=True,
                            cwd=REPO, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    text, _, last = result.stdout.rstrip("\n").rpartition("\n")
    return text, json.loads(last)


def _copy_package(tmp_path: Path) -> Path:
    """The package's sources in a scratch checkout (a build's stamp is checked against them)."""
    package = tmp_path / "kdissect"
    shutil.copytree(PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    return package


def _stamp(package: Path) -> None:
    """What tools/build_native.py writes last, for the sources as they are."""
    build = native.native_dir(package)
    build.mkdir(parents=True, exist_ok=True)
    (build / native.STAMP_FILE).write_text(build_native.current_stamp(package))


def _imports(module: str, functions_only: bool = False) -> set[str]:
    """The kdissect modules a module's source imports (`from X import y`: X
    and X.y), anywhere or only inside its functions."""
    import ast

    path = REPO.joinpath(*module.split(".")).with_suffix(".py")
    if not path.is_file():
        path = path.with_suffix("") / "__init__.py"
        if not path.is_file():
            return set()  # a name imported from a module, not a module
    tree = ast.parse(path.read_text())
    scopes = [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))] \
        if functions_only else [tree]
    found: set[str] = set()
    for scope in scopes:
        for node in ast.walk(scope):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("kdissect.")}


# (in a child) the kdissect modules that importing the given ones loads, with
# those imported inside functions of any module loaded, transitively
_LOAD_WITH_DEFERRED = """
import ast, importlib, sys, kdissect

def loaded(names):
    before = set(sys.modules)
    for name in names:
        importlib.import_module("kdissect." + name)
    read = set()
    while True:
        new = {m for m in set(sys.modules) - before - read if m.startswith("kdissect.")}
        if not new:
            return {m for m in set(sys.modules) - before if m.startswith("kdissect.")}
        for module in sorted(new):
            read.add(module)
            path = getattr(sys.modules[module], "__file__", None)
            if not path or not path.endswith(".py"):
                continue
            with open(path) as source:
                tree = ast.parse(source.read())
            for function in ast.walk(tree):
                if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    for node in ast.walk(function):
                        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kdissect."):
                            importlib.import_module(node.module)
"""


def test_the_sources_of_a_build_are_every_kdissect_module_the_compiled_ones_import() -> None:
    """The static reading of the imports (build time) against what importing
    the compiled modules' sources really loads, in a fresh interpreter, with
    the modules they import only inside a function (the pipeline's TLS
    layer: loaded when first needed, read by the compiler all the same)."""
    # imports them, then, until none is new, what any module loaded imports inside a function
    code = _LOAD_WITH_DEFERRED + f"print(' '.join(sorted(loaded({list(native.NATIVE_MODULES)!r}))))"
    env = dict(os.environ, KDISSECT_PURE_PYTHON="1")
    # (the package's own imports, native.py, run before the compiled modules' and are not theirs)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO, env=env)
    loaded = set(out.stdout.split())
    listed = {".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
              for path in build_native.compiled_sources(PACKAGE)}
    # (native.py is one of them when a subpackage's __init__ calls it; the package imported it before)
    imported = loaded | {f"kdissect.{name}" for name in native.NATIVE_MODULES}
    assert imported <= listed - {"kdissect.native"}  # nothing the build runs with is left out of its stamp
    # the rest are imported inside functions (loaded when called: pairing's
    # conn.trial, for an orphan response), or by such a module
    later = set().union(*(_imports(name, functions_only=True) for name in listed))
    todo = list(later)
    while todo:
        for found in _imports(todo.pop()) - later:
            later.add(found)
            todo.append(found)
    assert listed - {"kdissect.native"} - imported <= later
    assert "kdissect.conn.trial" in later  # (the test sees them)
    # the modules the compiled ones compile against, among them
    assert {"kdissect.model.packet", "kdissect.wire.captureset", "kdissect.failures", "kdissect.blake2"} <= listed


def test_a_build_is_used_only_for_the_sources_it_was_made_from(tmp_path: Path) -> None:
    package = _copy_package(tmp_path)
    assert not native.is_current(package)  # no build at all
    _stamp(package)
    assert native.is_current(package) and build_native.build_matches(package)
    stamp = (native.native_dir(package) / native.STAMP_FILE).read_text()
    assert f"compiler {build_native.compiler_version()}\n" in stamp
    # one byte of one compiled module changed: that build is not for these sources
    edited = package.joinpath(*native.NATIVE_MODULES[-1].split(".")).with_suffix(".py")
    original = edited.read_bytes()
    edited.write_bytes(original + b"\n")
    assert not native.is_current(package) and not build_native.build_matches(package)
    # the content back, a new mtime: stale at import (stat data), the same
    # contents for the build tool (which renews the stamp instead of compiling)
    edited.write_bytes(original)
    assert not native.is_current(package) and build_native.build_matches(package)
    _stamp(package)
    assert native.is_current(package)
    # a build for another interpreter
    lines = (native.native_dir(package) / native.STAMP_FILE).read_text().splitlines()
    (native.native_dir(package) / native.STAMP_FILE).write_text(
        "\n".join(["interpreter cpython-399 linux 3.99.0", *lines[1:]]) + "\n")
    assert not native.is_current(package) and not build_native.build_matches(package)
    # a build by another mypy: current for import, rebuilt by the build tool
    (native.native_dir(package) / native.STAMP_FILE).write_text(
        "\n".join([lines[0], "compiler mypy-0.1", *lines[2:]]) + "\n")
    assert native.is_current(package) and not build_native.build_matches(package)
    # a stamp in the old format (digests of the four modules only) is no stamp
    (native.native_dir(package) / native.STAMP_FILE).write_text("cpython-311 linux\nframing 00\n")
    assert not native.is_current(package)


def test_a_kept_build_is_found_only_for_the_same_sources(tmp_path: Path) -> None:
    """tools/build_native.py keeps finished builds outside the checkout under
    a digest of what they depend on; a fresh clone of the same sources
    installs the kept one, an edited source (contents, not stat data) does not."""
    package = _copy_package(tmp_path)
    key = build_native.cache_key(package)
    # a build's libraries as setuptools leaves them (names only matter here)
    lib = tmp_path / "lib" / "kdissect"
    names = [f"{name.replace('.', '/')}.so" for name in native.NATIVE_MODULES + native.C_EXTENSIONS] + ["group.so"]
    for name in names:
        (lib / name).parent.mkdir(parents=True, exist_ok=True)
        (lib / name).write_bytes(name.encode())
    root = tmp_path / "cache"
    build_native.keep_in_cache(lib, root, key)
    assert [path.name for path in root.iterdir()] == [key]  # nothing half-written left beside it
    clone = _copy_package(tmp_path / "clone")  # the same contents, new stat data
    assert build_native.cache_key(clone) == key
    assert build_native.restore_cached(clone, root, key)
    installed = native.native_dir(clone)
    assert sorted(path.relative_to(installed).as_posix() for path in installed.rglob("*.so")) == sorted(names)
    assert (installed / names[0]).read_bytes() == names[0].encode()
    edited = clone.joinpath(*native.NATIVE_MODULES[0].split(".")).with_suffix(".py")
    edited.write_bytes(edited.read_bytes() + b"\n")
    assert build_native.cache_key(clone) != key
    assert not build_native.restore_cached(clone, root, build_native.cache_key(clone))
    # a kept build missing a library is not used
    (root / key / names[0]).unlink()
    assert not build_native.restore_cached(package, root, key)
    # only the newest few are kept
    for other in range(4):
        build_native.keep_in_cache(lib, root, f"other{other}", keep=3)
    assert len([path for path in root.iterdir()]) == 3


def test_a_changed_tcp_segment_makes_a_build_stale(tmp_path: Path) -> None:
    """packet.py is not compiled, but TcpSegment's layout is compiled into
    the modules that use it: a build made before it changed is not current."""
    package = _copy_package(tmp_path)
    _stamp(package)
    assert native.is_current(package)
    packet = package.parent / "kdissect/model/packet.py"
    source = packet.read_text()
    assert "class TcpSegment" in source
    packet.write_text(source.replace("class TcpSegment", "class TcpSegment  ", 1))
    os.utime(packet, ns=(0, 0))  # whatever the clock did, the stat data differ
    assert not native.is_current(package)
    assert not build_native.build_matches(package)


def test_importing_kdissect_reads_the_stamp_and_no_source(tmp_path: Path) -> None:
    """`import kdissect` with a build present opens its stamp and only the
    sources Python itself imports (the package's __init__ and native.py)."""
    package = _copy_package(tmp_path)
    _stamp(package)
    code = ("import sys\n"
            "opened = []\n"
            "sys.addaudithook(lambda event, args: opened.append(str(args[0])) if event == 'open' else None)\n"
            "import kdissect\n"
            "from kdissect import native\n"
            "print(native.active)\n"
            "print('\\n'.join(opened))\n")
    env = {k: v for k, v in os.environ.items() if k != "KDISSECT_PURE_PYTHON"}
    env["PYTHONPATH"] = str(tmp_path)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path,
                         env=env)
    active, *opened = out.stdout.splitlines()
    assert active == "True"
    mine = {Path(path).name for path in opened if Path(path).is_relative_to(tmp_path)}
    assert {name for name in mine if name.endswith(".py")} <= {"__init__.py", "native.py"}
    assert native.STAMP_FILE in mine


def test_the_checkout_runs_the_compiled_modules_where_they_can_be_built() -> None:
    if not _toolchain():
        pytest.skip("no C compiler, Python headers or mypy here: kdissect runs its plain Python modules")
    # tools/setup.sh builds them; a stale or missing build is a setup that did not run
    assert native.is_current(PACKAGE), "run tools/build_native.py (tools/setup.sh does)"
    code = ("import kdissect.conn.pipeline, kdissect.wire.capture, kdissect.records.quick_spans, json; "
            "import kdissect.forensics.core; "
            "from kdissect import native; "
            "print(json.dumps(native.running_native()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert json.loads(out.stdout) == list(native.NATIVE_MODULES)
    env = dict(os.environ, KDISSECT_PURE_PYTHON="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO, env=env)
    assert json.loads(out.stdout) == []


def test_compiled_and_plain_modules_give_the_same_output(tmp_path: Path) -> None:
    if not native.is_current(PACKAGE):
        pytest.skip("the compiled modules are not built here (see the test above)")
    jobs = []
    for pcap in sorted((REPO / "captures").rglob("*.pcap")):
        keys = pcap.with_suffix(".keys")
        jobs.append({"paths": [str(pcap)], "keys": [str(keys)] if keys.exists() else [], "kept": False})
    # the messy paths of reassembly and framing: losses, reordering, copies,
    # cuts, snaplen, mid-stream starts (every variant of two captures)
    for name in ("produce_pipelined.pcap", "consume_group_kafka.pcap"):
        trace = impair.load_pcap(REPO / "captures" / name)
        for variant in VARIANTS:
            made = write_variant(trace, variant, tmp_path)
            path = made.rename(tmp_path / f"{name}.{variant}.pcap")
            jobs.append({"paths": [str(path)], "keys": [], "kept": False})
    jobs.append({"paths": [str(REPO / "captures" / "consume_group_kafka.pcap")], "keys": [], "kept": True})
    jobs += [{"paths": [str(REPO / "captures" / name)], "forensic": True}
             for name in ("forensics_kafka.pcap", "java_transactions_kafka.pcap", "large_records_kafka.pcap",
                          "old_v0_10_1.pcap", "acks0_flood_kafka.pcap")]
    jobs += [{**job, "forensic": True} for job in jobs if "consume_group_kafka.pcap." in job["paths"][0]]
    compiled, used = _export_all(jobs, pure=False)
    plain, none = _export_all(jobs, pure=True)
    assert used == list(native.NATIVE_MODULES) and none == []
    assert compiled.count("\n") > 10_000  # rows of every job
    assert compiled == plain


def test_the_c_extensions_are_in_the_stamp_and_load_from_a_current_build() -> None:
    """The C extensions' sources are in a build's stamp (an edit makes it
    stale), and they load only from a current build: KDISSECT_PURE_PYTHON
    runs the Python paths (their outputs compared in
    tests/conn/test_brokerlog_native.py and tests/shared/test_output_native.py)."""
    listed = {path.relative_to(REPO).as_posix() for path in build_native.extension_sources(PACKAGE)}
    assert listed == {f"kdissect/{name.replace('.', '/')}.c" for name in native.C_EXTENSIONS}
    assert {path for path, _size, _mtime, _digest in build_native.source_entries(PACKAGE)} >= listed
    if not native.is_current(PACKAGE):
        pytest.skip("the compiled modules are not built here (see the tests above)")
    code = ("import json; from kdissect.conn.brokerlog import parse; from kdissect.shared import output; "
            "print(json.dumps([parse._native_lines is not None, output._columns_text is not None]))")
    env = {k: v for k, v in os.environ.items() if k != "KDISSECT_PURE_PYTHON"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO, env=env)
    assert json.loads(out.stdout) == [True, True]
    env = dict(os.environ, KDISSECT_PURE_PYTHON="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO, env=env)
    assert json.loads(out.stdout) == [False, False]


# Pickles sketches (the tasks' states carry them to the driver) and prints them as
# read back: argv[1] "write" or a pickle file's path; argv[2] the file to write.
_SKETCH_PICKLES = """
import json, math, pickle, sys
from kdissect import native
from kdissect.sketch import LatencyHistogram, QuantileSketch

if sys.argv[1] == "write":
    latencies = LatencyHistogram()
    for value_ns, weight in ((900, 2), (5_000, 3), (1_234_567, 1), (10 ** 17, 1)):
        latencies.add(value_ns, weight)
    exact, bucketed = QuantileSketch(), QuantileSketch()
    exact.add(2.5)
    for i in range(1_500):
        bucketed.add(i * 0.37 - 100)
    with open(sys.argv[2], "wb") as out:
        pickle.dump([latencies, exact, bucketed, LatencyHistogram(), QuantileSketch()], out,
                    protocol=pickle.HIGHEST_PROTOCOL)
else:
    with open(sys.argv[1], "rb") as source:
        latencies, exact, bucketed, empty, nothing = pickle.load(source)
    print(json.dumps([latencies.summary(), sorted(latencies.buckets.items()), exact.state(), bucketed.state(),
                      bucketed.percentiles(1, 50, 99), empty.summary(), nothing.state()]))
print(json.dumps(native.running_native()))
"""


def test_sketches_pickled_compiled_load_plain_and_the_other_way(tmp_path: Path) -> None:
    """A driver with the build reads the states of workers without it (and
    the other way): unlike the default pickles of a slotted class and a
    compiled one, which the other read as an empty sketch or not at all."""
    if not native.is_current(PACKAGE):
        pytest.skip("the compiled modules are not built here (see the test above)")

    def run(pure: bool, *args: str) -> tuple[str, list[str]]:
        env = {k: v for k, v in os.environ.items() if k != "KDISSECT_PURE_PYTHON"}
        if pure:
            env["KDISSECT_PURE_PYTHON"] = "1"
        result = subprocess.run([sys.executable, "-c", _SKETCH_PICKLES, *args], capture_output=True, text=True,
                                cwd=REPO, env=env, timeout=120)
        assert result.returncode == 0, result.stderr[-2000:]
        text, _, last = result.stdout.rstrip("\n").rpartition("\n")
        return text, json.loads(last)

    for pure in (False, True):
        run(pure, "write", str(tmp_path / f"{'plain' if pure else 'compiled'}.pickle"))
    read = {(writer, pure): run(pure, str(tmp_path / f"{writer}.pickle"))
            for writer in ("plain", "compiled") for pure in (False, True)}
    for (_, pure), (_, used) in read.items():  # each reader ran the module it was meant to
        assert used == ([] if pure else ["sketch"])
    texts = {text for text, _ in read.values()}
    assert len(texts) == 1, texts
    summary = json.loads(texts.pop())
    assert summary[0]["count"] == 7 and summary[2]["values"] == [2.5] and summary[3]["count"] == 1_500
    assert summary[3]["values"] is None and summary[5]["count"] == 0
