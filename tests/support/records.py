"""Helpers for the record payload tests: sample records and independent builders."""

from __future__ import annotations

import zlib

from kdissect.records.model import Record

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
LEGACY_CODECS = ("none", "gzip", "snappy", "lz4")  # magic 0/1 predate zstd
KAFKA_PYTHON_CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def sample_records(count: int = 7, *, with_headers: bool = True) -> list[Record]:
    """Varied records: null key/value, empty and binary bytes, unicode, headers."""
    out = []
    for i in range(count):
        key = None if i % 5 == 3 else f"key-{i}".encode()
        value = None if i % 7 == 5 else (f"välue {i} ".encode() * (i + 1) + bytes(range(i % 256)))
        headers = [("trace", f"t{i}".encode()), ("empty", b""), ("null", None)] if with_headers and i % 2 else []
        out.append(Record(offset=0, timestamp=1_700_000_000_000 + 17 * i, key=key, value=value, headers=headers))
    return out


def essence(records, *, headers: bool = True, timestamps: bool = True) -> list[tuple]:
    """What a round trip must preserve, as comparable tuples."""
    return [
        (r.key, r.value, list(r.headers) if headers else None, r.timestamp if timestamps else None)
        for r in records
    ]


def kafka_python_batch(records, magic: int, codec: str, base_offset: int = 0) -> bytes:
    """The same records built by kafka-python's own builders (an independent encoder)."""
    if magic == 2:
        from kafka.record.default_records import DefaultRecordBatchBuilder

        builder = DefaultRecordBatchBuilder(2, KAFKA_PYTHON_CODEC_IDS[codec], False, -1, -1, -1, 1 << 24)
        for i, r in enumerate(records):
            builder.append(i, r.timestamp, r.key, r.value, list(r.headers))
        raw = bytearray(builder.build())
    else:
        from kafka.record.legacy_records import LegacyRecordBatchBuilder

        builder = LegacyRecordBatchBuilder(magic, KAFKA_PYTHON_CODEC_IDS[codec], 1 << 24)
        for i, r in enumerate(records):
            builder.append(i, r.timestamp if magic else None, r.key, r.value)
        raw = bytearray(builder.build())
    raw[0:8] = base_offset.to_bytes(8, "big", signed=True)
    return bytes(raw)


def gzip_bomb_batch(inflated_size: int, *, base_offset: int = 0) -> bytes:
    """A magic-2 gzip batch whose single record's value is `inflated_size` zero bytes.

    Built in a streaming way (1 MiB at a time) so making it stays cheap.
    """
    import struct

    import crc32c

    from kdissect.records.wire import write_varint

    # attributes, timestamp delta, offset delta, key, then the value's length
    body_head = bytes([0]) + write_varint(0) + write_varint(0) + write_varint(4) + b"bomb" + write_varint(inflated_size)
    record_len = len(body_head) + inflated_size + 1
    deflater = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [deflater.compress(write_varint(record_len) + body_head)]
    zeros = bytes(1 << 20)
    left = inflated_size
    while left:
        step = min(left, len(zeros))
        parts.append(deflater.compress(zeros[:step]))
        left -= step
    parts.append(deflater.compress(write_varint(0)))  # header count
    parts.append(deflater.flush())
    section = b"".join(parts)
    after_crc = struct.pack(">hiqqqhii", 1, 0, 0, 0, -1, -1, -1, 1) + section
    after_length = struct.pack(">ib", -1, 2) + struct.pack(">I", crc32c.crc32c(after_crc)) + after_crc
    return struct.pack(">qi", base_offset, len(after_length)) + after_length
