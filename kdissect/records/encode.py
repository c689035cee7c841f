"""Build message sets (magic 0/1) and record batches (magic 2) from records.

Used by the project's own tests (round trips, crafted captures) and benchmarks.
Offsets of the given records are ignored: they are numbered from `base_offset`.
"""

from __future__ import annotations

import gzip as _gzip
import struct
import zlib
from collections.abc import Sequence

from kdissect.records import crc as _crc32c

from kdissect.records import codecs
from kdissect.records.batch import ATTR_CONTROL, ATTR_LOG_APPEND_TIME, ATTR_TRANSACTIONAL
from kdissect.records.model import Record
from kdissect.records.wire import write_varint
from kdissect.records.xxh32 import xxh32

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def compress(codec: str, data: bytes, *, xerial: bool = True, legacy_lz4: bool = False) -> bytes:
    """Compress as Kafka clients do. snappy: xerial framing unless `xerial=False` (raw);
    lz4: one frame, with the pre-KIP-57 header checksum when `legacy_lz4`."""
    if codec == "gzip":
        return _gzip.compress(data, compresslevel=6, mtime=0)
    if codec == "snappy":
        import snappy

        if not xerial:
            return snappy.compress(data)
        out = bytearray(codecs.XERIAL_MAGIC + struct.pack(">ii", 1, 1))
        for start in range(0, max(len(data), 1), 32 * 1024):  # Java uses 32 KiB blocks
            block = snappy.compress(data[start : start + 32 * 1024])
            out += struct.pack(">i", len(block)) + block
        return bytes(out)
    if codec == "lz4":
        import lz4.frame

        frame = lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                                   block_linked=False, content_checksum=False)
        if legacy_lz4:
            flags = frame[4]
            checksum_at = 4 + 2 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0)
            wrong = (xxh32(frame[:checksum_at]) >> 8) & 0xFF
            frame = frame[:checksum_at] + bytes([wrong]) + frame[checksum_at + 1 :]
        return frame
    if codec == "zstd":
        import zstandard

        return zstandard.ZstdCompressor(write_content_size=False).compress(data)
    raise ValueError(f"unknown codec {codec!r}")


def _bytes32(value: bytes | None) -> bytes:
    return struct.pack(">i", -1) if value is None else struct.pack(">i", len(value)) + value


def _bytes_varint(value: bytes | None) -> bytes:
    return write_varint(-1) if value is None else write_varint(len(value)) + value


def encode_message(offset: int, magic: int, attributes: int, timestamp: int | None,
                   key: bytes | None, value: bytes | None) -> bytes:
    """One message set entry: offset, size, crc, magic, attributes, [timestamp], key, value."""
    body = struct.pack(">bB", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp if timestamp is not None else -1)
    body += _bytes32(key) + _bytes32(value)
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(message)) + message


def encode_message_set(records: Sequence[Record], magic: int = 1, codec: str = "none", *,
                       base_offset: int = 0, log_append_time: bool = False,
                       xerial: bool = True, legacy_lz4: bool | None = None) -> bytes:
    """Message set of `records`; with a codec, a single wrapper message holding them all."""
    if magic not in (0, 1):
        raise ValueError("message sets have magic 0 or 1")
    ts_bit = 0x08 if log_append_time and magic == 1 else 0
    if codec == "none":
        return b"".join(
            encode_message(base_offset + i, magic, ts_bit, r.timestamp, r.key, r.value)
            for i, r in enumerate(records))
    # Inner offsets: relative (0..n-1) for magic 1, as the producer writes them for magic 0 too.
    inner = b"".join(encode_message(i, magic, 0, r.timestamp, r.key, r.value) for i, r in enumerate(records))
    if legacy_lz4 is None:
        legacy_lz4 = magic == 0
    payload = compress(codec, inner, xerial=xerial, legacy_lz4=legacy_lz4)
    last = len(records) - 1
    wrapper_offset = base_offset + last
    max_ts = max((r.timestamp or -1 for r in records), default=-1)
    return encode_message(wrapper_offset, magic, CODEC_IDS[codec] | ts_bit, max_ts, None, payload)


def encode_record(offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None,
                  headers: Sequence[tuple[str | bytes, bytes | None]] = (), attributes: int = 0) -> bytes:
    body = bytearray(bytes([attributes]))
    body += write_varint(timestamp_delta) + write_varint(offset_delta)
    body += _bytes_varint(key) + _bytes_varint(value) + write_varint(len(headers))
    for header_key, header_value in headers:
        raw_key = header_key.encode("utf-8") if isinstance(header_key, str) else header_key
        body += _bytes_varint(raw_key) + _bytes_varint(header_value)
    return write_varint(len(body)) + bytes(body)


def encode_record_batch(records: Sequence[Record], codec: str = "none", *, base_offset: int = 0,
                        partition_leader_epoch: int = -1, log_append_time: bool = False,
                        transactional: bool = False, control: bool = False,
                        producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                        xerial: bool = True, max_timestamp: int | None = None) -> bytes:
    """One magic-2 record batch holding `records` (timestamps default to 0)."""
    stamps = [r.timestamp if r.timestamp is not None else 0 for r in records]
    base_ts = stamps[0] if stamps else -1
    max_ts = max_timestamp if max_timestamp is not None else (max(stamps) if stamps else -1)
    section = b"".join(
        encode_record(i, stamps[i] - base_ts, r.key, r.value, r.headers)
        for i, r in enumerate(records))
    if codec != "none":
        section = compress(codec, section, xerial=xerial)
    attributes = CODEC_IDS[codec]
    attributes |= ATTR_LOG_APPEND_TIME if log_append_time else 0
    attributes |= ATTR_TRANSACTIONAL if transactional else 0
    attributes |= ATTR_CONTROL if control else 0
    after_crc = struct.pack(">hiqqqhii", attributes, max(len(records) - 1, 0), base_ts, max_ts,
                            producer_id, producer_epoch, base_sequence, len(records)) + section
    after_length = struct.pack(">ib", partition_leader_epoch, 2) + struct.pack(">I", _crc32c.crc32c(after_crc)) + after_crc
    return struct.pack(">qi", base_offset, len(after_length)) + after_length


def control_record(kind: str, coordinator_epoch: int = 0) -> Record:
    """A commit/abort marker record, to put in a batch built with `control=True`."""
    key = struct.pack(">hh", 0, {"abort": 0, "commit": 1}[kind])
    return Record(offset=0, timestamp=0, key=key, value=struct.pack(">hi", 0, coordinator_epoch))
