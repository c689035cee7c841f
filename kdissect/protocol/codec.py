"""Straight-line decoders and encoders for every Kafka message version.

For each (api key, version, direction) the codec writes Python source for one
decoder and one encoder per struct of that message version, compiles it once
on first use and caches it. The generated code reads fields in wire order
with precompiled ``struct`` layouts (consecutive fixed-width fields are read
with one unpack), slices strings and bytes after checking their length
against the bytes that remain, and stores values straight into slotted
objects: no per-field dictionary lookups on the hot path.

Public:
    decode_request(frame) -> Request
    decode_response(frame, api_key, api_version) -> Response
    encode_request(api_key, api_version, correlation_id, client_id, body, tagged_fields=()) -> bytes
    encode_response(api_key, api_version, correlation_id, body, tagged_fields=()) -> bytes
    new_body(api_key, api_version, direction, **values) -> Struct (defaults from the spec)
    DecodeError (the only exception decoding raises)

Frames exclude the 4-byte size prefix, on input and output.
"""

from __future__ import annotations

import struct
from functools import lru_cache
from typing import Any, Callable, Iterator, Mapping, Sequence

from kdissect.protocol import primitives as prim
from kdissect.protocol.codecache import compile_cached
from kdissect.protocol.model import (
    ConsumerProtocolData,
    Request,
    RequestHeader,
    Response,
    ResponseHeader,
    Struct,
)
from kdissect.protocol.headers import read_request_header_layout, read_response_header
from kdissect.protocol.primitives import DecodeError, EncodeError
from kdissect.protocol.schema import (
    FieldSchema,
    MessageSchema,
    embedded_schema,
    get_schema,
    header_versions,
    resolve_version,
)

__all__ = [
    "DecodeError", "EncodeError", "Request", "Response", "Struct",
    "decode_request", "decode_response", "encode_request", "encode_response",
    "new_body", "body_class", "MessageCodec", "message_codec",
]

# type -> (struct code for decoding, code for encoding, size)
_FIXED = {
    "int8": ("b", "b", 1), "int16": ("h", "h", 2), "uint16": ("H", "H", 2),
    "int32": ("i", "i", 4), "uint32": ("I", "I", 4), "int64": ("q", "q", 8),
    "float64": ("d", "d", 8), "bool": ("B", "?", 1), "uuid": ("16s", "16s", 16),
}
API_VERSIONS = 18
_CORRELATION = prim.INT32.unpack_from
UNSUPPORTED_VERSION = 35


def _fail(problem: Exception, offset: int, path: str) -> DecodeError:
    if isinstance(problem, (struct.error, IndexError)):
        reason = "truncated"
    else:
        reason = str(problem) or type(problem).__name__
    return DecodeError(offset, path, reason)


def _read_tags(b: bytes, p: int, end: int, obj: Struct, known: Mapping[int, tuple[str, Callable]]) -> int:
    """Decode a tagged-field section into obj (known tags by name, others raw)."""
    count = b[p]
    if count < 0x80:
        p += 1
    else:
        count, p = prim.read_uvarint(b, p)
    if count > end - p:
        raise prim.Short(f"tag count {count} exceeds the {end - p} bytes left")
    unknown = []
    order = []
    seen = set()
    for _ in range(count):
        start = p
        tag, size, p = prim.read_tag_header(b, p, end)
        stop = p + size
        entry = known.get(tag)
        if entry is None:
            unknown.append((tag, b[p:stop]))
        else:
            if tag in seen:
                raise DecodeError(start, entry[0], f"tag {tag} repeated")
            seen.add(tag)
            value, q = entry[1](b, p, stop)
            if q != stop:
                raise DecodeError(p, entry[0], f"tagged field is {size} bytes but its value used {q - p}")
            setattr(obj, entry[0], value)
        order.append(tag)
        p = stop
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


def _read_fixed_array(b: bytes, p: int, n: int, code: str, size: int, kind: str) -> tuple[list, int]:
    if kind == "uuid":
        values = [prim.uuid_from(b[p + i * 16:p + i * 16 + 16]) for i in range(n)]
    else:
        values = list(struct.unpack_from(f">{n}{code}", b, p))
        if kind == "bool":
            if any(v > 1 for v in values):
                raise ValueError("bool byte is not 0 or 1")
            values = [v == 1 for v in values]
    return values, p + n * size


def _read_var_array(b: bytes, p: int, end: int, n: int, reader: Callable) -> tuple[list, int]:
    values = []
    for _ in range(n):
        value, p = reader(b, p, end)
        values.append(value)
    return values, p


def _write_fixed_array(values: list, code: str, kind: str) -> bytes:
    if kind == "uuid":
        return b"".join(v.bytes for v in values)
    return struct.pack(f">{len(values)}{code}", *values)


_STRUCT_CACHE: dict[str, struct.Struct] = {}


def _layout(fmt: str) -> struct.Struct:
    layout = _STRUCT_CACHE.get(fmt)
    if layout is None:
        layout = _STRUCT_CACHE[fmt] = struct.Struct(fmt)
    return layout


class _Source:
    """Accumulates generated source and the objects it refers to."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.lines: list[str] = []
        self.ns: dict[str, Any] = {
            "_new": object.__new__,
            "_str": str,
            "_uvar": prim.read_uvarint,
            "_I16": prim.INT16.unpack_from,
            "_I32": prim.INT32.unpack_from,
            "_P16": prim.INT16.pack,
            "_P32": prim.INT32.pack,
            "_uvw": prim.write_uvarint,
            "_Short": prim.Short,
            "_DecodeError": DecodeError,
            "_EncodeError": EncodeError,
            "_fail": _fail,
            "_uuid": prim.uuid_from,
            "_rbytes": prim.read_bytes,
            "_rcbytes": prim.read_compact_bytes,
            "_rstr": prim.read_string,
            "_rcstr": prim.read_compact_string,
            "_wstr": prim.len16,
            "_wcstr": prim.compact_str,
            "_wbytes": prim.len32_bytes,
            "_wcbytes": prim.compact_bytes,
            "_rtags": _read_tags,
            "_wtags": _write_tags,
            "_rfix": _read_fixed_array,
            "_unpack": struct.unpack_from,
            "_rvar": _read_var_array,
            "_wfix": _write_fixed_array,
        }
        self.counter = 0

    def name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def add(self, obj: Any, prefix: str = "_k") -> str:
        key = self.name(prefix)
        self.ns[key] = obj
        return key


class _StructCode:
    def __init__(self, cls: type, decoder: str, encoder: str, min_size: int) -> None:
        self.cls = cls
        self.decoder = decoder
        self.encoder = encoder
        self.min_size = min_size


def _element_reader(kind: str, flexible: bool) -> str:
    """Name, in generated code, of the primitive reading one string or bytes
    element of an array (compact in flexible versions)."""
    if kind == "string":
        return "_rcstr" if flexible else "_rstr"
    return "_rcbytes" if flexible else "_rbytes"


def _field_runs(fields: Sequence[FieldSchema], groupable: Callable[[FieldSchema], bool]
                ) -> Iterator[tuple[int, list[FieldSchema], bool]]:
    """(index of the first field, fields, grouped): each run of consecutive
    groupable fields together, every other field alone, in order."""
    index = 0
    while index < len(fields):
        if groupable(fields[index]):
            end = index + 1
            while end < len(fields) and groupable(fields[end]):
                end += 1
            yield index, list(fields[index:end]), True
            index = end
        else:
            yield index, [fields[index]], False
            index += 1


def _min_size(f: FieldSchema, flexible: bool, nested: _StructCode | None) -> int:
    if f.tagged:
        return 0
    if f.is_array:
        return 1 if flexible else 4
    if f.is_struct:
        return 1 if f.nullable else nested.min_size  # type: ignore[union-attr]
    if f.element in _FIXED:
        return _FIXED[f.element][2]
    if f.element == "string":
        return 1 if flexible else 2
    return 1 if flexible else 4  # bytes, records


class _Generator:
    """Writes decoder/encoder source for the structs of one message version."""

    def __init__(self, label: str, origin: tuple = ()) -> None:
        self.src = _Source(label)
        self.origin = origin  # how to find the codec again (for pickling)

    # ------------------------------------------------------------- structs
    def struct(self, fields: tuple[FieldSchema, ...], flexible: bool, class_name: str,
               secrets: frozenset[str] = frozenset(), path: tuple[str, ...] = ()) -> _StructCode:
        nested: dict[str, _StructCode] = {}
        for f in fields:
            if f.is_struct:
                nested[f.attr] = self.struct(f.fields, flexible, f.struct_name or f.name,  # type: ignore[arg-type]
                                             path=path + (f.attr,))
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
        cls = type(class_name, (Struct,), {
            "__slots__": slots,
            "_fields": attrs,
            "_defaults": tuple(defaults),
            "_secrets": frozenset(f.attr for f in fields if f.secret) | secrets,
            "_schema": fields,
            "_message": self.src.label,
            "_origin": (self.origin, path),
            "__module__": "kdissect.protocol.generated_structs",
        })
        if flexible:
            base_init = Struct.__init__

            def __init__(self: Struct, **values: Any) -> None:
                self._tag_order = None
                self.unknown_tagged_fields = []
                base_init(self, **values)

            cls.__init__ = __init__  # type: ignore[misc]
        cls._nested = {attr: code.cls for attr, code in nested.items()}
        cls_key = self.src.add(cls, "_C")
        min_size = sum(_min_size(f, flexible, nested.get(f.attr)) for f in fields) + (1 if flexible else 0)
        code = _StructCode(cls, "", "", min_size)
        code.decoder = self._decoder(fields, flexible, cls_key, nested)
        code.encoder = self._encoder(fields, flexible, nested)
        return code

    # ------------------------------------------------------------- decoding
    def _decoder(self, fields: tuple[FieldSchema, ...], flexible: bool, cls_key: str,
                 nested: dict[str, _StructCode]) -> str:
        fn = self.src.name("_d")
        plain = [f for f in fields if not f.tagged]
        tagged = [f for f in fields if f.tagged]
        paths = [f.attr for f in plain] + [""]
        arrays = frozenset(i for i, f in enumerate(plain) if f.is_array)
        paths_key = self.src.add(tuple(paths), "_path")
        arrays_key = self.src.add(arrays, "_arr")
        body: list[str] = [f"o = _new({cls_key})"]
        for index, group, grouped in _field_runs(plain, self._groupable):
            body.append(f"_f = {index}")
            if grouped:
                body += self._decode_group(group)
            else:
                f = group[0]
                body += self._decode_field(f, f"o.{f.attr}", flexible, nested.get(f.attr), "L")
        if flexible:
            body.append(f"_f = {len(plain)}")
            known = {}
            for f in tagged:
                if f.is_array:
                    body.append(f"o.{f.attr} = {'None' if f.default is None else '[]'}")
                elif f.is_struct:
                    body.append(f"o.{f.attr} = None")
                else:
                    body.append(f"o.{f.attr} = {self.src.add(f.default, '_dv')}")
                known[f.tag] = (f.attr, self._tag_decoder(f, flexible, nested.get(f.attr)))
            known_key = self.src.add(known, "_tags")
            body += [
                "if b[p] == 0:",
                "    p += 1",
                "    o.unknown_tagged_fields = ()",
                "    o._tag_order = None",
                "else:",
                f"    p = _rtags(b, p, L, o, {known_key})",
            ]
        lines = [f"def {fn}(b, p, L):", "    _f = 0", "    _i = -1", "    try:"]
        lines += ["        " + line for line in body]
        lines += [
            "    except _DecodeError as e:",
            f"        e.prefix({paths_key}[_f] + ('[%d]' % _i if _f in {arrays_key} and _i >= 0 else ''))",
            "        raise",
            "    except Exception as e:",
            f"        raise _fail(e, p, {paths_key}[_f]) from None",
            "    return o, p",
            "",
        ]
        self.src.lines += lines
        return fn

    @staticmethod
    def _groupable(f: FieldSchema) -> bool:
        return not f.is_array and not f.is_struct and f.element in _FIXED

    def _decode_group(self, group: list[FieldSchema]) -> list[str]:
        fmt = ">" + "".join(_FIXED[f.element][0] for f in group)
        size = sum(_FIXED[f.element][2] for f in group)
        layout = self.src.add(_layout(fmt).unpack_from, "_S")
        simple = all(f.element not in ("bool", "uuid") for f in group)
        if simple:
            targets = ", ".join(f"o.{f.attr}" for f in group)
            return [f"{targets}, = {layout}(b, p)", f"p += {size}"]
        temps = [f"_g{i}" for i in range(len(group))]
        lines = [f"{', '.join(temps)}, = {layout}(b, p)"]
        for temp, f in zip(temps, group):
            if f.element == "bool":
                lines += [f"if {temp} > 1: raise ValueError('bool byte %d is not 0 or 1' % {temp})",
                          f"o.{f.attr} = {temp} == 1"]
            elif f.element == "uuid":
                lines.append(f"o.{f.attr} = _uuid({temp})")
            else:
                lines.append(f"o.{f.attr} = {temp}")
        lines.append(f"p += {size}")
        return lines

    def _decode_field(self, f: FieldSchema, target: str, flexible: bool, nested: _StructCode | None,
                      end: str) -> list[str]:
        if f.is_array:
            return self._decode_array(f, target, flexible, nested, end)
        if f.is_struct:
            assert nested is not None
            if f.nullable:
                return [
                    "_m = b[p]",
                    "p += 1",
                    "if _m == 255:",
                    f"    {target} = None",
                    "elif _m == 1:",
                    f"    {target}, p = {nested.decoder}(b, p, {end})",
                    "else:",
                    "    raise ValueError('bad presence byte %d for a nullable struct' % _m)",
                ]
            return [f"{target}, p = {nested.decoder}(b, p, {end})"]
        kind = f.element
        if kind in _FIXED:
            return self._decode_group_single(f, target)
        if kind == "string":
            if flexible:
                return [
                    "_n = b[p]",
                    "if _n < 128:",
                    "    p += 1",
                    "else:",
                    "    _n, p = _uvar(b, p)",
                    "if _n == 0:",
                    f"    {target} = None",
                    "else:",
                    "    _e = p + _n - 1",
                    f"    if _e > {end}: raise _Short('string length %d exceeds the %d bytes left' % (_n - 1, {end} - p))",
                    f"    {target} = _str(b[p:_e], 'utf-8', 'surrogateescape')",
                    "    p = _e",
                ]
            return [
                "_n, = _I16(b, p)",
                "p += 2",
                "if _n < 0:",
                "    if _n != -1: raise ValueError('negative string length %d' % _n)",
                f"    {target} = None",
                "else:",
                "    _e = p + _n",
                f"    if _e > {end}: raise _Short('string length %d exceeds the %d bytes left' % (_n, {end} - p))",
                f"    {target} = _str(b[p:_e], 'utf-8', 'surrogateescape')",
                "    p = _e",
            ]
        # bytes and records stay raw bytes
        return [f"{target}, p = {'_rcbytes' if flexible else '_rbytes'}(b, p, {end})"]

    def _decode_group_single(self, f: FieldSchema, target: str) -> list[str]:
        code, _enc, size = _FIXED[f.element]
        layout = self.src.add(_layout(">" + code).unpack_from, "_S")
        if f.element == "bool":
            return [f"_g0 = b[p]", "if _g0 > 1: raise ValueError('bool byte %d is not 0 or 1' % _g0)",
                    f"{target} = _g0 == 1", "p += 1"]
        if f.element == "uuid":
            return [f"if p + 16 > len(b): raise _Short('uuid truncated')", f"{target} = _uuid(b[p:p + 16])", "p += 16"]
        return [f"{target}, = {layout}(b, p)", f"p += {size}"]

    def _decode_array(self, f: FieldSchema, target: str, flexible: bool, nested: _StructCode | None,
                      end: str) -> list[str]:
        kind = f.element
        if nested is not None:
            min_size = nested.min_size
        elif kind in _FIXED:
            min_size = _FIXED[kind][2]
        elif kind == "string":
            min_size = 1 if flexible else 2
        else:
            min_size = 1 if flexible else 4
        lines = ["_i = -1"]
        if flexible:
            lines += [
                "_n = b[p]",
                "if _n < 128:",
                "    p += 1",
                "else:",
                "    _n, p = _uvar(b, p)",
                "_n -= 1",
            ]
        else:
            lines += [
                "_n, = _I32(b, p)",
                "p += 4",
                "if _n < -1: raise ValueError('negative array count %d' % _n)",
            ]
        lines += [
            "if _n < 0:",
            f"    {target} = None",
            "else:",
            f"    if _n * {max(min_size, 1)} > {end} - p: "
            f"raise _Short('array count %d exceeds the %d bytes left' % (_n, {end} - p))",
        ]
        if nested is not None:
            lines += [
                "    _l = []",
                "    _ap = _l.append",
                "    for _i in range(_n):",
                f"        _x, p = {nested.decoder}(b, p, {end})",
                "        _ap(_x)",
                f"    {target} = _l",
            ]
        elif kind in _FIXED and kind not in ("bool", "uuid"):
            code, _enc, size = _FIXED[kind]
            lines += [f"    {target} = list(_unpack('>%d{code}' % _n, b, p)) if _n else []",
                      f"    p += _n * {size}"]
        elif kind in _FIXED:
            code, _enc, size = _FIXED[kind]
            lines.append(f"    {target}, p = _rfix(b, p, _n, {code!r}, {size}, {kind!r})")
        else:
            lines.append(f"    {target}, p = _rvar(b, p, {end}, _n, {_element_reader(kind, flexible)})")
        return lines

    def _tag_decoder(self, f: FieldSchema, flexible: bool, nested: _StructCode | None) -> Callable:
        fn = self.src.name("_t")
        lines = [f"def {fn}(b, p, L):", "    _i = -1", "    try:"]
        lines += ["        " + line for line in self._decode_field(f, "_v", flexible, nested, "L")]
        lines += [
            "    except _DecodeError as e:",
            f"        e.prefix({f.attr!r})",
            "        raise",
            "    except Exception as e:",
            f"        raise _fail(e, p, {f.attr!r}) from None",
            "    return _v, p",
            "",
        ]
        self.src.lines += lines
        return fn  # resolved to the function after exec (see _Generator.finish)

    # ------------------------------------------------------------- encoding
    def _encoder(self, fields: tuple[FieldSchema, ...], flexible: bool, nested: dict[str, _StructCode]) -> str:
        fn = self.src.name("_w")
        plain = [f for f in fields if not f.tagged]
        tagged = [f for f in fields if f.tagged]
        body: list[str] = []
        index = 0
        while index < len(plain):
            f = plain[index]
            if self._groupable(f):
                group = [f]
                while index + len(group) < len(plain) and self._groupable(plain[index + len(group)]):
                    group.append(plain[index + len(group)])
                fmt = ">" + "".join(_FIXED[g.element][1] for g in group)
                layout = self.src.add(_layout(fmt).pack, "_W")
                args = ", ".join(f"o.{g.attr}.bytes" if g.element == "uuid" else f"o.{g.attr}" for g in group)
                body += [f"_at = {group[0].attr!r}", f"out += {layout}({args})"]
                index += len(group)
                continue
            body.append(f"_at = {f.attr!r}")
            body += self._encode_field(f, f"o.{f.attr}", flexible, nested.get(f.attr))
            index += 1
        if flexible:
            known = []
            for f in tagged:
                enc_fn = self._tag_encoder(f, flexible, nested.get(f.attr))
                if f.is_array:
                    default: Any = None if f.default is None else []
                else:
                    default = None if f.is_struct else f.default
                known.append((f.tag, f.attr, enc_fn, default))
            known_key = self.src.add(tuple(known), "_tenc")
            body += ["_at = 'tagged fields'",
                     "if o._tag_order is None and not o.unknown_tagged_fields and "
                     + (" and ".join(f"o.{f.attr} == {self.src.add(d, '_dv')}" for (_t, _a, _e, d), f in zip(known, tagged)) or "True")
                     + ":",
                     "    out.append(0)",
                     "else:",
                     f"    _wtags(o, out, {known_key})"]
        lines = [f"def {fn}(o, out):", "    _at = ''", "    try:"]
        lines += ["        " + line for line in (body or ["pass"])]
        lines += [
            "    except _EncodeError as e:",
            "        raise _EncodeError(_at + '.' + str(e)) from None",
            "    except Exception as e:",
            "        raise _EncodeError('%s: %s' % (_at, e)) from None",
            "",
        ]
        self.src.lines += lines
        return fn

    def _encode_field(self, f: FieldSchema, value: str, flexible: bool, nested: _StructCode | None) -> list[str]:
        if f.is_array:
            null_marker = repr(b"\x00" if flexible else b"\xff\xff\xff\xff")
            lines = [f"_a = {value}", "if _a is None:", f"    out += {null_marker}", "else:"]
            lines.append("    out += _uvw(len(_a) + 1)" if flexible else "    out += _P32(len(_a))")
            kind = f.element
            if nested is not None:
                lines += ["    for _x in _a:", f"        {nested.encoder}(_x, out)"]
            elif kind in _FIXED:
                lines.append(f"    out += _wfix(_a, {_FIXED[kind][1]!r}, {kind!r})")
            else:
                if kind == "string":
                    writer = "_wcstr" if flexible else "_wstr"
                else:
                    writer = "_wcbytes" if flexible else "_wbytes"
                lines += ["    for _x in _a:", f"        out += {writer}(_x)"]
            return lines
        if f.is_struct:
            assert nested is not None
            if f.nullable:
                return [f"_s = {value}", "if _s is None:", "    out.append(255)", "else:", "    out.append(1)",
                        f"    {nested.encoder}(_s, out)"]
            return [f"{nested.encoder}({value}, out)"]
        kind = f.element
        if kind in _FIXED:
            layout = self.src.add(_layout(">" + _FIXED[kind][1]).pack, "_W")
            arg = f"{value}.bytes" if kind == "uuid" else value
            return [f"out += {layout}({arg})"]
        if kind == "string":
            return [f"out += {'_wcstr' if flexible else '_wstr'}({value})"]
        return [f"out += {'_wcbytes' if flexible else '_wbytes'}({value})"]

    def _tag_encoder(self, f: FieldSchema, flexible: bool, nested: _StructCode | None) -> str:
        fn = self.src.name("_u")
        lines = [f"def {fn}(v):", "    out = bytearray()"]
        lines += ["    " + line for line in self._encode_field(f, "v", flexible, nested)]
        lines += ["    return bytes(out)", ""]
        self.src.lines += lines
        return fn

    # ------------------------------------------------------------- finish
    def finish(self) -> dict[str, Any]:
        source = "\n".join(self.src.lines)
        ns = self.src.ns
        exec(compile_cached(source, f"<kdissect codec {self.src.label}>"), ns)  # noqa: S102
        # tag tables were filled with function names before the functions existed
        for key, value in list(ns.items()):
            if key.startswith("_tags") and isinstance(value, dict):
                for tag, (attr, fn_name) in list(value.items()):
                    value[tag] = (attr, ns[fn_name])
            elif key.startswith("_tenc") and isinstance(value, tuple):
                ns[key] = tuple((tag, attr, ns[enc], default) for tag, attr, enc, default in value)
        return ns


class MessageCodec:
    """Compiled decoder/encoder of one message version (body only)."""

    __slots__ = ("schema", "cls", "_decode", "_encode", "source")

    def __init__(self, schema: MessageSchema, label: str, origin: tuple = ()) -> None:
        gen = _Generator(label, origin)
        top = gen.struct(schema.fields, schema.flexible, schema.name)
        ns = gen.finish()
        self.schema = schema
        self.cls = top.cls
        self._decode = ns[top.decoder]
        self._encode = ns[top.encoder]
        self.source = "\n".join(gen.src.lines)

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

    def encode_into(self, body: Struct, out: bytearray) -> None:
        if not isinstance(body, self.cls):
            body = build(self.cls, body)
        self._encode(body, out)


@lru_cache(maxsize=None)
def message_codec(api_key: int, version: int, direction: str) -> MessageCodec:
    """Codec of a defined (api key, version, direction); KeyError if undefined."""
    schema = get_schema(api_key, version, direction)
    return MessageCodec(schema, f"{schema.name} v{version}", ("message", api_key, version, direction))


@lru_cache(maxsize=None)
def embedded_codec(name: str, version: int) -> MessageCodec:
    schema = embedded_schema(name, version)
    return MessageCodec(schema, f"{name} v{version}", ("embedded", name, version))


def struct_class(origin: tuple, path: tuple[str, ...]) -> type:
    """The struct class of a codec (origin as stored on classes) at a field path."""
    if origin[0] == "message":
        cls = message_codec(origin[1], origin[2], origin[3]).cls
    else:
        cls = embedded_codec(origin[1], origin[2]).cls
    for attr in path:
        cls = cls._nested[attr]
    return cls


def body_class(api_key: int, api_version: int, direction: str) -> type:
    return message_codec(api_key, api_version, direction).cls


def build(cls: type, values: Any) -> Struct:
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
            nested_cls = _nested_class(cls, f)
            value = [build(nested_cls, v) for v in value] if f.is_array else build(nested_cls, value)
        converted[key] = value
    return cls(**converted)


def _nested_class(cls: type, f: FieldSchema) -> type:
    return cls._nested[f.attr]


def new_body(api_key: int, api_version: int, direction: str, **values: Any) -> Struct:
    """A message body with spec defaults, overridden by `values` (nested dicts allowed)."""
    codec = message_codec(api_key, api_version, direction)
    return build(codec.cls, values)


# ----------------------------------------------------------------- public API

def _as_bytes(frame: Any) -> bytes:
    if type(frame) is bytes:
        return frame
    try:
        return bytes(frame)
    except Exception:
        raise DecodeError(0, "", f"cannot read a frame from {type(frame).__name__}") from None


def decode_request(frame: bytes) -> Request:
    """Decode one request frame (without its 4-byte size prefix)."""
    buf = frame if type(frame) is bytes else _as_bytes(frame)
    header, pos, layout = read_request_header_layout(buf)
    end = len(buf)
    try:
        body, pos = _request_decoder(header.api_key, layout[1])(buf, pos, end)
    except DecodeError:
        raise
    except Exception as problem:  # RecursionError / MemoryError: generated code converts the rest
        raise DecodeError(pos, "", f"{type(problem).__name__}: {problem}") from None
    if pos != end:
        raise DecodeError(pos, "", f"{end - pos} bytes left over after the last field")
    if header.api_key in _EMBEDDED_APIS:
        from kdissect.protocol.consumer import decode_embedded

        decode_embedded(header.api_key, "request", body)
    return Request(header, body, layout[1], layout[2])


@lru_cache(maxsize=None)
def _request_decoder(api_key: int, body_version: int) -> Callable:
    return message_codec(api_key, body_version, "request")._decode


@lru_cache(maxsize=None)
def _response_plan(api_key: int, api_version: int) -> tuple[MessageCodec, int, int, str | None]:
    """(codec, header version, body version, assumed problem); KeyError if unknown."""
    body_version, assumed = resolve_version(api_key, api_version, "response")
    codec = message_codec(api_key, body_version, "response")
    header_version = header_versions(api_key, body_version, codec.schema.flexible)[1]
    return codec, header_version, body_version, assumed


def decode_response(frame: bytes, api_key: int, api_version: int) -> Response:
    """Decode one response frame given the api key and version of its request."""
    buf = frame if type(frame) is bytes else _as_bytes(frame)
    try:
        codec, header_version, body_version, assumed = _response_plan(api_key, api_version)
    except KeyError as problem:
        raise DecodeError(0, "", str(problem.args[0]) if problem.args else "unknown version") from None
    except (TypeError, ValueError) as problem:
        raise DecodeError(0, "", f"bad api key/version: {problem}") from None
    end = len(buf)
    if header_version == 0 and end >= 4:
        header = ResponseHeader(_CORRELATION(buf, 0)[0], [], 0)
        pos = 4
    else:
        header, pos = read_response_header(buf, header_version)
    if api_key == API_VERSIONS and body_version > 0 and end - pos >= 2 and \
            prim.INT16.unpack_from(buf, pos)[0] == UNSUPPORTED_VERSION:
        # The broker answers an unsupported ApiVersions version with a v0 body.
        try:
            body, stop = message_codec(API_VERSIONS, 0, "response").decode(buf, pos, end)
            if stop == end:
                return Response(api_key, api_version, header, body, 0,
                                f"ApiVersions v{api_version} response with UNSUPPORTED_VERSION is laid out as v0")
        except DecodeError:
            pass
    try:
        body, pos = codec._decode(buf, pos, end)
    except DecodeError:
        raise
    except Exception as problem:
        raise DecodeError(pos, "", f"{type(problem).__name__}: {problem}") from None
    if pos != end:
        raise DecodeError(pos, "", f"{end - pos} bytes left over after the last field")
    if api_key in _EMBEDDED_APIS:
        from kdissect.protocol.consumer import decode_embedded

        decode_embedded(api_key, "response", body)
    return Response(api_key, api_version, header, body, body_version, assumed)


_EMBEDDED_APIS = frozenset({11, 14, 15})  # JoinGroup, SyncGroup, DescribeGroups


def encode_request_parts(header: RequestHeader, body: Any, body_version: int | None = None) -> bytes:
    from kdissect.protocol.headers import write_request_header

    version = header.api_version if body_version is None else body_version
    codec = message_codec(header.api_key, version, "request")
    out = bytearray(write_request_header(header, codec.schema.flexible))
    codec.encode_into(body, out)
    return bytes(out)


def encode_response_parts(api_key: int, header: ResponseHeader, body: Any, body_version: int) -> bytes:
    codec = message_codec(api_key, body_version, "response")
    header_version = header_versions(api_key, body_version, codec.schema.flexible)[1]
    out = bytearray(prim.INT32.pack(header.correlation_id))
    if header_version >= 1:
        out += prim.write_unknown_tags(header.tagged_fields)
    codec.encode_into(body, out)
    return bytes(out)


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                   body: Any, tagged_fields: Any = ()) -> bytes:
    """Encode a request frame (no size prefix); body is a Struct or a mapping."""
    header = RequestHeader(api_key, api_version, correlation_id, client_id, list(tagged_fields))
    return encode_request_parts(header, body)


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Any,
                    tagged_fields: Any = ()) -> bytes:
    """Encode a response frame (no size prefix); body is a Struct or a mapping."""
    header = ResponseHeader(correlation_id, list(tagged_fields))
    return encode_response_parts(api_key, header, body, api_version)


def frame_with_size(frame: bytes) -> bytes:
    """Prefix a frame with its int32 size, as it travels on the wire."""
    return prim.INT32.pack(len(frame)) + frame


__all__ += ["ConsumerProtocolData", "frame_with_size", "embedded_codec", "build"]
