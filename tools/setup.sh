#!/usr/bin/env bash
# Idempotent setup for a fresh Debian/Ubuntu machine: the system tools kdissect's
# lab and tests use (tcpdump, tshark, socat, Java 17 for Spark and Apache Kafka,
# Maven, openssl, Chromium for the report) and a virtualenv in .venv holding
# kdissect with all its extras.
set -euo pipefail
cd "$(dirname "$0")/.."

# The interpreter of .venv: the distribution's own python3 when it is new
# enough. Distributions build CPython with profile-guided and link-time
# optimisation; a plain source build (pyenv's default: no
# --enable-optimizations) runs kdissect about 25% slower on the same machine
# (benchmarks/README.md, "Which Python"). PYTHON=... picks another.
python=${PYTHON:-}
if [ -z "$python" ]; then
  python=python3
  if /usr/bin/python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    python=/usr/bin/python3
  fi
fi

missing=()
# Debian's python3 makes virtual environments only with python3-venv
"$python" -c 'import ensurepip' 2>/dev/null || [ -x .venv/bin/python ] || missing+=(python3-venv)
command -v tcpdump >/dev/null || missing+=(tcpdump)
command -v tshark >/dev/null || missing+=(tshark)
command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
# socat: the TLS front (OpenSSL) of the TLS lab tests
command -v socat >/dev/null || missing+=(socat)
# the capture lab's Apache Kafka: jars from Maven Central, its Java client, TLS certificates
command -v javac >/dev/null || missing+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null || missing+=(maven)
command -v openssl >/dev/null || missing+=(openssl)
# chromium: the tests open `kdissect report`'s page in it, headless
command -v chromium >/dev/null || missing+=(chromium)
# node and npm: tools/lab/azurite.py installs Azurite (the Azure Blob emulator of the abfs:// tests) from npm
command -v npm >/dev/null || missing+=(nodejs npm)
# a C compiler and the interpreter's headers: tools/build_native.py compiles the per-packet modules
command -v gcc >/dev/null || missing+=(gcc)
"$python" -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  2>/dev/null || missing+=(python3-dev)
if ((${#missing[@]})); then
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  export DEBIAN_FRONTEND=noninteractive
  # tshark's package asks whether non-root users may capture; answer "no".
  echo "wireshark-common wireshark-common/install-setuid boolean false" | $sudo debconf-set-selections || true
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Go >= 1.26: tools/lab/seaweedfs.py builds SeaweedFS, the S3 server of the
# store tests, from its Go module (Debian's golang-go is too old). The machines
# this runs on ship the toolchain at /usr/local/go; nothing is downloaded here.
# The build runs once, on first use, cached outside the checkout (~13 min cold
# on two cores, ~2 min with Go's build cache warm).
go_bin=$(command -v go || echo /usr/local/go/bin/go)
if ! "$go_bin" version 2>/dev/null | grep -qE 'go1\.(2[6-9]|[3-9][0-9])'; then
  echo "setup: Go 1.26+ not found (go on PATH or /usr/local/go/bin/go): the S3 store tests need it to build SeaweedFS" >&2
fi

[ -x .venv/bin/python ] || "$python" -m venv .venv
stamp=.venv/.kdissect-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ tools/setup.sh -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  # The build backend is flit_core: its editable install is a plain path
  # entry (kdissect.pth naming this checkout), so new modules are seen at
  # once and starting Python costs nothing more. (setuptools' default
  # editable install imports a finder module at every start of Python; its
  # compat mode, a path entry, is going away.) Remove what setuptools'
  # installs left here.
  rm -rf kdissect.egg-info build/__editable__.kdissect-*
  .venv/bin/python -m pip install -q -e '.[all]'
  touch "$stamp"
fi

# The per-packet modules compiled with mypyc (about 15% less time on
# many-connection captures); nothing is done when the build matches the
# sources. Without a build kdissect runs the same modules as plain Python.
.venv/bin/python tools/build_native.py || echo "setup: kdissect runs its plain Python modules" >&2
