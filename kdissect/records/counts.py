"""Cheap figures for exchange rows, from batch headers only (no decompression).

`batch_counts(raw) -> (records, record_bytes, codecs)`:

- records: magic 2: the record count of each batch header; magic 0/1: one per
  uncompressed message. A compressed magic 0/1 wrapper does not say how many
  messages it holds: its value is inflated (within the decompression limit)
  and the inner messages' entries are counted, without decoding them; when
  that fails (over the limit, a damaged stream) `records` is None (unknown)
  rather than a wrong number.
- record_bytes: size of the uncompressed records data. Uncompressed magic 2
  batch: the records section; uncompressed message: its entry (offset, size
  and message); compressed data: the size the compressed stream itself
  declares (gzip ISIZE trailer, snappy length preambles, lz4/zstd frame content
  size: `declared_size`, read in place). None when any batch leaves it unknown.
- codecs: distinct codec names in first-seen order.

A partial entry cut off at the end (Fetch responses) is not counted.
`batch_checks(raw, limit)` adds the checks that are still cheap: CRCs (C speed)
and compressed data declaring more than the decompression limit.
`batch_figures(raw, limit)` is both in one pass over the headers.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import Final

from kdissect.records import crc as _crc32c

from kdissect.records import codecs as _codecs
from kdissect.records.codecs import LZ4_MAGIC, XERIAL_MAGIC
from kdissect.records.model import codec_name

# the codec ids, as constants of the compiled module (no lookup per batch)
_GZIP: Final = 1
_SNAPPY: Final = 2
_LZ4: Final = 3
_ZSTD: Final = 4
assert (_GZIP, _SNAPPY, _LZ4, _ZSTD) == (_codecs.GZIP, _codecs.SNAPPY, _codecs.LZ4, _codecs.ZSTD)
_ENTRY: Final = struct.Struct(">qi")
_V2_COUNT: Final = struct.Struct(">i")
_V2_HEADER: Final = 61


def _entries(data: bytes) -> Iterator[tuple[int, int, int]]:
    """(pos, end, magic) of each complete top-level entry."""
    pos, total = 0, len(data)
    while total - pos >= 17:
        _offset, size = _ENTRY.unpack_from(data, pos)
        end = pos + 12 + size
        if size < 0 or end > total:
            return
        yield pos, end, data[pos + 16]
        pos = end


def batch_counts(raw: bytes | None, max_uncompressed: int = _codecs.DEFAULT_LIMIT
                 ) -> tuple[int | None, int | None, list[str]]:
    """(records, record_bytes, codecs) of a records field, from headers (and
    the inner entries of compressed magic 0/1 wrappers); never raises."""
    if not raw:
        return 0, 0, []
    data = bytes(raw)
    records: int | None = 0
    record_bytes: int | None = 0
    names: list[str] = []
    try:
        for pos, end, magic in _entries(data):
            if magic == 2 and end - pos >= _V2_HEADER:
                codec_id = struct.unpack_from(">h", data, pos + 21)[0] & 0x07
                count = _V2_COUNT.unpack_from(data, pos + 57)[0]
                size = end - pos - _V2_HEADER if codec_id == 0 else declared_size(codec_id, data, pos + _V2_HEADER, end)
            elif magic in (0, 1) and end - pos >= 18:
                codec_id = data[pos + 17] & 0x07
                if codec_id == 0:
                    count, size = 1, end - pos
                else:
                    count, inner_size = _wrapper_count(data, pos, end, magic, codec_id, max_uncompressed)
                    size = _declared_legacy(data, pos, end, magic, codec_id)
                    if size is None:
                        size = inner_size
            else:
                continue
            name = codec_name(codec_id)
            if name not in names:
                names.append(name)
            records = None if records is None or count is None else records + max(count, 0)
            record_bytes = None if record_bytes is None or size is None else record_bytes + size
    except Exception:  # headers are fixed-size reads; this is belt and braces
        return None, None, names
    return records, record_bytes, names


def _legacy_value(data: bytes, pos: int, end: int, magic: int) -> bytes | None:
    cursor = pos + 12 + 6 + (8 if magic == 1 else 0)
    if cursor + 4 > end:
        return None
    (key_len,) = struct.unpack_from(">i", data, cursor)
    cursor += 4 + max(key_len, 0)
    if cursor + 4 > end:
        return None
    (value_len,) = struct.unpack_from(">i", data, cursor)
    cursor += 4
    if value_len < 0 or cursor + value_len > end:
        return None
    return data[cursor : cursor + value_len]


def _wrapper_count(data: bytes, pos: int, end: int, magic: int, codec_id: int, limit: int
                   ) -> tuple[int | None, int | None]:
    """(messages, inflated bytes) inside a compressed magic 0/1 wrapper: its
    value inflated up to `limit`, then the inner entries counted by their
    headers (a wrapper inside, as no client writes, is not opened: None)."""
    value = _legacy_value(data, pos, end, magic)
    if value is None:
        return None, None
    inflated = _codecs.decompress(codec_id, value, limit, magic=magic)
    if inflated.over_limit or inflated.problems:
        return None, None
    inner = inflated.data
    count = 0
    covered = 0
    for inner_pos, inner_end, inner_magic in _entries(inner):
        if inner_magic not in (0, 1) or inner_end - inner_pos < 18 or inner[inner_pos + 17] & 0x07:
            return None, len(inner)
        count += 1
        covered = inner_end
    if covered != len(inner):  # a partial entry inside a wrapper: not a countable set
        return None, len(inner)
    return count, len(inner)


def _declared_legacy(data: bytes, pos: int, end: int, magic: int, codec_id: int) -> int | None:
    value = _legacy_value(data, pos, end, magic)
    return None if value is None else declared_size(codec_id, value, 0, len(value))


def batch_checks(raw: bytes | None, max_uncompressed: int = _codecs.DEFAULT_LIMIT) -> list[str]:
    """Problems visible without decoding records: CRC mismatches, declared sizes over the limit."""
    if not raw:
        return []
    data = bytes(raw)
    problems: list[str] = []
    try:
        for pos, end, magic in _entries(data):
            (offset,) = struct.unpack_from(">q", data, pos)
            if magic == 2 and end - pos >= _V2_HEADER:
                (crc,) = struct.unpack_from(">I", data, pos + 17)
                if _crc32c.crc32c(data[pos + 21 : end]) != crc:
                    problems.append(f"record batch at offset {offset}: CRC32C mismatch")
                codec_id = struct.unpack_from(">h", data, pos + 21)[0] & 0x07
                declared = declared_size(codec_id, data, pos + _V2_HEADER, end) if codec_id else None
            elif magic in (0, 1) and end - pos >= 18:
                (crc,) = struct.unpack_from(">I", data, pos + 12)
                if zlib.crc32(data[pos + 16 : end]) != crc:
                    problems.append(f"message at offset {offset}: CRC32 mismatch")
                codec_id = data[pos + 17] & 0x07
                declared = _declared_legacy(data, pos, end, magic, codec_id) if codec_id else None
            else:
                problems.append(f"entry at offset {offset}: unknown magic {magic}")
                continue
            if declared is not None and declared > max_uncompressed:
                problems.append(f"batch at offset {offset} declares {declared} uncompressed bytes, "
                                f"over the {max_uncompressed}-byte decompression limit")
    except Exception as problem:
        problems.append(f"records check failed: {type(problem).__name__}")
    return problems


def batch_figures(raw: bytes | None, max_uncompressed: int = _codecs.DEFAULT_LIMIT
                  ) -> tuple[int | None, int | None, list[str], list[str]]:
    """`(*batch_counts(raw), batch_checks(raw, max_uncompressed))` in one pass
    when every entry is a whole magic 2 batch (the usual case); never raises."""
    if not raw:
        return 0, 0, [], []
    data = raw if type(raw) is bytes else bytes(raw)
    total = len(data)
    # CRCs over slices: a view avoids copying big batches; small ones copy cheaper
    view = memoryview(data) if total > 2048 else data
    pos = 0
    records = 0
    record_bytes: int | None = 0
    names: list[str] = []
    problems: list[str] = []
    crc32c = _crc32c.crc32c
    try:
        # a magic 2 batch header, big-endian: base offset int64 at 0, batch
        # length int32 at 8, (leader epoch), magic int8 at 16, crc uint32 at
        # 17, attributes int16 at 21, (offset delta, timestamps, producer id
        # and epoch, base sequence), record count int32 at 57; 61 bytes
        while total - pos >= 17:
            size = _int32(data, pos + 8)
            end = pos + 12 + size
            if size < 0 or end > total:
                break
            if end - pos < _V2_HEADER or data[pos + 16] != 2:  # short, or not magic 2: unusual
                raise _Unusual
            if crc32c(view[pos + 21 : end]) != _uint32(data, pos + 17):
                problems.append(f"record batch at offset {_int64(data, pos)}: CRC32C mismatch")
            codec_id = data[pos + 22] & 0x07  # the low byte of the int16 attributes
            if codec_id:
                declared = declared_size(codec_id, data, pos + _V2_HEADER, end)
                if declared is not None and declared > max_uncompressed:
                    problems.append(f"batch at offset {_int64(data, pos)} declares {declared} uncompressed bytes, "
                                    f"over the {max_uncompressed}-byte decompression limit")
            else:
                declared = end - pos - _V2_HEADER
            count = _int32(data, pos + 57)
            name = _CODEC_NAMES[codec_id]
            if name not in names:
                names.append(name)
            if count > 0:
                records += count
            if record_bytes is not None:
                record_bytes = None if declared is None else record_bytes + declared
            pos = end
    except Exception:  # _Unusual, or anything surprising: the two separate passes decide
        counts = batch_counts(data, max_uncompressed)
        return counts[0], counts[1], counts[2], batch_checks(data, max_uncompressed)
    return records, record_bytes, names, problems


def declared_size(codec_id: int, data: bytes, start: int, end: int) -> int | None:
    """Uncompressed size announced by the compressed data data[start:end]
    itself, cheaply (read in place: batches are not copied), or None; never
    raises. gzip: ISIZE trailer (mod 2**32, last member); snappy: length
    preambles (xerial framing: summed over its blocks); lz4 / zstd: frame
    content size when the writer stored it."""
    try:
        if codec_id == _GZIP:
            if end - start >= 18 and data[start] == 0x1F and data[start + 1] == 0x8B:
                return data[end - 4] | data[end - 3] << 8 | data[end - 2] << 16 | data[end - 1] << 24
            return None
        if codec_id == _SNAPPY:
            if data[start : min(start + 8, end)] != XERIAL_MAGIC:
                return _preamble(data, start, end)
            total = 0
            pos = start + 16  # magic, version, compatible version; then [int32 size][block]...
            while pos + 4 <= end:
                size = data[pos] << 24 | data[pos + 1] << 16 | data[pos + 2] << 8 | data[pos + 3]
                block = _preamble(data, pos + 4, end)
                if size & 0x80000000 or block is None:  # a negative size
                    return None
                total += block
                pos += 4 + size
            return total
        if codec_id == _LZ4:
            if end - start < 15 or data[start : start + 4] != LZ4_MAGIC or not data[start + 4] & 0x08:
                return None
            value = 0
            for at in range(start + 13, start + 5, -1):  # 8 bytes, little-endian
                value = value << 8 | data[at]
            return value
        if codec_id == _ZSTD:
            return _codecs.zstd_content_size(data[start : min(start + 18, end)])
    except Exception:
        return None
    return None


def _preamble(data: bytes, pos: int, end: int) -> int | None:
    """A raw snappy block's length preamble at pos (LEB128, at most 5 bytes,
    not necessarily minimal), or None when cut short by end or over-long."""
    value = 0
    shift = 0
    first = pos
    while pos < end:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value
        shift += 7
        if pos - first >= 5:
            return None
    return None



def _uint32(data: bytes, pos: int) -> int:
    return data[pos] << 24 | data[pos + 1] << 16 | data[pos + 2] << 8 | data[pos + 3]


def _int32(data: bytes, pos: int) -> int:
    value = _uint32(data, pos)
    return value - 0x100000000 if value & 0x80000000 else value


def _int64(data: bytes, pos: int) -> int:
    value = _uint32(data, pos) << 32 | _uint32(data, pos + 4)
    return value - (1 << 64) if value & (1 << 63) else value


class _Unusual(Exception):
    """An entry the one-pass reading leaves to batch_counts/batch_checks."""


_CODEC_NAMES: Final = tuple(codec_name(codec_id) for codec_id in range(8))
