"""The quick walk's recent batches (records.quick_spans._RecentBatches): a
batch whose CRC-covered bytes come back (a produced batch fetched, at the
base offset the broker gave it) is answered from the first walk, and the
figures are still exactly the records decoder's (`_decoded_figures`);
anything but the same bytes, CRC and limit is walked again. Batches built by
kafka-python (an independent encoder), every codec."""

from __future__ import annotations

import pytest

from kdissect.forensics.batches import _decoded_figures, _plain_figures
from kdissect.records import quick_spans
from kdissect.records.codecs import DEFAULT_LIMIT
from tests.forensics.test_batch_figures import _figures
from tests.support.records import CODECS, KAFKA_PYTHON_CODEC_IDS

pytest.importorskip("kafka")


def _batch(codec: str, base_offset: int, offsets: list[int], stamp: int = 1_700_000_000_000) -> bytes:
    """A magic-2 batch with records at these offset deltas, its base offset set afterwards
    (as the broker sets a produced batch's: outside the CRC's range)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(2, KAFKA_PYTHON_CODEC_IDS[codec], False, 7, 1, 3, 1 << 24)
    for i, delta in enumerate(offsets):
        builder.append(delta, stamp + 13 * i, b"key-%d" % i, b"value " * (50 + i), [])
    raw = bytearray(builder.build())
    raw[0:8] = base_offset.to_bytes(8, "big", signed=True)
    return bytes(raw)


@pytest.fixture
def recent():
    quick_spans._recent.clear()
    yield quick_spans._recent
    quick_spans._recent.clear()


@pytest.mark.parametrize("offsets", [list(range(9)), [0, 1, 4, 5, 9]], ids=["contiguous", "with holes"])
def test_a_fetched_batch_is_answered_from_its_produced_twin(recent, offsets):
    for codec in CODECS:
        produced = _batch(codec, 0, offsets) + _batch(codec, 0, offsets, stamp=1_700_000_100_000)
        quick = _plain_figures(produced, DEFAULT_LIMIT, True)
        assert quick is not None and _figures(quick) == _figures(_decoded_figures(produced, DEFAULT_LIMIT, True))
        held = dict(recent.batches)
        assert len(held) == 2
        # the same batches fetched, at the offsets the broker gave them
        fetched = _batch(codec, 1000, offsets) + _batch(codec, 1000 + offsets[-1] + 1, offsets,
                                                         stamp=1_700_000_100_000)
        for produced_flag in (False, True):
            quick = _plain_figures(fetched, DEFAULT_LIMIT, produced_flag)
            assert quick is not None
            assert _figures(quick) == _figures(_decoded_figures(fetched, DEFAULT_LIMIT, produced_flag))
        # answered by the walks held, not walked again (a walk would hold a new object)
        assert all(recent.batches[crc] is walked for crc, walked in held.items()) and len(recent.batches) == 2
        if offsets[-1] + 1 != len(offsets):
            spans = _plain_figures(fetched, DEFAULT_LIMIT, False).spans
            assert spans[0].offsets == [1000 + delta for delta in offsets]
        recent.clear()


def test_another_limit_or_other_bytes_are_walked_again(recent):
    for codec in CODECS:
        raw = _batch(codec, 0, list(range(20)))
        assert _plain_figures(raw, DEFAULT_LIMIT, False) is not None
        # over a limit the first walk was not held to: the decoder's walk answers
        over = _plain_figures(raw, 100, False)
        expected = _decoded_figures(raw, 100, False)
        assert over is None or _figures(over) == _figures(expected)
        if codec != "none":
            assert over is None and expected.problems == 1  # (the quick walk declines, the decoder reports)
    recent.clear()
    raw = _batch("gzip", 0, list(range(5)))
    crc = int.from_bytes(raw[17:21], "big")
    # another batch's walk held under this CRC (a collision): its bytes differ, so it is not taken
    other = _batch("gzip", 0, list(range(8)), stamp=5)
    recent.batches[crc] = quick_spans._Walked(other[21:], crc, DEFAULT_LIMIT, 8, 0, 7, None, 999, None, None)
    quick = _plain_figures(raw, DEFAULT_LIMIT, False)
    assert quick is not None and _figures(quick) == _figures(_decoded_figures(raw, DEFAULT_LIMIT, False))
    assert quick.record_bytes != 999 and recent.batches[crc].content == raw[21:]
    # a damaged CRC is not answered from a twin held under the right one
    damaged = bytearray(raw)
    damaged[17] ^= 1
    assert _plain_figures(bytes(damaged), DEFAULT_LIMIT, False) is None


def test_the_walks_held_stay_within_the_budget():
    recent = quick_spans._RecentBatches(10_000)
    walks = [quick_spans._Walked(bytes([n]) * 3000, n, DEFAULT_LIMIT, 2, 0, 1, None, 3000, None, None) for n in range(10)]
    cost = walks[0].cost
    assert 3000 < cost <= 10_000 // 2  # the bytes held and what comes with them: two fit, not three
    lengths = []
    for added, walked in enumerate(walks, 1):
        recent.add(walked)
        held = list(recent.batches)
        lengths.append(len(held))
        assert recent.held == cost * len(held) <= 10_000
        assert held == [w.crc for w in walks[added - len(held):added]]  # the newest, in order: the oldest went first
    # a third overflows the budget: the oldest go until half of it (5,000) is held, the newest alone
    assert lengths == [1, 2, 1, 2, 1, 2, 1, 2, 1, 2]
    before = recent.held
    recent.add(walks[-1])  # the same batch again replaces its entry
    assert recent.held == before and list(recent.batches)[-1] == walks[-1].crc


def _stamped_batch(codec: str, offsets: list[int], stamps: list[int]) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(2, KAFKA_PYTHON_CODEC_IDS[codec], False, 7, 1, 3, 1 << 24)
    for i, (delta, stamp) in enumerate(zip(offsets, stamps)):
        builder.append(delta, stamp, b"key-%d" % i, b"value " * (50 + i), [])
    return bytes(builder.build())


@pytest.mark.parametrize("offsets, stamps", [
    ([0, 1, 2, 3], [500, 900, 700, 800]),  # the newest in the middle
    ([0, 2, 3, 4], [900, 100, 200, 300]),  # a hole after the first, the first the newest
    ([0, 1, 2, 7], [100, 200, 300, 400]),  # a hole before the last
    ([3, 5, 8], [100, 100, 100]),
    ([0], [42]),
    ([0, 1, 2], [100, -5, 300]),  # a negative timestamp: none kept
])
def test_first_and_newest_stamps_and_holes_as_encoded(recent, offsets, stamps):
    for codec in CODECS:
        recent.clear()
        raw = _stamped_batch(codec, offsets, stamps)
        quick = _plain_figures(raw, DEFAULT_LIMIT, False)
        assert quick is not None and len(quick.spans) == 1
        span = quick.spans[0]
        holes = offsets != list(range(offsets[0], offsets[-1] + 1))
        assert (span.first, span.last, span.count) == (offsets[0], offsets[-1], len(offsets))
        assert span.offsets == (offsets if holes else None)
        known = min(stamps) >= 0
        assert (span.first_stamp, span.newest_stamp) == ((stamps[0], max(stamps)) if known else (None, None))
        assert _figures(quick) == _figures(_decoded_figures(raw, DEFAULT_LIMIT, False))
        # the held walk answers the same again
        assert _figures(_plain_figures(raw, DEFAULT_LIMIT, False)) == _figures(quick)
