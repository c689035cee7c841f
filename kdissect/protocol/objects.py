"""Compiled body codecs: the generator's "build objects" output.

For each (api key, version, direction), and for the consumer-protocol
structures, `message_codec` / `embedded_codec` build one slotted class per
struct (derived from the message's typed class in `_generated`, so
``isinstance(body, ProduceRequest)`` holds) and have the generator write one
decoder and one encoder per struct. The decoders read fields in wire order
(`generator.ReadWalk` with the `BuildObjects` strategy below), grouping
consecutive fixed-width fields into one ``struct`` unpack and storing
straight into ``__slots__``. Errors become ``DecodeError(offset, path)``,
the path built while the exception propagates (``topics[0].partitions[3]``),
so the success path carries no bookkeeping beyond one local store per field.

Public:
    message_codec(api_key, version, direction) -> MessageCodec (.cls, .decode, .encode_into)
    embedded_codec(name, version) -> MessageCodec
    body_class(api_key, version, direction) -> the body's struct class
    build(cls, values) / new_body(api_key, version, direction, **values) -> Struct
    encode_embedded(ConsumerProtocolData) -> bytes (the int16 version, then the data)

Frames (headers included) are `codec.py`'s business.
"""

from __future__ import annotations

import importlib
import struct
from functools import lru_cache
from typing import Any, Callable, Mapping, Sequence

from kdissect.protocol import primitives as prim
from kdissect.protocol._generated.index import APIS
from kdissect.protocol.generator import EmitStrategy, Level, ReadWalk, Source, WriteWalk
from kdissect.protocol.model import ConsumerProtocolData, Struct
from kdissect.protocol.primitives import DecodeError, EncodeError
from kdissect.protocol.schema import FieldSchema, MessageSchema, embedded_schema, embedded_versions, get_schema

__all__ = [
    "BuildObjects", "MessageCodec", "body_class", "build", "embedded_codec", "encode_embedded",
    "message_codec", "new_body", "struct_class", "typed_class",
]

EMBEDDED_NAMES = {"subscription": "ConsumerProtocolSubscription", "assignment": "ConsumerProtocolAssignment"}


def typed_class(api_key: int | None, name: str) -> type:
    """A generated typed class (``ProduceRequest``): in bodies_NNN.py for api
    key NNN, in bodies_embedded.py for the consumer protocol (api_key None).
    Loaded on first use: the tables and the skim do not need them."""
    module = "bodies_embedded" if api_key is None else f"bodies_{api_key:03d}"
    return getattr(importlib.import_module(f"kdissect.protocol._generated.{module}"), name)


# ------------------------------------------------ helpers the generated code calls

def _fail(problem: Exception, offset: int, path: str) -> DecodeError:
    if isinstance(problem, (struct.error, IndexError)):
        reason = "truncated"
    else:
        reason = str(problem) or type(problem).__name__
    return DecodeError(offset, path, reason)


def _store_tags(b: bytes, p: int, end: int, obj: Struct, known: Mapping[int, tuple[str, Callable]]) -> int:
    """A non-empty tagged-field section into obj: known tags by name, the
    others raw, and the arrival order (re-encoding keeps it)."""
    values, unknown, order, p = prim.read_tag_section(b, p, end, known)
    for attr, value in values:
        setattr(obj, attr, value)
    obj.unknown_tagged_fields = unknown
    obj._tag_order = tuple(order)
    return p


def _write_tags(obj: Struct, out: bytearray, known: tuple[tuple[int, str, Callable, Any], ...]) -> None:
    """Write a tagged-field section: the arrival order when decoded, else
    non-default known tags and unknown tags sorted by tag number."""
    unknown = list(obj.unknown_tagged_fields or ())
    order = obj._tag_order
    by_tag = {tag: (attr, enc, default) for tag, attr, enc, default in known}
    items: list[tuple[int, bytes]] = []
    if order is None:
        present = [(tag, None) for tag, attr, _enc, default in known if getattr(obj, attr) != default]
        present += [(tag, raw) for tag, raw in unknown]
        present.sort(key=lambda item: item[0])
        for tag, raw in present:
            items.append((tag, raw if raw is not None else by_tag[tag][1](getattr(obj, by_tag[tag][0]))))
    else:
        pending = list(unknown)
        emitted = set()
        for tag in order:
            entry = by_tag.get(tag)
            if entry is not None:
                items.append((tag, entry[1](getattr(obj, entry[0]))))
                emitted.add(tag)
            else:
                for index, (utag, raw) in enumerate(pending):
                    if utag == tag:
                        items.append((tag, raw))
                        del pending[index]
                        break
        # fields set after decoding, and unknown tags added by the caller
        for tag, attr, _enc, default in known:
            if tag not in emitted and getattr(obj, attr) != default:
                items.append((tag, by_tag[tag][1](getattr(obj, attr))))
        items.extend(pending)
    out += prim.write_uvarint(len(items))
    for tag, raw in items:
        out += prim.write_uvarint(tag)
        out += prim.write_uvarint(len(raw))
        out += raw


def encode_embedded(value: ConsumerProtocolData) -> bytes:
    """The bytes of a consumer-protocol structure: its int16 version, then its data."""
    name = EMBEDDED_NAMES[value.kind]
    _lo, hi = embedded_versions(name)
    out = bytearray(prim.INT16.pack(value.version))
    embedded_codec(name, min(value.version, hi)).encode_into(value.data, out)
    return bytes(out)


def _plain_bytes(value: Any) -> Any:
    """A bytes field's value as bytes: decoded consumer-protocol data writes
    back its original bytes, data built from values is encoded."""
    if isinstance(value, ConsumerProtocolData):
        return value.raw if value.raw is not None else encode_embedded(value)
    return value


def _write_bytes(value: Any) -> bytes:
    return prim.len32_bytes(_plain_bytes(value))


def _write_compact_bytes(value: Any) -> bytes:
    return prim.compact_bytes(_plain_bytes(value))


_NAMESPACE = {"_fail": _fail, "_stags": _store_tags, "_wtags": _write_tags,
              "_wbytes": _write_bytes, "_wcbytes": _write_compact_bytes}


# ------------------------------------------------------------ the strategy

class _ObjectLevel(Level):
    """One struct's decoder function: values go into the object `o`; a
    tagged value's function keeps it in `_v`."""

    error_path = True
    no_tag_lines = ("o.unknown_tagged_fields = ()", "o._tag_order = None")

    def __init__(self, cls_key: str | None, decoders: dict[str, str], tag_defaults: Sequence[str] = ()) -> None:
        self.cls_key = cls_key  # None: the function of a tagged value
        self.decoders = decoders  # attr -> decoder function of a struct-typed field
        self.tag_defaults = tag_defaults  # lines giving the tagged fields their defaults

    def open(self) -> list[str]:
        if self.cls_key is None:
            return []
        return [f"o = _new({self.cls_key})", *self.tag_defaults]

    def target(self, f: FieldSchema) -> str:
        return "_v" if self.cls_key is None else f"o.{f.attr}"

    def tags(self, table: str) -> list[str]:
        return [f"p = _stags(b, p, L, o, {table})"]


class BuildObjects(EmitStrategy):
    """Emit strategy of the codec: every value into slotted objects."""

    uuid_objects = True

    def struct_value(self, walk: ReadWalk, f: FieldSchema, flexible: bool, level: Level,
                     target: str | None) -> list[str]:
        return [f"{target}, p = {level.decoders[f.attr]}(b, p, L)"]  # type: ignore[attr-defined]

    def struct_elements(self, walk: ReadWalk, f: FieldSchema, flexible: bool, level: Level,
                        target: str | None, count: str) -> list[str]:
        decoder = level.decoders[f.attr]  # type: ignore[attr-defined]
        return ["_l = []", "_ap = _l.append", f"for _i in range({count}):", f"    _x, p = {decoder}(b, p, L)",
                "    _ap(_x)", f"{target} = _l"]

    def tag_level(self, f: FieldSchema, level: Level) -> Level:
        return _ObjectLevel(None, level.decoders)  # type: ignore[attr-defined]

    def tag_function(self, f: FieldSchema, body: list[str], level: Level) -> list[str]:
        return ["_i = -1", "try:", *["    " + line for line in body],
                "except _DecodeError as e:", f"    e.prefix({f.attr!r})", "    raise",
                "except Exception as e:", f"    raise _fail(e, p, {f.attr!r}) from None",
                "return _v, p"]


_BUILD_OBJECTS = BuildObjects()


# ------------------------------------------------------------ classes

def _rebuild_struct(origin: tuple, state: list, tags: tuple) -> Struct:
    """Unpickle a struct: find its class again from the codec origin."""
    cls: Any = struct_class(*origin)
    obj = object.__new__(cls)
    for name, value in zip(cls._fields, state):
        object.__setattr__(obj, name, value)
    if "unknown_tagged_fields" in cls.__slots__:
        obj.unknown_tagged_fields, obj._tag_order = tags
    return obj


def _reduce_struct(self: Struct) -> tuple:
    """Pickle by codec origin and field path (the classes are built at run time)."""
    state = [getattr(self, name) for name in self._fields]
    tags = (list(self.unknown_tagged_fields or ()), self._tag_order)
    return (_rebuild_struct, (self._origin, state, tags))


class _StructCode:
    def __init__(self, cls: type, decoder: str, encoder: str) -> None:
        self.cls = cls
        self.decoder = decoder
        self.encoder = encoder


class _Compiler:
    """Classes, decoders and encoders of the structs of one message version."""

    def __init__(self, label: str, origin: tuple) -> None:
        self.src = Source("codec", label, _NAMESPACE)
        self.reader = ReadWalk(self.src, _BUILD_OBJECTS)
        self.writer = WriteWalk(self.src)
        self.origin = origin  # how to find the codec again (for pickling)

    def struct(self, fields: tuple[FieldSchema, ...], flexible: bool, name: str, message: type,
               typed: type, path: tuple[str, ...] = ()) -> _StructCode:
        """message: the typed class of the message (its structs are classes
        inside it); typed: the typed class of this struct."""
        nested = {f.attr: self.struct(f.fields, flexible, f.struct_name or f.name,  # type: ignore[arg-type]
                                      message, getattr(message, f.struct_name), path + (f.attr,))  # type: ignore[arg-type]
                  for f in fields if f.is_struct}
        cls = self._class(fields, flexible, name, typed, path, nested)
        cls_key = self.src.add(cls, "_C")
        code = _StructCode(cls, self._decoder(fields, flexible, cls_key, nested), "")
        code.encoder = self.writer.encoder(fields, flexible, {attr: c.encoder for attr, c in nested.items()})
        return code

    def _class(self, fields: tuple[FieldSchema, ...], flexible: bool, name: str, typed: type,
               path: tuple[str, ...], nested: dict[str, _StructCode]) -> type:
        attrs = tuple(f.attr for f in fields if not f.tagged) + tuple(f.attr for f in fields if f.tagged)
        defaults = []
        for f in fields:
            if f.is_array:
                default: Any = None if f.default is None else list
            elif f.is_struct:
                default = None if (f.nullable or f.tagged) else nested[f.attr].cls
            else:
                default = f.default
            defaults.append((f.attr, default))
        slots = attrs + (("unknown_tagged_fields", "_tag_order") if flexible else ())
        cls: Any = type(name, (typed,), {
            "__slots__": slots,
            "_fields": attrs,
            "_defaults": tuple(defaults),
            "_secrets": frozenset(f.attr for f in fields if f.secret),
            "_schema": fields,
            "_message": self.src.label,
            "_origin": (self.origin, path),
            "__module__": "kdissect.protocol.generated_structs",
            "__reduce__": _reduce_struct,
        })
        if flexible:
            base_init = Struct.__init__

            def __init__(self: Struct, **values: Any) -> None:
                self._tag_order = None
                self.unknown_tagged_fields = []
                base_init(self, **values)

            cls.__init__ = __init__  # type: ignore[misc]
        cls._nested = {attr: code.cls for attr, code in nested.items()}
        return cls

    def _decoder(self, fields: tuple[FieldSchema, ...], flexible: bool, cls_key: str,
                 nested: dict[str, _StructCode]) -> str:
        fn = self.src.name("_d")
        plain = [f for f in fields if not f.tagged]
        paths = self.src.add(tuple(f.attr for f in plain) + ("",), "_path")
        arrays = self.src.add(frozenset(i for i, f in enumerate(plain) if f.is_array), "_arr")
        tag_defaults = []  # tagged fields start at their default
        for f in fields:
            if f.tagged:
                if f.is_array:
                    value = "None" if f.default is None else "[]"
                elif f.is_struct:
                    value = "None"
                else:
                    value = self.src.add(f.default, "_dv")
                tag_defaults.append(f"o.{f.attr} = {value}")
        level = _ObjectLevel(cls_key, {attr: code.decoder for attr, code in nested.items()}, tag_defaults)
        body = self.reader.struct(fields, flexible, level)
        self.src.function(f"{fn}(b, p, L)", [
            "_f = 0", "_i = -1", "try:", *["    " + line for line in body],
            "except _DecodeError as e:",
            f"    e.prefix({paths}[_f] + ('[%d]' % _i if _f in {arrays} and _i >= 0 else ''))",
            "    raise",
            "except Exception as e:",
            f"    raise _fail(e, p, {paths}[_f]) from None",
            "return o, p",
        ])
        return fn


# ------------------------------------------------------------ codecs

class MessageCodec:
    """Compiled decoder/encoder of one message version (body only)."""

    __slots__ = ("schema", "cls", "_decode", "_encode", "source")

    def __init__(self, schema: MessageSchema, label: str, origin: tuple, typed: type) -> None:
        compiler = _Compiler(label, origin)
        top = compiler.struct(schema.fields, schema.flexible, schema.name, typed, typed)
        ns = compiler.src.compile()
        self.schema = schema
        self.cls = top.cls
        self._decode = ns[top.decoder]
        self._encode = ns[top.encoder]
        self.source = compiler.src.text

    def decode(self, buf: bytes, pos: int, end: int) -> tuple[Struct, int]:
        """Decode the body at pos; raises DecodeError only."""
        try:
            return self._decode(buf, pos, end)
        except DecodeError:
            raise
        except RecursionError:
            raise DecodeError(pos, "", "nesting too deep") from None
        except Exception as problem:  # defensive: generated code converts its own
            raise DecodeError(pos, "", f"{type(problem).__name__}: {problem}") from None

    def encode_into(self, body: Any, out: bytearray) -> None:
        """Append the body (a struct of this codec, or a mapping of values) to out."""
        if not isinstance(body, self.cls):
            body = build(self.cls, body)
        self._encode(body, out)


@lru_cache(maxsize=None)
def message_codec(api_key: int, version: int, direction: str) -> MessageCodec:
    """Codec of a defined (api key, version, direction); KeyError if undefined."""
    schema = get_schema(api_key, version, direction)
    return MessageCodec(schema, f"{schema.name} v{version}", ("message", api_key, version, direction),
                        typed_class(api_key, APIS[api_key][0] + direction.title()))


@lru_cache(maxsize=None)
def embedded_codec(name: str, version: int) -> MessageCodec:
    schema = embedded_schema(name, version)
    return MessageCodec(schema, f"{name} v{version}", ("embedded", name, version), typed_class(None, name))


def struct_class(origin: tuple, path: tuple[str, ...]) -> type:
    """The struct class of a codec (origin as stored on classes) at a field path."""
    cls: Any
    if origin[0] == "message":
        cls = message_codec(origin[1], origin[2], origin[3]).cls
    else:
        cls = embedded_codec(origin[1], origin[2]).cls
    for attr in path:
        cls = cls._nested[attr]
    return cls


def body_class(api_key: int, api_version: int, direction: str) -> type:
    return message_codec(api_key, api_version, direction).cls


def build(cls: Any, values: Any) -> Struct:
    """Convert nested mappings/lists into the struct classes of a message."""
    if isinstance(values, cls):
        return values
    if isinstance(values, Struct):
        values = {name: getattr(values, name) for name in values._fields}
    if not isinstance(values, Mapping):
        raise EncodeError(f"{cls.__name__}: expected a mapping of field values, got {type(values).__name__}")
    converted = {}
    by_attr = {f.attr: f for f in cls._schema}
    for key, value in values.items():
        f = by_attr.get(key)
        if f is None:
            if key == "unknown_tagged_fields":
                converted[key] = value
                continue
            raise EncodeError(f"{cls.__name__} has no field {key!r}")
        if f.is_struct and value is not None:
            nested_cls = cls._nested[f.attr]
            value = [build(nested_cls, v) for v in value] if f.is_array else build(nested_cls, value)
        converted[key] = value
    return cls(**converted)


def new_body(api_key: int, api_version: int, direction: str, **values: Any) -> Struct:
    """A message body with spec defaults, overridden by `values` (nested dicts allowed)."""
    return build(message_codec(api_key, api_version, direction).cls, values)
