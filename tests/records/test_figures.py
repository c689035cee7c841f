"""The one-pass figures equal the two separate header passes, on any bytes."""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdissect.protocol import codec
from kdissect.records import batch_checks, batch_counts, exchange_columns, record_sets
from kdissect.records.access import record_figures
from kdissect.records.counts import batch_figures
from kdissect.records.encode import encode_message_set, encode_record_batch
from tests.support.records import CODECS, LEGACY_CODECS, gzip_bomb_batch, sample_records

SEEDS = [encode_record_batch(sample_records(4), codec, base_offset=10) for codec in CODECS] + [
    encode_message_set(sample_records(3), magic, codec) for magic in (0, 1) for codec in LEGACY_CODECS
]


def _separate(raw: bytes, limit: int) -> tuple:
    return (*batch_counts(raw, limit), batch_checks(raw, limit))


def test_seeds_and_their_mixtures() -> None:
    mixtures = [b"".join(SEEDS[:3]), SEEDS[0] + SEEDS[-1], SEEDS[1] + SEEDS[0][:40], b"", gzip_bomb_batch(1 << 21)]
    for raw in SEEDS + mixtures:
        for limit in (1 << 20, 64):
            assert batch_figures(raw, limit) == _separate(raw, limit)


def test_damaged_crc_is_reported_once() -> None:
    raw = bytearray(SEEDS[0])
    raw[-1] ^= 0xFF
    figures = batch_figures(bytes(raw))
    assert figures == _separate(bytes(raw), 64 << 20)
    assert len(figures[3]) == 1 and "CRC32C mismatch" in figures[3][0]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SEEDS), st.integers(0, 200), st.binary(min_size=1, max_size=4), st.integers(16, 1 << 20))
def test_mutated_seeds(seed: bytes, at: int, patch: bytes, limit: int) -> None:
    at = min(at, len(seed))
    raw = seed[:at] + patch + seed[at + len(patch):]
    assert batch_figures(raw, limit) == _separate(raw, limit)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes(raw: bytes) -> None:
    assert batch_figures(raw, 1 << 20) == _separate(raw, 1 << 20)


def _produce_body(parts: list[tuple[str, int, bytes | None]], version: int):
    topics: dict[str, list] = {}
    for topic, index, records in parts:
        topics.setdefault(topic, []).append({"index": index, "records": records})
    return codec.new_body(0, version, "request", acks=1, timeout_ms=100, topic_data=[
        {"name": name, "partition_data": data} for name, data in topics.items()])


def test_struct_bodies_match_the_mapping_path() -> None:
    bad = bytearray(SEEDS[1])
    bad[-1] ^= 1
    cases = [
        [("a", 0, SEEDS[0])],
        [("a", 0, SEEDS[0]), ("a", 1, bytes(bad)), ("b", 3, SEEDS[-1])],
        [("a", 0, None), ("b", 1, b"")],
        [("a", 2, bytes(bad))],
    ]
    for parts in cases:
        body = _produce_body(parts, 9)
        mapping = {"topic_data": [{"name": t.name, "partition_data": [{"index": p.index, "records": p.records}
                                                                       for p in t.partition_data]}
                                  for t in body.topic_data]}
        expected = exchange_columns(0, 9, mapping, None)
        assert exchange_columns(0, 9, body, None) == expected
        assert record_figures(0, 9, body) == tuple(expected.values())
        # and the expected figures are the separate passes summed by hand
        sets = list(record_sets(0, 9, mapping, "request"))
        counts = [batch_counts(raw)[0] for _, _, raw in sets]
        assert expected["records"] == (None if None in counts else sum(counts))
    assert exchange_columns(3, 12, None, {"topics": []}) == {} and record_figures(3, 12, object()) is None


def test_crc32c_check_values() -> None:
    """RFC 3720 (iSCSI) B.4 CRC-32C examples, and the standard check value."""
    from kdissect.records.crc import crc32c

    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(bytes(32)) == 0x8A9136AA
    assert crc32c(b"\xff" * 32) == 0x62A8AB43
    assert crc32c(bytes(range(32))) == 0x46DD794E
    assert crc32c(memoryview(bytes(range(40)))[0:32]) == 0x46DD794E
