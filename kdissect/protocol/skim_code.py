"""The skim's code: what `kdissect.protocol.skim` runs, written from the schemas.

The skim is the generator's second emit strategy (`CollectFigures`, beside
the codec's `objects.BuildObjects`): for each (api key, version, direction)
the same read walk (`generator.ReadWalk`) writes one straight-line function
per frame layout, header included and nested structs inlined, with the same
length, count, varint, presence-byte, bool and tagged-field checks and the
same leftover-bytes rule, so it accepts exactly the frames the full decoder
accepts. It builds no objects and keeps only:

- error codes: every non-zero int16 field named ``ErrorCode`` /
  ``...ErrorCode`` at any depth, sorted and distinct at the end (what
  `summary.response_figures` collects);
- the top-level values a row uses (``acks`` / ``throttle_time_ms`` and
  ``error_code``);
- record sets ``(topic, partition, raw)`` of Produce requests and Fetch /
  ShareFetch responses (what `records.access.record_figures` finds).

Fixed-width fields nobody needs are stepped over without reading them (see
`generator.ReadWalk.fixed`). Strings are not decoded (the full decoder's
surrogateescape decoding cannot fail), except the client id and topic names,
which rows use.

The code is written two ways, from one walk:

- ahead of time, for the messages of `AHEAD_APIS` (Produce, Fetch,
  ShareFetch: most frames of busy captures), into
  ``_generated/skims.py`` (`ahead_of_time_module`, written by
  tools/gen_skims.py), typed for mypyc (`EmitStrategy.native`), which
  compiles it with the per-packet modules (kdissect/native.py);
- at run time for every other layout, on first use (`compiled_skim`:
  exec of the source, kept in the codec's disk cache).
"""

from __future__ import annotations

import re
import struct as _struct
from collections.abc import Callable, Sequence
from typing import Any

from kdissect.protocol import primitives as prim
from kdissect.protocol.apis import ApiKey, api_name
from kdissect.protocol.generator import EmitStrategy, Level, ReadWalk, Source, indent
from kdissect.protocol.schema import FieldSchema, MessageSchema, defined_versions, get_schema, header_versions
from kdissect.protocol.topics import topic_label

__all__ = ["AHEAD_APIS", "CollectFigures", "ahead_layouts", "ahead_of_time_module", "compiled_skim", "decline",
           "layout_source", "skim_source", "usual_header"]


# Where record sets live: (top-level topics array, partitions array in a
# topic, partition index field, topic name field); records are in "records".
RECORD_PATHS: dict[tuple[int, str], tuple[str, str, str, str]] = {
    (ApiKey.PRODUCE, "request"): ("topic_data", "partition_data", "index", "name"),
    (ApiKey.FETCH, "response"): ("responses", "partitions", "partition_index", "topic"),
    (ApiKey.SHARE_FETCH, "response"): ("responses", "partitions", "partition_index", "topic"),
}


def is_error_code(f: FieldSchema) -> bool:
    """The fields summary.response_figures reads error codes from."""
    return f.element == "int16" and not f.is_array and f.name.endswith("ErrorCode")


class _FigureLevel(Level):
    """One struct level, inlined at nesting depth d. role: "top", "topic",
    "partition" (levels of the record path) or ""."""

    def __init__(self, strategy: CollectFigures, fields: Sequence[FieldSchema], role: str, d: int,
                 top_values: tuple[str, ...] = (), topic_label: str = "None") -> None:
        self.strategy = strategy
        self.role = role
        self.depth = d
        self.topic_label = topic_label  # label expression of the enclosing topic level
        path = strategy.record_path
        wanted: set[str] = set(top_values)
        if role == "partition":
            wanted.update((path[2], "records"))  # type: ignore[index]
        elif role == "topic":
            wanted.update((path[3], "topic_id"))  # type: ignore[index]
        self.kept: dict[str, str] = {}  # attr -> local holding its value
        self._read: set[str] = set()  # assigned whenever the struct is read
        for f in fields:
            scalar = not f.is_array and not f.is_struct
            codes = strategy.codes and scalar and is_error_code(f)  # every error code is read
            if f.tagged:
                if scalar and f.attr in wanted:
                    raise NotImplementedError(f"{strategy.label}: tagged {f.attr} is needed by rows")
                if codes and f.default:
                    raise NotImplementedError(f"{strategy.label}: tagged {f.attr} with a non-zero default")
                continue
            self._read.add(f.attr)
            if scalar and (codes or f.attr in wanted):
                self.kept[f.attr] = f"_v{d}_{f.attr}"
                if f.element == "string":
                    strategy.declare(self.kept[f.attr], "str | None")
        if role == "partition":
            self.kept["records"] = f"_rec{d}"  # stays None when absent
            strategy.declare(f"_rec{d}", "bytes | None")
        if role == "topic":
            self.label = self._label_expression([f for f in fields if not f.tagged])

    def _label_expression(self, plain: list[FieldSchema]) -> str:
        """protocol.topics.topic_label as an expression on this topic level's
        locals; they must be read before the partitions array."""
        path = self.strategy.record_path
        name_attr, parts_attr = path[3], path[1]  # type: ignore[index]
        order = [f.attr for f in plain]
        for attr in (name_attr, "topic_id"):
            if attr in self.kept and (attr not in order or parts_attr not in order
                                      or order.index(attr) > order.index(parts_attr)):
                raise NotImplementedError(f"{self.strategy.label}: {attr} does not precede {parts_attr}")
        name, topic_id = self.kept.get(name_attr), self.kept.get("topic_id")
        if name and topic_id:
            return f"({name} or {self.strategy.topic_id_label(topic_id)})"
        if name:
            return f"({name} or None)"
        if topic_id:
            return self.strategy.topic_id_label(topic_id)
        return "None"

    def open(self) -> list[str]:
        # values this version does not have (records of a partition) are None
        return [f"{local} = None" for attr, local in self.kept.items() if attr not in self._read]

    def target(self, f: FieldSchema) -> str | None:
        return None if f.tagged else self.kept.get(f.attr)

    def after(self, f: FieldSchema, target: str) -> list[str]:
        if self.strategy.codes and is_error_code(f):
            return [f"if {target}: e.append({target})"]
        return []

    def tags(self, table: str) -> list[str]:
        return [self.strategy.tags_line(table)]

    def close(self) -> list[str]:
        if self.role != "partition":
            return []
        # inlined inside its topic's loop: the topic's locals are in scope
        index = self.kept.get(self.strategy.record_path[2], "None")  # type: ignore[index]
        return [f"if _rec{self.depth}:", f"    r.append(({self.topic_label}, {index}, _rec{self.depth}))"]

    def child(self, f: FieldSchema) -> _FigureLevel:
        """The level of struct field f, inlined one deeper."""
        role = ""
        path = self.strategy.record_path
        if path is not None and f.is_array and not f.tagged:
            if self.role == "top" and f.attr == path[0]:
                role = "topic"
            elif self.role == "topic" and f.attr == path[1]:
                role = "partition"
        label = self.label if self.role == "topic" else self.topic_label
        return _FigureLevel(self.strategy, f.fields, role, self.depth + 1, topic_label=label)  # type: ignore[arg-type]


class _TagValueLevel(Level):
    """The function reading a tagged value: nothing kept but error codes."""

    def __init__(self, strategy: CollectFigures, f: FieldSchema) -> None:
        self.strategy = strategy
        self.error_code = strategy.codes and is_error_code(f)

    def target(self, f: FieldSchema) -> str | None:
        return "_c" if self.error_code else None

    def after(self, f: FieldSchema, target: str) -> list[str]:
        return [f"if {target}: e.append({target})"]

    def tags(self, table: str) -> list[str]:
        return [self.strategy.tags_line(table)]

    def child(self, f: FieldSchema) -> _FigureLevel:
        return _FigureLevel(self.strategy, f.fields, "", 1)  # type: ignore[arg-type]


class CollectFigures(EmitStrategy):
    """Emit strategy of the skim: structs inlined, only a row's figures kept.

    Locals: `e` the error codes (responses), `r` the record sets."""

    uuid_objects = False  # a topic id is kept as its 16 bytes (text only when needed)

    def __init__(self, label: str, direction: str, record_path: tuple[str, str, str, str] | None,
                 native: bool = False) -> None:
        self.label = label
        self.codes = direction == "response"
        self.record_path = record_path
        self.native = native
        self.declared: dict[str, str] = {}  # local -> its type, when not obvious (native)

    def declare(self, local: str, annotation: str) -> None:
        self.declared[local] = annotation

    def declarations(self) -> list[str]:
        """Native: the frame function's locals that hold None or a value, typed."""
        return [f"{local}: {kind} = None" for local, kind in self.declared.items()] if self.native else []

    def tags_line(self, table: str) -> str:
        """The line reading a non-empty tagged-field section, nothing kept."""
        if self.native:
            return f"p = _tag_section(b, p, L, {table}, e, r)"
        return f"p = _rtags(b, p, L, {table}, e, r, False)"

    def topic_id_label(self, local: str) -> str:
        """protocol.topics.topic_label of a topic id (16 raw bytes)."""
        return f"_id_label({local})" if self.native else f"_label(None, {local})"

    def tag_signature(self, name: str) -> str:
        if not self.native:
            return f"{name}(b, p, L, e, r)"
        errors = "list[int]" if self.codes else "list[int] | None"
        return f"{name}(b: bytes, p: int, L: int, e: {errors}, r: RecordSets) -> int"

    def struct_value(self, walk: ReadWalk, f: FieldSchema, flexible: bool, level: Level,
                     target: str | None) -> list[str]:
        return walk.struct(f.fields, flexible, level.child(f))  # type: ignore[arg-type, attr-defined]

    def struct_elements(self, walk: ReadWalk, f: FieldSchema, flexible: bool, level: Level,
                        target: str | None, count: str) -> list[str]:
        inner = walk.struct(f.fields, flexible, level.child(f))  # type: ignore[arg-type, attr-defined]
        return [f"for _i{level.depth} in range({count}):", *indent(inner or ["pass"])]

    def tag_level(self, f: FieldSchema, level: Level) -> Level:
        return _TagValueLevel(self, f)

    def tag_function(self, f: FieldSchema, body: list[str], level: Level) -> list[str]:
        return [*body, "return p"]  # nothing kept: primitives.read_tag_section(keep=False)


_NAMESPACE = {"_KVC": _struct.Struct(">hhi").unpack_from, "_rutags": prim.read_unknown_tags, "_set": set,
              "_sorted": sorted, "_label": topic_label}


def _request_frame(src: Source, walk: ReadWalk, schema: MessageSchema, header_version: int) -> str:
    """fn(b) -> (api_key, api_version, correlation_id, client_id,
    expects_response, starts_raw_sasl, record_sets) | None."""
    fn = src.name("_frame")
    strategy: CollectFigures = walk.strategy  # type: ignore[assignment]
    native = strategy.native
    lines = ["L = len(b)", "if L < 8: return None"]
    if native:
        lines += ["_k = _int16(b, 0)", "_ver = _int16(b, 2)", "_cid = _int32(b, 4)", "p = 8",
                  "_cl: str | None = None"]
    else:
        lines += ["_k, _ver, _cid = _KVC(b, 0)", "p = 8", "_cl = None"]
    if header_version >= 1:  # the client id: never a compact string
        client_id = "b[p:p + _n].decode('utf-8', 'surrogateescape')" if native \
            else "_str(b[p:p + _n], 'utf-8', 'surrogateescape')"
        lines += ["if L < 10: return None", "_n = _int16(b, 8)" if native else "_n, = _I16(b, 8)", "p = 10",
                  "if _n >= 0:", "    if p + _n > L: return None", f"    _cl = {client_id}", "    p += _n",
                  "elif _n != -1: return None"]
    if header_version >= 2:
        lines += ["if p < L and b[p] == 0:", "    p += 1", "else:", "    p = _rutags(b, p, L)[1]"]
    lines += ["e: list[int] | None = None", "r: RecordSets = []"] if native else ["e = None", "r = []"]
    top = _FigureLevel(strategy, schema.fields, "top", 0, ("acks",))
    body = walk.struct(schema.fields, schema.flexible, top)
    lines += strategy.declarations() + body
    lines.append("if p != L: return None")
    acks = top.kept.get("acks")
    expects = f"{acks} != 0" if schema.api_key == ApiKey.PRODUCE and acks else "True"
    sasl = "_ver == 0" if schema.api_key == ApiKey.SASL_HANDSHAKE else "False"
    lines.append(f"return _k, _ver, _cid, _cl, {expects}, {sasl}, r")
    src.function(f"{fn}(b: bytes) -> RequestFigures | None" if native else f"{fn}(b)", lines)
    return fn


def _response_frame(src: Source, walk: ReadWalk, schema: MessageSchema, header_version: int) -> str:
    """fn(b, assumed) -> (throttle_time_ms, error_code, error_codes, assumed,
    record_sets) | None."""
    fn = src.name("_frame")
    strategy: CollectFigures = walk.strategy  # type: ignore[assignment]
    native = strategy.native
    lines = ["L = len(b)", "if L < 4: return None"]
    if header_version >= 1:
        lines += ["if b[4] == 0:", "    p = 5", "else:", "    p = _rutags(b, 4, L)[1]"]
    else:
        lines.append("p = 4")
    lines += ["e: list[int] = []", "r: RecordSets = []"] if native else ["e = []", "r = []"]
    top = _FigureLevel(strategy, schema.fields, "top", 0, ("throttle_time_ms", "error_code"))
    body = walk.struct(schema.fields, schema.flexible, top)
    lines += strategy.declarations() + body
    throttle, error_code = top.kept.get("throttle_time_ms", "None"), top.kept.get("error_code", "None")
    lines += ["if p != L: return None", "if e: e = sorted(set(e))" if native else "if e: e = _sorted(_set(e))",
              f"return {throttle}, {error_code}, e, assumed, r"]
    src.function(f"{fn}(b: bytes, assumed: str | None) -> ResponseFigures | None" if native
                 else f"{fn}(b, assumed)", lines)
    return fn


def layout_source(api_key: int, version: int, direction: str, header_version: int, native: bool = False,
                   stem: str = "") -> tuple[Source, str]:
    """(the source, the name of its frame function) of one layout; raises
    NotImplementedError for a layout rows cannot skim."""
    schema = get_schema(api_key, version, direction)
    label = f"{schema.name} v{version} header v{header_version}"
    src = Source("skim", label, _NAMESPACE, stem)
    walk = ReadWalk(src, CollectFigures(label, direction, RECORD_PATHS.get((api_key, direction)), native))
    if direction == "request":
        return src, _request_frame(src, walk, schema, header_version)
    return src, _response_frame(src, walk, schema, header_version)


def compiled_skim(api_key: int, version: int, direction: str, header_version: int) -> Callable[..., Any]:
    """The skim function of one layout, generated and compiled now (once,
    then from the disk cache: see Source.compile); `decline` for a layout
    rows cannot skim. KeyError if the version is undefined."""
    try:
        src, fn = layout_source(api_key, version, direction, header_version)
    except NotImplementedError:  # a layout rows cannot skim: always decode fully
        return decline
    compiled: Callable[..., Any] = src.compile()[fn]
    return compiled


def decline(b: bytes, assumed: str | None = None) -> None:
    """The skim of a layout the generator does not handle: the full decoder decides."""
    return None


def usual_header(api_key: int, version: int, direction: str) -> int:
    flexible = get_schema(api_key, version, direction).flexible
    return header_versions(api_key, version, flexible)[0 if direction == "request" else 1]


def skim_source(api_key: int, version: int, direction: str) -> str:
    """The generated source of a version with its usual header, as it runs
    (written ahead of time for `AHEAD_APIS`), for reading and debugging."""
    header_version = usual_header(api_key, version, direction)
    try:
        return layout_source(api_key, version, direction, header_version, native=api_key in AHEAD_APIS)[0].text
    except NotImplementedError as problem:
        return f"# {problem}"


# ------------------------------------------------------- written ahead of time

# the messages whose skims are written into _generated/skims.py (every
# defined version, with its usual header) and compiled with mypyc: those of
# the record-carrying exchanges, which make most frames of busy captures
AHEAD_APIS = (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.SHARE_FETCH)

_AHEAD_PREAMBLE = '''\
# Generated by tools/gen_skims.py from the message schemas (kdissect.protocol.skim_code). Do not edit.
"""Skim decoders of {apis}, written ahead of time so that mypyc compiles
them (kdissect/native.py): one function per frame layout, as
`kdissect.protocol.skim_code` writes them, with integers read by the readers
below. REQUEST_SKIMS and RESPONSE_SKIMS map (api key, body version, header
version) to them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

{imports}

RecordSets = list[tuple[str | None, int, bytes]]
# api_key, api_version, correlation_id, client_id, expects_response, starts_raw_sasl, record sets
RequestFigures = tuple[int, int, int, str | None, bool, bool, RecordSets]
# throttle_time_ms, error_code, error codes, assumed version, record sets
ResponseFigures = tuple[int | None, int | None, list[int], str | None, RecordSets]
TagReaders = dict[int, tuple[str, Callable[..., int]]]


# big-endian integers at p (IndexError past the end, like bytes indexing)
def _int8(b: bytes, p: int) -> int:
    v = b[p]
    return v - 0x100 if v & 0x80 else v


def _uint16(b: bytes, p: int) -> int:
    return b[p] << 8 | b[p + 1]


def _int16(b: bytes, p: int) -> int:
    v = b[p] << 8 | b[p + 1]
    return v - 0x10000 if v & 0x8000 else v


def _uint32(b: bytes, p: int) -> int:
    return b[p] << 24 | b[p + 1] << 16 | b[p + 2] << 8 | b[p + 3]


def _int32(b: bytes, p: int) -> int:
    v = b[p] << 24 | b[p + 1] << 16 | b[p + 2] << 8 | b[p + 3]
    return v - 0x100000000 if v & 0x80000000 else v


def _int64(b: bytes, p: int) -> int:
    v = _uint32(b, p) << 32 | _uint32(b, p + 4)
    return v - 0x10000000000000000 if v & 0x8000000000000000 else v


def _uvar(b: bytes, p: int) -> tuple[int, int]:
    """primitives.read_uvarint: at most 5 bytes, minimal encodings only."""
    value = 0
    shift = 0
    start = p
    while True:
        byte = b[p]
        p += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if byte == 0 and p - start > 1:
                raise ValueError("non-minimal varint")
            return value, p
        shift += 7
        if p - start >= 5:
            raise ValueError("varint too long")


def _tag_section(b: bytes, p: int, L: int, known: TagReaders, e: list[int] | None, r: RecordSets) -> int:
    """primitives.read_tag_section with nothing kept: each known tag read
    once, by its reader, which must use exactly its declared size; unknown
    tags stepped over."""
    count = b[p]
    if count < 0x80:
        p += 1
    else:
        count, p = _uvar(b, p)
    if count > L - p:
        raise _Short("tag count %d exceeds the %d bytes left" % (count, L - p))
    seen: list[int] = []
    for _ in range(count):
        tag = b[p]
        if tag < 0x80:
            p += 1
        else:
            tag, p = _uvar(b, p)
        size = b[p]
        if size < 0x80:
            p += 1
        else:
            size, p = _uvar(b, p)
        if size > L - p:
            raise _Short("tagged field size %d exceeds the %d bytes left" % (size, L - p))
        stop = p + size
        entry = known.get(tag)
        if entry is not None:
            if tag in seen:
                raise ValueError("tag %d repeated" % tag)
            seen.append(tag)
            if entry[1](b, p, stop, e, r) != stop:
                raise ValueError("tagged field %d is %d bytes but its value used another size" % (tag, size))
        p = stop
    return p


# topic id (16 raw bytes) -> protocol.topics.topic_label of it, for the few topics of a capture
_ID_LABELS: Final[dict[bytes, str | None]] = {{}}


def _id_label(raw: bytes) -> str | None:
    label = _ID_LABELS.get(raw)
    if label is None:
        label = _label(None, raw)
        if len(_ID_LABELS) < 4096:
            _ID_LABELS[raw] = label
    return label
'''

# names the generated code may use from primitives and topics (imported when used)
_AHEAD_IMPORTS = (("kdissect.protocol.primitives", (
    ("Short", "_Short"), ("read_tag_section", "_rtags"), ("read_unknown_tags", "_rutags"),
    ("skip_array", "_svar"), ("read_fixed_array", "_rfix"), ("read_string", "_rstr"),
    ("read_compact_string", "_rcstr"), ("read_bytes", "_rbytes"), ("read_compact_bytes", "_rcbytes"))),
    ("kdissect.protocol.topics", (("topic_label", "_label"),)))


def ahead_layouts() -> list[tuple[int, int, str, int]]:
    """(api key, body version, direction, header version) of every layout
    written ahead of time: each defined version of `AHEAD_APIS` with its usual header."""
    return [(api_key, version, direction, usual_header(api_key, version, direction))
            for api_key in AHEAD_APIS for direction in ("request", "response")
            for version in defined_versions(api_key, direction)]


def ahead_of_time_module() -> str:
    """The text of kdissect/protocol/_generated/skims.py (tools/gen_skims.py
    writes it; a test checks the committed copy is current). Layouts whose
    code is the same are written once."""
    written: dict[str, str] = {}  # code with plain names -> the function written for it
    parts: list[str] = []
    tables: dict[str, list[str]] = {"request": [], "response": []}
    for api_key, version, direction, header_version in ahead_layouts():
        try:
            plain = layout_source(api_key, version, direction, header_version, native=True)[0].text
        except NotImplementedError:  # rows never skim it: not in the table, the skim declines
            continue
        fn = written.get(plain)
        if fn is None:
            stem = f"_{api_key}{direction[:3]}{version}h{header_version}_"
            src, fn = layout_source(api_key, version, direction, header_version, native=True, stem=stem)
            written[plain] = fn
            code = src.text.rstrip("\n").replace("\n\ndef ", "\n\n\ndef ")
            parts.append("\n".join([f"# {src.label}", code, *src.tag_table_lines("Final[TagReaders]")]))
        tables[direction].append(f"    ({api_key}, {version}, {header_version}): {fn},")
    code = "\n\n\n".join(parts)
    code_and_readers = code + _AHEAD_PREAMBLE  # the readers above use some too
    used = [(module, [(name, alias) for name, alias in names if re.search(rf"\b{alias}\b", code_and_readers)])
            for module, names in _AHEAD_IMPORTS]
    imports = [f"from {module} import {', '.join(f'{name} as {alias}' for name, alias in found)}"
               for module, found in used if found]
    names = ", ".join(api_name(key) for key in AHEAD_APIS)
    return "\n".join([_AHEAD_PREAMBLE.format(apis=names, imports="\n".join(imports)), "", code, "", "",
                      "REQUEST_SKIMS: dict[tuple[int, int, int], Callable[[bytes], RequestFigures | None]] = {",
                      *tables["request"], "}",
                      "RESPONSE_SKIMS: dict[tuple[int, int, int], Callable[[bytes, str | None], ResponseFigures | None]] = {",
                      *tables["response"], "}", ""])
