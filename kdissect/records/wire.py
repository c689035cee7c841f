"""Small readers for the record formats: varints (zigzag) as Kafka writes them."""

from __future__ import annotations

from kdissect.protocol.primitives import varint_reader


class Truncated(Exception):
    """Internal: a field runs past the end of its buffer (caught by the parsers)."""


class Malformed(Exception):
    """Internal: bytes that cannot be a valid record (caught by the parsers)."""


# a zigzag varint (up to 64 bits) at `pos` -> (value, next position): the
# protocol's one reader, lenient as Kafka's record readers are (non-minimal
# encodings allowed), raising this module's Truncated / Malformed
read_varint = varint_reader(10, minimal=False, zigzag=True, short=Truncated, too_long=Malformed,
                            too_long_text="varint longer than 10 bytes")


def write_varint(value: int) -> bytes:
    """Zigzag varint encoding of a signed 64-bit value."""
    unsigned = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while unsigned > 0x7F:
        out.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    out.append(unsigned)
    return bytes(out)
