"""Small readers for the record formats: varints (zigzag) as Kafka writes them."""

from __future__ import annotations

from kdissect.protocol.primitives import read_uvarint


class Truncated(Exception):
    """Internal: a field runs past the end of its buffer (caught by the parsers)."""


class Malformed(Exception):
    """Internal: bytes that cannot be a valid record (caught by the parsers)."""


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """Zigzag varint (up to 64 bits) at `pos` -> (value, next position), read
    with the protocol's one reader (non-minimal encodings allowed here)."""
    try:
        raw, pos = read_uvarint(data, pos, 10, False)
    except IndexError:
        raise Truncated("varint") from None
    except ValueError:
        raise Malformed("varint longer than 10 bytes") from None
    return (raw >> 1) ^ -(raw & 1), pos


def write_varint(value: int) -> bytes:
    """Zigzag varint encoding of a signed 64-bit value."""
    unsigned = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while unsigned > 0x7F:
        out.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    out.append(unsigned)
    return bytes(out)
