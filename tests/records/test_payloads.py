"""Record payloads: round trips for every magic and codec, checks, bounds."""

from __future__ import annotations

import struct
import subprocess
import sys
import textwrap
import zlib

import lz4.frame
import pytest

from kdissect.records import batch_checks, batch_counts, decode_records
from kdissect.records.encode import compress, control_record, encode_message_set, encode_record_batch
from kdissect.records.model import Record
from tests.support.records import (
    CODECS,
    LEGACY_CODECS,
    essence,
    kafka_python_batch,
    sample_records,
)


@pytest.mark.parametrize("codec", CODECS)
def test_record_batch_round_trip(codec):
    records = sample_records()
    raw = encode_record_batch(records, codec, base_offset=1000, producer_id=42, producer_epoch=3,
                              base_sequence=7, partition_leader_epoch=9)
    decoded = decode_records(raw)
    assert len(decoded) == 1
    batch = decoded[0]
    assert batch.problems == [] and batch.crc_ok is True and not batch.partial
    assert (batch.magic, batch.codec, batch.base_offset) == (2, codec, 1000)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (42, 3, 7)
    assert batch.partition_leader_epoch == 9 and batch.last_offset_delta == len(records) - 1
    assert batch.record_count == len(records) and batch.timestamp_type == "create_time"
    assert [r.offset for r in batch.records] == list(range(1000, 1000 + len(records)))
    assert essence(batch.records) == essence(records)
    count, size, codecs = batch_counts(raw)
    assert count == len(records) and codecs == [codec]
    assert size in (batch.uncompressed_bytes, None)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_message_set_round_trip(magic, codec):
    records = sample_records()
    raw = encode_message_set(records, magic, codec, base_offset=500)
    decoded = decode_records(raw)
    assert all(b.problems == [] and b.crc_ok for b in decoded)
    got = list(decoded.records())
    assert essence(got, headers=False, timestamps=magic == 1) == essence(records, headers=False, timestamps=magic == 1)
    if magic == 0 and codec != "none":
        # magic 0 inner offsets are taken as written (the producer numbers them 0..n-1)
        assert [r.offset for r in got] == list(range(len(records)))
    else:
        assert [r.offset for r in got] == list(range(500, 500 + len(records)))
    assert {b.codec for b in decoded} == {codec} and {b.magic for b in decoded} == {magic}
    count, _size, codecs = batch_counts(raw)
    assert codecs == [codec]
    # compressed wrappers are counted too: their inner entries, after inflating
    assert count == len(records)


# zstd needs magic 2. kafka-python writes magic-0 lz4 with the pre-KIP-57
# header checksum (it needs the xxhash package, a dev dependency, for that).
KAFKA_PYTHON_CASES = [(2, c) for c in CODECS] + [(m, c) for m in (1, 0) for c in LEGACY_CODECS]


@pytest.mark.parametrize("magic, codec", KAFKA_PYTHON_CASES)
def test_decodes_kafka_python_builders(magic, codec):
    """kafka-python's own batch builders are an independent encoder."""
    records = sample_records(with_headers=magic == 2)
    raw = kafka_python_batch(records, magic, codec, base_offset=77)
    decoded = decode_records(raw)
    assert decoded.all_problems() == []
    assert essence(decoded.records(), timestamps=magic > 0) == essence(records, timestamps=magic > 0)


@pytest.mark.parametrize("magic, codec", KAFKA_PYTHON_CASES)
def test_own_encoder_read_by_kafka_python(magic, codec):
    """The project's encoder checked by an independent reader (kafka-python's)."""
    from kafka.record import MemoryRecords

    records = sample_records(with_headers=magic == 2)
    raw = encode_record_batch(records, codec) if magic == 2 else encode_message_set(records, magic, codec)
    reader = MemoryRecords(raw)
    seen = []
    while (batch := reader.next_batch()) is not None:
        for record in batch:
            seen.append((record.key, record.value, [tuple(h) for h in record.headers] if magic == 2 else None,
                         record.timestamp if magic else None))
    assert seen == essence(records, headers=magic == 2, timestamps=magic > 0)


def test_magic1_relative_offsets_resolved_against_wrapper():
    records = sample_records(4, with_headers=False)
    raw = bytearray(encode_message_set(records, 1, "gzip"))
    raw[0:8] = struct.pack(">q", 90_003)  # the broker sets the wrapper to the last absolute offset
    assert [r.offset for r in decode_records(bytes(raw)).records()] == [90_000, 90_001, 90_002, 90_003]
    raw[0:8] = struct.pack(">q", 0)  # kafka-python's Produce requests: wrapper offset left at 0
    assert [r.offset for r in decode_records(bytes(raw)).records()] == [0, 1, 2, 3]


def test_log_append_time_overrides_record_timestamps():
    records = sample_records(3)
    v2 = decode_records(encode_record_batch(records, "none", log_append_time=True, max_timestamp=123))[0]
    assert v2.timestamp_type == "log_append_time" and {r.timestamp for r in v2.records} == {123}
    v1 = decode_records(encode_message_set(records, 1, "gzip", log_append_time=True))[0]
    assert v1.timestamp_type == "log_append_time"
    assert {r.timestamp for r in v1.records} == {max(r.timestamp for r in records)}


def test_control_batch_markers():
    raw = encode_record_batch([control_record("commit", 12)], control=True, transactional=True,
                              producer_id=5, producer_epoch=1)
    raw += encode_record_batch([control_record("abort", 13)], control=True, transactional=True, base_offset=1)
    decoded = decode_records(raw)
    assert [b.control and b.transactional for b in decoded] == [True, True]
    markers = [(r.control, r.coordinator_epoch) for r in decoded.records()]
    assert markers == [("commit", 12), ("abort", 13)]


@pytest.mark.parametrize("magic", [0, 1, 2])
def test_corrupted_crc_is_flagged_not_raised(magic):
    records = sample_records(3)
    raw = bytearray(encode_record_batch(records) if magic == 2 else encode_message_set(records, magic, "gzip"))
    raw[-3] ^= 0x40  # flip a bit inside the last value
    decoded = decode_records(bytes(raw))
    batch = decoded[0]
    assert batch.crc_ok is False
    assert any("CRC" in p for p in batch.problems)
    assert any("CRC" in p for p in batch_checks(bytes(raw)))
    # the untouched CRC passes the cheap check
    clean = encode_record_batch(records) if magic == 2 else encode_message_set(records, magic, "gzip")
    assert batch_checks(clean) == []


def test_inner_message_crc_flagged():
    records = sample_records(3, with_headers=False)
    inner = encode_message_set(records, 1, "none")
    broken = bytearray(inner)
    broken[20] ^= 0x01  # inside the first inner message (after its CRC)
    from kdissect.records.encode import encode_message
    raw = encode_message(2, 1, 1, 0, None, compress("gzip", bytes(broken)))
    batch = decode_records(raw)[0]
    assert batch.crc_ok is True  # the wrapper is fine
    assert [r.crc_ok for r in batch.records] == [False, True, True]
    assert any("inner message" in p and "CRC32" in p for p in batch.problems)


def test_lz4_pre_kip57_framing():
    records = sample_records(5, with_headers=False)
    raw = encode_message_set(records, 0, "lz4", legacy_lz4=True)
    wrapped_value = raw[12 + 14 + 4 :]  # offset+size, crc/magic/attrs/key(-1), value length
    # the lz4 library itself refuses such a frame (the wrong header checksum) ...
    with pytest.raises(RuntimeError):
        lz4.frame.decompress(wrapped_value)
    # ... the decoder repairs it
    decoded = decode_records(raw)
    assert decoded.all_problems() == []
    assert decoded[0].notes == ["lz4 frame uses Kafka's pre-KIP-57 header checksum"]
    assert essence(decoded.records(), headers=False, timestamps=False) == essence(records, headers=False, timestamps=False)
    # kafka-python's old-Kafka lz4 writer (independent) produces the same wrong checksum byte
    from kafka.codec import lz4_encode_old_kafka

    theirs = lz4_encode_old_kafka(b"payload" * 50)
    from kdissect.records.codecs import repair_lz4_header

    assert repair_lz4_header(theirs)[1] == ["lz4 frame uses Kafka's pre-KIP-57 header checksum"]
    # with a correct checksum it also decodes (Kafka 0.10+ with magic 1)
    assert decode_records(encode_message_set(records, 1, "lz4", legacy_lz4=False)).all_problems() == []


@pytest.mark.parametrize("xerial", [True, False])
def test_snappy_framings(xerial):
    records = sample_records(3)
    big = Record(0, 5, b"big", bytes(range(256)) * 600)  # > 32 KiB: several xerial chunks
    raw = encode_record_batch(records + [big], "snappy", xerial=xerial)
    section = raw[61:]
    assert section.startswith(b"\x82SNAPPY\x00") is xerial
    if xerial:
        assert struct.unpack_from(">ii", section, 8) == (1, 1)
    decoded = decode_records(raw)
    assert decoded.all_problems() == []
    assert essence(decoded.records()) == essence(records + [big])
    assert batch_counts(raw)[1] == decoded[0].uncompressed_bytes


def test_xerial_snappy_from_kafka_python():
    from kafka.codec import snappy_encode

    payload = bytes(range(256)) * 1000
    framed = snappy_encode(payload, xerial_compatible=True, xerial_blocksize=32 * 1024)
    assert framed.startswith(b"\x82SNAPPY\x00")
    from kdissect.records.codecs import decompress

    assert decompress(2, framed).data == payload


def test_partial_batch_at_end_is_partial_not_error():
    first = encode_record_batch(sample_records(3), "gzip", base_offset=0)
    second = encode_record_batch(sample_records(4), "none", base_offset=3)
    for cut in (5, 16, 30, 61, len(second) - 1):
        decoded = decode_records(first + second[:cut])
        assert len(decoded) == 2
        assert decoded[0].problems == [] and len(decoded[0].records) == 3
        assert decoded[1].partial and decoded[1].problems == [] and decoded[1].records == []
        assert decoded.partial and decoded.all_problems() == []
        assert batch_counts(first + second[:cut])[0] == 3
    legacy = encode_message_set(sample_records(3), 1, "none")
    decoded = decode_records(legacy[:-4])
    assert [b.partial for b in decoded] == [False, False, True]


def test_missing_codec_is_a_problem(monkeypatch):
    from kdissect.records import codecs

    monkeypatch.setattr(codecs, "_zstd", None)
    raw = encode_record_batch(sample_records(2), "zstd")
    batch = decode_records(raw)[0]
    assert any("zstd codec unavailable" in p for p in batch.problems)
    assert codecs.available_codecs()["zstd"] is False


def test_decompression_cap_flags_batch_and_continues():
    records = [Record(0, 0, b"k", bytes(200_000))] * 3
    raw = encode_record_batch(records, "zstd") + encode_record_batch(sample_records(2), "lz4", base_offset=3)
    decoded = decode_records(raw, max_uncompressed=100_000)
    assert decoded[0].over_limit and any("limit" in p for p in decoded[0].problems)
    assert decoded[1].problems == [] and len(decoded[1].records) == 2
    for codec in ("gzip", "snappy", "lz4"):
        capped = decode_records(encode_record_batch(records, codec), max_uncompressed=100_000)[0]
        assert capped.over_limit, codec


BOMB_SCRIPT = textwrap.dedent(
    """
    import resource, sys, time, tracemalloc
    sys.path.insert(0, {root!r})
    from tests.support.records import gzip_bomb_batch
    from kdissect.records import decode_records, batch_checks
    from kdissect.records.encode import encode_record_batch
    from tests.support.records import sample_records
    raw = gzip_bomb_batch({size}) + encode_record_batch(sample_records(2), "gzip", base_offset=1)
    tracemalloc.start()
    start = time.perf_counter()
    decoded = decode_records(raw)
    elapsed = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    rss = int([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]) * 1024  # own peak; ru_maxrss would carry the forked test process's size over exec
    print(len(raw), elapsed, peak, rss, decoded[0].over_limit, len(decoded[1].records),
          decoded[1].problems == [], any("limit" in p for p in batch_checks(raw)))
    """
)


def test_gzip_bomb_bounded_time_and_memory(repo_root):
    size = 600 * 1024 * 1024
    script = BOMB_SCRIPT.format(root=str(repo_root), size=size)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    raw_len, elapsed, peak, rss, over, following, following_ok, flagged = out.stdout.split()
    assert int(raw_len) < 2 * 1024 * 1024  # small on the wire
    assert over == "True" and flagged == "True"  # flagged by the decoder and the cheap check
    assert int(following) == 2 and following_ok == "True"  # the next batch still decodes
    assert float(elapsed) < 20
    assert int(peak) < 200 * 1024 * 1024  # Python allocations during decoding
    assert int(rss) < 1024 * 1024 * 1024  # whole process, well under 1 GiB


def test_record_count_mismatch_and_garbage_are_problems():
    raw = bytearray(encode_record_batch(sample_records(3)))
    struct.pack_into(">i", raw, 57, 5)  # claim 5 records
    import crc32c

    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))
    batch = decode_records(bytes(raw))[0]
    assert batch.crc_ok and any("declares 5 records, found 3" in p for p in batch.problems)
    weird = decode_records(struct.pack(">qi", 0, 40) + bytes([0] * 4) + bytes([7]) + bytes(35))
    assert weird[0].problems and "magic 7" in weird[0].problems[0]


def test_gzip_uses_zlib_crc_for_legacy():
    # magic 0/1 CRC is plain CRC32 over magic..value (zlib), checked independently here
    raw = encode_message_set(sample_records(1), 0, "none")
    (crc,) = struct.unpack_from(">I", raw, 12)
    assert crc == zlib.crc32(raw[16:])
    assert decode_records(raw)[0].crc == crc


def test_snappy_problems_are_named_with_what_came_before():
    """decompress's snappy problems (records.codecs.inflate_snappy's stops):
    each named, with the whole chunks inflated before it; over the limit flagged."""
    import snappy

    from kdissect.records.codecs import DEFAULT_LIMIT, SNAPPY, XERIAL_MAGIC, decompress

    first, second = b"first chunk " * 10, b"second chunk " * 10
    head = XERIAL_MAGIC + struct.pack(">ii", 1, 1)

    def chunk(block: bytes) -> bytes:
        return struct.pack(">i", len(block)) + block

    over = "decompressed size exceeds the limit of {} bytes; stopped there"
    cases = [
        (XERIAL_MAGIC + b"\0\0\0\1", DEFAULT_LIMIT, b"", ["xerial snappy header truncated"], False),
        (head + chunk(snappy.compress(first)) + b"\0\0", DEFAULT_LIMIT, first,
         ["xerial snappy chunk header truncated"], False),
        (head + chunk(snappy.compress(first)) + struct.pack(">i", 40) + b"\0" * 10, DEFAULT_LIMIT, first,
         ["xerial snappy chunk of 40 bytes runs past the data"], False),
        (head + struct.pack(">i", -3), DEFAULT_LIMIT, b"", ["xerial snappy chunk of -3 bytes runs past the data"], False),
        (head + chunk(snappy.compress(first)) + chunk(b"\xff" * 5 + b"\0"), DEFAULT_LIMIT, first,
         ["snappy block length preamble unreadable"], False),
        (b"\x80", DEFAULT_LIMIT, b"", ["snappy block length preamble unreadable"], False),
        # 120 bytes inflated of a limit of 200: the second chunk's 130 declared bytes are over the 80 left
        (head + chunk(snappy.compress(first)) + chunk(snappy.compress(second)), 200, first,
         ["snappy block declares 130 bytes, over the limit; " + over.format(80)], True),
        (snappy.compress(second), 100, b"", ["snappy block declares 130 bytes, over the limit; " + over.format(100)],
         True),
    ]
    for body, limit, data, problems, over_limit in cases:
        inflated = decompress(SNAPPY, body, limit)
        assert (inflated.data, inflated.problems, inflated.over_limit) == (data, problems, over_limit), body
    # a block the library rejects: named as corrupt, the chunks before it kept
    inflated = decompress(SNAPPY, head + chunk(snappy.compress(first)) + chunk(b"\x05\xff\xff"), DEFAULT_LIMIT)
    assert inflated.data == first and len(inflated.problems) == 1
    assert inflated.problems[0].startswith("snappy data corrupt: ") and not inflated.over_limit
    assert decompress(SNAPPY, head + chunk(snappy.compress(first)) + chunk(snappy.compress(second)),
                      250).data == first + second  # exactly at the limit: whole
