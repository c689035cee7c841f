"""The Kafka versions, jars' logging binding and JVM the lab uses: the
leaf that the broker (apache_kafka.py), the Java client helper
(java_client.py) and the workloads share, so none of them imports another
to learn a version."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from tools.lab.net import LabError

VERSIONS = {"4": "4.4.0", "3": "3.9.2"}  # the generations the lab uses; exact versions work too
SLF4J_BINDING = "org.slf4j:slf4j-simple:1.7.36"
# The first Java client (4.1.1) of java_clients_kafka; java_clients_4_4_kafka
# runs the release the protocol tables come from (ApiVersions v5, ShareFetch v2).
JAVA_CLIENT_VERSION = "4.1.1"


def full_version(version: str) -> str:
    """'4' -> '4.4.0', '3' -> '3.9.2'; an exact version is returned as is."""
    return VERSIONS.get(version, version)


_JAVA: dict[str, str] = {}


def java_binary() -> str:
    """The `java` to run (JAVA_HOME first), checked to be Java 17 or newer."""
    if "path" in _JAVA:
        return _JAVA["path"]
    home = os.environ.get("JAVA_HOME")
    path = str(Path(home) / "bin" / "java") if home and (Path(home) / "bin" / "java").exists() else shutil.which("java")
    if path is None:
        raise LabError("java is not installed (apt-get install openjdk-17-jre-headless): Kafka needs Java 17+")
    out = subprocess.run([path, "-version"], capture_output=True, text=True).stderr
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    major = int(match.group(1)) if match else 0
    if major == 1 and match and match.group(2):  # "1.8.0_..." is Java 8
        major = int(match.group(2))
    if major < 17:
        raise LabError(f"{path} is Java {major or '?'}; Apache Kafka 4 needs Java 17 or newer")
    _JAVA["path"] = path
    return path
