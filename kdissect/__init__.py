"""kdissect: dissector and capture analyzer for the Apache Kafka wire protocol.

The protocol core is re-exported here. Imports are lazy so that
`import kdissect` stays cheap (no pyarrow / pyspark, no protocol tables until
first use).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kdissect import native as _native

_native.activate(__path__)  # the compiled per-packet modules, when built from these sources

__all__ = [
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "DecodeError",
    "Request",
    "Response",
]

if TYPE_CHECKING:  # pragma: no cover
    from kdissect.protocol.codec import (
        DecodeError,
        Request,
        Response,
        decode_request,
        decode_response,
        encode_request,
        encode_response,
    )


def __getattr__(name: str) -> Any:
    if name in __all__:
        from kdissect.protocol import codec

        return getattr(codec, name)
    raise AttributeError(f"module 'kdissect' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public API only (not the helpers this module imports, nor the
    subpackages an import has loaded)."""
    return sorted(__all__)
