"""kdissect.wire.stores and kdissect.shared.outdir_tree without a server: URI parsing,
settings, globbing, ranged reads and the OUTDIR rule on the local file
system (file:// URIs). The S3 side is in test_spark_stores.py."""

from __future__ import annotations

import os

import pytest

from kdissect.wire import stores
from kdissect.wire.capture import ReadStats, read_file
from kdissect.failures import InputError
from kdissect.shared.inputs import expand_inputs
from kdissect.shared.protected_inputs import ProtectedInputs
from kdissect.spark.outdir import claim_outdir
from kdissect.shared.outdir_tree import SUCCESS, Tree


def test_uris_parse_to_the_store_and_path():
    assert stores.parse("s3a://bucket/a/b.pcap") == stores.Location("s3a", "bucket", "bucket/a/b.pcap")
    assert stores.parse("s3://bucket").path == "bucket"
    # pathlib folds "//": the folded form names the same object
    assert stores.parse("s3:/bucket/a").uri == "s3://bucket/a"
    assert stores.parse("hdfs://nn:8020/x/y").path == "/x/y"
    assert stores.parse("file:///tmp/x").path == "/tmp/x"
    assert not stores.is_uri("/tmp/x") and not stores.is_uri("relative/s3:/x")
    assert not stores.is_uri("ftp://host/x")


def test_cloud_uris_parse_to_bucket_or_container_paths():
    assert stores.parse("gs://bucket/a/b.pcap") == stores.Location("gs", "bucket", "bucket/a/b.pcap")
    assert stores.parse("gs://bucket/a/").uri == "gs://bucket/a"
    full = stores.parse("abfs://caps@acct.dfs.core.windows.net/a/b.pcap")
    assert (full.path, full.container, full.account) == ("caps/a/b.pcap", "caps", "acct")
    assert full.uri == "abfs://caps@acct.dfs.core.windows.net/a/b.pcap"
    # a listed path maps back to a URI naming the same account
    assert full.child("caps/c.pcap").uri == "abfs://caps@acct.dfs.core.windows.net/c.pcap"
    short = stores.parse("abfss://caps/a.pcap")
    assert (short.path, short.account, short.uri) == ("caps/a.pcap", None, "abfss://caps/a.pcap")


def test_an_abfs_uri_with_a_key_is_refused_without_echoing_it():
    for uri in ("abfs://caps:c2VjcmV0a2V5@acct.dfs.core.windows.net/x.pcap",
                "abfs://:c2VjcmV0a2V5@acct.blob.core.windows.net/caps/x.pcap"):
        with pytest.raises(InputError) as caught:
            stores.parse(uri)
        assert "c2VjcmV0a2V5" not in str(caught.value) and "credentials in a URI are refused" in str(caught.value)
    with pytest.raises(InputError, match="no container"):
        stores.parse("abfs://@acct.dfs.core.windows.net/x")


def test_gcs_and_azure_settings_from_the_environment_hide_the_key(monkeypatch):
    for name in ("HADOOP_CONF_DIR", "HADOOP_HOME", "SPARK_CONF_DIR", "GOOGLE_CLOUD_PROJECT", "AZURE_STORAGE_KEY",
                 "AZURE_STORAGE_ACCOUNT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:4443")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", "acct")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", "c2VjcmV0a2V5")
    monkeypatch.setenv("AZURE_STORAGE_ENDPOINT", "http://127.0.0.1:10000")
    settings = stores.StoreSettings.from_conf({"spark.hadoop.fs.gs.project.id": "proj"})
    assert settings.gcs.pyarrow_options() == {"anonymous": True, "scheme": "http",
                                              "endpoint_override": "127.0.0.1:4443", "project_id": "proj"}
    options = settings.azure.pyarrow_options(None)
    assert options["account_name"] == "acct" and options["account_key"] == "c2VjcmV0a2V5"
    assert options["blob_storage_authority"] == options["dfs_storage_authority"] == "127.0.0.1:10000"
    assert options["blob_storage_scheme"] == "http"
    # the key goes to its own account only
    assert "account_key" not in settings.azure.pyarrow_options("otheraccount")
    assert "c2VjcmV0a2V5" not in repr(settings) and "c2VjcmV0a2V5" not in str(settings)
    import pickle

    assert pickle.loads(pickle.dumps(settings)) == settings
    monkeypatch.delenv("STORAGE_EMULATOR_HOST")
    assert stores.StoreSettings.from_conf({}).gcs.pyarrow_options() == {"anonymous": False}
    assert stores.StoreSettings.from_conf({"fs.gs.auth.type": "UNAUTHENTICATED"}).gcs.anonymous


def test_abfs_without_an_account_is_one_line(monkeypatch):
    monkeypatch.delenv("AZURE_STORAGE_ACCOUNT_NAME", raising=False)
    monkeypatch.delenv("AZURE_STORAGE_ACCOUNT", raising=False)
    stores.configure(stores.StoreSettings.from_conf({}))
    try:
        with pytest.raises(InputError, match="no storage account"):
            stores.file_system(stores.parse("abfs://caps/x.pcap"))
    finally:
        stores.configure(stores.StoreSettings())


def test_a_uri_with_credentials_is_refused_without_echoing_them():
    with pytest.raises(InputError) as caught:
        stores.parse("s3://AKIAEXAMPLE:verysecret@bucket/x.pcap")
    assert "verysecret" not in str(caught.value) and "AKIAEXAMPLE" not in str(caught.value)
    assert str(caught.value).startswith("s3://bucket/x.pcap: credentials in a URI are refused")


def test_s3a_settings_come_first_then_the_aws_variables(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ENVKEY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "envsecret")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    monkeypatch.delenv("HADOOP_HOME", raising=False)
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    from_env = stores.StoreSettings.from_conf({})
    assert (from_env.s3.access_key, from_env.s3.secret_key, from_env.s3.endpoint) == \
        ("ENVKEY", "envsecret", "http://127.0.0.1:1")
    conf = {"spark.hadoop.fs.s3a.access.key": "CONFKEY", "spark.hadoop.fs.s3a.secret.key": "confsecret",
            "spark.hadoop.fs.s3a.endpoint": "https://s3.example:9000", "spark.executor.memory": "1g"}
    settings = stores.StoreSettings.from_conf(conf)
    assert (settings.s3.access_key, settings.s3.endpoint) == ("CONFKEY", "https://s3.example:9000")
    options = settings.s3.pyarrow_options()
    assert options["endpoint_override"] == "s3.example:9000" and options["scheme"] == "https"
    assert "confsecret" not in repr(settings) and "CONFKEY" not in repr(settings)


def test_settings_travel_whole_and_stay_as_made():
    """What the Spark driver pickles into its tasks' closures comes back
    equal (the keys too), hashes alike, cannot be changed, and its repr
    still hides the keys; a Location likewise."""
    import copy
    import pickle

    settings = stores.StoreSettings(stores.S3Settings(endpoint="http://127.0.0.1:1", access_key="AKEY",
                                                      secret_key="sekrit", session_token="tok"), "hdfs")
    back = pickle.loads(pickle.dumps(settings))
    assert back == settings and hash(back) == hash(settings) and back.s3.secret_key == "sekrit"
    assert copy.deepcopy(settings) == settings and settings != stores.StoreSettings()
    assert stores.StoreSettings().s3 == stores.S3Settings() and stores.StoreSettings().hadoop_user is None
    for text in ("AKEY", "sekrit", "tok"):
        assert text not in repr(settings)
    assert repr(stores.S3Settings(region="eu")) == "S3Settings(endpoint=None, region='eu', path_style=None)"
    with pytest.raises(AttributeError):
        settings.s3.secret_key = "other"  # type: ignore[misc]
    location = stores.parse("hdfs://nn:8020/x/y")
    assert pickle.loads(pickle.dumps(location)) == location and {location, stores.parse("hdfs://nn:8020/x/y")} == {location}
    with pytest.raises(AttributeError):
        location.path = "/z"  # type: ignore[misc]


def test_hadoop_core_site_is_read(tmp_path, monkeypatch):
    (tmp_path / "core-site.xml").write_text(
        "<configuration><property><name>fs.s3a.endpoint</name><value>http://minio:9000</value></property>"
        "<property><name>fs.s3a.path.style.access</name><value>true</value></property></configuration>")
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    settings = stores.StoreSettings.from_conf()
    assert settings.s3.endpoint == "http://minio:9000" and settings.s3.path_style is True


@pytest.mark.parametrize("pattern, path, matches", [
    ("b/cap/*.pcap", "b/cap/x.pcap", True),
    ("b/cap/*.pcap", "b/cap/sub/x.pcap", False),
    ("b/cap/**/*.pcap", "b/cap/sub/deeper/x.pcap", True),
    ("b/cap/**/*.pcap", "b/cap/x.pcap", True),
    ("b/cap/x?.pcap", "b/cap/x1.pcap", True),
    ("b/cap/x[!1].pcap", "b/cap/x1.pcap", False),
    ("b/cap/x[12].pcap", "b/cap/x2.pcap", True),
])
def test_globs_match_store_paths(pattern, path, matches):
    assert bool(stores._glob_regex(pattern).fullmatch(path)) is matches


def test_file_uris_list_and_read_like_paths(captures_dir, tmp_path):
    (tmp_path / "sub").mkdir()
    for name in ("admin.pcap", "ipv6.pcap"):
        (tmp_path / "sub" / name).write_bytes((captures_dir / name).read_bytes())
    (tmp_path / "sub" / "notes.txt").write_text("x")
    found, skipped = expand_inputs([f"file://{tmp_path}/sub"])
    assert found == [f"file://{tmp_path}/sub/admin.pcap", f"file://{tmp_path}/sub/ipv6.pcap"]
    assert skipped == [f"file://{tmp_path}/sub/notes.txt"]
    assert expand_inputs([f"file://{tmp_path}/**/i*.pcap"])[0] == [f"file://{tmp_path}/sub/ipv6.pcap"]
    with pytest.raises(InputError, match="no such file or directory"):
        expand_inputs([f"file://{tmp_path}/missing"])
    # the same segments through a RangedFile as through open()
    stats_uri, stats_path = ReadStats(), ReadStats()
    by_uri = [(s.frame_number, s.payload) for s in read_file(found[0], 0, stats_uri)]
    by_path = [(s.frame_number, s.payload) for s in read_file(tmp_path / "sub" / "admin.pcap", 0, stats_path)]
    assert by_uri == by_path and by_uri


def test_ranged_file_reads_across_blocks(tmp_path, monkeypatch):
    data = os.urandom(10_000)
    (tmp_path / "blob").write_bytes(data)
    handle = stores.RangedFile(f"file://{tmp_path}/blob", block_size=1024)
    handle.seek(1000)
    assert handle.read(3000) == data[1000:4000]
    handle.seek(-10, 2)
    assert handle.read() == data[-10:]
    assert handle.read(5) == b""
    handle.seek(0)
    assert handle.read(20_000) == data
    handle.close()


def test_outdir_rule_and_markers(tmp_path):
    def claim(outdir: str, overwrite: bool = False) -> str:
        return claim_outdir(outdir, ProtectedInputs([]), overwrite, ("exchanges",), "_work")

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("keep me")
    with pytest.raises(InputError, match="is not empty and holds no earlier kdissect spark output"):
        claim(str(foreign), overwrite=True)
    assert (foreign / "thesis.tex").read_text() == "keep me"
    claim(str(tmp_path / "new"))  # missing: fine
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / SUCCESS).write_bytes(b"")  # the commit protocol's marker: an earlier output
    with pytest.raises(InputError, match="holds an earlier kdissect spark output: give --overwrite"):
        claim(f"file://{earlier}")
    assert claim(f"file://{earlier}", overwrite=True) == str(earlier)
    assert not (earlier / SUCCESS).exists()


def test_tree_output_appears_whole_or_not_at_all(tmp_path):
    tree = Tree(str(tmp_path / "out"))
    tree.write_bytes(b"hello", "t", "part-00000.parquet")
    assert (tmp_path / "out" / "t" / "part-00000.parquet").read_bytes() == b"hello"
    with pytest.raises(RuntimeError):
        with tree.output("t", "part-00001.parquet") as stream:
            stream.write(b"half")
            raise RuntimeError("task died")
    assert sorted(os.listdir(tmp_path / "out" / "t")) == ["part-00000.parquet"]
    assert tree.files("t", suffix=".parquet") == ["part-00000.parquet"]
    tree.delete("t")
    assert not (tmp_path / "out" / "t").exists()


@pytest.mark.parametrize("env, message", [
    ({}, "hdfs:// needs Hadoop's client jars on CLASSPATH"),
    ({"CLASSPATH": "/nonexistent/hadoop-client-api.jar"}, "hdfs:// needs a Java runtime"),
    ({"CLASSPATH": "/nonexistent/hadoop-client-api.jar", "JAVA_HOME": "JDK"}, "hdfs:// needs libhdfs.so"),
])
def test_hdfs_without_a_hadoop_client_says_what_is_missing(env, message, tmp_path):
    """hdfs:// on a machine without libhdfs, a JVM or Hadoop's jars: one line
    naming what to install, status 2, nothing written."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from tests.support.paths import REPO

    base = {k: v for k, v in os.environ.items() if k not in ("CLASSPATH", "JAVA_HOME", "HADOOP_HOME",
                                                             "ARROW_LIBHDFS_DIR")}
    if env.get("JAVA_HOME") == "JDK":
        javac = shutil.which("javac")
        assert javac, "a JDK is part of the project's setup (tools/setup.sh)"
        env = {**env, "JAVA_HOME": str(Path(os.path.realpath(javac)).parents[1])}
    out = tmp_path / "x.parquet"
    done = subprocess.run([sys.executable, "-m", "kdissect", "export", "hdfs://127.0.0.1:1/captures/x.pcap",
                           "-o", str(out)], cwd=REPO, env={**base, **env}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"kdissect: error: hdfs://127.0.0.1:1/captures/x.pcap: {message}")
    assert not out.exists()
