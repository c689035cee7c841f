"""XXH32 in pure Python, only for LZ4 frame header checksums (a few bytes).

The LZ4 frame header checksum is the second byte of XXH32 over the frame
descriptor. Kafka's old LZ4 framing (magic 0, KIP-57) computed it over the
magic number too; we recompute it to repair such frames before decoding.
"""

from __future__ import annotations

_P1 = 2654435761
_P2 = 2246822519
_P3 = 3266489917
_P4 = 668265263
_P5 = 374761393
_M = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M


def _lane(v: int, word: int) -> int:
    return (_rotl((v + word * _P2) & _M, 13) * _P1) & _M


def xxh32(data: bytes, seed: int = 0) -> int:
    n = len(data)
    i = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M
        v2 = (seed + _P2) & _M
        v3 = seed & _M
        v4 = (seed - _P1) & _M
        while i + 16 <= n:
            v1 = _lane(v1, int.from_bytes(data[i : i + 4], "little"))
            v2 = _lane(v2, int.from_bytes(data[i + 4 : i + 8], "little"))
            v3 = _lane(v3, int.from_bytes(data[i + 8 : i + 12], "little"))
            v4 = _lane(v4, int.from_bytes(data[i + 12 : i + 16], "little"))
            i += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while i + 4 <= n:
        h = (h + int.from_bytes(data[i : i + 4], "little") * _P3) & _M
        h = (_rotl(h, 17) * _P4) & _M
        i += 4
    while i < n:
        h = (h + data[i] * _P5) & _M
        h = (_rotl(h, 11) * _P1) & _M
        i += 1
    h ^= h >> 15
    h = (h * _P2) & _M
    h ^= h >> 13
    h = (h * _P3) & _M
    h ^= h >> 16
    return h
