"""The report's data from a `kdissect spark` OUTDIR, without touching a packet.

- The `stats` part (what `kdissect stats --json` prints) is rebuilt from the
  summary tables: latency per API/client/broker (wire and service time)
  from `latency/`, the waits from `waits/`, error counts
  from `errors/`, throttling per broker and per client from `throttle/`, per-partition errors
  from `partition_errors/` (grouped with pyarrow), the accounting from
  `manifest.json`. Statuses and unanswered requests per API come from the scan
  below.
- The report's own entries come from one scan of `exchanges/` with pyarrow,
  batch by batch, through the same `Collector` as the capture path (bounded
  memory: the slowest and failed lists are capped, the rest is per time
  bucket), latency over time included: the same buckets (a second for a
  short capture) and the same p50, p99 and max per bucket as from the
  captures. (The job's `timeseries/` table is per minute: too coarse for a
  short capture, so the page does not read it.)
- The topic, group and client tables are the job's own (`topics/`, `groups/`,
  `clients/`...; times back to int nanoseconds, as `stats --json` gives them),
  their flags from the manifest.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from kdissect.failures import InputError
from kdissect.report.collect import COLUMNS, Collector

from kdissect.forensics.tables import STATS_TABLES, TABLE_COLUMNS

TABLES = ("exchanges", "partition_errors", "latency", "waits", "errors", "throttle", *TABLE_COLUMNS)
# what the manifest's "forensics" entry holds beside the tables (ForensicTables' other entries)
_FORENSIC_FLAGS = ("rebalance_storms", "member_rejoins", "metadata_storms", "unresolved_topic_ids",
                   "topic_id_conflicts")
_BATCH_ROWS = 65536


def _dataset(outdir: Any, name: str) -> ds.Dataset:
    """A table of OUTDIR (a kdissect.shared.outdir_tree.Tree) as a pyarrow dataset."""
    if not outdir.exists(name):
        raise InputError(f"{outdir.uri}: not a complete kdissect spark output ({name}/ is missing)")
    return ds.dataset(outdir.path(name), filesystem=outdir.fs, format="parquet", partitioning="hive",
                      exclude_invalid_files=False, ignore_prefixes=[".", "_"])


def _rows(outdir: Any, name: str) -> list[dict[str, Any]]:
    return _dataset(outdir, name).to_table().to_pylist()


def forensic_tables(outdir: Any, manifest: dict[str, Any]) -> dict[str, Any]:
    """The topic, group and client tables as `stats --json` gives them (rows in
    the job's order, which is the CLI's; times as int nanoseconds)."""
    found: dict[str, Any] = {}
    for name, columns in TABLE_COLUMNS.items():
        if name in STATS_TABLES:  # the summaries' table (read with them)
            continue
        if not outdir.exists(name):  # an OUTDIR of a job older than the table
            found[name] = []
            continue
        table = _dataset(outdir, name).to_table()
        for column, kind in columns:
            if kind == "timestamp":
                index = table.schema.get_field_index(column)
                ns = pc.cast(pc.cast(table[column], pa.timestamp("ns")), pa.int64())
                table = table.set_column(index, column, ns)
        found[name] = table.to_pylist()
    flags = manifest.get("forensics") or {}
    for key in _FORENSIC_FLAGS:
        found[key] = flags.get(key)
    return found


def stats_from_tables(outdir: Any, collector: Collector, manifest: dict[str, Any]) -> dict[str, Any]:
    """What `kdissect stats --json` prints, from the summary tables (see the module's docstring)."""
    latency = _rows(outdir, "latency")

    def row(item: dict[str, Any]) -> dict[str, Any]:
        return {k: item[k] for k in ("count", "p50", "p90", "p99", "max", "service_count", "service_p50",
                                     "service_p90", "service_p99", "service_max", "waits")}

    by_api = sorted((r for r in latency if r["dimension"] == "api"),
                    key=lambda r: (r["api_name"], -1 if r["api_version"] is None else r["api_version"]))
    by_client = sorted((r for r in latency if r["dimension"] == "client_id"), key=lambda r: r["client_id"])
    by_broker = sorted((r for r in latency if r["dimension"] == "broker"), key=lambda r: r["broker"])

    from kdissect.conn.normal_flow import is_normal_flow_name

    top: Counter[str] = Counter()
    anywhere: Counter[str] = Counter()
    for item in _rows(outdir, "errors"):
        if item["top_level"]:
            top[item["error_name"]] += item["top_level"]
        if item["anywhere"]:
            anywhere[item["error_name"]] += item["anywhere"]
    error_codes = [{"error": name, "normal_flow": is_normal_flow_name(name), "top_level": top.get(name, 0),
                    "anywhere": anywhere.get(name, 0)}
                   for name in sorted(set(top) | set(anywhere),
                                      key=lambda n: (is_normal_flow_name(n), -anywhere.get(n, 0), n))]
    # (an OUTDIR of a job older than the table has none)
    by_client_errors = [{"client_id": r["client_id"], "error": r["error_name"], "normal_flow": r["normal_flow"],
                         "exchanges": r["exchanges"]}
                        for r in (_rows(outdir, "errors_by_client") if outdir.exists("errors_by_client") else [])]
    # the order of `kdissect stats`: failures first, then by client id, each client's errors by exchanges
    by_client_errors.sort(key=lambda r: (r["normal_flow"], r["client_id"], -r["exchanges"], r["error"]))
    accounting = manifest.get("accounting", {})

    grouped = _dataset(outdir, "partition_errors").to_table(columns=["topic", "partition", "error_name"]).group_by(
        ["topic", "partition", "error_name"], use_threads=False).aggregate([([], "count_all")])
    partition_errors = sorted(
        ({"topic": str(r["topic"]), "partition": r["partition"], "error": r["error_name"], "count": r["count_all"]}
         for r in grouped.to_pylist()), key=lambda r: -r["count"])

    throttle: dict[str, dict[str, Any]] = defaultdict(lambda: {"responses": 0, "throttled": 0, "max_ms": 0,
                                                               "total_ms": 0})
    throttle_rows = _rows(outdir, "throttle")
    throttle_by_client = [{"client_id": item["client_id"], "broker": item["broker"], "responses": item["responses"],
                  "throttled": item["throttled"], "total_ms": item["total_ms"] or 0, "max_ms": item["max_ms"] or 0,
                  "sent_while_muted": item["sent_while_muted"] or 0}
                 for item in sorted(throttle_rows, key=lambda r: (r["client_id"], r["broker"]))]
    waits = [{"reason": item["reason"], "api": item["api_name"], "count": item["count"],
              "median_ms": item["median_ms"], "max_ms": item["max_ms"]}
             for item in sorted(_rows(outdir, "waits"), key=lambda r: (r["reason"], r["api_name"]))]
    for item in throttle_rows:
        entry = throttle[item["broker"]]
        entry["responses"] += item["responses"]
        entry["throttled"] += item["throttled"]
        entry["max_ms"] = max(entry["max_ms"], item["max_ms"] or 0)
        entry["total_ms"] += item["total_ms"] or 0

    return {
        "exchanges": collector.exchanges,
        "statuses": dict(collector.statuses),
        "latency_by_api": [{"api": r["api_name"], "version": r["api_version"], **row(r)} for r in by_api],
        "latency_by_client": [{"client_id": r["client_id"], **row(r)} for r in by_client],
        "latency_by_broker": [{"broker": r["broker"], **row(r)} for r in by_broker],
        "waits": waits,
        "throttle_by_client": throttle_by_client,
        "paired_with_error_codes": accounting.get("ok_with_errors", 0),
        "paired_normal_flow_only": accounting.get("ok_normal_flow_only", 0),
        "error_codes": error_codes,
        "errors_by_client": by_client_errors,
        "top_level_errors": dict(top.most_common()),
        "errors_anywhere": dict(anywhere.most_common()),
        "partition_errors": partition_errors,
        "throttle": [{"broker": broker, **values} for broker, values in sorted(throttle.items())],
        "no_response": dict(collector.no_response.most_common()),
        **forensic_tables(outdir, manifest),
        "accounting": manifest.get("accounting", {}),
    }


def read_outdir(outdir: str | Path) -> dict[str, Any]:
    """The report's data (as `kdissect.report.data.from_captures` gives it)
    from a Spark OUTDIR (a local path or a store URI)."""
    from kdissect.shared.outdir_tree import SUCCESS, Tree

    tree = Tree(str(outdir))
    try:
        manifest = json.loads(tree.read_bytes("manifest.json"))
    except (OSError, ValueError) as problem:
        raise InputError(f"{tree.uri}: cannot read manifest.json ({problem})") from None
    if not tree.exists(SUCCESS):
        raise InputError(f"{tree.uri}: the job that wrote it did not finish (no {SUCCESS} marker)")
    # a job run with --no-forensic-tables wrote no topic, group or client table
    left_out = set() if manifest.get("forensic_tables", True) else set(TABLE_COLUMNS) - set(STATS_TABLES)
    for name in TABLES:
        if name not in left_out:
            _dataset(tree, name)  # each there, before any work
    collector = Collector()
    exchanges = _dataset(tree, "exchanges")
    for batch in exchanges.to_batches(columns=COLUMNS, batch_size=_BATCH_ROWS, use_threads=False):
        collector.add_batch(batch)
    inputs = [item.get("name") or item.get("path") for item in manifest.get("inputs", [])]
    stats = stats_from_tables(tree, collector, manifest)
    if manifest.get("broker_log"):  # the job ran with --broker-log: its tables, as stats --json has them
        stats["broker_log"] = {"accounting": manifest["broker_log"]}
        for key, name in (("latency_decomposition", "broker_latency"), ("principals", "broker_principals"),
                          ("unmatched", "broker_unmatched")):
            stats["broker_log"][key] = _dataset(tree, name).to_table().to_pylist()
    from kdissect.filters.selection import describe_selection
    from kdissect.report.data import selection_entry

    chosen = manifest.get("selection") or {}  # what the job was run with (kdissect.spark.job)
    applied = describe_selection(chosen.get("filter"), chosen.get("from_ns"), chosen.get("to_ns"),
                                 chosen.get("clients") or (), chosen.get("brokers") or (), chosen.get("topics") or (),
                                 chosen.get("groups") or ())
    return {
        "selection": selection_entry(applied, stats),
        "source": {"kind": "spark", "path": tree.uri, "inputs": inputs,
                   "skipped_files": len(manifest.get("skipped_files", []))},
        "stats": stats,
        "report": collector.to_dict(),
        "tls": manifest.get("tls"),
    }
