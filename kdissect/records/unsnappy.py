"""Snappy batch bodies inflated, compiled with mypyc: the one snappy path.

`inflate_snappy(library, data, limit)` inflates one raw snappy block, or
Java's xerial framing (the magic, a version int32, a compatible version
int32, then chunks of [int32 compressed length][raw block]), producing at
most `limit` bytes, and raises SnappyStop at the first problem: why (one of
the reasons below), what the whole chunks before it gave, and the figures
the problem is named with. records.codecs.decompress turns a stop into its
Inflated (problem texts there); the forensic tallies' quick walk
(records.quick_spans), which meets most compressed batches (most are
snappy), calls it directly, without decompress's result object, and leaves
a stopped batch to the decoder's walk. `library` is python-snappy's module
(records.codecs loads it on first use).
"""

from __future__ import annotations

from typing import Any, Final

XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = len(XERIAL_MAGIC) + 8  # the magic, then two int32 versions

# why inflate_snappy stopped (SnappyStop.reason)
HEADER_CUT: Final = 1  # the xerial header is cut short
CHUNK_HEADER_CUT: Final = 2  # a chunk's length is cut short
CHUNK_OVERRUN: Final = 3  # a chunk's length (`value`) is negative or runs past the data
PREAMBLE_UNREADABLE: Final = 4  # a block's length preamble is cut short or over-long
OVER_LIMIT: Final = 5  # a block declares `value` bytes, more than the `room` left under the limit
CORRUPT: Final = 6  # the library rejected a block (`cause`: its exception's text)


class SnappyStop(Exception):
    """Where inflate_snappy stopped; `inflated`: what the chunks before gave."""

    def __init__(self, reason: int, inflated: bytes, value: int = 0, room: int = 0, cause: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.inflated = inflated
        self.value = value
        self.room = room
        self.cause = cause


def inflate_snappy(library: Any, data: bytes, limit: int) -> bytes:
    """A snappy batch body inflated: see the module docstring."""
    if not data.startswith(XERIAL_MAGIC):
        return _block(library, data, limit, b"")
    out = bytearray()
    pos = _XERIAL_HEADER
    total = len(data)
    if pos > total:
        raise SnappyStop(HEADER_CUT, b"")
    while pos < total:
        if pos + 4 > total:
            raise SnappyStop(CHUNK_HEADER_CUT, bytes(out))
        size = data[pos] << 24 | data[pos + 1] << 16 | data[pos + 2] << 8 | data[pos + 3]
        if size >= 1 << 31:
            size -= 1 << 32
        pos += 4
        if size < 0 or pos + size > total:
            raise SnappyStop(CHUNK_OVERRUN, bytes(out), size)
        out += _block(library, data[pos:pos + size], limit - len(out), out)
        pos += size
    return bytes(out)


def _block(library: Any, block: bytes, limit: int, before: bytes | bytearray) -> bytes:
    """One raw block, its declared length at most `limit`. The length preamble
    is unsigned LEB128 of at most 5 bytes, read as protocol.primitives'
    varint_reader(5, minimal=False) reads it (inline: the compiled loop is a
    fraction of a call into the interpreted reader). `before`: what the
    chunks before gave, for a SnappyStop."""
    declared = 0
    shift = 0
    for at in range(min(5, len(block))):
        byte = block[at]
        declared |= (byte & 0x7F) << shift
        if byte < 0x80:
            if declared > limit:
                raise SnappyStop(OVER_LIMIT, bytes(before), declared, limit)
            try:
                inflated: bytes = bytes(library.uncompress(block))
            except Exception as problem:
                raise SnappyStop(CORRUPT, bytes(before), cause=str(problem))
            return inflated
        shift += 7
    raise SnappyStop(PREAMBLE_UNREADABLE, bytes(before))  # cut short or over-long
