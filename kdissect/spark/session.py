"""Start (or join) a SparkSession: Java check, same Python on executors, quiet logs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
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


def class_data_archive() -> Path | None:
    """Where the class-data archive of this Java + Spark is cached (None: off).

    The driver JVM of a local run loads some 15,000 classes from Spark's jars
    before the first task; a class-data-sharing archive of them (Java's AppCDS)
    maps them ready-made instead: measured here, session start ~7 s -> ~4 s and
    the first job ~3 s -> ~2 s. Kept beside the codec cache (`KDISSECT_CACHE_DIR`,
    default ~/.cache/kdissect; an empty value turns both off, as does
    KDISSECT_SPARK_CDS=0), keyed by the java binary and the pyspark install, so
    another Java or Spark gets its own archive.
    """
    if os.environ.get("KDISSECT_SPARK_CDS", "1") == "0":
        return None
    base = os.environ.get("KDISSECT_CACHE_DIR")
    if base is None:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "kdissect")
    if not base:
        return None
    try:
        import hashlib

        import pyspark

        java = os.path.realpath(find_java())
        identity = f"{java}\0{os.stat(java).st_mtime_ns}\0{pyspark.__version__}\0{pyspark.__file__}"
    except (InputError, OSError, ImportError):
        return None
    key = hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return Path(base) / f"spark-classes-{key}.jsa"


def class_data_options() -> str:
    """JVM options that use the class-data archive, or write it at this run's
    exit when there is none yet (the JVM's own CDS log lines silenced)."""
    archive = class_data_archive()
    if archive is None:
        return ""
    if archive.is_file() and archive.stat().st_size > 0:
        return f" -XX:SharedArchiveFile={archive} -Xlog:disable -Xlog:all=error:stderr"
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return ""
    return f" -XX:ArchiveClassesAtExit={archive} -Xlog:disable -Xlog:all=error:stderr"


def package_zip() -> str:
    """Zip the kdissect package so remote executors can import it (addPyFile).

    Python compiles a module imported from a zip from its source on every
    import, in every Python worker of every executor (a zip holds no
    `__pycache__`). So each module's bytecode goes beside its source, as an
    unchecked hash-based `.pyc` (PEP 552), which zipimport loads without
    comparing it to the source: in a fresh interpreter, the read task's
    modules (with pyarrow) imported in 0.56-0.63 s of CPU instead of
    1.36-1.47 s (2026-11-29). An executor running another Python version
    finds a different magic number and compiles the source, as before."""
    package_dir = Path(__file__).resolve().parent.parent
    target = Path(tempfile.mkdtemp(prefix="kdissect-pyfiles-")) / "kdissect.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for file in sorted(package_dir.rglob("*")):
            if file.is_file() and "__pycache__" not in file.parts and file.suffix != ".pyc":
                name = (Path("kdissect") / file.relative_to(package_dir)).as_posix()
                archive.write(file, name)
                if file.suffix == ".py":
                    archive.writestr(name + "c", _unchecked_bytecode(file.read_bytes(), name))
    return str(target)


def _unchecked_bytecode(source: bytes, name: str) -> bytes:
    """A `.pyc` of `source` that is not checked against it: the magic number,
    the flags (hash-based, unchecked), the source's hash, the marshalled code."""
    import importlib.util
    import marshal

    code = compile(source, name, "exec", dont_inherit=True)
    return importlib.util.MAGIC_NUMBER + (0b01).to_bytes(4, "little") + importlib.util.source_hash(source) \
        + marshal.dumps(code)


# Modules pyspark imports on the driver's first DataFrame calls (pandas through
# its version checks, IPython and ipykernel where it captures call sites): about
# a second, spent in a thread while the JVM starts instead of after.
_DRIVER_IMPORTS = ("pyspark.testing.utils", "IPython", "ipykernel")


def _import_driver_modules() -> None:
    import importlib

    for name in _DRIVER_IMPORTS:
        try:
            importlib.import_module(name)
        except Exception:  # absent or broken optional module: pyspark copes without it
            pass


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
            java_options += " -XX:TieredStopAtLevel=1" + class_data_options()
        os.environ.setdefault("PYSPARK_SUBMIT_ARGS", f"--driver-java-options '{java_options}' pyspark-shell")
        builder = (
            builder.config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.execution.arrow.pyspark.enabled", "true")
            # the job's queries have fixed shapes (an explicit repartition, mapInArrow):
            # adaptive execution has nothing to re-plan, but cut each into a job per
            # stage with a planning pass between them
            .config("spark.sql.adaptive.enabled", "false")
            # Spark keeps a worker daemon (and its idle workers) per set of
            # worker environment variables, and its SQL runners (mapInArrow)
            # add this one to what RDD jobs (the finishing stage) get: two
            # daemons per executor, the second started in the middle of the job
            # (~1.3-1.7 s of preloading in local mode, and workers not reused
            # across the two). Given to every Python function, the two sets are
            # equal: one daemon (on a standalone cluster too: a job of the
            # cluster tests took 49 s instead of 56 s with this and the line above).
            .config("spark.executorEnv.SPARK_SIMPLIFIED_TRACEBACK", "1")
        )
        if master.startswith("local"):
            # In one process on one machine, compressing the shuffle (the whole
            # capture passes through it) and the cached dissected rows costs
            # CPU the Python workers need, to save local disk and memory
            # (measured: ~2 s of JVM CPU per GB of capture).
            builder = (
                builder.config("spark.shuffle.compress", "false")
                .config("spark.sql.inMemoryColumnarStorage.compressed", "false")
                # workers import the installed pyspark (not Spark's zip) and
                # fork with their modules loaded (kdissect/spark/worker_daemon.py);
                # local only: a cluster's executors get kdissect by addPyFile
                .config("spark.python.daemon.module", "kdissect.spark.worker_daemon")
            )
    for key, value in (extra_conf or {}).items():
        builder = builder.config(key, value)
    threading.Thread(target=_import_driver_modules, name="kdissect-imports", daemon=True).start()
    zipped = None
    if master is not None and not master.startswith("local"):
        # the zip's bytecode compiled while the JVM starts (~1.2 s of CPU)
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1, thread_name_prefix="kdissect-zip") as pool:
            zipped = pool.submit(package_zip)
            session = builder.getOrCreate()
    else:
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    if zipped is not None:
        session.sparkContext.addPyFile(zipped.result())
    return session
