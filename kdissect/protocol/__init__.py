"""Kafka wire protocol core: generated tables, codec, headers, summaries.

Public functions (see docs/architecture.md):
    decode_request, decode_response, encode_request, encode_response,
    DecodeError, Request, Response, peek_request_header, looks_like_request,
    api_name.
Submodules: schema (per-version field views), errors, summary, render.
Attributes are loaded lazily so importing this package is cheap.
"""

from __future__ import annotations

from typing import Any

_FROM_CODEC = {
    "decode_request", "decode_response", "encode_request", "encode_response",
    "DecodeError", "Request", "Response", "Struct",
}
_FROM_HEADERS = {"peek_request_header", "looks_like_request", "api_name"}

__all__ = sorted(_FROM_CODEC | _FROM_HEADERS)


def __getattr__(name: str) -> Any:
    if name in _FROM_CODEC:
        from kdissect.protocol import codec

        return getattr(codec, name)
    if name in _FROM_HEADERS:
        from kdissect.protocol import headers

        return getattr(headers, name)
    raise AttributeError(f"module 'kdissect.protocol' has no attribute {name!r}")
