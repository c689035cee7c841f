"""The lab's Java client (`tools/lab/java/LabClient.java`), compiled with
javac against `org.apache.kafka:kafka-clients` from Maven Central. The
classes are cached beside the jars, keyed by the source's hash, so the
compiler runs once per change."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tools.lab import maven
from tools.lab.kafka_versions import SLF4J_BINDING, VERSIONS, full_version, java_binary
from tools.lab.net import LabError

SOURCE = Path(__file__).resolve().parent / "java" / "LabClient.java"
HELPER_CLIENT_VERSION = VERSIONS["4"]  # for the quota helper: any 4.x Admin client does


def client_jars(version: str = HELPER_CLIENT_VERSION) -> list[Path]:
    version = full_version(version)
    return maven.resolve(f"kafka-clients-{version}", [f"org.apache.kafka:kafka-clients:{version}", SLF4J_BINDING])


def compiled_classes(version: str = HELPER_CLIENT_VERSION) -> Path:
    """The directory holding LabClient.class for this kafka-clients version."""
    version = full_version(version)
    return maven.compile_java(SOURCE, client_jars(version), f"kafka-clients-{version}")


def run_java_helper(args: list[str], version: str = HELPER_CLIENT_VERSION, timeout: float = 180.0) -> str:
    """Run `LabClient ARGS...`; its standard output. A failure raises
    LabError with the end of its error output."""
    classpath = ":".join([str(compiled_classes(version)), *map(str, client_jars(version))])
    cmd = [java_binary(), "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
           "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath, "LabClient", *args]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise LabError(f"the Java client ({args[0]}) did not finish within {timeout:.0f}s") from None
    if done.returncode != 0:
        raise LabError(f"the Java client ({args[0]}) failed ({done.returncode}):\n{done.stderr.strip()[-2000:]}")
    return done.stdout
