"""Scapy Field classes for the Kafka wire primitives.

Most Kafka encodings depend on the message version: strings, bytes and
arrays use int16/int32 lengths in old versions and unsigned-varint
("compact") lengths in flexible versions; nullability and tagging also vary
by version. The fields therefore ask the packet they belong to for the
resolved field schema of its current version (`pkt.kafka_field(name)`, see
`kdissect.scapy.layers.KafkaStruct`) and encode accordingly. Values use the
same Python types as the core codec (int, bool, str, bytes, uuid.UUID, lists,
nested packets), with None for null.

Reading and writing use the core's readers and writers
(`kdissect.protocol.primitives`: varints, compact and classic strings,
bytes and array counts, tag sections, uuids, bools), so a field is checked
exactly as the core codec checks it: a length running past the end, a
non-minimal varint or a bool byte other than 0/1 raises.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

from scapy.fields import Field, PacketField, PacketListField
from scapy.packet import Packet

from kdissect.protocol import primitives as prim
from kdissect.protocol.errors import error_name
from kdissect.protocol.apis import api_name

__all__ = [
    "KafkaDecodeError", "UVarIntField", "VarIntField", "VarLongField",
    "KafkaBoolField", "KafkaInt8Field", "KafkaInt16Field", "KafkaUInt16Field", "KafkaInt32Field",
    "KafkaUInt32Field", "KafkaInt64Field", "KafkaFloat64Field", "KafkaUuidField",
    "KafkaStringField", "KafkaBytesField", "KafkaSecretBytesField", "KafkaRecordsField", "KafkaScalarArrayField",
    "KafkaStructArrayField", "KafkaStructField", "KafkaTagSectionField", "KafkaHeaderTagsField",
    "KafkaNullableStringField", "ApiKeyField", "scalar_field_class", "show_secrets",
]


class KafkaDecodeError(ValueError):
    """Bytes that do not decode as the field says (Scapy then shows the layer as Raw)."""


# ------------------------------------------------------------------ varints

def _read(reader: Callable[[bytes, int], tuple[int, int]], s: bytes) -> tuple[bytes, int]:
    """(rest, value) of a varint read by a core reader from the front of s."""
    try:
        value, pos = reader(s, 0)
    except IndexError:
        raise KafkaDecodeError("truncated varint") from None
    except ValueError as problem:
        raise KafkaDecodeError(str(problem)) from None
    return s[pos:], value


class UVarIntField(Field[int, int]):
    """Unsigned LEB128 varint (compact lengths, tag numbers)."""

    def __init__(self, name: str, default: int | None) -> None:
        Field.__init__(self, name, default, fmt="B")

    def addfield(self, pkt: Packet, s: bytes, val: int | None) -> bytes:
        return s + prim.write_uvarint(self.i2m(pkt, val) or 0)

    def getfield(self, pkt: Packet, s: bytes) -> tuple[bytes, int]:
        return _read(prim.read_uvarint, s)


class VarIntField(UVarIntField):
    """Zigzag signed 32-bit varint (record fields)."""

    def addfield(self, pkt: Packet, s: bytes, val: int | None) -> bytes:
        return s + prim.write_varint(self.i2m(pkt, val) or 0)

    def getfield(self, pkt: Packet, s: bytes) -> tuple[bytes, int]:
        return _read(prim.read_varint, s)


class VarLongField(UVarIntField):
    """Zigzag signed 64-bit varint (record fields)."""

    def addfield(self, pkt: Packet, s: bytes, val: int | None) -> bytes:
        return s + prim.write_varlong(self.i2m(pkt, val) or 0)

    def getfield(self, pkt: Packet, s: bytes) -> tuple[bytes, int]:
        return _read(prim.read_varlong, s)


# ------------------------------------------------------------ value fields

class KafkaValueField(Field[Any, Any]):
    """Base of the message-body fields.

    Subclasses implement `encode(pkt, val) -> bytes` and
    `decode(pkt, s) -> (value, rest)`. A field that is tagged in the packet's
    version is not on the wire in place: the struct's tag section
    (`KafkaTagSectionField`) writes and reads it through the same methods.
    """

    def __init__(self, name: str, default: Any) -> None:
        Field.__init__(self, name, default, fmt="B")

    # schema of this field in the packet's current version
    def schema(self, pkt: Packet) -> Any:
        return pkt.kafka_field(self.name)

    def flexible(self, pkt: Packet) -> bool:
        return pkt.kafka_flexible()

    def nullable(self, pkt: Packet) -> bool:
        fs = self.schema(pkt)
        return bool(fs is not None and fs.nullable)

    def encode(self, pkt: Packet, val: Any) -> bytes:
        raise NotImplementedError

    def decode(self, pkt: Packet, s: bytes) -> tuple[Any, bytes]:
        raise NotImplementedError

    def addfield(self, pkt: Packet, s: bytes, val: Any) -> bytes:
        fs = self.schema(pkt)
        if fs is None or fs.tagged:
            return s
        return s + self.encode(pkt, val)

    def getfield(self, pkt: Packet, s: bytes) -> tuple[bytes, Any]:
        fs = self.schema(pkt)
        if fs is None:
            return s, None
        if fs.tagged:  # filled in by the tag section, which comes later
            return s, pkt.fields.get(self.name, self.default)
        try:
            value, rest = self.decode(pkt, s)
        except (IndexError, struct.error):
            raise KafkaDecodeError(f"{self.name}: truncated") from None
        except (prim.Short, ValueError, KafkaDecodeError) as problem:
            raise KafkaDecodeError(f"{self.name}: {problem}") from None
        return rest, value

    def i2len(self, pkt: Packet, x: Any) -> int:
        return len(self.encode(pkt, x))


class _FixedField(KafkaValueField):
    layout = prim.INT32  # the core's precompiled big-endian layouts

    def encode(self, pkt: Packet, val: Any) -> bytes:
        return self.layout.pack(0 if val is None else val)

    def decode(self, pkt: Packet, s: bytes) -> tuple[Any, bytes]:
        (value,) = self.layout.unpack_from(s, 0)
        return value, s[self.layout.size:]


class KafkaInt8Field(_FixedField):
    layout = prim.INT8


class KafkaInt16Field(_FixedField):
    layout = prim.INT16

    def i2repr(self, pkt: Packet | None, x: Any) -> str:
        if self.name.endswith("error_code") and isinstance(x, int):
            return f"{x} ({error_name(x)})"
        return repr(x)


class KafkaUInt16Field(_FixedField):
    layout = prim.UINT16


class KafkaInt32Field(_FixedField):
    layout = prim.INT32


class KafkaUInt32Field(_FixedField):
    layout = prim.UINT32


class KafkaInt64Field(_FixedField):
    layout = prim.INT64


class KafkaFloat64Field(_FixedField):
    layout = prim.FLOAT64


class KafkaBoolField(KafkaValueField):
    def any2i(self, pkt: Packet | None, x: Any) -> Any:
        return None if x is None else bool(x)

    def encode(self, pkt: Packet, val: Any) -> bytes:
        return b"\x01" if val else b"\x00"

    def decode(self, pkt: Packet, s: bytes) -> tuple[Any, bytes]:
        return prim.read_bool(s, 0), s[1:]


class KafkaUuidField(KafkaValueField):
    """16-byte UUID; accepts uuid.UUID, its text form or 16 raw bytes."""

    def any2i(self, pkt: Packet | None, x: Any) -> Any:
        if x is None or isinstance(x, uuid.UUID):
            return x
        if isinstance(x, (bytes, bytearray)) and len(x) == 16:
            return uuid.UUID(bytes=bytes(x))
        return uuid.UUID(str(x))

    def encode(self, pkt: Packet, val: Any) -> bytes:
        return (val or prim.uuid_from(bytes(16))).bytes

    def decode(self, pkt: Packet, s: bytes) -> tuple[Any, bytes]:
        value, pos = prim.read_uuid(s, 0)
        return value, s[pos:]

    def i2repr(self, pkt: Packet | None, x: Any) -> str:
        return str(x)


class KafkaStringField(KafkaValueField):
    """Kafka string: int16 length (-1 = null), or compact in flexible versions."""

    def any2i(self, pkt: Packet | None, x: Any) -> Any:
        if isinstance(x, (bytes, bytearray)):
            return bytes(x).decode("utf-8", "surrogateescape")
        return x

    def encode(self, pkt: Packet, val: Any) -> bytes:
        if val is None and not self.nullable(pkt):
            val = ""
        return prim.compact_str(val) if self.flexible(pkt) else prim.len16(val)

    def decode(self, pkt: Packet, s: bytes) -> tuple[Any, bytes]:
        read = prim.read_compact_string if self.flexible(pkt) else prim.read_string
        value, pos = read(s, 0, len(s))
        if value is None and not self.nullable(pkt):
            raise ValueError("null in a non-nullable string")
        return value, s[pos:]


class KafkaBytesField(KafkaValueField):
    """Kafka bytes: int32 length (-1 = null), or compact in flexible versions."""

    def encode(self, pkt: Packet, val: Any) -> bytes:
        if val is None and not self.nullable(pkt):
            val = b""
        return prim.compact_bytes(val) if self.flexible(pkt) else prim.len32_bytes(val)

    def decode(self, pkt: Packet, s: bytes) -> tuple[Any, bytes]:
        read = prim.read_compact_bytes if self.flexible(pkt) else prim.read_bytes
        value, pos = read(s, 0, len(s))
        return (None if value is None else bytes(value)), s[pos:]

    def i2repr(self, pkt: Packet | None, x: Any) -> str:
        if isinstance(x, (bytes, bytearray)) and len(x) > 48:
            return f"<{len(x)} bytes> {bytes(x[:32])!r}..."
        return repr(x)


_SHOW_SECRETS = [False]


def show_secrets(flag: bool = True) -> None:
    """Show (True) or redact (False, the default) sensitive bytes in show()/repr."""
    _SHOW_SECRETS[0] = bool(flag)


def redacted(x: Any) -> str | None:
    """Placeholder for a secret value, or None when secrets are shown / value is null."""
    if x is None or _SHOW_SECRETS[0]:
        return None
    return f"<redacted {len(x)} bytes>"


class KafkaSecretBytesField(KafkaBytesField):
    """Bytes the spec marks sensitive (SASL auth bytes, token HMACs, SCRAM
    salts and passwords): redacted in show() and repr unless
    `show_secrets(True)`; the value itself is untouched."""

    def i2repr(self, pkt: Packet | None, x: Any) -> str:
        return redacted(x) or KafkaBytesField.i2repr(self, pkt, x)


class KafkaRecordsField(KafkaBytesField):
    """Record batches / message sets, kept raw (parse with kdissect.records)."""


_SCALAR_CLASSES: dict[str, type[KafkaValueField]] = {
    "bool": KafkaBoolField, "int8": KafkaInt8Field, "int16": KafkaInt16Field,
    "uint16": KafkaUInt16Field, "int32": KafkaInt32Field, "uint32": KafkaUInt32Field,
    "int64": KafkaInt64Field, "float64": KafkaFloat64Field, "uuid": KafkaUuidField,
    "string": KafkaStringField, "bytes": KafkaBytesField, "records": KafkaRecordsField,
}


def scalar_field_class(kind: str) -> type[KafkaValueField]:
    return _SCALAR_CLASSES[kind]


def _read_count(flexible: bool, s: bytes) -> tuple[int, bytes]:
    """(-1 for null | count, rest): every element takes at least one byte."""
    count, pos = prim.read_array_count(s, 0, len(s), flexible)
    return count, s[pos:]


class KafkaScalarArrayField(KafkaValueField):
    """Array of a primitive type ([]int32, []string, ...)."""

    __slots__ = ["element"]
    islist = 1

    def __init__(self, name: str, default: Any, kind: str) -> None:
        KafkaValueField.__init__(self, name, default)
        self.element = scalar_field_class(kind)(name, None)

    def encode(self, pkt: Packet, val: Any) -> bytes:
        flexible = self.flexible(pkt)
        if val is None and not self.nullable(pkt):
            val = []
        out = bytearray(prim.write_array_count(val, flexible))
        for item in val or ():
            out += self.element.encode(pkt, item)
        return bytes(out)

    def decode(self, pkt: Packet, s: bytes) -> tuple[Any, bytes]:
        count, s = _read_count(self.flexible(pkt), s)
        if count < 0:
            if not self.nullable(pkt):
                raise ValueError("null in a non-nullable array")
            return None, s
        values = []
        for _ in range(count):
            value, s = self.element.decode(pkt, s)
            values.append(value)
        return values, s

    def i2repr(self, pkt: Packet | None, x: Any) -> str:
        return repr(x)


def _dissect_struct(cls: type[Packet], parent: Packet, s: bytes) -> tuple[Packet, bytes]:
    """Dissect one nested struct from the front of s; returns (packet, rest)."""
    item = cls(_internal=1, _parent=parent)
    rest = item.do_dissect(s)
    return item, rest


def _build_struct(item: Packet, parent: Packet) -> bytes:
    if item.parent is not parent:
        item.add_parent(parent)  # the version comes from the enclosing message
    return bytes(item)


class KafkaStructArrayField(PacketListField):
    """Array of nested structs (each a Packet class named after the spec struct)."""

    def __init__(self, name: str, default: Any, cls: type[Packet]) -> None:
        PacketListField.__init__(self, name, [], cls)
        self.default = default  # keep a null default (PacketListField turns it into [])

    # shared helpers with KafkaValueField (duck-typed by the tag section)
    def schema(self, pkt: Packet) -> Any:
        return pkt.kafka_field(self.name)

    def nullable(self, pkt: Packet) -> bool:
        fs = self.schema(pkt)
        return bool(fs is not None and fs.nullable)

    def encode(self, pkt: Packet, val: Any) -> bytes:
        flexible = pkt.kafka_flexible()
        if val is None and not self.nullable(pkt):
            val = []
        out = bytearray(prim.write_array_count(val, flexible))
        for item in val or ():
            out += _build_struct(item, pkt)
        return bytes(out)

    def decode(self, pkt: Packet, s: bytes) -> tuple[Any, bytes]:
        count, s = _read_count(pkt.kafka_flexible(), s)
        if count < 0:
            if not self.nullable(pkt):
                raise ValueError("null in a non-nullable array")
            return None, s
        items = []
        for _ in range(count):
            item, s = _dissect_struct(self.cls, pkt, s)
            items.append(item)
        return items, s

    addfield = KafkaValueField.addfield
    getfield = KafkaValueField.getfield

    def i2len(self, pkt: Packet, x: Any) -> int:
        return len(self.encode(pkt, x))

    def any2i(self, pkt: Packet | None, x: Any) -> Any:
        if x is None:
            return None
        return PacketListField.any2i(self, pkt, x)


class KafkaStructField(PacketField):
    """A single nested struct; nullable ones carry an int8 presence marker."""

    def __init__(self, name: str, default: Any, cls: type[Packet]) -> None:
        PacketField.__init__(self, name, default, cls)

    schema = KafkaStructArrayField.schema
    nullable = KafkaStructArrayField.nullable

    def encode(self, pkt: Packet, val: Any) -> bytes:
        if self.nullable(pkt):
            if val is None:
                return b"\xff"
            return b"\x01" + _build_struct(val, pkt)
        if val is None:
            val = self.cls()  # spec defaults
        return _build_struct(val, pkt)

    def decode(self, pkt: Packet, s: bytes) -> tuple[Any, bytes]:
        if self.nullable(pkt):
            marker = s[0]
            if marker == 0xFF:
                return None, s[1:]
            if marker != 1:
                raise ValueError(f"bad presence byte {marker} for a nullable struct")
            s = s[1:]
        return _dissect_struct(self.cls, pkt, s)

    addfield = KafkaValueField.addfield
    getfield = KafkaValueField.getfield

    def i2len(self, pkt: Packet, x: Any) -> int:
        return len(self.encode(pkt, x))


def _tag_value_reader(field: Any, pkt: Packet) -> Callable:
    """A tagged value read by its Scapy field, as primitives.read_tag_section calls it."""

    def read(buf: bytes, pos: int, stop: int, _errors: Any, _records: Any) -> tuple[Any, int]:
        try:
            value, rest = field.decode(pkt, bytes(buf[pos:stop]))
        except (IndexError, ValueError, struct.error, prim.Short) as problem:
            raise KafkaDecodeError(f"tagged field {field.name}: {problem or 'truncated'}") from None
        return value, stop - len(rest)

    return read


class KafkaTagSectionField(Field[Any, Any]):
    """The tagged-field section that ends every struct of a flexible version.

    Its own value is the list of unknown tags `[(tag, raw bytes), ...]`.
    Known tagged fields of the version are separate Scapy fields (shown and
    set like any other); this field writes those whose value differs from the
    spec default, sorted by tag together with the unknown ones, and on
    dissection decodes them into their fields.
    """

    islist = 1

    def __init__(self, name: str) -> None:
        Field.__init__(self, name, [], fmt="B")

    def addfield(self, pkt: Packet, s: bytes, val: Any) -> bytes:
        # tags that arrived when this struct was dissected are written again
        # in their order, even at their default value; others only when set
        # to a non-default value, sorted by tag with the unknown ones
        arrived = pkt.__dict__.get("_kafka_tag_order") or ()
        known = {fs.tag: (field, fs) for field, fs in pkt.kafka_tagged_fields()}
        unknown = [(int(tag), bytes(raw)) for tag, raw in (val or ())]
        first: list[tuple[int, bytes]] = []
        for tag in arrived:
            if tag in known:
                field = known.pop(tag)[0]
                first.append((tag, field.encode(pkt, pkt.getfieldval(field.name))))
            else:
                for index, (utag, raw) in enumerate(unknown):
                    if utag == tag:
                        first.append(unknown.pop(index))
                        break
        rest: list[tuple[int, bytes]] = list(unknown)
        for tag, (field, fs) in known.items():
            value = pkt.getfieldval(field.name)
            if value != pkt.kafka_tag_default(fs):
                rest.append((tag, field.encode(pkt, value)))
        rest.sort(key=lambda item: item[0])
        return s + prim.write_unknown_tags(first + rest)

    def getfield(self, pkt: Packet, s: bytes) -> tuple[bytes, Any]:
        # the core's tag-section reader: a known tag must not repeat and its
        # value must fill exactly its declared size
        known = {fs.tag: (field.name, _tag_value_reader(field, pkt)) for field, fs in pkt.kafka_tagged_fields()}
        try:
            values, unknown, order, pos = prim.read_tag_section(s, 0, len(s), known)
        except KafkaDecodeError:
            raise
        except prim.DecodeError as problem:
            raise KafkaDecodeError(f"tagged field {problem.path}: {problem.reason}") from None
        except (IndexError, ValueError, prim.Short) as problem:
            raise KafkaDecodeError(f"tagged fields: {problem or 'truncated'}") from None
        for name, value in values:
            pkt.fields[name] = value
        pkt.__dict__["_kafka_tag_order"] = tuple(order)
        return s[pos:], [(tag, bytes(raw)) for tag, raw in unknown]

    def i2repr(self, pkt: Packet | None, x: Any) -> str:
        return repr(x)


class KafkaHeaderTagsField(Field[Any, Any]):
    """Tagged fields of a request header v2 / response header v1 (kept raw)."""

    islist = 1

    def __init__(self, name: str) -> None:
        Field.__init__(self, name, [], fmt="B")

    def addfield(self, pkt: Packet, s: bytes, val: Any) -> bytes:
        return s + prim.write_unknown_tags([(int(t), bytes(r)) for t, r in (val or ())])

    def getfield(self, pkt: Packet, s: bytes) -> tuple[bytes, Any]:
        try:
            tags, pos = prim.read_unknown_tags(s, 0, len(s))
        except (IndexError, ValueError, prim.Short) as problem:
            raise KafkaDecodeError(f"header tagged fields: {problem or 'truncated'}") from None
        return s[pos:], [(tag, bytes(raw)) for tag, raw in tags]

    def i2repr(self, pkt: Packet | None, x: Any) -> str:
        return repr(x)


class KafkaNullableStringField(Field[Any, Any]):
    """Header client id: always an int16-length string (never compact), -1 = null."""

    def __init__(self, name: str, default: str | None) -> None:
        Field.__init__(self, name, default, fmt="H")

    def any2i(self, pkt: Packet | None, x: Any) -> Any:
        if isinstance(x, (bytes, bytearray)):
            return bytes(x).decode("utf-8", "surrogateescape")
        return x

    def addfield(self, pkt: Packet, s: bytes, val: Any) -> bytes:
        return s + prim.len16(val)

    def getfield(self, pkt: Packet, s: bytes) -> tuple[bytes, Any]:
        try:
            value, pos = prim.read_string(s, 0, len(s))
        except (IndexError, ValueError, struct.error, prim.Short) as problem:
            raise KafkaDecodeError(f"{self.name}: {problem or 'truncated'}") from None
        return s[pos:], value

    def i2len(self, pkt: Packet, x: Any) -> int:
        return len(prim.len16(x))


class ApiKeyField(Field[Any, Any]):
    """int16 api key, shown with its Kafka name."""

    def __init__(self, name: str, default: int | None) -> None:
        Field.__init__(self, name, default, fmt="!h")

    def i2repr(self, pkt: Packet | None, x: Any) -> str:
        if x is None:
            return "None"
        return f"{x} ({api_name(x)})"
