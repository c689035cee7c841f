"""The built wheel alone (`pip install kdissect`, no extras) in a fresh
virtualenv: every command either works or, when its extra is missing, says in
one line which extra to install."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from tests.support.paths import REPO

pytestmark = pytest.mark.slow

CAPTURES = REPO / "captures"


def _run(args: list[str], cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600, **kwargs)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path]:
    """(the wheel, the fresh virtualenv's bin directory)."""
    work = tmp_path_factory.mktemp("wheel")
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(REPO), "-w", str(work / "dist")], work)
    assert built.returncode == 0, built.stderr
    wheel = next((work / "dist").glob("kdissect-*.whl"))
    venv = work / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], work)
    assert made.returncode == 0, made.stderr
    # this interpreter's pip installs into the new environment (pip's cache is reused)
    done = _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                 str(wheel)], work)
    assert done.returncode == 0, done.stderr
    return wheel, venv / "bin"


def _env(tmp: Path) -> dict[str, str]:
    # nothing from this checkout or its .venv: only the fresh environment
    return {"PATH": "/usr/bin:/bin", "HOME": str(tmp), "KDISSECT_CACHE_DIR": str(tmp / "cache"), "LC_ALL": "C.UTF-8"}


def test_wheel_holds_the_package_only(installed) -> None:
    wheel, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    assert "kdissect/spark/log4j2.properties" in names and "kdissect/py.typed" in names
    assert not [n for n in names if not n.startswith(("kdissect/", "kdissect-"))]
    assert "kdissect/impair.py" not in names and not [n for n in names if "__pycache__" in n]
    metadata = Parser().parsestr(zipfile.ZipFile(wheel).read(
        next(n for n in names if n.endswith(".dist-info/METADATA"))).decode())
    assert metadata["License-Expression"] == "Apache-2.0"
    base = [r for r in metadata.get_all("Requires-Dist") if "extra ==" not in r]
    assert base and not [r for r in base if r.startswith("dpkt")]  # the package does not import it


def test_each_command_runs_from_the_bare_install(installed, tmp_path) -> None:
    _, bin_dir = installed
    env = _env(tmp_path)
    where = _run([str(bin_dir / "python"), "-c", "import kdissect, sys; print(kdissect.__file__)"], tmp_path, env=env)
    assert where.stdout.startswith(str(bin_dir.parent)), where  # the installed copy, not the checkout
    kdissect = str(bin_dir / "kdissect")
    admin = str(CAPTURES / "admin.pcap")

    apis = _run([kdissect, "apis", "--json"], tmp_path, env=env)
    assert apis.returncode == 0 and {"api_key": 0, "name": "Produce"}.items() <= json.loads(apis.stdout)[0].items()

    export = _run([kdissect, "export", admin, "-o", "rows.jsonl"], tmp_path, env=env)
    assert export.returncode == 0, export.stderr
    assert (tmp_path / "rows.jsonl").read_text().count("\n") == 17  # admin.pcap: tshark counts 17 requests

    show = _run([kdissect, "show", str(CAPTURES)], tmp_path, env=env)  # a directory, as every command takes
    assert show.returncode == 0 and "kdissect: not captures, skipped:" in show.stderr, show.stderr
    stats = _run([kdissect, "stats", "--json", admin], tmp_path, env=env)
    assert stats.returncode == 0 and json.loads(stats.stdout)["accounting"]["exchanges"] == 17
    records = _run([kdissect, "records", str(CAPTURES / "produce_acks1.pcap")], tmp_path, env=env)
    assert records.returncode == 0 and records.stdout.count("\n") > 0, records.stderr
    # the report page needs no extra: its specs are built without altair, its JavaScript is vendored
    report = _run([kdissect, "report", admin, "-q", "-o", "page.html"], tmp_path, env=env)
    assert report.returncode == 0, report.stderr
    page = (tmp_path / "page.html").read_text()
    assert "window.kdissectEmbed = vegaEmbed;" in page and '<figure data-chart="statuses">' in page


@pytest.mark.parametrize("face, says", [
    (["kdissect", "spark", "CAPTURE", "-o", "out"], "`kdissect spark` needs pyspark"),
    (["python", "-m", "kdissect.spark.submit_main", "CAPTURE", "-o", "out"], "submit_main.py needs pyspark"),
])
def test_a_face_without_its_extra_says_which_to_install(installed, tmp_path, face: list[str], says: str) -> None:
    _, bin_dir = installed
    args = [str(bin_dir / face[0]), *[str(CAPTURES / "admin.pcap") if a == "CAPTURE" else a for a in face[1:]]]
    result = _run(args, tmp_path, env=_env(tmp_path))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"kdissect: error: {says}, which is not installed: pip install 'kdissect[spark]'"]
    assert not (tmp_path / "out").exists()


def test_scapy_layers_without_scapy_name_the_extra(installed, tmp_path) -> None:
    _, bin_dir = installed
    code = ("try:\n import kdissect.scapy\nexcept ModuleNotFoundError as problem:\n"
            " print(type(problem).__name__, problem.name, problem)")
    result = _run([str(bin_dir / "python"), "-c", code], tmp_path, env=_env(tmp_path))
    assert result.stdout.strip() == ("MissingExtra scapy kdissect.scapy needs scapy, which is not installed: "
                                     "pip install 'kdissect[scapy]'"), result.stderr


def test_version_and_help_list_every_command(installed, tmp_path) -> None:
    _, bin_dir = installed
    result = _run([str(bin_dir / "kdissect"), "--help"], tmp_path, env=_env(tmp_path))
    assert result.returncode == 0
    for name in ("apis", "export", "records", "show", "spark", "stats"):
        assert f"  {name} " in result.stdout
    version = _run([str(bin_dir / "kdissect"), "--version"], tmp_path, env=_env(tmp_path))
    assert version.stdout.strip() == "kdissect, version 0.1.0"
