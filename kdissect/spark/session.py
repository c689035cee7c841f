"""Start (or join) a SparkSession: Java check, same Python on executors, quiet logs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path

from kdissect.failures import InputError

MIN_JAVA = 17
_LOG4J = Path(__file__).with_name("log4j2.properties")


def find_java(environ: dict[str, str] | None = None) -> str:
    """Path of the java launcher Spark will use; InputError if there is none."""
    env = os.environ if environ is None else environ
    home = env.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", "java")
        if os.access(candidate, os.X_OK):
            return candidate
        raise InputError(
            f"Java not found: JAVA_HOME={home} has no bin/java; "
            f"kdissect spark needs Java {MIN_JAVA} or newer (e.g. apt-get install openjdk-17-jre-headless)"
        )
    found = shutil.which("java", path=env.get("PATH", ""))
    if found is None:
        raise InputError(
            f"Java not found (no java on PATH and JAVA_HOME unset); "
            f"kdissect spark needs Java {MIN_JAVA} or newer (e.g. apt-get install openjdk-17-jre-headless)"
        )
    return found


def java_major_version(java: str) -> int | None:
    try:
        probe = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', probe.stderr + probe.stdout)
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major  # "1.8.0" is Java 8


def check_java(environ: dict[str, str] | None = None) -> str:
    java = find_java(environ)
    major = java_major_version(java)
    if major is not None and major < MIN_JAVA:
        raise InputError(f"{java} is Java {major}; kdissect spark needs Java {MIN_JAVA} or newer")
    return java


def package_zip() -> str:
    """Zip the kdissect package so remote executors can import it (addPyFile)."""
    package_dir = Path(__file__).resolve().parent.parent
    target = Path(tempfile.mkdtemp(prefix="kdissect-pyfiles-")) / "kdissect.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for file in sorted(package_dir.rglob("*")):
            if file.is_file() and "__pycache__" not in file.parts and file.suffix != ".pyc":
                archive.write(file, Path("kdissect") / file.relative_to(package_dir))
    return str(target)


def start_session(master: str | None, app_name: str = "kdissect", extra_conf: dict[str, str] | None = None):
    """A SparkSession for the job.

    With `master` None an existing session (spark-submit) is joined.
    Executors run the interpreter running this process unless the user set
    PYSPARK_PYTHON already (on a cluster it must name the executors' Python).
    """
    # pyspark warns about pandas 3 on import and in every worker; the job does not use pandas.
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    from pyspark.sql import SparkSession

    if master is None or master.startswith("local"):
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    else:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        check_java()
        builder = builder.master(master)
        # The driver JVM is launched by pyspark; its options can only be passed
        # on that command line: our log configuration and, in local mode,
        # C1-only JIT compilation. The job's JVM side mostly moves bytes for
        # the Python workers, and a run is short, so C2's optimising compiler
        # costs more CPU than it gives back (measured: about half the JVM's
        # CPU time on a 333 MB archive went to C2 compiler threads).
        java_options = f"-Dlog4j2.configurationFile=file:{_LOG4J}"
        if master.startswith("local"):
            java_options += " -XX:TieredStopAtLevel=1"
        os.environ.setdefault("PYSPARK_SUBMIT_ARGS", f"--driver-java-options '{java_options}' pyspark-shell")
        builder = (
            builder.config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        )
    for key, value in (extra_conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    if master is not None and not master.startswith("local"):
        session.sparkContext.addPyFile(package_zip())
    return session
