"""The README's rules for captured strings ("Reading untrusted captures"),
written for the tests with the standard library (codecs' backslashreplace,
unicodedata's categories), not with kdissect.text_escape."""

from __future__ import annotations

import unicodedata

_NAMED = {7: "\\a", 8: "\\b", 9: "\\t", 10: "\\n", 11: "\\v", 12: "\\f", 13: "\\r"}


def stored(raw: bytes) -> str:
    """JSONL/CSV/Parquet: a backslash doubled, a byte that is not UTF-8 as \\xNN."""
    return raw.replace(b"\\", b"\\\\").decode("utf-8", "backslashreplace")


def controls_escaped(text: str) -> str:
    """Every character of category C* or Z* but the space, escaped
    (backslashes as they are)."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch == " " or unicodedata.category(ch)[0] not in "CZ":
            out.append(ch)
        elif code in _NAMED:
            out.append(_NAMED[code])
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return "".join(out)


def shown(raw: bytes) -> str:
    """Text faces: `stored`, then every control and format character escaped."""
    return controls_escaped(stored(raw))
