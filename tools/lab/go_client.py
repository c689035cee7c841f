"""The lab's Go client (`tools/lab/go/main.go`, franz-go), built with the Go
toolchain; modules come through the Go module proxy, pinned by go.mod and
go.sum. The binary is cached beside the Maven jars, keyed by the hash of the
sources, so the compiler runs once per change."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

from tools.lab import maven
from tools.lab.net import LabError

SOURCE_DIR = Path(__file__).resolve().parent / "go"
SOURCES = ("go.mod", "go.sum", "main.go", "share.go")


def franz_go_version() -> str:
    """The franz-go version go.mod pins (what the manifest names)."""
    found = re.search(r"github\.com/twmb/franz-go (v[0-9.]+)", (SOURCE_DIR / "go.mod").read_text())
    if found is None:
        raise LabError("tools/lab/go/go.mod does not require github.com/twmb/franz-go")
    return found.group(1)


def go_binary() -> str:
    found = shutil.which("go") or next((p for p in ("/usr/local/go/bin/go",) if os.access(p, os.X_OK)), None)
    if found is None:
        raise LabError("the Go toolchain is not installed (https://go.dev/dl/, or apt-get install golang)")
    return found


def built_client() -> Path:
    """The labgo binary for the current sources (built when missing)."""
    digest = hashlib.sha256(b"".join((SOURCE_DIR / name).read_bytes() for name in SOURCES)).hexdigest()[:12]
    target = maven.cache_dir() / "go" / f"labgo-{digest}"
    with maven.locked(target.with_name(target.name + ".lock")):
        if not target.exists():
            staging = target.with_name(target.name + ".tmp")
            done = subprocess.run([go_binary(), "build", "-mod=readonly", "-o", str(staging), "."],
                                  cwd=SOURCE_DIR, capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                raise LabError(f"go build failed in {SOURCE_DIR}:\n{done.stderr.strip()[-2000:]}")
            staging.rename(target)
    return target


def run_go_client(args: list[str], timeout: float = 180.0) -> str:
    """Run `labgo ARGS...`; its standard output. A failure raises LabError
    with the end of its error output."""
    try:
        done = subprocess.run([str(built_client()), *args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise LabError(f"the Go client ({args[0]}) did not finish within {timeout:.0f}s") from None
    if done.returncode != 0:
        raise LabError(f"the Go client ({args[0]}) failed ({done.returncode}):\n{done.stderr.strip()[-2000:]}")
    return done.stdout
