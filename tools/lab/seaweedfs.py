"""A real S3 server for the store tests: SeaweedFS (`weed server -s3`, Apache-2.0).

    with s3_server() as s3:          # master, volume, filer and S3 gateway on free loopback ports
        s3.endpoint                   # "http://127.0.0.1:PORT"
        s3.env()                      # AWS_* variables for the writer identity
        s3.make_bucket("captures")

The binary is built once from SeaweedFS's Go module and cached outside the
checkout (tools/lab/maven.py's cache dir, `seaweedfs-VERSION/weed`). The
module has `replace` directives, so `go install module@version` is refused:
the module is downloaded (`go mod download -json`), copied and built with
`go build ./weed`. Cold, that takes about 13 minutes on two cores; with Go's
build cache warm, about 2 (it runs under `nice -n 19`).

Identities (S3 access keys) are made up per server: `writer` may do
anything, `reader` may only read and list some buckets, so permission tests
have a real refusal. The keys are random, so a test can grep every output for them.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from tools.lab.maven import cache_dir, locked
from tools.lab.net import LabError, free_port, port_is_free, stop_process

MODULE = "github.com/seaweedfs/seaweedfs"
VERSION = "v0.0.0-20261109003541-7506e5f91cd6"  # a version the Go proxy is known to serve


GO_NEEDED = (1, 26)  # the SeaweedFS module's go directive


def _go_toolchain() -> str:
    """A Go toolchain new enough to build SeaweedFS (go on PATH, or
    /usr/local/go/bin/go), or a LabError saying what is missing."""
    import re

    found = []
    for candidate in (shutil.which("go"), "/usr/local/go/bin/go"):
        if not candidate or not os.path.exists(candidate):
            continue
        try:
            text = subprocess.run([candidate, "version"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        match = re.search(r"go(\d+)\.(\d+)", text)
        if match and (int(match.group(1)), int(match.group(2))) >= GO_NEEDED:
            return candidate
        found.append(f"{candidate}: {text.strip() or 'unknown version'}")
    raise LabError("SeaweedFS (the S3 server of the store tests) is built with Go 1.26 or newer, which is not "
                   "installed (looked for go on PATH and /usr/local/go/bin/go"
                   + (f"; found {', '.join(found)}" if found else "") + ")")


def weed_binary(build: bool = True) -> Path:
    """The cached `weed` binary; built from the Go module on first use."""
    entry = cache_dir() / f"seaweedfs-{VERSION}"
    binary = entry / "weed"
    if binary.is_file():
        return binary
    if not build:
        raise LabError(f"SeaweedFS is not built yet ({binary}); run `python -m tools.lab.seaweedfs build`")
    with locked(entry.with_name(entry.name + ".lock")):
        if binary.is_file():
            return binary
        go = _go_toolchain()
        entry.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([go, "mod", "download", "-json", f"{MODULE}@{VERSION}"], capture_output=True,
                              text=True, cwd=entry)
        if done.returncode != 0:
            raise LabError(f"go mod download {MODULE}@{VERSION} failed: {(done.stdout + done.stderr)[-400:]}")
        source_dir = json.loads(done.stdout)["Dir"]
        source = Path(tempfile.mkdtemp(prefix="src.", dir=entry))
        try:
            shutil.copytree(source_dir, source, dirs_exist_ok=True)
            for path in source.rglob("*"):  # the module cache is read-only
                path.chmod(path.stat().st_mode | 0o200)
            staging = entry / "weed.building"
            done = subprocess.run(["nice", "-n", "19", go, "build", "-o", str(staging), "./weed"], cwd=source,
                                  capture_output=True, text=True)
            if done.returncode != 0:
                raise LabError(f"go build ./weed failed: {(done.stdout + done.stderr)[-800:]}")
            staging.rename(binary)
        finally:
            shutil.rmtree(source, ignore_errors=True)
    return binary


@dataclass
class S3Server:
    endpoint: str
    directory: Path
    log_path: Path
    keys: dict[str, tuple[str, str]] = field(default_factory=dict)  # identity -> (access key, secret key)

    def env(self, identity: str = "writer", base: dict[str, str] | None = None) -> dict[str, str]:
        """`base` (default: os.environ) with the AWS variables of `identity` and the endpoint."""
        env = dict(os.environ if base is None else base)
        access, secret = self.keys[identity]
        for name in [key for key in env if key.startswith("AWS_")]:
            del env[name]
        env.update(AWS_ACCESS_KEY_ID=access, AWS_SECRET_ACCESS_KEY=secret, AWS_ENDPOINT_URL=self.endpoint,
                   AWS_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true")
        return env

    def file_system(self, identity: str = "writer"):
        """A pyarrow S3FileSystem for `identity`."""
        from pyarrow import fs

        access, secret = self.keys[identity]
        scheme, _, host = self.endpoint.partition("://")
        return fs.S3FileSystem(access_key=access, secret_key=secret, endpoint_override=host, scheme=scheme,
                               region="us-east-1", allow_bucket_creation=True, allow_bucket_deletion=True)

    def make_bucket(self, name: str) -> None:
        self.file_system().create_dir(name)

    def upload(self, local: str | os.PathLike, key: str) -> None:
        """Copy a local file to `bucket/key` (the bucket must exist)."""
        from pyarrow import fs

        fs.copy_files(str(local), key, source_filesystem=fs.LocalFileSystem(),
                      destination_filesystem=self.file_system())

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


def _free_pair() -> int:
    """A free port whose SeaweedFS gRPC companion (port + 10000) is free too."""
    for _ in range(200):
        port = free_port()
        if port + 10000 < 65536 and port_is_free(port + 10000):
            return port
    raise LabError("no free port pair (port, port + 10000) on loopback")


def _wait_for_s3(endpoint: str, proc: subprocess.Popen, timeout: float) -> None:
    """Until the S3 gateway answers (any HTTP status: an anonymous request is refused)."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise LabError(f"weed exited with status {proc.returncode}")
        try:
            urllib.request.urlopen(endpoint + "/", timeout=1).close()
            return
        except urllib.error.HTTPError:
            return
        except (urllib.error.URLError, OSError):
            if time.monotonic() > deadline:
                raise LabError(f"the S3 gateway at {endpoint} does not answer after {timeout:.0f}s") from None
            time.sleep(0.2)


@contextlib.contextmanager
def s3_server(timeout: float = 90.0, reader_buckets: tuple[str, ...] = ("captures",)) -> Iterator[S3Server]:
    """SeaweedFS's master, volume server, filer and S3 gateway in one process,
    data in a temporary directory; stopped and removed on exit. The `reader`
    identity may read and list `reader_buckets` only."""
    binary = weed_binary()
    directory = Path(tempfile.mkdtemp(prefix="seaweedfs-"))
    keys = {name: ("KD" + secrets.token_hex(8).upper(), secrets.token_urlsafe(30)) for name in ("writer", "reader")}
    config = {"identities": [
        {"name": "writer", "credentials": [{"accessKey": keys["writer"][0], "secretKey": keys["writer"][1]}],
         "actions": ["Admin", "Read", "Write", "List", "Tagging"]},
        {"name": "reader", "credentials": [{"accessKey": keys["reader"][0], "secretKey": keys["reader"][1]}],
         "actions": [f"{action}:{bucket}" for bucket in reader_buckets for action in ("Read", "List")]},
    ]}
    config_path = directory / "s3.json"
    config_path.write_text(json.dumps(config))
    config_path.chmod(0o600)
    ports = {name: _free_pair() for name in ("master", "volume", "filer", "s3")}
    endpoint = f"http://127.0.0.1:{ports['s3']}"
    log_path = directory / "weed.log"
    (directory / "data").mkdir()
    cmd = [str(binary), "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={directory / 'data'}",
           f"-master.port={ports['master']}", f"-volume.port={ports['volume']}",
           f"-filer.port={ports['filer']}", "-filer", "-s3", f"-s3.port={ports['s3']}",
           f"-s3.config={config_path}", "-volume.max=0", "-master.volumeSizeLimitMB=64"]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    server = S3Server(endpoint, directory, log_path, keys)
    try:
        try:
            _wait_for_s3(endpoint, proc, timeout)
            _wait_writable(server, proc, timeout)
        except LabError as problem:
            raise LabError(f"{problem}; SeaweedFS log:\n{server.log()[-3000:]}") from None
        yield server
    finally:
        # SeaweedFS never ended on SIGTERM or SIGINT within 15 s here (each stop
        # waited the whole timeout, three times a suite); its data is a
        # temporary directory removed right after, so nothing is lost by a kill
        stop_process(proc, signal.SIGKILL, timeout=10)
        shutil.rmtree(directory, ignore_errors=True)


def _wait_writable(server: S3Server, proc: subprocess.Popen, timeout: float) -> None:
    """Until a bucket can be made and a small object written (the volume
    server registers with the master a moment after the gateway answers)."""
    deadline = time.monotonic() + timeout
    probe = "kdissect-lab-ready"
    while True:
        try:
            client = server.file_system()
            client.create_dir(probe)
            with client.open_output_stream(f"{probe}/ready") as out:
                out.write(b"ok")
            client.delete_dir(probe)
            return
        except OSError as problem:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise LabError(f"SeaweedFS not writable: {problem}") from None
            time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    """`python -m tools.lab.seaweedfs build`: build (or find) the cached binary."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["build"]:
        print(weed_binary())
        return 0
    if args[:1] == ["serve"]:  # for trying things by hand: prints the endpoint and keys, Ctrl-C stops
        with s3_server() as server:
            print(server.endpoint, json.dumps(server.keys), flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    time.sleep(3600)
        return 0
    print("usage: python -m tools.lab.seaweedfs build|serve", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
