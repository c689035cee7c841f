"""The HTML report (`kdissect report`) and its charts, shared with the notebooks.

    from kdissect.report import from_captures, from_spark_outdir, write_page
    data = from_captures(["captures/consume_group.pcap"])   # or from_spark_outdir("report/")
    write_page(data, "report.html")
    from kdissect.report import charts; charts.latency_over_time(data)   # a chart (shown as altair's in a notebook)

Modules: `collect` (one pass over exchange rows: time series, capped lists),
`spark_tables` (the same data from a Spark OUTDIR), `data` (the data dict),
`charts` (Vega-Lite charts of it, written with altair's names and built by
`vegalite` without altair), `page` (the self-contained HTML page), `bundle`
(the inlined Vega JavaScript, vendored in `vendor/`). The page needs only
the base dependencies (no pyarrow, altair or JavaScript engine is loaded
from captures: issue 23, item 7); notebooks showing the charts need the
`report` extra (altair, vl-convert-python).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kdissect.report.data import from_analysis, from_captures, from_exchanges, from_spark_outdir

__all__ = ["from_analysis", "from_captures", "from_exchanges", "from_spark_outdir", "write_page"]


def write_page(data: dict[str, Any], path: str | Path) -> int:
    """Write the report page for `data` to `path` (whole or not at all:
    kdissect.shared.atomic); its size in bytes."""
    from kdissect.shared.atomic import write_atomically
    from kdissect.report.page import render

    text = render(data).encode("utf-8")
    write_atomically(path, text)
    return len(text)
