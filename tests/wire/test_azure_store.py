"""abfs:// against a real Azure Blob Storage emulator (Azurite, tools/lab/azurite.py):
the CLI reads a capture from a container exactly as it reads the local file
(expected rows: `kdissect export` of the local copy), lists and globs,
writes an OUTDIR Tree, and fails in one line, exit 2, with the account key
in no output."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kdissect.wire import stores
from kdissect.shared.outdir_tree import Tree
from tests.support.spark import REPO


@pytest.fixture(scope="module")
def azure(captures_dir):
    from tools.lab.azurite import azure_server

    with azure_server() as server:
        server.make_container("caps")
        for name in ("admin.pcap", "consume_group.pcap"):
            server.upload(captures_dir / name, f"caps/archive/{name}")
        yield server


@pytest.fixture()
def azure_env(azure, monkeypatch):
    for name, value in azure.env({}).items():
        monkeypatch.setenv(name, value)
    stores.configure(stores.StoreSettings.from_conf({}))
    yield
    stores.configure(stores.StoreSettings())


def _kdissect(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kdissect", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def test_export_of_an_abfs_uri_equals_export_of_the_local_file(azure, captures_dir):
    env = azure.env()
    local = _kdissect(["export", str(captures_dir / "admin.pcap")], env)
    assert local.returncode == 0 and local.stdout.strip()
    account_uri = f"abfs://caps@{azure.account}.dfs.core.windows.net/archive/admin.pcap"
    for uri in ("abfs://caps/archive/admin.pcap", account_uri):
        remote = _kdissect(["export", uri], env)
        assert remote.returncode == 0, remote.stderr
        assert remote.stdout == local.stdout
        assert azure.key not in remote.stdout + remote.stderr


def test_bad_abfs_inputs_give_one_line_status_2_and_no_key(azure):
    import base64
    import secrets

    wrong, malformed = azure.env(), azure.env()
    wrong["AZURE_STORAGE_ACCOUNT_KEY"] = base64.b64encode(secrets.token_bytes(64)).decode()
    malformed["AZURE_STORAGE_ACCOUNT_KEY"] = azure.key[::-1]  # "==" first: not base64
    cases = [(azure.env(), "abfs://nocontainer/admin.pcap", "abfs://nocontainer/admin.pcap: no such container"),
             (azure.env(), "abfs://caps/archive/missing.pcap", "abfs://caps/archive/missing.pcap: no such file or directory"),
             (wrong, "abfs://caps/archive/admin.pcap", "abfs://caps/archive/admin.pcap: the store refused the credentials"),
             (malformed, "abfs://caps/archive/admin.pcap", f"the account key of {azure.account} is not base64 "
                                                             "(AZURE_STORAGE_ACCOUNT_KEY or fs.azure.account.key.*)")]
    for env, uri, expected in cases:
        done = _kdissect(["export", uri], env)
        lines = [line for line in done.stderr.splitlines() if "error" in line]
        assert done.returncode == 2, done.stderr
        assert len(lines) == 1 and lines[0].endswith(expected), done.stderr
        assert "Traceback" not in done.stderr
        assert azure.key not in done.stderr and env["AZURE_STORAGE_ACCOUNT_KEY"] not in done.stderr


def test_listing_globs_and_a_tree_written_in_a_container(azure, azure_env, captures_dir):
    listed = stores.list_files("abfs://caps/archive")
    assert listed == [("abfs://caps/archive/admin.pcap", (captures_dir / "admin.pcap").stat().st_size),
                      ("abfs://caps/archive/consume_group.pcap",
                       (captures_dir / "consume_group.pcap").stat().st_size)]
    assert [uri for uri, _ in stores.list_files("abfs://caps/arch*/adm*.pcap")] == ["abfs://caps/archive/admin.pcap"]
    # ranged reads: the bytes of the local file, from an offset
    data = (captures_dir / "consume_group.pcap").read_bytes()
    with stores.open_input("abfs://caps/archive/consume_group.pcap") as handle:
        handle.seek(100)
        assert handle.read(1000) == data[100:1100]
    tree = Tree("abfs://caps/out")
    tree.check_store()
    tree.write_bytes(b"one", "t", "part-0.parquet")  # a temporary, then moved into place (copy and delete)
    tree.move("t/part-0.parquet", "t/part-1.parquet")
    assert tree.files("t") == ["part-1.parquet"] and tree.read_bytes("t", "part-1.parquet") == b"one"
    with pytest.raises(Exception, match="no such container"):
        Tree("abfs://nocontainer/out").check_store()
