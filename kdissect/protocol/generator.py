"""The one generator of message code: Python source written from a resolved
schema (`schema.MessageSchema`), compiled once per message version.

Reading is a single walk over the fields (`ReadWalk`) that writes every
check once: lengths and counts against the bytes left, minimal varints,
-1 as the only negative length, bool bytes 0/1, presence bytes of nullable
structs, tagged-field sections (`primitives.read_tag_section`). What happens
to each value is decided by an emit strategy (`EmitStrategy`); there are two:

- build objects (`objects.BuildObjects`, the codec): one function per
  struct, every value stored into a slotted object, errors turned into
  `DecodeError(offset, field path)`;
- collect the row's figures (`skim_code.CollectFigures`, the skim): nested
  structs inlined into one function per frame, only the values an exchange
  row needs kept in locals (header values, throttle time, error codes, record
  sets), everything else stepped over with the same checks. Its busiest
  layouts are written ahead of time, typed for mypyc (`EmitStrategy.native`),
  into a module that is compiled (`Source.tag_table_lines` writes their tag
  tables as literals).

Because both run the same walk, the skim accepts exactly the frames the
codec accepts (tests/protocol/test_skim.py checks it on random, mutated and captured
frames). Writing (`WriteWalk`) is the codec's third output.

The generated source is compiled through `codecache` (a marshal cache on
disk) under the file name ``<kdissect {kind} {label}>``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from kdissect.protocol import primitives as prim
from kdissect.protocol.codecache import compile_cached
from kdissect.protocol.schema import FieldSchema

__all__ = [
    "FIXED", "EmitStrategy", "Level", "ReadWalk", "Source", "WriteWalk",
    "field_runs", "indent", "is_fixed", "struct_min_size",
]

# type -> (struct code for reading, struct code for writing, size in bytes)
FIXED = {
    "int8": ("b", "b", 1), "int16": ("h", "h", 2), "uint16": ("H", "H", 2),
    "int32": ("i", "i", 4), "uint32": ("I", "I", 4), "int64": ("q", "q", 8),
    "float64": ("d", "d", 8), "bool": ("B", "?", 1), "uuid": ("16s", "16s", 16),
}

_LAYOUTS: dict[str, struct.Struct] = {}


def layout(fmt: str) -> struct.Struct:
    found = _LAYOUTS.get(fmt)
    if found is None:
        found = _LAYOUTS[fmt] = struct.Struct(fmt)
    return found


def is_fixed(f: FieldSchema) -> bool:
    """A fixed-width scalar (read with struct, grouped with its neighbours)."""
    return not f.is_array and not f.is_struct and f.element in FIXED


def field_runs(fields: Sequence[FieldSchema], groupable: Callable[[FieldSchema], bool] = is_fixed
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


def field_min_size(f: FieldSchema, flexible: bool) -> int:
    """The fewest bytes a field takes on the wire (bounds array counts)."""
    if f.tagged:
        return 0
    if f.is_array:
        return 1 if flexible else 4
    if f.is_struct:
        return 1 if f.nullable else struct_min_size(f.fields, flexible)  # type: ignore[arg-type]
    if f.element in FIXED:
        return FIXED[f.element][2]
    if f.element == "string":
        return 1 if flexible else 2
    return 1 if flexible else 4  # bytes, records


def struct_min_size(fields: Sequence[FieldSchema], flexible: bool) -> int:
    return sum(field_min_size(f, flexible) for f in fields) + (1 if flexible else 0)


def element_min_size(f: FieldSchema, flexible: bool) -> int:
    """The fewest bytes one element of array f takes."""
    if f.is_struct:
        return struct_min_size(f.fields, flexible)  # type: ignore[arg-type]
    if f.element in FIXED:
        return FIXED[f.element][2]
    if f.element == "string":
        return 1 if flexible else 2
    return 1 if flexible else 4


def element_reader(kind: str, flexible: bool) -> str:
    """Name, in generated code, of the primitive reading one string or bytes
    element of an array (compact in flexible versions)."""
    if kind == "string":
        return "_rcstr" if flexible else "_rstr"
    return "_rcbytes" if flexible else "_rbytes"


def native_reader(kind: str) -> str:
    """Name of the reader of a fixed-width integer in code written ahead of
    time (`EmitStrategy.native`): fn(b, p) -> int, IndexError past the end."""
    if kind not in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
        raise NotImplementedError(f"no native reader of {kind}")
    return f"_{kind}"


def indent(lines: list[str], by: str = "    ") -> list[str]:
    return [by + line for line in lines]


def _write_fixed_array(values: list, code: str, kind: str) -> bytes:
    if kind == "uuid":
        return b"".join(v.bytes for v in values)
    return struct.pack(f">{len(values)}{code}", *values)


# names every generated function can use
_NAMESPACE: dict[str, Any] = {
    "_new": object.__new__,
    "_str": str,
    "_uvar": prim.read_uvarint,
    "_I16": prim.INT16.unpack_from,
    "_I32": prim.INT32.unpack_from,
    "_P32": prim.INT32.pack,
    "_uvw": prim.write_uvarint,
    "_Short": prim.Short,
    "_DecodeError": prim.DecodeError,
    "_EncodeError": prim.EncodeError,
    "_uuid": prim.uuid_from,
    "_unpack": struct.unpack_from,
    "_rstr": prim.read_string,
    "_rcstr": prim.read_compact_string,
    "_rbytes": prim.read_bytes,
    "_rcbytes": prim.read_compact_bytes,
    "_rvar": prim.read_array,
    "_svar": prim.skip_array,
    "_rfix": prim.read_fixed_array,
    "_rtags": prim.read_tag_section,
    "_wstr": prim.len16,
    "_wcstr": prim.compact_str,
    "_wfix": _write_fixed_array,
}


class Source:
    """Generated lines and the namespace they run in.

    Tag tables refer to the functions reading (or writing) tagged values by
    name; the names become the functions once the source is compiled.
    """

    def __init__(self, kind: str, label: str, namespace: dict[str, Any] | None = None, stem: str = "") -> None:
        self.kind = kind  # "codec" or "skim": part of the compiled file name
        self.label = label  # e.g. "ProduceRequest v9"
        self.stem = stem  # in every name: sources written into one module stay apart
        self.lines: list[str] = []
        self.ns: dict[str, Any] = dict(_NAMESPACE)
        if namespace:
            self.ns.update(namespace)
        self._base = set(self.ns)  # the names every source has (not written by this one)
        self.counter = 0
        self._tag_tables: list[tuple[str, dict]] = []
        self._encoder_tables: list[str] = []

    def name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.stem}{self.counter}"

    def add(self, obj: Any, prefix: str = "_k") -> str:
        """Put obj in the namespace; returns its name."""
        key = self.name(prefix)
        self.ns[key] = obj
        return key

    def tag_table(self, table: dict[int, tuple[str, str]]) -> str:
        """Readers of tagged values: {tag: (attr, function name)}."""
        key = self.add(table, "_tags")
        self._tag_tables.append((key, table))
        return key

    def encoder_table(self, table: tuple[tuple[int, str, str, Any], ...]) -> str:
        """Writers of tagged values: ((tag, attr, function name, default), ...)."""
        key = self.add(table, "_tenc")
        self._encoder_tables.append(key)
        return key

    def function(self, signature: str, body: list[str]) -> None:
        self.lines += [f"def {signature}:"] + indent(body or ["pass"]) + [""]

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def tag_table_lines(self, annotation: str) -> list[str]:
        """The tag tables as module-level literals (a source written ahead of
        time, whose namespace holds nothing else: see EmitStrategy.native)."""
        added = set(self.ns) - self._base - {key for key, _table in self._tag_tables}
        if added:
            raise NotImplementedError(f"{self.label}: {sorted(added)} have no literal")
        return [f"{key}: {annotation} = {{{', '.join(f'{tag}: ({attr!r}, {fn})' for tag, (attr, fn) in table.items())}}}"
                for key, table in self._tag_tables]

    def compile(self) -> dict[str, Any]:
        """Run the source (compiled once, then from the disk cache); returns the namespace."""
        exec(compile_cached(self.text, f"<kdissect {self.kind} {self.label}>"), self.ns)  # noqa: S102
        for _key, table in self._tag_tables:
            for tag, (attr, fn_name) in list(table.items()):
                table[tag] = (attr, self.ns[fn_name])
        for key in self._encoder_tables:
            self.ns[key] = tuple((tag, attr, self.ns[fn_name], default) for tag, attr, fn_name, default in self.ns[key])
        return self.ns


class Level:
    """What one emit strategy does at one struct level (see EmitStrategy)."""

    depth = 0  # suffix of the temporaries written at this level
    # keep the field index (`_f`) and array index (`_i`) current, for the
    # path of a DecodeError (see objects._ObjectLevel)
    error_path = False
    no_tag_lines: tuple[str, ...] = ()  # lines when the tagged-field section is empty

    def open(self) -> list[str]:
        """Lines before the first field."""
        return []

    def target(self, f: FieldSchema) -> str | None:
        """Where f's value goes (an expression to assign), None to step over it."""
        return None

    def after(self, f: FieldSchema, target: str) -> list[str]:
        """Lines once f's value is in target."""
        return []

    def tags(self, table: str) -> list[str]:
        """Lines reading a non-empty tagged-field section (table: tag -> (attr, reader))."""
        raise NotImplementedError

    def close(self) -> list[str]:
        """Lines after the last field."""
        return []


class EmitStrategy:
    """What the read walk does with values. Subclasses: objects.BuildObjects,
    skim_code.CollectFigures."""

    uuid_objects = True  # uuid values as uuid.UUID (else the raw 16 bytes)
    # written ahead of time for mypyc: integers read by the module's own
    # readers (`_int16(b, p)`, `_uvar`), strings by bytes.decode, no struct
    # layouts in the namespace, so every value has a type the compiler knows
    native = False

    def struct_value(self, walk: ReadWalk, f: FieldSchema, flexible: bool, level: Level,
                     target: str | None) -> list[str]:
        """Lines reading a (present) struct value of field f."""
        raise NotImplementedError

    def struct_elements(self, walk: ReadWalk, f: FieldSchema, flexible: bool, level: Level,
                        target: str | None, count: str) -> list[str]:
        """Lines reading `count` (a local) struct elements of array f."""
        raise NotImplementedError

    def tag_level(self, f: FieldSchema, level: Level) -> Level:
        """The level of a function reading tagged field f's value."""
        raise NotImplementedError

    def tag_function(self, f: FieldSchema, body: list[str], level: Level) -> list[str]:
        """The body of that function around the lines reading the value."""
        return body

    def tag_signature(self, name: str) -> str:
        """The signature of a function reading a tagged value."""
        return f"{name}(b, p, L, e, r)"


class ReadWalk:
    """Writes the lines reading structs for one emit strategy."""

    def __init__(self, source: Source, strategy: EmitStrategy) -> None:
        self.src = source
        self.strategy = strategy

    def struct(self, fields: Sequence[FieldSchema], flexible: bool, level: Level) -> list[str]:
        """Lines reading one struct's fields at the position `p`."""
        plain = [f for f in fields if not f.tagged]
        lines = level.open()
        paths = level.error_path
        for index, group, grouped in field_runs(plain):
            if paths:
                lines.append(f"_f = {index}")
            if grouped:
                lines += self.fixed(group, level)
            else:
                lines += self.value(group[0], flexible, level)
        if flexible:
            if paths:
                lines.append(f"_f = {len(plain)}")
            lines += self.tag_section([f for f in fields if f.tagged], flexible, level)
        return lines + level.close()

    def value(self, f: FieldSchema, flexible: bool, level: Level) -> list[str]:
        """Lines reading one field that is not grouped with others (or the value
        of a tagged field)."""
        target = level.target(f)
        if is_fixed(f):
            if target is None or self.strategy.native:
                return self._fixed_some([f], [target]) + ([] if target is None else level.after(f, target))
            return self._fixed_one(f, target) + level.after(f, target)
        if f.is_array:
            lines = self.array(f, flexible, level, target)
        elif f.is_struct:
            lines = self.struct_field(f, flexible, level, target)
        else:
            lines = self.length_prefixed(f, flexible, level.depth, target)
        if target is not None:
            lines += level.after(f, target)
        return lines

    # ----------------------------------------------------- fixed-width fields
    def fixed(self, group: list[FieldSchema], level: Level) -> list[str]:
        """Consecutive fixed-width fields: one unpack when every value is kept,
        else each kept value read at its offset and the rest stepped over (a
        position past the end is rejected by whatever reads next: the position
        only grows, and the frame ends with the leftover-bytes check)."""
        targets = [level.target(f) for f in group]
        if all(t is not None for t in targets) and not self.strategy.native:
            lines = self._fixed_all(group, targets)  # type: ignore[arg-type]
        else:
            lines = self._fixed_some(group, targets)
        after = [line for f, target in zip(group, targets) if target is not None for line in level.after(f, target)]
        return lines[:-1] + after + lines[-1:]  # the last line moves p past the group

    def _uuid_value(self, raw: str) -> str:
        return f"_uuid({raw})" if self.strategy.uuid_objects else raw

    def _fixed_one(self, f: FieldSchema, target: str) -> list[str]:
        code, _write, size = FIXED[f.element]
        if f.element == "bool":
            return ["_g0 = b[p]", "if _g0 > 1: raise ValueError('bool byte %d is not 0 or 1' % _g0)",
                    f"{target} = _g0 == 1", "p += 1"]
        if f.element == "uuid":
            return ["if p + 16 > len(b): raise _Short('uuid truncated')",
                    f"{target} = {self._uuid_value('b[p:p + 16]')}", "p += 16"]
        reader = self.src.add(layout(">" + code).unpack_from, "_S")
        return [f"{target}, = {reader}(b, p)", f"p += {size}"]

    def _fixed_all(self, group: list[FieldSchema], targets: list[str]) -> list[str]:
        fmt = ">" + "".join(FIXED[f.element][0] for f in group)
        size = sum(FIXED[f.element][2] for f in group)
        reader = self.src.add(layout(fmt).unpack_from, "_S")
        if all(f.element not in ("bool", "uuid") for f in group):
            return [f"{', '.join(targets)}, = {reader}(b, p)", f"p += {size}"]
        temps = [f"_g{i}" for i in range(len(group))]
        lines = [f"{', '.join(temps)}, = {reader}(b, p)"]
        for temp, f, target in zip(temps, group, targets):
            if f.element == "bool":
                lines += [f"if {temp} > 1: raise ValueError('bool byte %d is not 0 or 1' % {temp})",
                          f"{target} = {temp} == 1"]
            elif f.element == "uuid":
                lines.append(f"{target} = {self._uuid_value(temp)}")
            else:
                lines.append(f"{target} = {temp}")
        return lines + [f"p += {size}"]

    def _fixed_some(self, group: list[FieldSchema], targets: list[str | None]) -> list[str]:
        lines = []
        offset = 0
        for f, target in zip(group, targets):
            at = f"p + {offset}" if offset else "p"
            if f.element == "bool":
                lines.append(f"if b[{at}] > 1: raise ValueError('bool byte %d is not 0 or 1' % b[{at}])")
            if target is not None:
                if f.element == "bool":
                    lines.append(f"{target} = b[{at}] == 1")
                elif f.element == "uuid":
                    lines += [f"_g0 = b[{at}:{at} + 16]", "if len(_g0) != 16: raise _Short('uuid truncated')",
                              f"{target} = {self._uuid_value('_g0')}"]
                elif self.strategy.native:
                    lines.append(f"{target} = {native_reader(f.element)}(b, {at})")
                else:
                    reader = self.src.add(layout(">" + FIXED[f.element][0]).unpack_from, "_S")
                    lines.append(f"{target} = {reader}(b, {at})[0]")
            offset += FIXED[f.element][2]
        return lines + [f"p += {offset}"]

    # ------------------------------------------------- strings, bytes, records
    def length_prefixed(self, f: FieldSchema, flexible: bool, d: int, target: str | None) -> list[str]:
        """A string (int16 length) or bytes/records (int32 length) value, null
        allowed; compact (varint length + 1, 0 = null) in flexible versions.
        Strings are decoded as UTF-8 with surrogateescape (which cannot fail);
        bytes stay a slice of the frame. A string's errors point after its
        length, a bytes value's at its start (as primitives.read_bytes)."""
        n, e = f"_n{d}", f"_e{d}"
        native = self.strategy.native
        if f.element == "string":
            text = f"b[p:{e}].decode('utf-8', 'surrogateescape')" if native else f"_str(b[p:{e}], 'utf-8', 'surrogateescape')"
            keep = [f"    {target} = {text}"] if target else []
            null = [f"    {target} = None"] if target else []
            if flexible:
                return [f"{n} = b[p]", f"if {n} < 128:", "    p += 1", "else:", f"    {n}, p = _uvar(b, p)",
                        f"if {n}:", f"    {e} = p + {n} - 1",
                        f"    if {e} > L: raise _Short('string length %d exceeds the %d bytes left' % ({n} - 1, L - p))",
                        *keep, f"    p = {e}", *(["else:", *null] if target else [])]
            return [f"{n} = _int16(b, p)" if native else f"{n}, = _I16(b, p)", "p += 2", f"if {n} < 0:",
                    f"    if {n} != -1: raise ValueError('negative string length %d' % {n})", *null,
                    "else:", f"    {e} = p + {n}",
                    f"    if {e} > L: raise _Short('string length %d exceeds the %d bytes left' % ({n}, L - p))",
                    *keep, f"    p = {e}"]
        q = f"_q{d}"  # where the value starts; p stays at the length until it is read
        keep = [f"    {target} = b[{q}:{e}]"] if target else []
        null = [f"    {target} = None"] if target else []
        if flexible:
            return [f"{n} = b[p]", f"if {n} < 128:", f"    {q} = p + 1", "else:", f"    {n}, {q} = _uvar(b, p)",
                    f"if {n}:", f"    {e} = {q} + {n} - 1",
                    f"    if {e} > L: raise _Short('length %d exceeds the %d bytes left' % ({n} - 1, L - {q}))",
                    *keep, f"    p = {e}", "else:", *null, f"    p = {q}"]
        return [f"{n} = _int32(b, p)" if native else f"{n}, = _I32(b, p)", f"if {n} < 0:",
                f"    if {n} != -1: raise ValueError('negative length %d' % {n})", *null, "    p += 4",
                "else:", f"    {q} = p + 4", f"    {e} = {q} + {n}",
                f"    if {e} > L: raise _Short('length %d exceeds the %d bytes left' % ({n}, L - {q}))",
                *keep, f"    p = {e}"]

    # ------------------------------------------------------ structs, arrays
    def struct_field(self, f: FieldSchema, flexible: bool, level: Level, target: str | None) -> list[str]:
        inner = self.strategy.struct_value(self, f, flexible, level, target)
        if not f.nullable:
            return inner
        m = f"_m{level.depth}"
        return [f"{m} = b[p]", "p += 1", f"if {m} == 1:", *indent(inner or ["pass"]),
                f"elif {m} == 255:", f"    {target} = None" if target else "    pass",
                "else:", f"    raise ValueError('bad presence byte %d for a nullable struct' % {m})"]

    def array(self, f: FieldSchema, flexible: bool, level: Level, target: str | None) -> list[str]:
        n = f"_n{level.depth}"
        lines = ["_i = -1"] if level.error_path else []
        if flexible:
            lines += [f"{n} = b[p]", f"if {n} < 128:", "    p += 1", "else:", f"    {n}, p = _uvar(b, p)",
                      f"{n} -= 1"]
        else:
            lines += [f"{n} = _int32(b, p)" if self.strategy.native else f"{n}, = _I32(b, p)", "p += 4",
                      f"if {n} < -1: raise ValueError('negative array count %d' % {n})"]
        if target is not None:
            lines += [f"if {n} < 0:", f"    {target} = None", "else:"]
        else:
            lines.append(f"if {n} >= 0:")
        lines.append(f"    if {n} * {max(element_min_size(f, flexible), 1)} > L - p: "
                     f"raise _Short('array count %d exceeds the %d bytes left' % ({n}, L - p))")
        kind = f.element
        if f.is_struct:
            body = self.strategy.struct_elements(self, f, flexible, level, target, n)
        elif kind in FIXED and kind not in ("bool", "uuid"):
            code, _write, size = FIXED[kind]
            body = [f"{target} = list(_unpack('>%d{code}' % {n}, b, p)) if {n} else []"] if target else []
            body.append(f"p += {n} * {size}")  # within the count check above
        elif kind in FIXED:
            code, _write, size = FIXED[kind]
            read = f"_rfix(b, p, {n}, {code!r}, {size}, {kind!r})"
            body = [f"{target}, p = {read}" if target else f"p = {read}[1]"]
        else:
            reader = element_reader(kind, flexible)
            body = [f"{target}, p = _rvar(b, p, L, {n}, {reader})" if target
                    else f"p = _svar(b, p, L, {n}, {reader})"]
        return lines + indent(body)

    # ------------------------------------------------------- tagged fields
    def tag_section(self, tagged: list[FieldSchema], flexible: bool, level: Level) -> list[str]:
        table = {f.tag: (f.attr, self.tag_function(f, flexible, level)) for f in tagged}
        return ["if b[p] == 0:", "    p += 1", *indent(list(level.no_tag_lines)),
                "else:", *indent(level.tags(self.src.tag_table(table)))]  # type: ignore[arg-type]

    def tag_function(self, f: FieldSchema, flexible: bool, level: Level) -> str:
        """A function reading tagged field f's value: fn(b, p, L, e, r) -> (value, p)
        (e, r: the skim's error codes and record sets, unused by the codec)."""
        name = self.src.name("_t")
        inner = self.strategy.tag_level(f, level)
        body = self.value(f, flexible, inner)
        self.src.function(self.strategy.tag_signature(name), self.strategy.tag_function(f, body, inner))
        return name


class WriteWalk:
    """Writes the encoder of one struct: fn(obj, out: bytearray)."""

    def __init__(self, source: Source) -> None:
        self.src = source

    def encoder(self, fields: Sequence[FieldSchema], flexible: bool, nested: dict[str, str]) -> str:
        """nested: attr -> name of the encoder of struct-typed field attr."""
        fn = self.src.name("_w")
        plain = [f for f in fields if not f.tagged]
        tagged = [f for f in fields if f.tagged]
        body: list[str] = []
        for _index, group, grouped in field_runs(plain):
            if grouped:
                fmt = ">" + "".join(FIXED[g.element][1] for g in group)
                writer = self.src.add(layout(fmt).pack, "_W")
                args = ", ".join(f"o.{g.attr}.bytes" if g.element == "uuid" else f"o.{g.attr}" for g in group)
                body += [f"_at = {group[0].attr!r}", f"out += {writer}({args})"]
            else:
                f = group[0]
                body.append(f"_at = {f.attr!r}")
                body += self.field(f, f"o.{f.attr}", flexible, nested.get(f.attr))
        if flexible:
            known: list[tuple[Any, str, str, Any]] = []  # (tag, attr, encoder, default)
            for f in tagged:
                if f.is_array:
                    default: Any = None if f.default is None else []
                else:
                    default = None if f.is_struct else f.default
                known.append((f.tag, f.attr, self.tag_encoder(f, flexible, nested.get(f.attr)), default))
            table = self.src.encoder_table(tuple(known))
            defaults = " and ".join(f"o.{f.attr} == {self.src.add(entry[3], '_dv')}"
                                    for entry, f in zip(known, tagged)) or "True"
            body += ["_at = 'tagged fields'",
                     f"if o._tag_order is None and not o.unknown_tagged_fields and {defaults}:",
                     "    out.append(0)",
                     "else:",
                     f"    _wtags(o, out, {table})"]
        self.src.function(f"{fn}(o, out)", ["_at = ''", "try:", *indent(body or ["pass"]),
                                            "except _EncodeError as e:",
                                            "    raise _EncodeError(_at + '.' + str(e)) from None",
                                            "except Exception as e:",
                                            "    raise _EncodeError('%s: %s' % (_at, e)) from None"])
        return fn

    def field(self, f: FieldSchema, value: str, flexible: bool, nested: str | None) -> list[str]:
        if f.is_array:
            null_marker = repr(b"\x00" if flexible else b"\xff\xff\xff\xff")
            lines = [f"_a = {value}", "if _a is None:", f"    out += {null_marker}", "else:",
                     "    out += _uvw(len(_a) + 1)" if flexible else "    out += _P32(len(_a))"]
            kind = f.element
            if nested is not None:
                lines += ["    for _x in _a:", f"        {nested}(_x, out)"]
            elif kind in FIXED:
                lines.append(f"    out += _wfix(_a, {FIXED[kind][1]!r}, {kind!r})")
            else:
                lines += ["    for _x in _a:", f"        out += {self._writer(kind, flexible)}(_x)"]
            return lines
        if f.is_struct:
            assert nested is not None
            if f.nullable:
                return [f"_s = {value}", "if _s is None:", "    out.append(255)", "else:", "    out.append(1)",
                        f"    {nested}(_s, out)"]
            return [f"{nested}({value}, out)"]
        kind = f.element
        if kind in FIXED:
            writer = self.src.add(layout(">" + FIXED[kind][1]).pack, "_W")
            return [f"out += {writer}({value}.bytes)" if kind == "uuid" else f"out += {writer}({value})"]
        return [f"out += {self._writer(kind, flexible)}({value})"]

    @staticmethod
    def _writer(kind: str, flexible: bool) -> str:
        if kind == "string":
            return "_wcstr" if flexible else "_wstr"
        return "_wcbytes" if flexible else "_wbytes"  # supplied by the codec (embedded structures)

    def tag_encoder(self, f: FieldSchema, flexible: bool, nested: str | None) -> str:
        fn = self.src.name("_u")
        self.src.function(f"{fn}(v)", ["out = bytearray()", *self.field(f, "v", flexible, nested),
                                       "return bytes(out)"])
        return fn
