"""The JavaScript that draws the charts, to inline into the page: Vega,
Vega-Lite and vega-embed, bundled by vl-convert (the Vega project's own
packaging, shipped inside its Python wheel), for the Vega-Lite version altair
writes specs for.

Bundling takes vl-convert several seconds, so the bundle is kept on disk
beside kdissect's other caches (`$KDISSECT_CACHE_DIR`, else
`$XDG_CACHE_HOME/kdissect`, else `~/.cache/kdissect`; an empty
`KDISSECT_CACHE_DIR` turns caching off), named by vl-convert's and
Vega-Lite's versions, so a cached bundle is never stale.
"""

from __future__ import annotations

import os
import re

# the bundle's one global: vega-embed, as `kdissectEmbed`
_SNIPPET = "window.kdissectEmbed = vegaEmbed;"
_memo: dict[str, str] = {}


def vegalite_version() -> str:
    """The Vega-Lite version altair writes specs for, as vl-convert names it ("5.20")."""
    import altair

    major, minor = altair.SCHEMA_VERSION.lstrip("v").split(".")[:2]
    return f"{major}.{minor}"


def _cache_directory() -> str | None:
    base = os.environ.get("KDISSECT_CACHE_DIR")
    if base is None:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "kdissect")
    return os.path.join(base, "report") if base else None


def javascript() -> str:
    """The bundle's source, safe to put inside a <script> element."""
    import vl_convert

    version = vegalite_version()
    key = f"vega-embed-{vl_convert.__version__}-vl{version}"  # type: ignore[attr-defined]
    if key in _memo:
        return _memo[key]
    directory = _cache_directory()
    path = os.path.join(directory, key + ".js") if directory else None
    source = None
    if path is not None:
        try:
            with open(path, encoding="utf-8") as handle:
                source = handle.read()
        except OSError:
            source = None
    if not source:
        source = vl_convert.javascript_bundle(snippet=_SNIPPET, vl_version=version)
        # "</script" inside the code would end the element (in JS, "<\/" means "</")
        source = re.sub(r"</(script)", r"<\\/\1", source, flags=re.IGNORECASE)
        if path is not None:
            from kdissect.shared.atomic import OutputError, write_atomically

            try:
                os.makedirs(directory, exist_ok=True)  # type: ignore[arg-type]
                write_atomically(path, source)
            except (OSError, OutputError):
                pass  # no cache: bundle again next time
    _memo[key] = source
    return source
