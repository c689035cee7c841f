"""The JavaScript that draws the charts, to inline into the page: Vega,
Vega-Lite and vega-embed, their browser builds as published on npm, pinned and
kept in `vendor/` (versions, checksums and licences in vendor/README.md).

Read from the package's files, nothing is bundled or fetched at run time (no
JavaScript engine, no network): the report's renderer costs the page's text
alone, where vl-convert's in-process bundling cost a V8 engine's memory
(issue 23, item 7). Vega-Lite's version is the one altair writes specs for
(`vegalite_version`), so notebooks and the page draw the same specs alike.
"""

from __future__ import annotations

import re
from pathlib import Path

VENDOR = Path(__file__).with_name("vendor")
# in load order: each build defines a global the next one uses (vega, vegaLite, vegaEmbed)
FILES = ("vega.min.js", "vega-lite.min.js", "vega-embed.min.js")
VEGA_LITE_VERSION = "5.20.1"
# the bundle's one global the page calls: vega-embed, as `kdissectEmbed`
_SNIPPET = "window.kdissectEmbed = vegaEmbed;"
_memo: dict[str, str] = {}


def vegalite_version() -> str:
    """The Vega-Lite version of the inlined JavaScript, major.minor ("5.20")."""
    return ".".join(VEGA_LITE_VERSION.split(".")[:2])


def javascript() -> str:
    """The bundle's source, safe to put inside a <script> element."""
    if "source" not in _memo:
        parts = [(VENDOR / name).read_text(encoding="utf-8") for name in FILES]
        source = ";\n".join(parts) + ";\n" + _SNIPPET
        # "</script" inside the code would end the element (in JS, "<\/" means "</")
        _memo["source"] = re.sub(r"</(script)", r"<\\/\1", source, flags=re.IGNORECASE)
    return _memo["source"]
