"""A throw-away self-signed TLS certificate for a lab broker, made at run
time with openssl (never committed): an EC P-256 key in PKCS#8 PEM and a
certificate for localhost, 127.0.0.1 and ::1."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tools.lab.net import LabError


@dataclass(frozen=True)
class Certificate:
    key: Path  # PKCS#8 private key (PEM, unencrypted)
    cert: Path  # the self-signed certificate (PEM): clients trust it as their CA
    bundle: Path  # key then certificate in one PEM file (Kafka's PEM keystore)


def self_signed(directory: Path, days: int = 2) -> Certificate:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise LabError("openssl is not installed (apt-get install openssl)")
    directory.mkdir(parents=True, exist_ok=True)
    key, cert, bundle = directory / "broker.key.pem", directory / "broker.cert.pem", directory / "broker.pem"
    cmd = [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
           "-keyout", str(key), "-out", str(cert), "-days", str(days), "-subj", "/CN=localhost",
           "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise LabError(f"openssl could not make a certificate: {done.stderr.strip().splitlines()[-1:]}")
    key.chmod(0o600)
    bundle.write_text(key.read_text() + cert.read_text())
    bundle.chmod(0o600)
    return Certificate(key, cert, bundle)
