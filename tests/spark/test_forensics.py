"""The Spark job's forensic tables equal the CLI's on the same inputs.

The job tallies per task (connections hashed over four shuffle partitions,
so every table is merged from several tasks' parts) and matches end-to-end
latency after a shuffle by topic-partition; the CLI does it all in one pass.
Both are written to Parquet (`kdissect topics|groups|clients --table T -o
T.parquet`) and compared row for row."""

from __future__ import annotations

import zlib
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kdissect.cli import main
from kdissect.forensics import COMMAND_TABLES
from kdissect.spark.job import JobOptions, run_job
from tests.support.spark import editcap_split, table_rows

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

INPUTS = ("forensics_kafka.pcap", "java_clients_kafka.pcap", "consume_group_kafka.pcap", "transactions_kafka.pcap",
          "quota_kafka.pcap", "consume_group.pcap")


def _cli_tables(inputs: list[Path], out: Path) -> dict[str, list[dict]]:
    found = {}
    for command, tables in COMMAND_TABLES.items():
        for table in tables:
            target = out / f"{table}.parquet"
            assert main([command, *map(str, inputs), "--table", table, "-o", str(target), "-q"]) == 0
            found[table] = pq.read_table(target).to_pylist()
    return found


def _compare(spark, inputs: list[Path], tmp_path: Path) -> dict:
    outdir = tmp_path / "spark"
    result = run_job(JobOptions(inputs=[str(p) for p in inputs], outdir=str(outdir), master=None), spark=spark)
    expected = _cli_tables(inputs, tmp_path)
    for table, rows in expected.items():
        got = table_rows(outdir, table)
        assert got == rows, table
        assert result.manifest["counts"][table] == len(rows)
    assert not (outdir / "_work").exists()
    return expected | {"_manifest": result.manifest}


def test_spark_tables_equal_the_cli(spark, captures_dir, tmp_path) -> None:
    inputs = [captures_dir / name for name in INPUTS]
    tables = _compare(spark, inputs, tmp_path)
    # the comparison covered every kind of row
    assert {r["group_type"] for r in tables["groups"]} >= {"classic", "consumer", "share"}
    assert sum(r["records"] for r in tables["end_to_end"] if r["dimension"] == "topic") > 300
    assert any(r["sequence_gaps"] == 0 and r["transactional_id"] for r in tables["producers"])
    manifest = tables["_manifest"]["forensics"]
    assert [r["group_id"] for r in manifest["rebalance_storms"]] == ["fx-classic"]
    assert manifest["unresolved_topic_ids"] == []


def test_rotated_files_give_the_same_tables(spark, captures_dir, tmp_path) -> None:
    """forensics_kafka cut into rotated files (connections run across them)."""
    parts = editcap_split(captures_dir / "forensics_kafka.pcap", 700, tmp_path / "rotated")
    assert len(parts) > 3
    _compare(spark, parts, tmp_path)


def test_the_tables_of_the_rotated_files_are_the_whole_files(captures_dir, tmp_path) -> None:
    """The CLI reads rotated files as one capture set: the same tables."""
    (tmp_path / "whole").mkdir()
    (tmp_path / "parts").mkdir()
    whole = _cli_tables([captures_dir / "forensics_kafka.pcap"], tmp_path / "whole")
    parts = editcap_split(captures_dir / "forensics_kafka.pcap", 700, tmp_path / "rotated")
    assert _cli_tables(parts, tmp_path / "parts") == whole


@pytest.mark.parametrize("parts", [2, 5])
def test_tallies_of_parts_merge_into_the_whole(captures_dir, parts) -> None:
    """Connections dealt out to several tallies (as the Spark tasks get
    them), merged in reverse order: every table but end-to-end latency
    (matched after a shuffle in the job) equals the one-pass tally."""
    from kdissect.forensics import FORENSIC_APIS, Forensics
    from kdissect.conn.pipeline import analyze

    exchanges = list(analyze([captures_dir / name for name in INPUTS], keep_apis=FORENSIC_APIS)[0])
    whole = Forensics()
    pieces = [Forensics() for _ in range(parts)]
    for ex in exchanges:
        whole.add(ex)
        pieces[zlib.crc32(repr((ex.client, ex.stream_key)).encode()) % parts].add(ex)
    whole.finish()
    merged = Forensics.from_state(pieces[-1].state())
    for piece in reversed(pieces[:-1]):
        piece.finish()
        merged.merge(Forensics.from_state(piece.state()))
    expected, got = whole.tables().to_dict(), merged.tables().to_dict()
    for name in expected:
        if name != "end_to_end":
            assert got[name] == expected[name], name


def test_forensic_settings_reach_the_job(spark, captures_dir, tmp_path) -> None:
    """`--e2e-horizon` and `--max-uncompressed-mib`, parsed as `kdissect spark`
    parses them, give the tables the CLI gives with the same options; the
    short horizon leaves records unmatched that the default matches."""
    from kdissect.shared.options import parse_plain
    from kdissect.spark.options import SparkJobOptions, job_options

    inputs = [str(captures_dir / "forensics_kafka.pcap")]
    settings = ["--e2e-horizon", "0.05", "--max-uncompressed-mib", "1"]
    outdir = tmp_path / "spark"
    options = parse_plain(SparkJobOptions, [*inputs, "-o", str(outdir), *settings])
    run_job(job_options(options, None), spark=spark)
    # the tables the settings shape: matching (end_to_end), decompression (topics, clients)
    for command, table in (("topics", "end_to_end"), ("topics", "topics"), ("clients", "clients")):
        target = tmp_path / f"{table}.parquet"
        assert main([command, *inputs, *settings, "--table", table, "-o", str(target), "-q"]) == 0
        assert table_rows(outdir, table) == pq.read_table(target).to_pylist(), table
    short = table_rows(outdir, "end_to_end")
    default = tmp_path / "default.parquet"
    assert main(["topics", *inputs, "--table", "end_to_end", "-o", str(default), "-q"]) == 0
    assert sum(r["unmatched"] for r in short) > sum(r["unmatched"] for r in pq.read_table(default).to_pylist())


def test_without_the_forensic_tables(spark, captures_dir, tmp_path) -> None:
    """`--no-forensic-tables` (parsed as `kdissect spark` parses it): none of
    the forensic tables is written or counted, and the exchange rows are
    still `kdissect export`'s, on rotated files and with byte ranges
    (connections dissected in place and shuffled); the other tables are the
    full job's."""
    from kdissect.shared.options import parse_plain
    from kdissect.spark.job import FORENSIC_TABLES, TABLES
    from kdissect.spark.options import SparkJobOptions, job_options
    from tests.support.spark import canonical, export_rows

    parts = [str(p) for p in editcap_split(captures_dir / "forensics_kafka.pcap", 700, tmp_path / "rotated")]
    lean, full = tmp_path / "lean", tmp_path / "full"
    options = parse_plain(SparkJobOptions, [*parts, "-o", str(lean), "--split-size", "64k", "--no-forensic-tables"])
    manifest = run_job(job_options(options, None), spark=spark).manifest
    assert manifest["forensic_tables"] is False and manifest["forensics"] is None
    assert manifest["in_range"]["tuples_in_place"] > 0 and manifest["in_range"]["tuples_shipped"] > 0
    assert not set(manifest["counts"]) & set(FORENSIC_TABLES)
    assert not any((lean / table).exists() for table in FORENSIC_TABLES)
    expected = export_rows([Path(p) for p in parts], tmp_path / "export.parquet")
    assert canonical(table_rows(lean, "exchanges")) == canonical(expected)
    run_job(JobOptions(inputs=parts, outdir=str(full), master=None, split_size=64 << 10), spark=spark)
    for table in TABLES:
        if table not in FORENSIC_TABLES and table != "exchanges":
            assert canonical(table_rows(lean, table)) == canonical(table_rows(full, table)), table


def test_end_to_end_matched_on_the_driver_equals_the_spark_job(spark, captures_dir, tmp_path) -> None:
    """In local mode the ranges are matched in the driver's process
    (forensics.match_here): the same end_to_end rows as the Spark job from
    the same task files. (The job's tables against the CLI's, driver side
    included: the tests above, whose session is local.)"""
    import pyarrow as pa

    from kdissect.spark.dissect import read_partition
    from kdissect.spark.forensics import match_ranges, merged_forensics
    from kdissect.spark.plan import number_tasks, plan_splits

    paths = [str(captures_dir / name) for name in ("forensics_kafka.pcap", "consume_group_kafka.pcap")]
    splits = [split.as_row() for split in number_tasks(plan_splits([(path, "pcap") for path in paths], 1 << 40))]
    work = str(tmp_path / "_work")
    for split in splits:  # each file its own task (and ranges file), every connection dissected in place
        for _ in read_partition([pa.RecordBatch.from_pylist([split])], True, split["split_id"], 4, [9092],
                                True, [Path(p).name for p in paths], work):
            pass
    tables = []
    for on_driver in (False, True):
        forensics = merged_forensics(work)
        match_ranges(spark, work, forensics, 4, on_driver)
        tables.append(forensics.tables().to_dict()["end_to_end"])
    assert sum(row["records"] for row in tables[0] if row["dimension"] == "topic") > 100
    assert tables[1] == tables[0]


def test_range_rows_get_their_topic_ids_resolved_by_the_archives_names() -> None:
    import pyarrow as pa

    from kdissect.spark.forensics import RANGE_SCHEMA, _resolve

    def batch(topics: list) -> pa.RecordBatch:
        rows = [{"kind": 0, "topic": topic, "partition": 0, "first": 1, "last": 2, "ts": 3, "response_ts": 4,
                 "client_id": None} for topic in topics]
        return pa.RecordBatch.from_pylist(rows, schema=RANGE_SCHEMA)

    names = {"id:AAAA": "orders", "id:BBBB": "payments"}
    resolved = list(_resolve([batch(["id:AAAA", "audit", None]), batch(["audit", "metrics"]), batch([])], names))
    assert [b.column("topic").to_pylist() for b in resolved] == [["orders", "audit", None], ["audit", "metrics"], []]
    assert all(b.schema.equals(RANGE_SCHEMA) for b in resolved)
    assert [b.column("topic").to_pylist() for b in _resolve([batch(["id:BBBB"])], {})] == [["id:BBBB"]]


def test_ranges_are_matched_per_topic_partition_across_batches() -> None:
    """`_match` takes each topic-partition's rows as one group, however the
    sorted rows are cut into batches (a group across a batch boundary; a null
    topic label is a group of its own): hand-made ranges whose latencies are
    worked out by hand, the tally's histogram counts compared."""
    import pickle

    import pyarrow as pa

    from kdissect.forensics.latency import FETCHED, PRODUCED
    from kdissect.spark.forensics import RANGE_SCHEMA, _match

    second = 1_000_000_000

    def row(kind: int, topic: str | None, partition: int, first: int, last: int, ts: int, client: str | None = None):
        return {"kind": kind, "topic": topic, "partition": partition, "first": first, "last": last, "ts": ts,
                "response_ts": ts + 1 if kind == PRODUCED else None, "client_id": client}

    rows = [
        row(PRODUCED, None, 0, 0, 4, 1 * second),
        row(FETCHED, None, 0, 0, 4, 3 * second, "c"),  # 5 records, 2 s
        row(PRODUCED, "a", 0, 0, 9, 2 * second),
        row(PRODUCED, "a", 0, 0, 9, 1 * second),  # a replay sent earlier: it wins
        row(FETCHED, "a", 0, 0, 9, 5 * second, "c"),  # 10 records, 4 s
        row(FETCHED, "a", 0, 10, 11, 5 * second, "c"),  # produced nowhere: 2 unmatched
        row(PRODUCED, "a", 1, 10, 11, 4 * second),  # (the offsets of a/0 above, on a/1)
        row(FETCHED, "a", 1, 0, 9, 6 * second, "c"),  # produced on a/0 only: 10 unmatched
        row(FETCHED, "a", 1, 10, 11, 7 * second, "d"),  # 2 records, 3 s
    ]
    table = pa.Table.from_pylist(rows, schema=RANGE_SCHEMA)
    # (topic, client) -> (records matched, their summed latency, min, max; records unmatched)
    expected = {(None, "c"): (5, 10 * second, 2 * second, 2 * second, 0),
                ("a", "c"): (10, 40 * second, 4 * second, 4 * second, 12),
                ("a", "d"): (2, 6 * second, 3 * second, 3 * second, 0)}
    for size in (1, 2, 3, 4, len(rows)):
        (out,) = _match(table.to_batches(max_chunksize=size), 3600 * second, 30 * second)
        tally = pickle.loads(out.column("tally")[0].as_py())
        found = {key: (h.count, h.total_ns, h.min_ns, h.max_ns, tally.unmatched.get(key, 0))
                 for key, h in tally.histograms.items()}
        assert found == expected, size
