"""Topic, partition, group and client forensics from the wire.

- `Forensics` (core.py): exchanges in, `ForensicTables` out; mergeable.
- `forensic_tables(paths, ...)`: the whole run for a capture set.
- tables and columns: kdissect.forensics.tables (TABLE_COLUMNS).

One module per table: topics.py (partition rows and lag), latency.py
(end-to-end latency), groups.py (group generations and commits), clients.py
(clients and producer sequences); topic ids are resolved for all of them
(and for `kdissect records`) by kdissect.protocol.topics.TopicNames. Names
are loaded on first use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Sequence

from kdissect import native as _native

_native.extend(__path__, __name__)  # this package's compiled modules, when in use

__all__ = ["FORENSIC_APIS", "COMMAND_TABLES", "TABLE_COLUMNS", "Forensics", "ForensicTables", "TopicNames",
           "forensic_tables"]

_LAZY = {"FORENSIC_APIS": "core", "Forensics": "core", "ForensicTables": "core", "TopicNames": "kdissect.protocol.topics",
         "COMMAND_TABLES": "tables", "TABLE_COLUMNS": "tables"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kdissect.forensics' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module if "." in module else f"kdissect.forensics.{module}"), name)


def forensic_tables(paths: Sequence[str | Path], ports: Iterable[int] = (9092,), detect: bool = True,
                    tls_keylogs: Sequence[str | Path] = (), **settings: Any) -> tuple[Any, Any]:
    """(ForensicTables, accounting) of a capture set; `settings` go to
    `Forensics` (horizon_ns, slack_ns, max_uncompressed)."""
    from kdissect.forensics.core import FORENSIC_APIS, Forensics
    from kdissect.conn.pipeline import Analysis

    analysis = Analysis(paths, ports, detect, keep_apis=FORENSIC_APIS, tls_keylogs=tls_keylogs)
    forensics = Forensics(**settings)
    for ex in analysis:
        forensics.add(ex)
        ex.request = ex.response = None
    forensics.finish()
    return forensics.tables(), analysis.accounting
