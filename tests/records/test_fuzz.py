"""Property tests: no input bytes make the record decoders raise."""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdissect.records import batch_checks, batch_counts, decode_records, exchange_columns
from kdissect.records.encode import encode_message_set, encode_record_batch
from kdissect.records.model import Record
from tests.support.records import CODECS, LEGACY_CODECS, essence, sample_records

SEEDS = [encode_record_batch(sample_records(4), codec, base_offset=10) for codec in CODECS] + [
    encode_message_set(sample_records(3), magic, codec) for magic in (0, 1) for codec in LEGACY_CODECS
]

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _exercise(raw: bytes) -> None:
    decoded = decode_records(raw, max_uncompressed=1 << 20)
    for batch in decoded:
        # the catch-all in iter_batches must never be what handled the input
        assert not any("internal decoder error" in p for p in batch.problems), batch.problems
        for record in batch.records:
            assert record.key is None or isinstance(record.key, bytes)
    decoded.all_problems()
    batch_counts(raw)
    batch_checks(raw)
    body = {"topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": raw}]}]}
    exchange_columns(0, 9, body, None)


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes_never_raise(raw):
    _exercise(raw)


@FUZZ
@given(st.sampled_from(SEEDS), st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=6),
       st.integers(0, 10_000))
def test_mutated_batches_never_raise(seed, flips, cut):
    raw = bytearray(seed)
    for position, value in flips:
        raw[position % len(raw)] = value
    _exercise(bytes(raw[: max(cut, 0)] if cut < len(raw) else raw))


@FUZZ
@given(st.sampled_from(SEEDS), st.integers(-(2**31), 2**31 - 1), st.integers(0, 80))
def test_bad_length_fields_never_raise(seed, value, where):
    raw = bytearray(seed)
    position = min(where, len(raw) - 4)
    struct.pack_into(">i", raw, position, value)
    _exercise(bytes(raw))


@FUZZ
@given(st.sampled_from(SEEDS), st.binary(max_size=300))
def test_garbage_after_compressed_payload_never_raises(seed, junk):
    # length fields consistent, compressed section replaced by junk
    raw = bytearray(seed[:61]) + junk
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    _exercise(bytes(raw))


_maybe_bytes = st.one_of(st.none(), st.binary(max_size=64))
_record = st.builds(
    lambda key, value, headers, ts: Record(0, ts, key, value, headers),
    _maybe_bytes,
    _maybe_bytes,
    st.lists(st.tuples(st.text(max_size=8), _maybe_bytes), max_size=3),
    st.integers(0, 2**41),
)


ROUND_TRIPS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@ROUND_TRIPS
@given(st.lists(_record, min_size=1, max_size=12), st.sampled_from(CODECS), st.integers(0, 2**40))
def test_any_records_round_trip_magic2(records, codec, base_offset):
    decoded = decode_records(encode_record_batch(records, codec, base_offset=base_offset))
    assert decoded.all_problems() == []
    assert essence(decoded.records()) == essence(records)
    assert [r.offset for r in decoded.records()] == list(range(base_offset, base_offset + len(records)))


@ROUND_TRIPS
@given(st.lists(_record, min_size=1, max_size=12), st.sampled_from(LEGACY_CODECS), st.sampled_from([0, 1]))
def test_any_records_round_trip_message_sets(records, codec, magic):
    decoded = decode_records(encode_message_set(records, magic, codec))
    assert decoded.all_problems() == []
    assert essence(decoded.records(), headers=False, timestamps=magic == 1) == essence(
        records, headers=False, timestamps=magic == 1)
