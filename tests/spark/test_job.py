"""The Spark job in local mode against the single-process CLI on real captures.

One SparkSession (local[2]) serves the module. Expected tables come from
`kdissect export` (the single-process path), the rotation from editcap, frame
counts from tshark.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from kdissect.model.exchange import COLUMN_NAMES, SCHEMA
from kdissect.forensics.sketch import EXACT_LIMIT, RELATIVE_ACCURACY
from kdissect.spark.job import JobOptions, run_job
from tests.support.spark import (
    canonical,
    editcap_split,
    export_rows,
    table_rows,
    tshark_frame_count,
)

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]


def _captures(captures_dir: Path) -> list[Path]:
    found = sorted(p for p in captures_dir.glob("*.pcap") if p.stat().st_size > 24)
    assert found, f"no recorded captures in {captures_dir}"
    return found


def _run(spark, inputs: list[Path], outdir: Path, **options) -> dict:
    result = run_job(JobOptions(inputs=[str(p) for p in inputs], outdir=str(outdir), master=None, **options),
                     spark=spark)
    manifest = json.loads((outdir / "manifest.json").read_text())
    assert manifest == json.loads(json.dumps(result.manifest))
    return manifest


@pytest.fixture(scope="module")
def whole_run(spark, captures_dir, tmp_path_factory):
    """The job over all project captures with the default split size."""
    captures = _captures(captures_dir)
    outdir = tmp_path_factory.mktemp("spark-all")
    manifest = _run(spark, captures, outdir)
    expected = export_rows(captures, outdir.parent / "export-all.parquet")
    return captures, outdir, manifest, expected


def test_exchanges_identical_to_export(whole_run):
    captures, outdir, manifest, expected = whole_run
    got = table_rows(outdir, "exchanges")
    assert len(expected) > 0
    assert canonical(got) == canonical(expected)
    # same columns and Arrow types as `kdissect export`
    schema = ds.dataset(str(outdir / "exchanges")).schema
    assert [(f.name, f.type) for f in schema] == [(f.name, f.type) for f in SCHEMA]
    assert manifest["counts"]["exchanges"] == len(expected)
    assert manifest["read"]["packets"] == sum(tshark_frame_count(p) for p in captures)
    assert manifest["accounting"]["exchanges"] == len(expected)


def quantile_of(values, q: float):
    """pandas' exact quantile, to the sketch's stated error past EXACT_LIMIT values."""
    exact = values.quantile(q)
    return pytest.approx(exact, rel=1e-6 if len(values) <= EXACT_LIMIT else RELATIVE_ACCURACY)


def test_summary_tables_agree_with_exchanges(whole_run):
    import pandas as pd

    _captures_, outdir, manifest, expected = whole_run
    frame = pd.DataFrame(expected, columns=COLUMN_NAMES)
    answered = frame[frame.latency_ms.notna() & frame.api_key.notna()]
    latency = pd.DataFrame(table_rows(outdir, "latency"))
    by_api = latency[latency.dimension == "api"].set_index(["api_name", "api_version"])
    for (api, version), group in answered.groupby(["api_name", "api_version"]):
        row = by_api.loc[(api, version)]
        assert row["count"] == len(group)
        assert row["p50"] == quantile_of(group.latency_ms, 0.5)
        assert row["p99"] == quantile_of(group.latency_ms, 0.99)
        assert row["max"] == pytest.approx(group.latency_ms.max())
        assert row["mean"] == pytest.approx(group.latency_ms.mean())
        # service time beside it: the latency without the waits the protocol asked for
        service = group.service_ms.dropna()
        assert row["service_count"] == len(service) and row["waits"] == int(group.wait_reason.notna().sum())
        if len(service):
            assert row["service_p50"] == quantile_of(service, 0.5)
            assert row["service_max"] == pytest.approx(service.max())
    waits = pd.DataFrame(table_rows(outdir, "waits"))
    waited = answered[answered.wait_reason.notna()]
    assert len(waited) > 0 and sum(waits["count"]) == len(waited)
    for (reason, api), group in waited.groupby(["wait_reason", "api_name"]):
        row = waits.set_index(["reason", "api_name"]).loc[(reason, api)]
        assert row["count"] == len(group) and row["median_ms"] == quantile_of(group.wait_ms, 0.5)
    assert latency[latency.dimension == "api"][["client_id", "broker"]].isna().all().all()
    for dimension, fill in (("client_id", "(none)"), ("broker", "?")):
        rows = latency[latency.dimension == dimension]
        assert sum(rows["count"]) == len(answered)
        others = [c for c in ("api_name", "api_version", "client_id", "broker") if c != dimension]
        assert rows[others].isna().all().all()
        by_key = rows.set_index(dimension)
        for key, group in answered.fillna({dimension: fill}).groupby(dimension):
            assert by_key.loc[key, "count"] == len(group)
            assert by_key.loc[key, "p90"] == quantile_of(group.latency_ms, 0.9)
            assert by_key.loc[key, "max"] == pytest.approx(group.latency_ms.max())
    errors = table_rows(outdir, "errors")
    top_level = frame[frame.error_code.fillna(0) != 0]
    assert sum(r["top_level"] for r in errors) == len(top_level)
    timeseries = table_rows(outdir, "timeseries")
    assert sum(r["exchanges"] for r in timeseries) == len(frame)
    throttle = table_rows(outdir, "throttle")
    assert sum(r["responses"] for r in throttle) == int(frame.throttle_time_ms.notna().sum())
    for name in ("partition_errors", "latency", "waits", "errors", "throttle", "timeseries"):
        assert manifest["counts"][name] == len(table_rows(outdir, name))
    # each summary table is one file in a fixed order
    dimensions = [row["dimension"] for row in latency.to_dict("records")]
    assert dimensions == sorted(dimensions, key=["api", "client_id", "broker"].index)
    minutes = [(row["minute"], row["api_name"]) for row in timeseries]
    assert minutes == sorted(minutes)
    assert [len(list((outdir / name).glob("*.parquet"))) for name in ("latency", "errors", "throttle", "timeseries")] \
        == [1, 1, 1, 1]


def test_rotated_files_give_the_whole_files_exchanges(spark, captures_dir, tmp_path):
    """editcap -c cuts connections across files; they must come out whole."""
    source = max(_captures(captures_dir), key=lambda p: p.stat().st_size)
    frames = tshark_frame_count(source)
    pieces = editcap_split(source, max(2, frames // 5), tmp_path / "rotated")
    assert len(pieces) >= 4
    # one piece gzip-compressed: read whole by the capture reader
    compressed = pieces[1].with_name(pieces[1].name + ".gz")
    compressed.write_bytes(gzip.compress(pieces[1].read_bytes()))
    pieces[1].unlink()
    # and a file with no packets at all (a rotation that caught nothing)
    (tmp_path / "rotated" / "zz_empty.pcap").write_bytes(source.read_bytes()[:24])
    manifest = _run(spark, [tmp_path / "rotated"], tmp_path / "out")
    assert len(manifest["inputs"]) == len(pieces) + 1
    got = table_rows(tmp_path / "out", "exchanges")
    whole = export_rows([source], tmp_path / "whole.parquet")
    # per-file columns (capture name, frame numbers) differ by construction
    per_file = ("capture", "request_frame", "response_frame")
    assert canonical(got, per_file) == canonical(whole, per_file)
    streams_spanning = {}
    for row in got:
        streams_spanning.setdefault(row["stream"], set()).add(row["capture"])
    assert any(len(names) > 1 for names in streams_spanning.values()), "no connection spans a cut"
    # and exactly what the CLI gives on the same rotated set
    rotated = sorted((tmp_path / "rotated").iterdir())
    assert canonical(got) == canonical(export_rows(rotated, tmp_path / "rotated.parquet"))


def test_small_split_size_uses_several_byte_ranges(spark, captures_dir, tmp_path):
    source = max(_captures(captures_dir), key=lambda p: p.stat().st_size)
    split_size = max(4096, source.stat().st_size // 6)
    manifest = _run(spark, [source], tmp_path / "out", split_size=split_size)
    assert manifest["byte_range_tasks"] >= 4
    assert manifest["inputs"][0]["read_tasks"] == manifest["byte_range_tasks"]
    assert manifest["files_read_whole_after_boundary_check"] == []
    assert manifest["read"]["packets"] == tshark_frame_count(source)
    got = table_rows(tmp_path / "out", "exchanges")
    assert canonical(got) == canonical(export_rows([source], tmp_path / "whole.parquet"))


def test_partition_errors_match_the_single_process_report(whole_run):
    """Same per-partition error counts as `kdissect stats` computes them."""
    from collections import Counter

    from kdissect.conn.pipeline import Analysis
    from kdissect.stats.summary import Summary

    captures, outdir, _manifest, _expected = whole_run
    analysis = Analysis([str(p) for p in captures], (9092,), True, keep_messages=True)
    summary = Summary()
    summary.add_all(analysis)
    expected = Counter({(r["topic"], r["partition"], r["error"]): r["count"]
                        for r in summary.to_dict()["partition_errors"]})
    got = Counter((r["topic"], r["partition"], r["error_name"]) for r in table_rows(outdir, "partition_errors"))
    assert got == expected


def test_partition_errors_point_at_their_exchanges(whole_run):
    """Each partition error row names (capture, stream, correlation id) of an
    exchange of the same API whose response carries that error code: the
    stream numbers of both tables agree."""
    _captures_, outdir, _manifest, expected = whole_run
    by_key = {(r["capture"], r["stream"], r["correlation_id"]): r for r in expected}
    rows = table_rows(outdir, "partition_errors")
    assert rows, "the project's captures hold partition errors (unknown_topic.pcap)"
    for row in rows:
        exchange = by_key[(row["capture"], row["stream"], row["correlation_id"])]
        assert (exchange["api_key"], exchange["api_version"]) == (row["api_key"], row["api_version"])
        assert row["error_code"] in exchange["error_codes"]


def test_each_exchanges_file_is_in_stream_order(whole_run):
    import pyarrow.parquet as pq

    _captures_, outdir, _manifest, _expected = whole_run
    files = sorted((outdir / "exchanges").rglob("*.parquet"))  # under capture_date=... partitions
    assert len(files) > 1
    for file in files:
        streams = pq.read_table(file, columns=["stream"]).column("stream").to_pylist()
        assert streams == sorted(streams)
    assert (outdir / "exchanges" / "_SUCCESS").exists()
    assert not (outdir / "_work").exists()


def test_a_rerun_with_fewer_partitions_leaves_no_earlier_parts(spark, captures_dir, tmp_path):
    """The exchange files are named by task partition: a second run into the
    same OUTDIR with fewer partitions must not leave the first run's extra parts."""
    source = max(_captures(captures_dir), key=lambda p: p.stat().st_size)
    _run(spark, [source], tmp_path / "out", partitions=9, in_place=False)  # every connection shuffled
    first = sorted(p.name for p in (tmp_path / "out" / "exchanges").rglob("*.parquet"))
    manifest = _run(spark, [source], tmp_path / "out", partitions=2, overwrite=True)
    assert manifest["shuffle_partitions"] == 2 and len(first) > 2
    # the shuffle's task partitions, then one per read task (connections dissected where read)
    assert {p.name for p in (tmp_path / "out" / "exchanges").rglob("*.parquet")} <= {
        f"part-{index:05d}.parquet" for index in range(2 + manifest["read_tasks"])}
    got = table_rows(tmp_path / "out", "exchanges")
    assert canonical(got) == canonical(export_rows([source], tmp_path / "whole.parquet"))



def test_pre_pass_in_driver_processes_equals_the_spark_job(spark, captures_dir):
    """Local masters run the pre-pass in worker processes of the driver (started
    before the JVM); it must find what the Spark job and a plain loop find."""
    from kdissect.spark import plan

    biggest = max(captures_dir.glob("*.pcap"), key=lambda path: path.stat().st_size)
    splits = plan.plan_splits([(str(biggest), "pcap"), (str(biggest), "pcap")], 8192)
    to_scan = plan.ranges_to_scan(splits)
    assert len(to_scan) == len(splits) >= 8
    direct = {split.split_id: plan.scan_range(split) for split in to_scan}
    assert plan.LocalScan(to_scan, 2).result() == direct
    assert plan.scan_with_spark(spark.sparkContext, to_scan) == direct
    final, fallbacks = plan.apply_scans(splits, direct)
    assert fallbacks == [] and final[0].first_frame == 1 and len(final) > 2


def test_local_task_slots_follow_the_master():
    import os

    from kdissect.spark.plan import local_task_slots

    usable = len(os.sched_getaffinity(0))
    assert local_task_slots("local") == 1
    assert local_task_slots("local[1]") == 1
    assert local_task_slots("local[*]") == usable
    assert local_task_slots("local[64, 3]") == usable  # capped at the usable CPUs
    assert local_task_slots("spark://host:7077") is None
    assert local_task_slots("yarn") is None
    assert local_task_slots(None) is None


def test_a_capture_without_packets_gives_empty_readable_tables(spark, captures_dir, tmp_path):
    """No task writes a row: every table still exists with its schema (the
    exchanges with `kdissect export`'s), and the counts are zero."""
    empty = tmp_path / "empty.pcap"
    empty.write_bytes((captures_dir / "admin.pcap").read_bytes()[:24])  # the file header only
    manifest = _run(spark, [empty], tmp_path / "out")
    for name in ("exchanges", "partition_errors", "latency", "errors", "throttle", "timeseries"):
        assert table_rows(tmp_path / "out", name) == []
        assert manifest["counts"][name] == 0
    schema = ds.dataset(str(tmp_path / "out" / "exchanges")).schema
    assert [(f.name, f.type) for f in schema] == [(f.name, f.type) for f in SCHEMA]


def test_a_relative_outdir_is_where_the_tasks_write_too(spark, captures_dir, tmp_path, monkeypatch):
    """The tasks write the exchange files themselves, in Python workers whose
    working directory is the JVM's (an executor's own, on a cluster), not the
    driver's: a relative OUTDIR must reach them as the driver's path."""
    source = captures_dir / "admin.pcap"
    monkeypatch.chdir(tmp_path)  # the session's JVM keeps its own working directory
    result = run_job(JobOptions(inputs=[str(source)], outdir="relative-out", master=None), spark=spark)
    assert result.manifest["counts"]["exchanges"] > 0
    got = table_rows(tmp_path / "relative-out", "exchanges")
    assert canonical(got) == canonical(export_rows([source], tmp_path / "whole.parquet"))


def test_kafka_over_tls_with_a_key_log_equals_export(spark, captures_dir, tmp_path):
    """The key log travels with the job (read on the driver, in the tasks'
    closure); the exchanges equal `kdissect export --tls-keylog`; no secret
    reaches OUTDIR."""
    tls = captures_dir / "tls"
    pcaps = sorted(tls.glob("*.pcap"))
    keys = sorted(tls.glob("*.keys"))
    ports = tuple(sorted({int(_tls_port(p)) for p in pcaps}))
    outdir = tmp_path / "out"
    manifest = _run(spark, pcaps, outdir, ports=ports, tls_keylogs=tuple(str(k) for k in keys))
    argv_ports = [a for port in ports for a in ("--port", str(port))]
    from kdissect.cli import main

    target = tmp_path / "export.parquet"
    assert main(["export", *map(str, pcaps), *argv_ports, *[a for k in keys for a in ("--tls-keylog", str(k))],
                 "-o", str(target), "--quiet"]) == 0
    import pyarrow.parquet as pq

    expected = pq.read_table(target).to_pylist()
    assert len(expected) > 20 and canonical(table_rows(outdir, "exchanges")) == canonical(expected)
    assert manifest["tls"]["decrypted"] == manifest["tls"]["connections"] > 0
    # the same secrets carried inside pcapng files (Decryption Secrets Blocks): no option needed
    import subprocess

    carried = []
    for pcap, key in zip(pcaps, keys):
        target = tmp_path / f"{pcap.stem}.pcapng"
        subprocess.run(["editcap", "--inject-secrets", f"tls,{key}", str(pcap), str(target)], check=True)
        carried.append(target)
    inside = tmp_path / "inside"
    _run(spark, carried, inside, ports=ports)
    assert canonical(table_rows(inside, "exchanges"), drop=("capture",)) == canonical(expected, drop=("capture",))
    secrets = {line.split()[-1] for k in keys for line in k.read_text().splitlines() if line.strip()}
    for path in outdir.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert not any(s.encode() in data for s in secrets), path


def _tls_port(pcap: Path) -> int:
    import subprocess

    out = subprocess.run(["tshark", "-n", "-r", str(pcap), "-Y", "tcp.flags.syn == 1 && tcp.flags.ack == 0",
                          "-T", "fields", "-e", "tcp.dstport", "-c", "1"], capture_output=True, text=True,
                         check=True).stdout
    return int(out.split()[0])
