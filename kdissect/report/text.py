"""Captured strings on the report's page: shown visibly, embedded safely.

Client ids, topics, group and member ids are hostile input. `visible` is
applied to every text the page (tables, cards, chart labels) shows;
`script_json` to every JSON the page embeds in a <script> element.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any


_HIDDEN = ("Cc", "Cf", "Zl", "Zp")  # controls, formats (bidi among them), line and paragraph separators


def visible(text: str) -> str:
    """`text` with every control (Cc), format (Cf) and line or paragraph
    separator (Zl, Zp) character written as a
    visible escape (`\\x1b`, `\\u202e`, `\\U000e0001`), so captured strings
    can neither hide text nor reorder it (bidi overrides) on the page.
    Backslashes are left alone: the escapes are for reading, not decoding."""
    if text.isprintable() and text.isascii():
        return text
    return "".join(_escape_char(c) if unicodedata.category(c) in _HIDDEN else c for c in text)


def _escape_char(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


_SCRIPT_UNSAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028",
                                "\u2029": "\\u2029"})


def script_json(value: Any) -> str:
    """`value` as JSON safe inside a <script> element: `<`, `>` and `&` as
    JSON escapes, so no `</script>`, `<!--` or `<script` can end or change
    the element, and U+2028/U+2029 escaped for older JavaScript parsers.
    Every JSON embedded in the page goes through here."""
    return json.dumps(value, allow_nan=False, default=str).translate(_SCRIPT_UNSAFE)
