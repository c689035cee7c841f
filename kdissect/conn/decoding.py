"""Decoding a Kafka message as the connection layer does: tolerant of bytes
after a complete body (clients and brokers that pad a frame), never
stopping the run on a decoder's complaint. Pairing decodes every frame this
way, and the pipeline's check of a request found by hunting does too."""

from __future__ import annotations

from typing import Any, Callable

from kdissect.protocol.codec import DecodeError

# the decoder's complaint when a body is complete before its frame ends
_LEFT_OVER = "bytes left over after the last field"


def trailing_bytes(error: Exception, length: int) -> int:
    """Bytes after a complete top-level body, from the decoder's complaint (0: another problem)."""
    offset = getattr(error, "offset", None)
    if _LEFT_OVER in str(error) and not getattr(error, "path", None) and offset is not None and 0 < offset < length:
        return length - offset
    return 0


def decode_tolerant(decode: Callable[[bytes], Any], data: bytes) -> tuple[Any, int, Exception | None]:
    """(message, trailing bytes ignored, None), or (None, 0, the error) when
    `decode` rejects the frame for anything but bytes after its body."""
    try:
        return decode(data), 0, None
    except Exception as error:  # DecodeError, or a decoder bug: never stop the run
        trailing = trailing_bytes(error, len(data)) if isinstance(error, DecodeError) else 0
        if trailing:
            try:
                return decode(data[: len(data) - trailing]), trailing, None
            except Exception:
                pass
        return None, 0, error
