"""The quick walk's gzip inflation in one call (records.quick_spans._gunzip_whole)
answers only where codecs.decompress (piece by piece) answers without a
problem, with the same bytes; everything else (damage, a cut, the limit,
trailing data, a second member) it leaves to the decoder's walk."""

from __future__ import annotations

import gzip
import random
import zlib

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


@pytest.mark.parametrize("limit", [codecs.DEFAULT_LIMIT, 1_000])
def test_one_call_inflation_as_the_codecs_module(limit: int) -> None:
    answered = declined = 0
    for body in bodies():
        expected = codecs.decompress(codecs.GZIP, body, limit)
        try:
            inflated = quick_spans._gunzip_whole(body, limit)
        except (quick_spans._Irregular, zlib.error):
            declined += 1
            continue
        answered += 1
        assert not expected.problems and not expected.over_limit
        assert inflated == expected.data
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
