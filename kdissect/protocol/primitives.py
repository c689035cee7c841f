"""Kafka wire primitives: fixed-width integers, varints, strings, bytes,
arrays and tagged-field sections, plus the one decode exception.

These are the readers and writers every decoder shares: the generated
decoders and skims (`generator.py` inlines the hot cases and calls these for
the rare ones), the headers, and the Scapy fields. Readers take
``(buf, pos, end)`` and return ``(value, new_pos)``. Every length is checked
against the bytes that remain before anything is sliced or allocated, so a
length field claiming 2 GB fails fast instead of allocating.

Decoding is strict about canonical encodings (minimal varints, bools 0/1,
-1 as the only negative length) so that every accepted message re-encodes to
identical bytes.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Mapping, Sized
from typing import Any

__all__ = [
    "DecodeError", "EncodeError", "Short",
    "read_uvarint", "read_varint", "read_varlong", "write_uvarint", "write_varint", "write_varlong",
    "read_bool", "read_uuid", "uuid_from",
    "read_string", "read_compact_string", "read_bytes", "read_compact_bytes",
    "read_count32", "read_compact_count", "read_array_count", "read_array", "skip_array", "read_fixed_array",
    "read_tag_header", "read_tag_section", "read_unknown_tags",
    "len16", "compact_str", "len32_bytes", "compact_bytes", "write_array_count", "write_unknown_tags",
]

# Precompiled big-endian layouts.
INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
UINT16 = struct.Struct(">H")
INT32 = struct.Struct(">i")
UINT32 = struct.Struct(">I")
INT64 = struct.Struct(">q")
FLOAT64 = struct.Struct(">d")

_UUID_NEW = object.__new__
_SET = object.__setattr__
_SAFE_UNKNOWN = uuid.SafeUUID.unknown


class DecodeError(Exception):
    """Malformed Kafka bytes. ``offset`` is the byte offset in the frame where
    the failing field starts; ``path`` names the field (``topics[0].name``)."""

    def __init__(self, offset: int, path: str | list[str] = "", reason: str = "malformed") -> None:
        self.offset = offset
        self._parts = [path] if isinstance(path, str) else list(path)
        self.reason = reason
        super().__init__()

    @property
    def path(self) -> str:
        text = ""
        for part in self._parts:
            if not part:
                continue
            if part.startswith("[") or not text:
                text += part
            else:
                text += "." + part
        return text

    def prefix(self, part: str) -> None:
        """Add an enclosing field name (used while the error propagates up)."""
        self._parts.insert(0, part)

    def __str__(self) -> str:
        where = f" in {self.path}" if self.path else ""
        return f"{self.reason} at offset {self.offset}{where}"

    def __reduce__(self):  # picklable (Spark workers)
        return (DecodeError, (self.offset, self._parts, self.reason))


class EncodeError(ValueError):
    """A value cannot be encoded (wrong type, out of range)."""


class Short(Exception):
    """Internal: a length points past the end of the buffer."""


def uuid_from(raw: bytes) -> uuid.UUID:
    """Build a UUID from 16 bytes without the argument checks of UUID()."""
    value = _UUID_NEW(uuid.UUID)
    _SET(value, "int", int.from_bytes(raw, "big"))
    _SET(value, "is_safe", _SAFE_UNKNOWN)
    return value


# ---------------------------------------------------------------- varints

def varint_reader(max_bytes: int = 5, minimal: bool = True, zigzag: bool = False,
                  short: type[Exception] | None = None, too_long: type[Exception] = ValueError,
                  too_long_text: str = "varint too long") -> Callable[..., tuple[int, int]]:
    """kdissect's one varint reader, made for a kind of field: LEB128 of at
    most `max_bytes` bytes -> (value, next position), zigzag-decoded when
    `zigzag`. An over-long encoding raises `too_long(too_long_text)`; a
    non-minimal one (a last byte 0 after others) ValueError when `minimal`;
    running past the end IndexError, or `short("varint")` when given. Each
    kind gets its own function (its options bound in the closure), so no
    reader pays a wrapper's call: message fields use `read_uvarint`,
    record fields (records/wire.py) a lenient zigzag one."""

    def read(buf: Any, pos: int, max_bytes: int = max_bytes, minimal: bool = minimal) -> tuple[int, int]:
        result = 0
        shift = 0
        start = pos
        try:
            while True:
                byte = buf[pos]
                pos += 1
                result |= (byte & 0x7F) << shift
                if byte < 0x80:
                    if byte == 0 and pos - start > 1 and minimal:
                        raise ValueError("non-minimal varint")
                    return ((result >> 1) ^ -(result & 1) if zigzag else result), pos
                shift += 7
                if pos - start >= max_bytes:
                    raise too_long(too_long_text)
        except IndexError:
            if short is None:
                raise
            raise short("varint") from None

    return read


# message fields: unsigned, at most 5 bytes (or max_bytes), minimal encodings only
read_uvarint = varint_reader()


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Zigzag signed 32-bit varint."""
    raw, pos = read_uvarint(buf, pos, 5)
    if raw > 0xFFFFFFFF:
        raise ValueError("varint out of range")
    return (raw >> 1) ^ -(raw & 1), pos


def read_varlong(buf: bytes, pos: int) -> tuple[int, int]:
    """Zigzag signed 64-bit varint."""
    raw, pos = read_uvarint(buf, pos, 10)
    if raw > 0xFFFFFFFFFFFFFFFF:
        raise ValueError("varlong out of range")
    return (raw >> 1) ^ -(raw & 1), pos


def write_uvarint(value: int) -> bytes:
    if value < 0:
        raise EncodeError(f"unsigned varint cannot hold {value}")
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def write_varint(value: int) -> bytes:
    return write_uvarint((value << 1) ^ (value >> 31))


def write_varlong(value: int) -> bytes:
    return write_uvarint((value << 1) ^ (value >> 63))


# ------------------------------------------------------- length-prefixed reads

def read_len16(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """int16 length; returns (-1 | n, pos after the length)."""
    (n,) = INT16.unpack_from(buf, pos)
    pos += 2
    if n < 0:
        if n != -1:
            raise ValueError(f"negative length {n}")
    elif pos + n > end:
        raise Short(f"length {n} exceeds the {end - pos} bytes left")
    return n, pos


def read_len32(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    (n,) = INT32.unpack_from(buf, pos)
    pos += 4
    if n < 0:
        if n != -1:
            raise ValueError(f"negative length {n}")
    elif pos + n > end:
        raise Short(f"length {n} exceeds the {end - pos} bytes left")
    return n, pos


def read_compact_len(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """Compact length (uvarint n+1, 0 = null); returns (-1 | n, pos)."""
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = read_uvarint(buf, pos)
    n -= 1
    if n > end - pos:
        raise Short(f"length {n} exceeds the {end - pos} bytes left")
    return n, pos


def read_count32(buf: bytes, pos: int, end: int, min_size: int) -> tuple[int, int]:
    """int32 array count, bounded by what the remaining bytes can hold."""
    (n,) = INT32.unpack_from(buf, pos)
    pos += 4
    if n < 0:
        if n != -1:
            raise ValueError(f"negative array count {n}")
    elif n * (min_size or 1) > end - pos:
        raise Short(f"array count {n} exceeds the {end - pos} bytes left")
    return n, pos


def read_compact_count(buf: bytes, pos: int, end: int, min_size: int) -> tuple[int, int]:
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = read_uvarint(buf, pos)
    n -= 1
    if n > 0 and n * (min_size or 1) > end - pos:
        raise Short(f"array count {n} exceeds the {end - pos} bytes left")
    return n, pos


def read_string(buf: bytes, pos: int, end: int) -> tuple[str | None, int]:
    n, pos = read_len16(buf, pos, end)
    if n < 0:
        return None, pos
    return str(buf[pos:pos + n], "utf-8", "surrogateescape"), pos + n


def read_compact_string(buf: bytes, pos: int, end: int) -> tuple[str | None, int]:
    n, pos = read_compact_len(buf, pos, end)
    if n < 0:
        return None, pos
    return str(buf[pos:pos + n], "utf-8", "surrogateescape"), pos + n


def read_bytes(buf: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    n, pos = read_len32(buf, pos, end)
    if n < 0:
        return None, pos
    return buf[pos:pos + n], pos + n


def read_compact_bytes(buf: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    n, pos = read_compact_len(buf, pos, end)
    if n < 0:
        return None, pos
    return buf[pos:pos + n], pos + n


def read_bool(buf: bytes, pos: int) -> bool:
    byte = buf[pos]
    if byte > 1:
        raise ValueError(f"bool byte {byte} is not 0 or 1")
    return byte == 1


def read_uuid(buf: bytes, pos: int) -> tuple[uuid.UUID, int]:
    raw = buf[pos:pos + 16]
    if len(raw) != 16:
        raise Short("uuid truncated")
    return uuid_from(raw), pos + 16


# ------------------------------------------------------------------- arrays

def read_array_count(buf: bytes, pos: int, end: int, flexible: bool, min_size: int = 1) -> tuple[int, int]:
    """An array count (-1 for null): compact in flexible versions, else int32;
    bounded by what the remaining bytes can hold at min_size bytes each."""
    if flexible:
        return read_compact_count(buf, pos, end, min_size)
    return read_count32(buf, pos, end, min_size)


def read_array(buf: bytes, pos: int, end: int, count: int, reader: Callable) -> tuple[list, int]:
    """`count` values read one after the other by reader(buf, pos, end)."""
    values = []
    for _ in range(count):
        value, pos = reader(buf, pos, end)
        values.append(value)
    return values, pos


def skip_array(buf: bytes, pos: int, end: int, count: int, reader: Callable) -> int:
    """read_array's checks, keeping nothing: the position after the values."""
    for _ in range(count):
        pos = reader(buf, pos, end)[1]
    return pos


def read_fixed_array(buf: bytes, pos: int, count: int, code: str, size: int, kind: str) -> tuple[list, int]:
    """`count` fixed-width values (struct code `code`, `size` bytes each) whose
    bytes are known to be there; bools must be 0 or 1, uuids become UUIDs."""
    values: list[Any]
    if kind == "uuid":
        values = [uuid_from(buf[pos + i * 16:pos + i * 16 + 16]) for i in range(count)]
    else:
        values = list(struct.unpack_from(f">{count}{code}", buf, pos))
        if kind == "bool":
            if any(v > 1 for v in values):
                raise ValueError("bool byte is not 0 or 1")
            values = [v == 1 for v in values]
    return values, pos + count * size


# ------------------------------------------------------------ tagged fields

def read_tag_header(buf: bytes, pos: int, end: int) -> tuple[int, int, int]:
    """One tagged field's (tag, size, pos of payload)."""
    tag = buf[pos]
    if tag < 0x80:
        pos += 1
    else:
        tag, pos = read_uvarint(buf, pos)
    size = buf[pos]
    if size < 0x80:
        pos += 1
    else:
        size, pos = read_uvarint(buf, pos)
    if size > end - pos:
        raise Short(f"tagged field size {size} exceeds the {end - pos} bytes left")
    return tag, size, pos


def read_tag_section(buf: bytes, pos: int, end: int, known: Mapping[int, tuple[str, Callable]],
                     errors: Any = None, records: Any = None, keep: bool = True) -> Any:
    """A tagged-field section whose known tags are read by
    ``known[tag] = (attr, reader)``: ``reader(buf, pos, stop, errors, records)``
    returns ``(value, pos)``, or only the position when keep is False (the
    skim's readers, which add error codes and record sets to `errors` and
    `records` instead).

    Returns ``(values, unknown, order, pos)``: ``(attr, value)`` of the known
    tags, ``(tag, raw bytes)`` of the others, every tag in arrival order; with
    keep=False only the position (the same checks, nothing kept). A known
    tag must not repeat and its value must fill exactly its declared size;
    unknown tags are kept as they are (they may repeat).
    """
    count = buf[pos]
    if count < 0x80:
        pos += 1
    else:
        count, pos = read_uvarint(buf, pos)
    if count > end - pos:
        raise Short(f"tag count {count} exceeds the {end - pos} bytes left")
    if keep:
        values: list[tuple[str, Any]] = []
        unknown: list[tuple[int, bytes]] = []
        order: list[int] = []
    seen: tuple[int, ...] = ()
    for _ in range(count):
        start = pos
        tag, size, pos = read_tag_header(buf, pos, end)
        stop = pos + size
        entry = known.get(tag)
        if entry is not None:
            if tag in seen:
                raise DecodeError(start, entry[0], f"tag {tag} repeated")
            seen += (tag,)
            if keep:
                value, used = entry[1](buf, pos, stop, errors, records)
                values.append((entry[0], value))
            else:
                used = entry[1](buf, pos, stop, errors, records)
            if used != stop:
                raise DecodeError(pos, entry[0], f"tagged field is {size} bytes but its value used {used - pos}")
        elif keep:
            unknown.append((tag, buf[pos:stop]))
        if keep:
            order.append(tag)
        pos = stop
    return (values, unknown, order, pos) if keep else pos


def read_unknown_tags(buf: bytes, pos: int, end: int) -> tuple[list[tuple[int, bytes]], int]:
    """A tagged-field section kept entirely raw (headers)."""
    count = buf[pos]
    if count < 0x80:
        pos += 1
    else:
        count, pos = read_uvarint(buf, pos)
    if count > end - pos:
        raise Short(f"tag count {count} exceeds the {end - pos} bytes left")
    tags = []
    for _ in range(count):
        tag, size, pos = read_tag_header(buf, pos, end)
        tags.append((tag, buf[pos:pos + size]))
        pos += size
    return tags, pos


# ------------------------------------------------------------------ writers

def len16(value: str | None) -> bytes:
    if value is None:
        return b"\xff\xff"
    raw = value.encode("utf-8", "surrogateescape")
    return INT16.pack(len(raw)) + raw


def compact_str(value: str | None) -> bytes:
    if value is None:
        return b"\x00"
    raw = value.encode("utf-8", "surrogateescape")
    return write_uvarint(len(raw) + 1) + raw


def as_bytes(value: Any) -> bytes:
    """Bytes of a bytes-typed field value (bytes-like)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise EncodeError(f"expected bytes, got {type(value).__name__}")


def len32_bytes(value: Any) -> bytes:
    if value is None:
        return b"\xff\xff\xff\xff"
    raw = as_bytes(value)
    return INT32.pack(len(raw)) + raw


def compact_bytes(value: Any) -> bytes:
    if value is None:
        return b"\x00"
    raw = as_bytes(value)
    return write_uvarint(len(raw) + 1) + raw


def write_array_count(values: Sized | None, flexible: bool) -> bytes:
    """An array's count (None for null): compact in flexible versions, else int32."""
    if values is None:
        return b"\x00" if flexible else b"\xff\xff\xff\xff"
    return write_uvarint(len(values) + 1) if flexible else INT32.pack(len(values))


def write_unknown_tags(tags: Any) -> bytes:
    out = bytearray(write_uvarint(len(tags)))
    for tag, payload in tags:
        out += write_uvarint(tag)
        out += write_uvarint(len(payload))
        out += payload
    return bytes(out)
