"""The quick walk's gzip inflation in one call (records.quick_spans._gunzip_whole)
answers only where codecs.decompress (piece by piece) answers without a
problem, with the same bytes; everything else (damage, a cut, the limit,
trailing data, a second member) it leaves to the decoder's walk."""

from __future__ import annotations

import gzip
import random
import zlib
from typing import Any

import pytest

from kdissect.records import codecs, quick_spans


def bodies() -> list[bytes]:
    rng = random.Random(1)
    made = []
    for n in range(40):
        text = bytes(rng.choice(b"kafka gzip records ") for _ in range(rng.randint(0, 200_000 if n % 8 == 0 else 4_000)))
        whole = gzip.compress(text, mtime=0)
        made += [whole, whole[: len(whole) // 2], whole + b"\x00\x00", whole + gzip.compress(b"second", mtime=0),
                 zlib.compress(text)]
        damaged = bytearray(whole)
        damaged[rng.randrange(10, len(whole))] ^= 1 << rng.randrange(8)
        made.append(bytes(damaged))
    return made


def answered_and_declined(codec_id: int, made: list[bytes], inflate: Any, limit: int,
                          declines: tuple[type[BaseException], ...]) -> tuple[int, int]:
    """How many bodies the one-call inflation answers (each exactly as
    codecs.decompress, which must report nothing for them) and declines
    (raising one of `declines`: the decoder's walk answers those)."""
    answered = declined = 0
    for body in made:
        expected = codecs.decompress(codec_id, body, limit)
        try:
            inflated = inflate(body, limit)
        except declines:
            declined += 1
            continue
        answered += 1
        assert not expected.problems and not expected.over_limit
        assert inflated == expected.data
    return answered, declined


@pytest.mark.parametrize("limit", [codecs.DEFAULT_LIMIT, 1_000])
def test_one_call_inflation_as_the_codecs_module(limit: int) -> None:
    answered, declined = answered_and_declined(codecs.GZIP, bodies(), quick_spans._gunzip_whole, limit,
                                               (quick_spans._Irregular, zlib.error))
    assert answered >= (80 if limit == codecs.DEFAULT_LIMIT else 10) and declined >= 80  # both ways taken


def test_what_codecs_reports_is_declined() -> None:
    text = b"records " * 1_000
    whole = gzip.compress(text, mtime=0)
    for body, limit in ((whole[:-3], codecs.DEFAULT_LIMIT), (whole, len(text) - 1),
                        (whole + gzip.compress(b"x", mtime=0), codecs.DEFAULT_LIMIT),
                        (whole + b"\x00", codecs.DEFAULT_LIMIT)):
        with pytest.raises((quick_spans._Irregular, zlib.error)):
            quick_spans._gunzip_whole(body, limit)
    assert quick_spans._gunzip_whole(whole, len(text)) == text


lz4frame = pytest.importorskip("lz4.frame")


def lz4_bodies() -> list[bytes]:
    rng = random.Random(3)
    made = []
    for n in range(40):
        text = bytes(rng.choice(b"kafka lz4 records ") for _ in range(rng.randint(0, 3_000_000 if n % 10 == 0 else 4_000)))
        whole = lz4frame.compress(text, content_checksum=bool(n % 2))
        header_checksum_at = 4 + 2 + (8 if whole[4] & 0x08 else 0) + (4 if whole[4] & 0x01 else 0)
        legacy = bytearray(whole)  # Kafka's pre-KIP-57 header checksum (over the magic too)
        from kdissect.records.xxh32 import xxh32
        legacy[header_checksum_at] = (xxh32(bytes(whole[:header_checksum_at])) >> 8) & 0xFF
        damaged = bytearray(whole)
        damaged[rng.randrange(7, len(whole))] ^= 1 << rng.randrange(8)
        made += [whole, whole[: len(whole) // 2], whole + b"\x00", whole + lz4frame.compress(b"second"),
                 bytes(legacy), bytes(damaged)]
    return made


@pytest.mark.parametrize("limit", [codecs.DEFAULT_LIMIT, 1_000])
def test_lz4_in_one_frame_as_the_codecs_module(limit: int) -> None:
    library = codecs.codec_library(codecs.LZ4)
    answered, declined = answered_and_declined(
        codecs.LZ4, lz4_bodies(), lambda body, limit: quick_spans._unlz4_whole(library, body, limit), limit,
        (Exception,))  # _Irregular, or the library's error
    assert answered >= (40 if limit == codecs.DEFAULT_LIMIT else 4) and declined >= 120  # both ways taken
