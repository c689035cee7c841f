"""Captured strings made safe to show and lossless to store.

A capture is attacker-shaped input: client ids, topics, group and member
ids, hostnames and record keys may hold terminal escapes, bidi controls,
NUL, CR/LF, or bytes that are not UTF-8 (decoded with surrogateescape, so
each such byte is a lone surrogate U+DC80..U+DCFF). Two rules, one table:

- `lossless_text` (JSONL, CSV, Parquet): each byte that was not valid UTF-8
  becomes the four characters `\\xNN` (NN its two lowercase hex digits), and
  a literal backslash becomes `\\\\`, so distinct byte strings stay distinct
  and the original bytes can be rebuilt (`original_bytes`). Everything else,
  controls included, is kept as is: the formats quote or escape it.
- `escape_text` (every text face: show, stats, topics, groups, clients,
  stderr): the same, and also every character Python does not call
  printable (Unicode categories Cc, Cf, Cs, Co, Cn, Zl, Zp, and Zs but the
  space: ESC, BEL, CR, LF, NUL, DEL, C1 controls, U+202E and the other bidi
  controls, U+2028/U+2029 ...) is written as an escape: `\\a \\b \\t \\n \\v
  \\f \\r` for those seven, `\\xNN` for the other ASCII controls and DEL,
  `\\uXXXX` / `\\UXXXXXXXX` for the rest. `\\xNN` with NN >= 80 is therefore
  always a byte that was not UTF-8, never a character.

`terminal_text` is the last guard at the output: it escapes any
non-printable character still left in a finished line (none, when every
value went through `escape_text`), without touching backslashes, so text
that is already escaped is not escaped twice; `one_line` is that guard for
a one-line message (stderr), newlines escaped too. `quoted` is
`escape_text` in quotes, as `show -v` prints strings.
"""

from __future__ import annotations

import re
from typing import Any

_NAMED = {"\a": "\\a", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\v": "\\v", "\f": "\\f", "\r": "\\r"}


def _escape_char(ch: str) -> str:
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    if code < 0x80:
        return f"\\x{code:02x}"
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


_BYTES = re.compile("[\\\\\ud800-\udfff]")


def _lossless_char(match: re.Match[str]) -> str:
    ch = match.group()
    # a lone surrogate not from surrogateescape (not a byte) cannot be
    # written as UTF-8 either: \\uXXXX
    return "\\\\" if ch == "\\" else _escape_char(ch)


def lossless_text(text: str) -> str:
    """`text` with each undecodable byte as `\\xNN` and each backslash as
    `\\\\` (valid UTF-8, reversible); unchanged when it has neither."""
    if text.isascii() and "\\" not in text:
        return text
    return _BYTES.sub(_lossless_char, text)


def escape_text(text: str) -> str:
    """`text` as it may be shown: `lossless_text`, and every non-printable
    character escaped (see the module's docstring). Printable text without
    a backslash comes back unchanged."""
    if text.isprintable() and "\\" not in text:
        return text
    return "".join("\\\\" if ch == "\\" else ch if ch.isprintable() else _escape_char(ch) for ch in text)


def terminal_text(text: str) -> str:
    """Finished output lines (joined by newlines) with any non-printable
    character but the newline escaped; backslashes are left alone."""
    if text.isprintable():
        return text
    return "\n".join(line if line.isprintable() else
                     "".join(ch if ch.isprintable() else _escape_char(ch) for ch in line)
                     for line in text.split("\n"))


_ESCAPED_BYTE = re.compile(r"\\(\\|x[0-9a-f]{2})")


def original_bytes(stored: str) -> bytes:
    """The bytes a `lossless_text` string came from (its inverse)."""
    out = bytearray()
    last = 0
    for match in _ESCAPED_BYTE.finditer(stored):
        out += stored[last:match.start()].encode("utf-8")
        token = match.group(1)
        out += b"\\" if token == "\\" else bytes([int(token[1:], 16)])
        last = match.end()
    out += stored[last:].encode("utf-8")
    return bytes(out)


def quoted(text: str) -> str:
    """`escape_text(text)` in quotes, as `repr` quotes a str (the same text
    for a printable string without a backslash)."""
    body = escape_text(text)
    if "'" in text and '"' not in text:
        return '"' + body + '"'
    return "'" + body.replace("'", "\\'") + "'"


def one_line(text: str) -> str:
    """A message for one line of stderr: every non-printable character,
    newlines included, escaped (backslashes left alone)."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape_char(ch) for ch in text)


def lossless_value(value: Any) -> Any:
    """`lossless_text` applied to every string (dict keys too) in nested dicts and lists."""
    if isinstance(value, str):
        return lossless_text(value)
    if isinstance(value, dict):
        return {lossless_value(k): lossless_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [lossless_value(v) for v in value]
    if isinstance(value, tuple):
        return tuple(lossless_value(v) for v in value)
    return value
