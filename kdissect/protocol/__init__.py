"""Kafka wire protocol core: generated tables, codec, headers, summaries.

Public functions (see docs/architecture.md):
    decode_request, decode_response, encode_request, encode_response,
    encode_message, DecodeError, Request, Response, peek_request_header,
    looks_like_request, api_name, ApiKey.
Submodules: schema (per-version field views), bodies (typed body classes),
skim, summary, render, errors.

The package loads its submodules on first use of an attribute: importing
`kdissect.protocol.errors` or `kdissect.protocol.apis` alone (as the Scapy
and records packages do) does not load the codec. The submodules import
each other without cycles (tests/protocol/test_imports.py).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from kdissect import native as _native

_native.extend(__path__, __name__)  # the compiled skim.py, when in use

if TYPE_CHECKING:
    from kdissect.protocol.apis import ApiKey, api_name
    from kdissect.protocol.codec import (
        DecodeError,
        Request,
        Response,
        Struct,
        decode_request,
        decode_response,
        encode_message,
        encode_request,
        encode_response,
    )
    from kdissect.protocol.headers import looks_like_request, peek_request_header

_HOME = {
    "decode_request": "codec", "decode_response": "codec", "encode_request": "codec",
    "encode_response": "codec", "encode_message": "codec", "DecodeError": "codec", "Request": "codec",
    "Response": "codec", "Struct": "codec",
    "peek_request_header": "headers", "looks_like_request": "headers",
    "api_name": "apis", "ApiKey": "apis",
}

__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'kdissect.protocol' has no attribute {name!r}")
    return getattr(importlib.import_module(f"kdissect.protocol.{home}"), name)
