"""The compiled per-packet modules (kdissect/native.py, tools/build_native.py):
used only when built from the sources in the checkout, and the same output
as the plain Python modules, byte for byte, on every bundled capture and
impaired variants of some."""

from __future__ import annotations

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

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "kdissect"

# Run in a fresh interpreter: every capture's rows and accounting, then which
# per-packet modules were compiled ones (the last line).
_EXPORT_ALL = """
import io, json, sys
from kdissect import native
from kdissect.output import JsonlWriter
from kdissect.pipeline import Analysis

for job in json.loads(sys.argv[1]):
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


def test_a_build_is_used_only_for_the_sources_it_was_made_from(tmp_path: Path) -> None:
    package = tmp_path / "kdissect"
    package.mkdir()
    for name in native.NATIVE_MODULES:
        shutil.copy(PACKAGE / f"{name}.py", package / f"{name}.py")
    assert not native.is_current(package)  # no build at all
    build = native.native_dir(package)
    build.mkdir(parents=True)
    (build / native.SOURCES_FILE).write_text(native.sources_text(package))
    assert native.is_current(package)
    # one byte of one module changed: that build is not for these sources
    edited = package / f"{native.NATIVE_MODULES[-1]}.py"
    edited.write_bytes(edited.read_bytes() + b"\n")
    assert not native.is_current(package)
    edited.write_bytes(edited.read_bytes()[:-1])
    assert native.is_current(package)
    # a build for another interpreter
    lines = (build / native.SOURCES_FILE).read_text().splitlines()
    (build / native.SOURCES_FILE).write_text("\n".join(["cpython-399 linux", *lines[1:]]) + "\n")
    assert not native.is_current(package)


def test_the_checkout_runs_the_compiled_modules_where_they_can_be_built() -> None:
    if not _toolchain():
        pytest.skip("no C compiler, Python headers or mypy here: kdissect runs its plain Python modules")
    # tools/setup.sh builds them; a stale or missing build is a setup that did not run
    assert native.is_current(PACKAGE), "run tools/build_native.py (tools/setup.sh does)"
    code = ("import kdissect.pipeline, kdissect.capture, json; from kdissect import native; "
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
    compiled, used = _export_all(jobs, pure=False)
    plain, none = _export_all(jobs, pure=True)
    assert used == list(native.NATIVE_MODULES) and none == []
    assert compiled.count("\n") > 10_000  # rows of every job
    assert compiled == plain
