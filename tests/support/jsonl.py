"""The reference JSONL line of an exchange, written with the json module.

Timestamps are int nanoseconds in rows and exact epoch seconds in JSONL
(microsecond digits for microsecond captures); the json module cannot write
such a number, so the reference writes a placeholder and puts the digits,
computed here with plain integer arithmetic, in its place.
"""

from __future__ import annotations

import json
from typing import Any

from kdissect.model.exchange import TIMESTAMP_COLUMNS


def seconds(ns: int, places: int = 6) -> str:
    sign = "-" if ns < 0 else ""
    whole, part = divmod(abs(ns), 1_000_000_000)
    return f"{sign}{whole}.{str(part).zfill(9)[:places]}"


def stored_text(text: str) -> str:
    """The README's rule for captured strings, computed from the bytes:
    backslashes doubled, bytes that are not UTF-8 as \\xNN (the codec's own
    backslashreplace)."""
    raw = text.encode("utf-8", "surrogateescape")
    return raw.replace(b"\\", b"\\\\").decode("utf-8", "backslashreplace")


def stored_value(value: Any) -> Any:
    if isinstance(value, str):
        return stored_text(value)
    if isinstance(value, list):
        return [stored_value(v) for v in value]
    return value


def reference_line(exchange: Any, places: int = 6) -> str:
    row = {name: stored_value(value) for name, value in exchange.to_row().items()}
    texts = {}
    for name in TIMESTAMP_COLUMNS:
        value = row[name]
        if type(value) is int:
            marker = f"@@{name}@@"
            texts[json.dumps(marker)] = seconds(value, places)
            row[name] = marker
    line = json.dumps(row, separators=(",", ":"))
    for marker, text in texts.items():
        line = line.replace(marker, text)
    return line + "\n"
