"""A real Azure Blob Storage emulator for the abfs:// store tests: Azurite
(Microsoft's, MIT), its blob service only.

    with azure_server() as azure:      # on a free loopback port, data in a temporary directory
        azure.env()                    # AZURE_STORAGE_* variables for kdissect
        azure.upload(local, "container/key")

Installed once with npm (`npm install azurite@VERSION`) into the lab cache
(tools/lab/maven.py's cache dir, `azurite-VERSION/`); needs node and npm.
The account is made up per server with a random key, so a test can grep
every output for it. Azurite's blob API has no hierarchical namespace:
pyarrow's AzureFileSystem then moves a file by copy and delete.
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from tools.lab.maven import cache_dir, locked
from tools.lab.net import LabError, free_port, stop_process

VERSION = "3.35.0"
ACCOUNT = "kdissectlab"


def azurite_binary() -> Path:
    """The azurite-blob script, installed on first use."""
    home = cache_dir() / f"azurite-{VERSION}"
    binary = home / "node_modules" / ".bin" / "azurite-blob"
    with locked(cache_dir() / f"azurite-{VERSION}.lock"):
        if not binary.exists():
            if shutil.which("npm") is None:
                raise LabError("Azurite needs npm (apt-get install npm)")
            home.mkdir(parents=True, exist_ok=True)
            done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", f"azurite@{VERSION}"],
                                  cwd=home, capture_output=True, text=True, timeout=600)
            if done.returncode != 0 or not binary.exists():
                raise LabError(f"npm install azurite@{VERSION} failed: {done.stderr[-2000:]}")
    return binary


@dataclass
class AzureServer:
    endpoint: str  # "http://127.0.0.1:PORT"
    account: str
    key: str

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        env.update(AZURE_STORAGE_ACCOUNT_NAME=self.account, AZURE_STORAGE_ACCOUNT_KEY=self.key,
                   AZURE_STORAGE_ENDPOINT=self.endpoint)
        return env

    def file_system(self) -> Any:
        from pyarrow import fs

        host = self.endpoint.removeprefix("http://")
        return fs.AzureFileSystem(account_name=self.account, account_key=self.key,
                                  blob_storage_authority=host, dfs_storage_authority=host,
                                  blob_storage_scheme="http", dfs_storage_scheme="http")

    def make_container(self, name: str) -> None:
        self.file_system().create_dir(name)

    def upload(self, local: str | os.PathLike, key: str) -> None:
        with self.file_system().open_output_stream(key) as stream:
            stream.write(Path(local).read_bytes())


@contextlib.contextmanager
def azure_server(timeout: float = 60.0) -> Iterator[AzureServer]:
    binary = azurite_binary()
    directory = Path(tempfile.mkdtemp(prefix="azurite-"))
    port = free_port()
    key = base64.b64encode(secrets.token_bytes(64)).decode()
    env = dict(os.environ, AZURITE_ACCOUNTS=f"{ACCOUNT}:{key}")
    cmd = [str(binary), "--silent", "--location", str(directory), "--blobHost", "127.0.0.1",
           "--blobPort", str(port), "--skipApiVersionCheck", "--disableTelemetry"]
    with open(directory / "azurite.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise LabError(f"Azurite did not start: {(directory / 'azurite.log').read_text(errors='replace')[-2000:]}")
            time.sleep(0.2)
        yield AzureServer(f"http://127.0.0.1:{port}", ACCOUNT, key)
    finally:
        stop_process(proc, signal.SIGTERM, timeout=10)
        shutil.rmtree(directory, ignore_errors=True)
