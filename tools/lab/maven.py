"""Jars from Maven Central, resolved once into a cache outside the checkout.

`resolve("kafka-4.4.0", ["org.apache.kafka:kafka_2.13:4.4.0"])` writes a
small pom naming the artifacts, runs `mvn dependency:copy-dependencies`, and
keeps the jars in `<cache>/kafka-4.4.0/lib/`; later calls return them
without running Maven. The cache is `$KDISSECT_LAB_CACHE`, else
`$XDG_CACHE_HOME/kdissect-lab`, else `~/.cache/kdissect-lab`.
`compile_java(source, jars, name)` compiles a lab helper against such jars
once per change of its source.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator
from xml.sax.saxutils import escape

from tools.lab.net import LabError


def cache_dir() -> Path:
    env = os.environ.get("KDISSECT_LAB_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kdissect-lab"


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (created), so two processes filling the
    same cache entry take turns."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _pom(artifacts: list[str]) -> str:
    deps = []
    for coordinate in artifacts:
        group, artifact, version = coordinate.split(":")
        deps.append(f"    <dependency><groupId>{escape(group)}</groupId><artifactId>{escape(artifact)}</artifactId>"
                    f"<version>{escape(version)}</version></dependency>")
    return ("<project xmlns=\"http://maven.apache.org/POM/4.0.0\">\n"
            "  <modelVersion>4.0.0</modelVersion>\n"
            "  <groupId>kdissect.lab</groupId><artifactId>resolve</artifactId><version>1</version>\n"
            "  <packaging>pom</packaging>\n  <dependencies>\n" + "\n".join(deps) + "\n  </dependencies>\n</project>\n")


def resolve(name: str, artifacts: list[str]) -> list[Path]:
    """The jars of `artifacts` (group:artifact:version) and their runtime
    dependencies, sorted by file name; resolved with Maven on first use."""
    entry = cache_dir() / name
    lib = entry / "lib"
    stamp = entry / "lib.complete"
    with locked(entry.with_name(name + ".lock")):
        if not (stamp.exists() and stamp.read_text() == "\n".join(artifacts)):
            mvn = shutil.which("mvn")
            if mvn is None:
                raise LabError("Maven is not installed (apt-get install maven): it fetches the Kafka jars")
            entry.mkdir(parents=True, exist_ok=True)
            (entry / "pom.xml").write_text(_pom(artifacts))
            staging = Path(tempfile.mkdtemp(prefix="lib.", dir=entry))
            cmd = [mvn, "-q", "-B", "-f", str(entry / "pom.xml"), "dependency:copy-dependencies",
                   f"-DoutputDirectory={staging}", "-DincludeScope=runtime"]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                shutil.rmtree(staging, ignore_errors=True)
                errors = [line for line in (done.stdout + done.stderr).splitlines() if "[ERROR]" in line]
                first = errors[0].split("[ERROR]", 1)[1].strip()[:400] if errors else "no error message"
                raise LabError(f"mvn could not resolve {', '.join(artifacts)} (is Maven Central reachable?): {first}")
            shutil.rmtree(lib, ignore_errors=True)
            staging.rename(lib)
            stamp.write_text("\n".join(artifacts))
    jars = sorted(lib.glob("*.jar"))
    if not jars:
        raise LabError(f"no jars in {lib}")
    return jars


def compile_java(source: Path, jars: list[Path], name: str) -> Path:
    """The directory of `source`'s classes compiled with javac against `jars`,
    cached as `<cache>/<name>/classes-<hash of the source>` so the compiler
    runs once per change of the source."""
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:12]
    target = cache_dir() / name / f"classes-{digest}"
    with locked(target.with_name(target.name + ".lock")):
        if not (target / (source.stem + ".class")).exists():
            javac = shutil.which("javac")
            if javac is None:
                raise LabError("javac is not installed (apt-get install openjdk-17-jdk-headless)")
            target.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix="classes.", dir=target.parent))
            done = subprocess.run([javac, "-nowarn", "-d", str(staging), "-cp", ":".join(map(str, jars)),
                                   str(source)], capture_output=True, text=True)
            if done.returncode != 0:
                shutil.rmtree(staging, ignore_errors=True)
                raise LabError(f"javac failed on {source.name}:\n{done.stderr.strip()[-2000:]}")
            shutil.rmtree(target, ignore_errors=True)
            staging.rename(target)
    return target
