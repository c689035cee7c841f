"""The zstd decompressor kept per thread (kdissect.records.codecs) gives every
frame what a decompressor of its own gives, whatever came before it: damaged
frames, frames stopped at the limit, several frames in one body."""

from __future__ import annotations

import io
import random
import threading

import pytest

from kdissect.records import codecs

zstandard = pytest.importorskip("zstandard")


def fresh(data: bytes, limit: int) -> tuple[bytes, list[str], bool]:
    """The frames read by a new decompressor (zstandard's streaming reader), up to limit + 1 bytes."""
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
    out = bytearray()
    try:
        while len(out) <= limit:
            chunk = reader.read(limit - len(out) + 1)
            if not chunk:
                break
            out += chunk
    except zstandard.ZstdError:
        return bytes(out), ["corrupt"], False
    if len(out) > limit:
        return bytes(out[:limit]), ["over"], True
    return bytes(out), [], False


def bodies() -> list[bytes]:
    rng = random.Random(4)
    compressor = zstandard.ZstdCompressor(level=3)
    made = []
    for n in range(60):
        text = bytes(rng.choice(b"kafka records ") for _ in range(rng.randint(0, 5_000)))
        frame = compressor.compress(text)
        kind = n % 5
        if kind == 1:  # damaged in the middle
            at = len(frame) // 2
            frame = frame[:at] + bytes([frame[at] ^ 0xFF]) + frame[at + 1:]
        elif kind == 2:  # cut short
            frame = frame[: len(frame) * 2 // 3]
        elif kind == 3:  # two frames
            frame += compressor.compress(text[::-1])
        made.append(frame)
    return made


@pytest.mark.parametrize("limit", [64 << 20, 3_000])
def test_each_frame_as_with_a_decompressor_of_its_own(limit: int) -> None:
    assert codecs._load("_zstd") is not None
    for body in bodies():
        inflated = codecs.decompress(codecs.ZSTD, body, limit)
        data, problems, over = fresh(body, limit)
        assert inflated.data == data
        assert bool(inflated.problems) == bool(problems)
        assert inflated.over_limit == over


def test_each_thread_has_its_own() -> None:
    codecs._load("_zstd")
    mine = codecs._zstd_decompressor()
    assert codecs._zstd_decompressor() is mine
    theirs = []
    thread = threading.Thread(target=lambda: theirs.append(codecs._zstd_decompressor()))
    thread.start()
    thread.join()
    assert theirs[0] is not mine
