"""The figures `kdissect stats` prints and the report shows, in one pass.

`collect` feeds every exchange to a `Summary` (latency, errors, throttling)
and to `Forensics` (the topic, group and client tables), and to whatever
else the caller tallies on the way (the report's collector); `as_dict` is
what `kdissect stats --json` prints, so the report's numbers are stats'
by construction.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from kdissect.forensics import FORENSIC_APIS
from kdissect.forensics.core import ForensicTables, Forensics
from kdissect.stats.summary import Summary

# What `collect` reads beyond an exchange's row, for an Analysis or a
# Dissector to keep (the Spark job's read tasks keep the same, less the
# forensic APIs under --no-forensic-tables): the decoded response of an
# exchange whose response carries error codes (per-partition errors), and
# the messages the forensic tallies read. Decoding every message gives the same tables in
# up to twice the time (record-heavy traffic: benchmarks/bench_verbs.py).
COLLECT_KEEPS: dict[str, Any] = {"keep_error_responses": True, "keep_apis": FORENSIC_APIS}


def collect(exchanges: Iterable[Any], each: Callable[[Any], None] | None = None) -> tuple[Summary, ForensicTables]:
    """One pass over `exchanges`; their decoded messages are dropped as they
    pass (memory stays bounded by the tallies)."""
    summary = Summary()
    forensics = Forensics()
    if hasattr(exchanges, "on_hidden"):  # a selection (kdissect.filters.selection.Selected): names from every exchange
        exchanges.on_hidden.append(forensics.learn_names)
    for exchange in exchanges:
        summary.add(exchange)
        forensics.add(exchange)
        if each is not None:
            each(exchange)
        exchange.request = exchange.response = None
    forensics.finish()
    return summary, forensics.tables(release=True)


def as_dict(summary: Summary, tables: ForensicTables, accounting: Any) -> dict[str, Any]:
    """`kdissect stats --json`'s object (without the TLS figures, which only
    a capture set with TLS has)."""
    payload = summary.to_dict()
    payload.update(tables.to_dict())
    payload["accounting"] = accounting.to_dict()
    return payload
