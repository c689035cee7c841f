"""Walk the bytes of a `records` field: message sets and record batches mixed.

Every entry starts with offset int64 and a size int32; the magic byte sits at
byte 16 in both generations, which decides how the rest is read. A Fetch
response may end in the middle of an entry (the broker cuts at the requested
byte count): that tail is returned as a batch with `partial=True`, which is not
a problem. Nothing here raises for any input bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from kdissect.records import batch as v2
from kdissect.records import legacy
from kdissect.records.codecs import DEFAULT_LIMIT
from kdissect.records.model import Batch, DecodedRecords

_ENTRY = struct.Struct(">qi")


def iter_batches(raw: bytes | bytearray | memoryview | None,
                 max_uncompressed: int = DEFAULT_LIMIT) -> Iterator[Batch]:
    """Yield the batches of a records field one by one (memory: one batch at a time)."""
    if not raw:
        return
    data = bytes(raw)
    pos = 0
    total = len(data)
    while pos < total:
        if total - pos < 17:
            yield _partial(data, pos)
            return
        offset, size = _ENTRY.unpack_from(data, pos)
        end = pos + 12 + size
        magic = data[pos + 16]
        if size < 0:
            yield _broken(pos, offset, size, magic, f"negative entry size {size}")
            return
        if end > total:
            yield _partial(data, pos)
            return
        try:
            if magic == 2:
                if size < v2.HEADER_SIZE - 12:
                    yield _broken(pos, offset, size, magic, f"batch length {size} is shorter than a batch header")
                    return
                yield v2.decode_batch(data, pos, end, max_uncompressed)
            elif magic in (0, 1):
                if size < legacy.minimum_size(magic):
                    yield _broken(pos, offset, size, magic, f"message size {size} is too small for magic {magic}")
                    return
                yield legacy.decode_message_entry(data, pos, end, max_uncompressed)
            else:
                yield _broken(pos, offset, size, magic, f"unknown magic {magic}")
                return
        except Exception as problem:  # last line of defence: report, never raise
            yield _broken(pos, offset, size, magic, f"internal decoder error ({type(problem).__name__}: {problem})")
        pos = end


def decode_records(raw: bytes | bytearray | memoryview | None,
                   max_uncompressed: int = DEFAULT_LIMIT) -> DecodedRecords:
    """Decode every batch of a records field. `max_uncompressed` caps decompression per batch."""
    return DecodedRecords(list(iter_batches(raw, max_uncompressed)))


def _partial(data: bytes, pos: int) -> Batch:
    offset = length = -1
    magic = -1
    if len(data) - pos >= 12:
        offset, length = _ENTRY.unpack_from(data, pos)
    if len(data) - pos > 16:
        magic = data[pos + 16]
    return Batch(position=pos, base_offset=offset, length=length, magic=magic, partial=True,
                 uncompressed_bytes=None)


def _broken(pos: int, offset: int, size: int, magic: int, problem: str) -> Batch:
    return Batch(position=pos, base_offset=offset, length=size, magic=magic, problems=[problem])
