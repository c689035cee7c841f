"""The uncompressed size compressed data declares (records.counts.declared_size),
read in place inside a larger buffer, against the length actually compressed."""

from __future__ import annotations

import gzip
import random
import struct

import lz4.frame
import pytest
import snappy
import zstandard

from kdissect.records.codecs import GZIP, LZ4, SNAPPY, XERIAL_MAGIC, ZSTD
from kdissect.records.counts import declared_size

SIZES = (0, 1, 3000, 100_000)


def _payload(size: int) -> bytes:
    rng = random.Random(size)
    return bytes(rng.randrange(8) for _ in range(size))


def _xerial(data: bytes) -> bytes:
    """snappy in the Java client's framing: magic, two versions, then [int32 size][raw block] per 32 KiB."""
    out = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    for start in range(0, max(len(data), 1), 32 * 1024):
        block = snappy.compress(data[start : start + 32 * 1024])
        out += struct.pack(">i", len(block)) + block
    return out


COMPRESSORS = {
    "gzip": (GZIP, lambda data: gzip.compress(data, mtime=0)),
    "snappy-raw": (SNAPPY, snappy.compress),
    "snappy-xerial": (SNAPPY, _xerial),
    "lz4": (LZ4, lambda data: lz4.frame.compress(data, store_size=True)),
    "zstd": (ZSTD, lambda data: zstandard.ZstdCompressor(write_content_size=True).compress(data)),
}


def _in_place(codec_id: int, compressed: bytes) -> int | None:
    """declared_size of `compressed` placed between other bytes."""
    before, after = b"\x1f\x8b\x04\x22" * 3, b"\xff" * 9
    buffer = before + compressed + after
    return declared_size(codec_id, buffer, len(before), len(before) + len(compressed))


# (lz4.frame writes no content size for empty input)
@pytest.mark.parametrize("name, size", [(name, size) for name in sorted(COMPRESSORS) for size in SIZES
                                        if (name, size) != ("lz4", 0)])
def test_declared_size_is_the_length_compressed(name: str, size: int) -> None:
    codec_id, compress = COMPRESSORS[name]
    data = _payload(size)
    assert _in_place(codec_id, compress(data)) == len(data)


def test_sizes_not_stored_or_cut_short_are_unknown() -> None:
    data = _payload(3000)
    assert _in_place(LZ4, lz4.frame.compress(data, store_size=False)) is None
    assert _in_place(ZSTD, zstandard.ZstdCompressor(write_content_size=False).compress(data)) is None
    assert _in_place(GZIP, gzip.compress(data)[:17]) is None  # shorter than a gzip header and trailer
    assert _in_place(GZIP, b"\x00" + gzip.compress(data)[1:]) is None  # not gzip
    assert _in_place(LZ4, lz4.frame.compress(data)[:14]) is None
    assert _in_place(SNAPPY, b"\x80\x80") is None  # a preamble cut short (not read past the end)
    assert _in_place(SNAPPY, b"\xff\xff\xff\xff\xff\x01") is None  # over 5 bytes
    xerial = _xerial(data)
    assert _in_place(SNAPPY, xerial[:16] + struct.pack(">i", -1) + xerial[20:]) is None  # a negative block size
    assert _in_place(0, xerial) is None and _in_place(7, xerial) is None  # no codec, unknown codec
