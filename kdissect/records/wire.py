"""Small readers for the record formats: varints (zigzag) as Kafka writes them."""

from __future__ import annotations


class Truncated(Exception):
    """Internal: a field runs past the end of its buffer (caught by the parsers)."""


class Malformed(Exception):
    """Internal: bytes that cannot be a valid record (caught by the parsers)."""


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """Zigzag varint (up to 64 bits) at `pos` -> (value, next position)."""
    result = 0
    shift = 0
    end = len(data)
    while True:
        if pos >= end:
            raise Truncated("varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise Malformed("varint longer than 10 bytes")


def write_varint(value: int) -> bytes:
    """Zigzag varint encoding of a signed 64-bit value."""
    unsigned = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while unsigned > 0x7F:
        out.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    out.append(unsigned)
    return bytes(out)
