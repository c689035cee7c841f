"""Captures in a real S3 server (SeaweedFS, tools/lab/seaweedfs.py) read by
the Spark job and the CLI through kdissect.wire.stores.

Expected tables come from `kdissect export` on local copies of the same
files; frame counts from tshark; the rotation and the pcapng from editcap.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kdissect.wire import stores
from kdissect.failures import InputError
from kdissect.spark.job import JobOptions, run_job
from tests.support.spark import REPO, canonical, export_rows, table_rows, tshark_frame_count
from tests.support.spark import write_mixed_archive

pytestmark = [pytest.mark.slow, pytest.mark.minutes, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

BUCKET = "captures"


@pytest.fixture(scope="module")
def s3():
    from tools.lab.seaweedfs import s3_server

    with s3_server() as server:
        server.make_bucket(BUCKET)
        server.make_bucket("private")
        yield server


@pytest.fixture(scope="module")
def archive(s3, captures_dir, tmp_path_factory):
    """Local copies and their S3 twins: one pcap cut into byte ranges, a
    pcapng, a gzip file and a rotated set whose connections span files."""
    local = tmp_path_factory.mktemp("archive")
    rotated = write_mixed_archive(captures_dir, local)
    (local / "notes.txt").write_text("not a capture")
    for path in sorted(local.rglob("*")):
        if path.is_file():
            s3.upload(path, f"{BUCKET}/archive/{path.relative_to(local)}")
    s3.upload(captures_dir / "admin.pcap", "private/admin.pcap")
    return local, rotated


@pytest.fixture(scope="module")
def s3_env(s3):
    """The writer's AWS variables in this process (the job's driver and, through
    the tasks' closures, its local executors)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(s3.env("writer", saved))
    stores.configure(stores.StoreSettings.from_conf())
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
        stores.configure(stores.StoreSettings())


def test_listing_globs_and_one_line_errors(s3, archive, s3_env):
    listed = [uri for uri, _ in stores.list_files(f"s3://{BUCKET}/archive")]
    local, rotated = archive
    expected = sorted(f"s3://{BUCKET}/archive/{p.relative_to(local)}" for p in local.rglob("*") if p.is_file())
    assert listed == expected
    # s3a:// names the same objects; a glob is matched against the listing
    globbed = [uri for uri, _ in stores.list_files(f"s3a://{BUCKET}/archive/rotated/*.pcap")]
    assert globbed == [f"s3a://{BUCKET}/archive/rotated/{p.name}" for p in rotated]
    with pytest.raises(InputError, match=r"^s3://no-such-bucket/x: no such bucket$"):
        stores.list_files("s3://no-such-bucket/x")
    with pytest.raises(InputError, match=rf"^s3://{BUCKET}/archive/nothing\*: no file matches$"):
        stores.list_files(f"s3://{BUCKET}/archive/nothing*")


def test_ranged_reads_fetch_each_range_not_the_file(s3, archive, s3_env, monkeypatch):
    """The pre-pass of a middle range fetches blocks near that range only
    (ranged GETs), not the whole object."""
    from kdissect.spark import plan

    # eight copies of the largest capture back to back (mergecap -a): ranges of
    # a quarter of it are larger than the reader's 1 MiB chunks
    local, _rotated = archive
    long = local.parent / "long.pcap"
    subprocess.run(["mergecap", "-a", "-F", "pcap", "-w", str(long), *[str(local / "big.pcap")] * 8], check=True)
    s3.upload(long, f"{BUCKET}/long/long.pcap")
    uri = f"s3://{BUCKET}/long/long.pcap"
    size = stores.size(uri)
    block = 256 << 10
    fetched: list[int] = []
    real_block = stores.RangedFile._block

    def counting(self, *where):
        before = self.bytes_fetched
        data = real_block(self, *where)
        fetched.append(self.bytes_fetched - before)  # 0 when the block was kept from an earlier read
        return data

    monkeypatch.setattr(stores, "BLOCK_SIZE", block)
    monkeypatch.setattr(stores.RangedFile, "_block", counting)
    splits = plan.plan_splits([(uri, "pcap")], size // 4)
    scan = plan.scan_range(splits[1])
    assert splits[1].start <= scan.boundary < splits[1].end and scan.records > 0
    # a quarter of the file, plus the header's block and the walk's last chunk
    # (the reader asks 1 MiB at a time): about half the file is never fetched
    assert 0 < sum(fetched) <= size // 4 + (1 << 20) + 2 * block < size


def test_spark_job_over_s3_equals_export_of_local_copies(spark, s3, archive, s3_env, tmp_path):
    local, rotated = archive
    big = local / "big.pcap"
    split_size = max(4096, big.stat().st_size // 5)
    outdir = tmp_path / "out"
    result = run_job(JobOptions(inputs=[f"s3://{BUCKET}/archive"], outdir=str(outdir), master=None,
                                split_size=split_size), spark=spark)
    manifest = json.loads((outdir / "manifest.json").read_text())
    captures = sorted(p for p in local.rglob("*") if p.is_file() and p.suffix != ".txt")
    assert sorted(entry["path"] for entry in manifest["inputs"]) == sorted(
        f"s3://{BUCKET}/archive/{p.relative_to(local)}" for p in captures)
    assert manifest["skipped_files"] == [f"s3://{BUCKET}/archive/notes.txt"]
    by_name = {entry["name"]: entry for entry in manifest["inputs"]}
    assert by_name["big.pcap"]["read_tasks"] >= 4
    assert by_name["group.pcapng"]["format"] == "pcapng"
    assert by_name["admin.pcap.gz"]["format"] == "gzip" and by_name["admin.pcap.gz"]["read_tasks"] == 1
    assert manifest["files_read_whole_after_boundary_check"] == []
    assert manifest["read"]["packets"] == sum(tshark_frame_count(p) for p in captures)
    expected = export_rows(captures, tmp_path / "export.parquet")
    got = table_rows(outdir, "exchanges")
    assert len(expected) > 0
    assert canonical(got) == canonical(expected)
    assert manifest["counts"]["exchanges"] == len(expected) == result.manifest["accounting"]["exchanges"]
    # connections of the rotated set span files, and come out whole
    spans: dict[int, set[str]] = {}
    pieces = {path.name for path in rotated}
    for row in got:
        if row["capture"] in pieces:
            spans.setdefault(row["stream"], set()).add(row["capture"])
    assert any(len(names) > 1 for names in spans.values()), "no connection spans the rotated files"


def _kdissect(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kdissect", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)


def test_bad_store_inputs_give_one_line_and_status_2(s3, archive, tmp_path):
    writer = s3.env("writer")
    secret = writer["AWS_SECRET_ACCESS_KEY"]
    wrong = {**writer, "AWS_SECRET_ACCESS_KEY": "wrong-" + secret[6:]}
    reader = s3.env("reader")
    unreachable = {**writer, "AWS_ENDPOINT_URL": "http://127.0.0.1:9"}
    # (an S3 HEAD answer has no body: a refused key and a missing permission
    # are one bare 403, and the line says so)
    denied = "access denied (no permission, or the credentials were refused)"
    cases = [
        (writer, "s3://no-such-bucket/archive", "no such bucket"),
        (writer, f"s3://{BUCKET}/no-such-dir", "no such file or directory"),
        (wrong, f"s3://{BUCKET}/archive/big.pcap", denied),
        (reader, "s3://private/admin.pcap", denied),
        (unreachable, f"s3://{BUCKET}/archive/big.pcap", "cannot reach the store"),
    ]
    for env, uri, reason in cases:
        outdir = tmp_path / f"out-{len(list(tmp_path.iterdir()))}"
        done = _kdissect(["spark", uri, "-o", str(outdir)], env)
        assert done.returncode == 2, (uri, done.stderr)
        assert done.stderr.strip().splitlines() == [f"kdissect: error: {uri}: {reason}"], (uri, done.stderr)
        assert not outdir.exists()
        for key in ("AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID"):
            assert env[key] not in done.stdout + done.stderr


def test_cli_export_reads_a_store_uri_like_a_local_path(s3, archive, tmp_path):
    local, _rotated = archive
    done = _kdissect(["export", f"s3a://{BUCKET}/archive/group.pcapng", "-o", str(tmp_path / "s3.parquet"),
                      "--quiet"], s3.env("writer"))
    assert done.returncode == 0, done.stderr
    import pyarrow.parquet as pq

    got = pq.read_table(tmp_path / "s3.parquet").to_pylist()
    assert got and canonical(got) == canonical(export_rows([local / "group.pcapng"], tmp_path / "local.parquet"))


@pytest.fixture(scope="module")
def lake_run(s3, archive):
    """`kdissect spark` from S3 to S3 in a child process, the writer's keys in
    its environment only."""
    env = s3.env("writer")
    done = _kdissect(["spark", f"s3://{BUCKET}/archive", "-o", f"s3://{BUCKET}/lake", "--master", "local[2]",
                      "--split-size", "64k"], env)
    assert done.returncode == 0, done.stderr[-3000:]
    return done, env


def _objects(s3, prefix: str) -> dict[str, bytes]:
    from pyarrow.fs import FileSelector, FileType

    client = s3.file_system()
    found = {}
    for info in client.get_file_info(FileSelector(prefix, recursive=True, allow_not_found=True)):
        if info.type == FileType.File:
            with client.open_input_stream(info.path) as stream:
                found[info.path[len(prefix) + 1:]] = stream.read()
    return found


def test_tables_in_s3_are_a_committed_partitioned_lake(s3, archive, lake_run, tmp_path):
    import pyarrow.dataset as ds

    from kdissect.model.exchange import SCHEMA

    local, _rotated = archive
    objects = _objects(s3, f"{BUCKET}/lake")
    assert "_SUCCESS" in objects and "_KDISSECT_RUNNING" not in objects
    assert not [name for name in objects if name.startswith("_work") or "/." in name or name.endswith(".tmp")]
    manifest = json.loads(objects["manifest.json"])
    captures = sorted(p for p in local.rglob("*") if p.is_file() and p.suffix != ".txt")
    expected = export_rows(captures, tmp_path / "export.parquet")
    # the exchanges table, read by partition through pyarrow's S3 client
    days = sorted({name.split("/")[1] for name in objects if name.startswith("exchanges/capture_date=")})
    assert days, "no capture_date partitions"
    lake = ds.dataset(f"{BUCKET}/lake/exchanges", filesystem=s3.file_system(), format="parquet",
                      partitioning="hive")
    got = lake.to_table()
    values = sorted(set(got.column("capture_date").to_pylist()))
    assert sorted(f"capture_date={value}" for value in values) == days
    assert got.drop_columns(["capture_date"]).schema.equals(SCHEMA.with_metadata(None), check_metadata=False) \
        or [f.name for f in got.drop_columns(["capture_date"]).schema] == [f.name for f in SCHEMA]
    assert canonical(got.drop_columns(["capture_date"]).to_pylist()) == canonical(expected)
    one_day = lake.to_table(filter=ds.field("capture_date") == values[0]).num_rows
    assert 0 < one_day <= len(expected)
    # each row's partition is its request's (else response's) UTC date
    for row in got.to_pylist():
        when = row["request_ts"] or row["response_ts"]
        assert str(row["capture_date"]) == when.strftime("%Y-%m-%d")
    assert manifest["counts"]["exchanges"] == len(expected)
    # every other table is there, each committed
    for name in ("partition_errors", "latency", "errors", "throttle", "timeseries", "topics", "clients"):
        assert f"{name}/_SUCCESS" in objects and any(n.startswith(name + "/") and n.endswith(".parquet")
                                                      for n in objects)


def test_no_credential_reaches_an_output_or_a_log(s3, lake_run):
    done, env = lake_run
    secret, key_id = env["AWS_SECRET_ACCESS_KEY"], env["AWS_ACCESS_KEY_ID"]
    outputs = _objects(s3, f"{BUCKET}/lake")
    assert outputs
    for value in (secret, key_id):
        assert value not in done.stdout and value not in done.stderr
        for name, data in outputs.items():
            assert value.encode() not in data, name


def test_report_reads_the_lake_uri(s3, lake_run, tmp_path):
    done = _kdissect(["report", f"s3://{BUCKET}/lake", "-o", str(tmp_path / "page.html"), "--quiet"],
                     s3.env("writer"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "page.html").stat().st_size > 10000


def test_a_foreign_store_outdir_is_refused_and_left_alone(s3, archive, tmp_path):
    client = s3.file_system()
    with client.open_output_stream(f"{BUCKET}/someone-else/data.csv") as out:
        out.write(b"a,b\n1,2\n")
    done = _kdissect(["spark", f"s3://{BUCKET}/archive/admin.pcap.gz", "-o", f"s3://{BUCKET}/someone-else"],
                     s3.env("writer"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"kdissect: error: OUTDIR s3://{BUCKET}/someone-else is not empty and holds no earlier kdissect spark output: "
        "refusing to write there, even with --overwrite (choose a new or empty directory)"]
    assert _objects(s3, f"{BUCKET}/someone-else") == {"data.csv": b"a,b\n1,2\n"}
    # and a reader may list but not write: refused before anything is written
    done = _kdissect(["spark", f"s3://{BUCKET}/archive/admin.pcap.gz", "-o", f"s3://{BUCKET}/readers-lake"],
                     s3.env("reader"))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"kdissect: error: s3://{BUCKET}/readers-lake: access denied (no permission, or the credentials were refused)")
    assert _objects(s3, f"{BUCKET}/readers-lake") == {}


def test_the_outdir_rule_in_a_store_is_the_local_one(s3, archive, tmp_path):
    """An earlier output in S3 is replaced only with --overwrite, which removes
    only kdissect's files; an OUTDIR inside an input (by URI) is refused."""
    client = s3.file_system()
    earlier = f"{BUCKET}/earlier"
    for name, data in ((".kdissect-outdir", b"{}"), ("notes.txt", b"my notes\n"), ("_SUCCESS", b""),
                       ("exchanges/capture_date=2020-01-01/part-00007.parquet", b"PAR1 stale PAR1"),
                       ("exchanges/_SUCCESS", b"")):
        with client.open_output_stream(f"{earlier}/{name}") as out:
            out.write(data)
    before = _objects(s3, earlier)
    source = f"s3://{BUCKET}/archive/admin.pcap.gz"
    done = _kdissect(["spark", source, "-o", f"s3://{BUCKET}/earlier"], s3.env("writer"))
    assert done.returncode == 2
    assert "holds an earlier kdissect spark output: give --overwrite" in done.stderr.strip().splitlines()[-1]
    assert _objects(s3, earlier) == before
    # inside an input directory, compared by URI (s3a:// is s3://)
    done = _kdissect(["spark", f"s3://{BUCKET}/archive", "-o", f"s3a://{BUCKET}/archive/tables"], s3.env("writer"))
    assert done.returncode == 2
    assert f"the input s3://{BUCKET}/archive: refusing to write there" in done.stderr.strip().splitlines()[-1]
    # a file of someone else's in a table directory: refused, even with --overwrite, nothing removed
    with client.open_output_stream(f"{earlier}/exchanges/theirs.csv") as out:
        out.write(b"x\n")
    done = _kdissect(["spark", source, "-o", f"s3://{BUCKET}/earlier", "--overwrite"], s3.env("writer"))
    assert done.returncode == 2 and "theirs.csv was not written by kdissect" in done.stderr.strip().splitlines()[-1]
    client.delete_file(f"{earlier}/exchanges/theirs.csv")
    assert _objects(s3, earlier) == before
    done = _kdissect(["spark", source, "-o", f"s3://{BUCKET}/earlier", "--overwrite", "--master", "local[2]"],
                     s3.env("writer"))
    assert done.returncode == 0, done.stderr[-3000:]
    after = _objects(s3, earlier)
    assert after["notes.txt"] == b"my notes\n" and "_SUCCESS" in after and "_KDISSECT_RUNNING" not in after
    assert "exchanges/capture_date=2020-01-01/part-00007.parquet" not in after
    assert any(key.startswith("exchanges/capture_date=") and key.endswith(".parquet") for key in after)


def test_spark_topic_selection_over_s3_keeps_the_cli_rows(spark, s3, captures_dir, s3_env, tmp_path):
    """--topic on captures only in a store: the driver learns the topic id ->
    name pairs through the store as the tasks read it, so a Kafka 4.4 capture
    whose Fetch (v17+) names topics by id only keeps the CLI's rows."""
    capture, topic = captures_dir / "java_clients_4_4_kafka.pcap", "java-orders"
    s3.upload(capture, f"{BUCKET}/topics/{capture.name}")
    outdir = tmp_path / "out"
    run_job(JobOptions(inputs=[f"s3://{BUCKET}/topics/{capture.name}"], outdir=str(outdir), master=None,
                       topics=(topic,)), spark=spark)
    cli = subprocess.run([sys.executable, "-m", "kdissect", "export", str(capture), "-o",
                          str(tmp_path / "kept.parquet"), "-q", "--topic", topic], cwd=REPO)
    assert cli.returncode == 0
    import pyarrow.parquet as pq

    kept = pq.read_table(tmp_path / "kept.parquet").to_pylist()
    assert [r for r in kept if r["api_name"] == "Fetch" and r["api_version"] >= 17]
    assert canonical(table_rows(outdir, "exchanges")) == canonical(kept)
