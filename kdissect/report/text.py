"""Captured strings on the report's page: shown visibly, embedded safely.

Client ids, topics, group and member ids are hostile input. `visible` is
applied to every text the page (tables, cards, chart labels) shows;
`script_json` to every JSON the page embeds in a <script> element.
"""

from __future__ import annotations

import json
from typing import Any

from kdissect.text_escape import one_line


def visible(text: str) -> str:
    """`text` as the page shows it: every character that is not printable
    (controls, formats and bidi overrides among them, line and paragraph
    separators) written as the visible escape every text face uses
    (`kdissect.text_escape`: `\\x1b`, `\\r`, `\\u202e`, `\\U000e0001`), so
    captured strings can neither hide text nor reorder it on the page. The
    page's data holds captured strings by the tables' lossless rule already,
    so backslashes are left alone."""
    return one_line(text)


_SCRIPT_UNSAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028",
                                "\u2029": "\\u2029"})


def script_json(value: Any) -> str:
    """`value` as JSON safe inside a <script> element: `<`, `>` and `&` as
    JSON escapes, so no `</script>`, `<!--` or `<script` can end or change
    the element, and U+2028/U+2029 escaped for older JavaScript parsers.
    Every JSON embedded in the page goes through here."""
    return json.dumps(value, allow_nan=False, default=str).translate(_SCRIPT_UNSAFE)
