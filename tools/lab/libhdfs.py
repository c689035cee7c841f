"""libhdfs, Apache Hadoop's C client of HDFS (over JNI), for pyarrow's
HadoopFileSystem (`hdfs://` in kdissect.wire.stores), built once from source
into the lab cache.

Where it comes from: no registry reachable here serves libhdfs.so. Debian
packages no Hadoop; on Maven Central `hadoop-hdfs-native-client` 3.5.0 is
not served and the 3.4.1 jar and sources jar hold only LICENSE and NOTICE
(the C sources stay in Hadoop's source tarball, the binary in its binary
tarball, neither on Maven Central). pydoop's source distribution on PyPI
carries Hadoop's libhdfs sources (src/libhdfs, Apache-2.0, the JNI client
of Hadoop 3): `pip download` fetches it (hash-pinned) and gcc compiles them
against the JDK's JNI headers, a few seconds. The C side only calls
Hadoop's Java FileSystem API, so the jars on CLASSPATH decide the Hadoop
version: the lab puts Hadoop's client jars of pyspark's version there (from
Maven Central, as a node's `hadoop classpath --glob` would).

    python -m tools.lab.libhdfs build    # the directory holding libhdfs.so
    env = client_env()                   # ARROW_LIBHDFS_DIR, JAVA_HOME, CLASSPATH for a child process
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from tools.lab import maven
from tools.lab.net import LabError

PYDOOP = "pydoop==2.0.0"
PYDOOP_SHA256 = "c7eb2ad8c36d2a75dc1c6cee701928334614f2e862a70798b0cb278e3102f77d"
# pydoop's setup.py imports pkg_resources, which setuptools 81 dropped (only its metadata step runs)
BUILD_CONSTRAINT = "setuptools<81\n"
SOURCES = ["hdfs.c", "jni_helper.c", "exception.c", "common/htable.c", "os/posix/mutexes.c", "os/posix/thread.c",
           "os/posix/thread_local_storage.c"]


def java_home() -> Path:
    """The JDK whose JNI headers and libjvm the library is built and run with."""
    candidates = [os.environ.get("JAVA_HOME", "")]
    javac = shutil.which("javac")
    if javac:
        candidates.append(str(Path(os.path.realpath(javac)).parents[1]))
    for candidate in filter(None, candidates):
        home = Path(candidate)
        if (home / "include" / "jni.h").exists() and (home / "lib" / "server" / "libjvm.so").exists():
            return home
    raise LabError("no JDK with include/jni.h and lib/server/libjvm.so (apt-get install openjdk-17-jdk-headless)")


def _download_sources(staging: Path) -> Path:
    """pydoop's sdist, unpacked under `staging`; its libhdfs source folder."""
    (staging / "requirement.txt").write_text(f"{PYDOOP} --hash=sha256:{PYDOOP_SHA256}\n")
    (staging / "build-constraint.txt").write_text(BUILD_CONSTRAINT)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
           "--build-constraint", str(staging / "build-constraint.txt"), "-r", str(staging / "requirement.txt"),
           "-d", str(staging / "dl")]
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "JAVA_HOME": str(java_home())})
    archives = sorted((staging / "dl").glob("pydoop-*.tar.gz"))
    if done.returncode != 0 or not archives:
        raise LabError(f"pip could not download {PYDOOP}'s sources (is PyPI reachable? pip 25.3+ for "
                       f"--build-constraint):\n{done.stderr.strip()[-1500:]}")
    source = staging / "libhdfs"
    with tarfile.open(archives[0]) as archive:
        for member in archive.getmembers():  # the regular files below src/libhdfs/, nothing else
            _, found, inner = member.name.partition("/src/libhdfs/")
            if found and member.isfile() and ".." not in inner.split("/") and not inner.startswith("/"):
                (source / inner).parent.mkdir(parents=True, exist_ok=True)
                (source / inner).write_bytes(archive.extractfile(member).read())  # type: ignore[union-attr]
    if not (source / "hdfs.c").exists():
        raise LabError(f"{archives[0].name} holds no src/libhdfs/hdfs.c")
    return source


def build() -> Path:
    """The cache directory holding libhdfs.so (built on first use)."""
    target = maven.cache_dir() / f"libhdfs-{PYDOOP.replace('==', '-')}"
    with maven.locked(target.with_name(target.name + ".lock")):
        if not (target / "libhdfs.so").exists():
            gcc = shutil.which("gcc")
            if gcc is None:
                raise LabError("gcc is not installed (apt-get install gcc): it builds libhdfs")
            home = java_home()
            target.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix="libhdfs.", dir=target.parent))
            try:
                source = _download_sources(staging)
                out = staging / "out"
                out.mkdir()
                includes = [source, source / "include", source / "include" / "hdfs", source / "os",
                            source / "os" / "posix", home / "include", home / "include" / "linux"]
                cmd = [gcc, "-O2", "-shared", "-fPIC", "-w", *(f"-I{path}" for path in includes),
                       *(str(source / name) for name in SOURCES), "-o", str(out / "libhdfs.so"),
                       f"-L{home / 'lib' / 'server'}", "-ljvm", "-lpthread"]
                done = subprocess.run(cmd, capture_output=True, text=True)
                if done.returncode != 0:
                    raise LabError(f"gcc failed on libhdfs:\n{done.stderr.strip()[-2000:]}")
                shutil.rmtree(target, ignore_errors=True)
                out.rename(target)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    return target


def client_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) with what pyarrow's
    HadoopFileSystem needs: ARROW_LIBHDFS_DIR, JAVA_HOME, and CLASSPATH
    holding the Hadoop client jars (on a real node: `hadoop classpath --glob`)."""
    env = dict(os.environ if base is None else base)
    env["ARROW_LIBHDFS_DIR"] = str(build())
    env["JAVA_HOME"] = str(java_home())
    env["CLASSPATH"] = ":".join(map(str, client_jars()))
    return env


def node_install(directory: Path) -> dict[str, str]:
    """A node's Hadoop client install for another user: libhdfs.so and the
    client jars copied into `directory` (made readable by everyone; the lab
    cache lives in the driver user's home), and the variables a process
    there needs (ARROW_LIBHDFS_DIR, CLASSPATH, JAVA_HOME; the JDK is the
    system's, readable by all)."""
    native = directory / "lib" / "native"
    jars = directory / "share" / "hadoop" / "client"
    for where in (native, jars):
        where.mkdir(parents=True, exist_ok=True)
    shutil.copy(build() / "libhdfs.so", native / "libhdfs.so")
    copied = []
    for jar in client_jars():
        shutil.copy(jar, jars / jar.name)
        copied.append(jars / jar.name)
    for path in [directory, *directory.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return {"ARROW_LIBHDFS_DIR": str(native), "CLASSPATH": ":".join(map(str, copied)),
            "JAVA_HOME": str(java_home())}


def client_jars() -> list[Path]:
    """Hadoop's client jars, pyspark's Hadoop version, and a silent SLF4J
    binding (without one the JVM that libhdfs starts prints SLF4J's warning
    to the process's standard error)."""
    from tools.lab.hdfs import hadoop_version

    version = hadoop_version()
    return maven.resolve(f"hadoop-client-{version}", [
        f"org.apache.hadoop:hadoop-client-api:{version}",
        f"org.apache.hadoop:hadoop-client-runtime:{version}",
        "org.slf4j:slf4j-nop:1.7.36",
    ])


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["build"]:
        print(build())
        return 0
    print("usage: python -m tools.lab.libhdfs build", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
