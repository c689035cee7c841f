"""Message sets, message format magic 0 (Kafka 0.8) and magic 1 (0.10, KIP-32).

Each entry: offset int64, message_size int32, then the message: crc uint32
(CRC32 of the rest of the message), magic int8, attributes int8 (codec in bits
0-2, timestamp type in bit 3 for magic 1), timestamp int64 (magic 1 only),
key bytes, value bytes (int32 length, -1 for null). A compressed message
("wrapper") carries a whole inner message set, compressed, as its value. With
magic 1 the inner offsets are relative (0..n-1) and the wrapper's offset is
the absolute offset of the last inner message.
"""

from __future__ import annotations

import struct
import zlib

from kdissect.records import codecs
from kdissect.records.model import CREATE_TIME, LOG_APPEND_TIME, Batch, Record, codec_name

ENTRY_HEAD = struct.Struct(">qi")  # offset, message_size
MESSAGE_HEAD = struct.Struct(">IbB")  # crc, magic, attributes
MAX_DEPTH = 4  # Kafka never nests wrappers; allow a little, refuse recursion bombs


def minimum_size(magic: int) -> int:
    """Smallest valid message_size for a magic: crc, magic, attributes, [timestamp], two lengths."""
    return 14 + (8 if magic == 1 else 0)


class _Budget:
    """Decompression allowance shared by a wrapper and any wrappers inside it."""

    __slots__ = ("left", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.left = limit


def decode_message_entry(data: bytes, pos: int, end: int, limit: int) -> Batch:
    """Decode the top-level entry at data[pos:end] (offset, size, message) as a Batch."""
    offset, size = ENTRY_HEAD.unpack_from(data, pos)
    batch = Batch(position=pos, base_offset=offset, length=size, magic=data[pos + 16])
    message = _parse_message(data, pos + 12, end, batch.problems)
    if message is None:
        return batch
    crc, crc_ok, magic, attributes, timestamp, key, value = message
    codec_id = attributes & 0x07
    batch.crc, batch.crc_ok, batch.attributes = crc, crc_ok, attributes
    batch.codec = codec_name(codec_id)
    if magic == 1:
        batch.timestamp_type = LOG_APPEND_TIME if attributes & 0x08 else CREATE_TIME
        batch.base_timestamp = batch.max_timestamp = timestamp
    if not crc_ok:
        batch.problems.append("CRC32 mismatch")
    if codec_id == 0:
        batch.records.append(Record(offset, timestamp, key, value, [], attributes, crc_ok=crc_ok))
        batch.record_count = 1
        batch.uncompressed_bytes = (len(key) if key else 0) + (len(value) if value else 0)
        return batch
    budget = _Budget(limit)
    _expand_wrapper(batch, offset, magic, attributes, timestamp, value, budget, 1)
    batch.record_count = len(batch.records)
    batch.uncompressed_bytes = limit - budget.left
    return batch


def _parse_message(data: bytes, pos: int, end: int, problems: list[str]):
    """Fields of the message at data[pos:end] or None (problem noted) if malformed."""
    if end - pos < 6:
        problems.append(f"message of {end - pos} bytes is too short")
        return None
    crc, magic, attributes = MESSAGE_HEAD.unpack_from(data, pos)
    if magic not in (0, 1):
        problems.append(f"unexpected magic {magic} inside a message set")
        return None
    crc_ok = zlib.crc32(data[pos + 4 : end]) == crc
    cursor = pos + 6
    timestamp = None
    try:
        if magic == 1:
            (timestamp,) = struct.unpack_from(">q", data, cursor)
            cursor += 8
        key, cursor = _read_bytes(data, cursor, end)
        value, cursor = _read_bytes(data, cursor, end)
    except (ValueError, struct.error) as problem:
        problems.append(f"message malformed: {problem}")
        return None
    if cursor != end:
        problems.append(f"{end - cursor} bytes left over inside the message")
    return crc, crc_ok, magic, attributes, timestamp, key, value


def _read_bytes(data: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    if pos + 4 > end:
        raise ValueError("length field runs past the message")
    (size,) = struct.unpack_from(">i", data, pos)
    pos += 4
    if size == -1:
        return None, pos
    if size < 0 or pos + size > end:
        raise ValueError(f"field of {size} bytes runs past the message")
    return data[pos : pos + size], pos + size


def _expand_wrapper(batch: Batch, wrapper_offset: int, magic: int, attributes: int,
                    timestamp: int | None, value: bytes | None, budget: _Budget, depth: int) -> None:
    if depth > MAX_DEPTH:
        batch.problems.append("compressed messages nested too deeply")
        return
    if value is None:
        batch.problems.append("compressed wrapper message has a null value")
        return
    inflated = codecs.decompress(attributes & 0x07, value, budget.left, magic=magic)
    budget.left -= len(inflated.data)
    batch.problems.extend(inflated.problems)
    batch.notes.extend(n for n in inflated.notes if n not in batch.notes)
    if inflated.over_limit:
        batch.over_limit = True
    inner = inflated.data
    found: list[Record] = []
    pos = 0
    while pos < len(inner):
        if pos + 12 > len(inner):
            if not batch.over_limit:
                batch.problems.append("inner message set ends inside an entry header")
            break
        offset, size = ENTRY_HEAD.unpack_from(inner, pos)
        end = pos + 12 + size
        if size < 0 or end > len(inner):
            if not batch.over_limit:
                batch.problems.append(f"inner message of {size} bytes runs past the inner message set")
            break
        message = _parse_message(inner, pos + 12, end, batch.problems)
        if message is None:
            break
        crc, crc_ok, inner_magic, inner_attributes, inner_ts, key, inner_value = message
        if not crc_ok:
            batch.problems.append(f"inner message at offset {offset}: CRC32 mismatch")
        if inner_attributes & 0x07:
            nested = Batch(position=pos, base_offset=offset, length=size, magic=inner_magic)
            _expand_wrapper(nested, offset, inner_magic, inner_attributes, inner_ts, inner_value, budget, depth + 1)
            batch.problems.extend(nested.problems)
            batch.notes.extend(n for n in nested.notes if n not in batch.notes)
            batch.over_limit = batch.over_limit or nested.over_limit
            found.extend(nested.records)
        else:
            found.append(Record(offset, inner_ts, key, inner_value, [], inner_attributes, crc_ok=crc_ok))
        pos = end
    if magic == 1 and found and batch.over_limit:
        batch.problems.append("inner offsets left relative: the inner message set was not read to its end")
    elif magic == 1 and found:
        # Relative inner offsets: the wrapper holds the absolute offset of the last one.
        # In Produce requests some clients (kafka-python) leave the wrapper at 0;
        # resolving would give negative offsets, so those stay relative (0..n-1).
        shift = wrapper_offset - found[-1].offset
        if found[0].offset + shift >= 0:
            for record in found:
                record.offset += shift
    if magic == 1 and attributes & 0x08:
        for record in found:
            record.timestamp = timestamp
    batch.records.extend(found)
