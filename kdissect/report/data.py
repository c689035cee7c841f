"""The report's data: one JSON-able dict drawn from captures or from a Spark
OUTDIR, which the page and the notebooks chart.

    {"source": {"kind": "captures" | "spark", "inputs": [...], ...},
     "stats": what `kdissect stats --json` prints (kdissect.stats.tables: the
             Summary's tables, the topic, group and client tables, "accounting"),
     "report": the Collector's entries (time series, errors per API, problems,
               slowest and failed exchanges, time span; kdissect.report.collect),
     "selection": what was selected (-Y, --from/--to, --client ..., --top/--sort)
                  and how many exchanges of how many were kept}

From captures, `stats` is computed by `kdissect.stats.summary.Summary` in the same
pass as the collector, so the page's numbers are `stats --json`'s by
construction; from a Spark OUTDIR it is rebuilt from the summary tables
(kdissect.report.spark_tables).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Sequence

from kdissect.report.collect import Collector, RowBatcher


def from_exchanges(exchanges: Iterable[Any], accounting: Any, inputs: Sequence[str],
                   min_width: int = 1) -> dict[str, Any]:
    """The report's data for exchanges (iterated once; their decoded messages,
    if kept, give per-partition errors and are dropped as they pass).
    `min_width`: the narrowest time bucket in seconds (60 gives the Spark
    path's buckets)."""
    from kdissect.stats.tables import as_dict, collect
    from kdissect.text_escape import lossless_value

    collector = Collector(min_width=min_width)
    batcher = RowBatcher(collector)
    summary, tables = collect(exchanges, batcher.add)
    batcher.flush()
    # captured strings as every table stores them (as the Spark tables do)
    stats = lossless_value(as_dict(summary, tables, accounting))
    return {"source": {"kind": "captures", "inputs": [Path(p).name for p in inputs]},
            "stats": stats, "report": collector.to_dict()}


def from_captures(paths: Sequence[str | Path], ports: Iterable[int] = (9092,), detect: bool = True,
                  tls_keylogs: Sequence[str | Path] = (), progress: bool = False,
                  min_width: int = 1, broker_logs: Sequence[str | Path] = ()) -> dict[str, Any]:
    """The report's data for a capture set (as `kdissect stats` reads it;
    `broker_logs`: request-log files joined as `--broker-log` does)."""
    from kdissect.conn.pipeline import Analysis
    from kdissect.stats.tables import COLLECT_KEEPS

    analysis = Analysis(paths, ports, detect, progress=progress, tls_keylogs=tls_keylogs, broker_logs=broker_logs,
                        **COLLECT_KEEPS)
    return from_analysis(analysis, min_width)


def from_analysis(analysis: Any, min_width: int = 1) -> dict[str, Any]:
    """The report's data for a running `kdissect.conn.pipeline.Analysis` (its
    exchanges, accounting and TLS figures; with a broker log, its join's
    tables under stats["broker_log"], as `stats --json` has them)."""
    from kdissect.stats.brokerlog import observe, payload

    broker_tables = observe(analysis)
    data = from_exchanges(analysis, analysis.accounting, analysis.capture_set.paths, min_width)
    if broker_tables is not None:
        data["stats"]["broker_log"] = payload(analysis, broker_tables)
    data["tls"] = analysis.dissector.tls_stats.to_dict() if analysis.accounting.tls_connections else None
    # a Selected or Ranked analysis (kdissect.filters.selection) says what it kept
    applied = analysis.applied() if hasattr(type(analysis), "applied") else []
    data["selection"] = selection_entry(applied, data["stats"])
    return data


def selection_entry(applied: list[dict[str, str]], stats: dict[str, Any]) -> dict[str, Any]:
    """What the page says of its selection: the options applied
    (`kdissect.filters.selection.describe_selection`'s items, none for the
    whole capture) and how many exchanges it kept of how many."""
    return {"applied": applied, "exchanges": stats.get("exchanges"),
            "of": (stats.get("accounting") or {}).get("exchanges")}


def is_spark_outdir(path: str | Path) -> bool:
    """A directory the Spark job wrote (it holds manifest.json and exchanges/):
    a local path, or a store URI (kdissect.wire.stores)."""
    from kdissect.wire import stores

    if stores.is_uri(str(path)):
        from kdissect.shared.outdir_tree import Tree

        tree = Tree(str(path))
        entries = tree.entries()
        return "manifest.json" in entries and "exchanges" in entries
    path = Path(path)
    return (path / "manifest.json").is_file() and (path / "exchanges").is_dir()


def from_spark_outdir(outdir: str | Path) -> dict[str, Any]:
    """The report's data from the tables of `kdissect spark ... -o OUTDIR`."""
    from kdissect.report.spark_tables import read_outdir

    return read_outdir(outdir)
