"""Kafka error codes (generated from errors.tsv): names and retriability."""

from __future__ import annotations

from kdissect.protocol._generated.errors import ERRORS

__all__ = ["ERRORS", "error_name", "is_retriable"]


def error_name(code: int) -> str:
    """Symbolic name of an error code ("NONE" for 0), `UNKNOWN_<n>` if unknown."""
    entry = ERRORS.get(code)
    return entry[0] if entry else f"UNKNOWN_{code}"


def is_retriable(code: int) -> bool:
    """Whether Kafka marks the error retriable (False for unknown codes)."""
    entry = ERRORS.get(code)
    return bool(entry and entry[1])
