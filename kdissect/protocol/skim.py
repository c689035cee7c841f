"""Skim decoders: validate a frame like the full decoder, keep only row figures.

The exchange table needs a handful of values per frame (header fields, acks,
throttle time, error codes, record sets), not the decoded objects. For each
(api key, version, direction) this module writes a second straight-line
function (header included, nested structs inlined) that walks the frame
exactly as the generated full decoder in `codec.py` does: the same length,
count, varint, presence-byte, bool and tagged-field checks and the same
leftover-bytes rule, so it accepts exactly the frames the full decoder
accepts. It builds no objects and keeps only:

- error codes: every non-zero int16 field named ``ErrorCode`` /
  ``...ErrorCode`` at any depth, sorted and distinct at the end (what
  `summary.response_figures` collects);
- the top-level values a row uses (``acks`` / ``throttle_time_ms`` and
  ``error_code``);
- record sets ``(topic, partition, raw)`` of Produce requests and Fetch /
  ShareFetch responses (what `records.access.record_figures` finds).

Fixed-width fields nobody needs are stepped over without reading them. Their
bounds check is left to what follows: the position only grows, so a position
past the end always ends in a rejection (a failing read, a count or length
check, the leftover-bytes check, or a tagged value not ending where its size
says), where the full decoder rejects too. Strings are not decoded (the
full decoder's surrogateescape decoding cannot fail), except the client id
and topic names, which rows use.

Public:
    skim_request(frame) -> (api_key, api_version, correlation_id, client_id,
                            expects_response, starts_raw_sasl, record_sets) | None
    skim_response(frame, api_key, api_version) -> (throttle_time_ms, error_code,
                            error_codes, assumed_version, record_sets) | None

None means "rejected": the caller decodes with the full decoder, which raises
the exact DecodeError. Neither function raises.
"""

from __future__ import annotations

import struct as _struct
from collections.abc import Callable
from functools import partial
from typing import Any

from kdissect.protocol import primitives as prim
from kdissect.protocol.codec import _FIXED, _element_reader, _field_runs, _min_size
from kdissect.protocol.codecache import compile_cached
from kdissect.protocol.headers import request_layout
from kdissect.protocol.schema import (
    FieldSchema,
    get_schema,
    header_versions,
    resolve_version,
)

__all__ = ["frame_skim", "skim_request", "skim_response", "skim_source"]

_KEY_VERSION_CORR = _struct.Struct(">hhi").unpack_from

PRODUCE, FETCH, API_VERSIONS, SASL_HANDSHAKE, SHARE_FETCH = 0, 1, 18, 17, 78
UNSUPPORTED_VERSION = 35

# Where record sets live: (top-level topics array, partitions array in a
# topic, partition index field, topic name field); records are in "records".
_RECORD_PATHS = {
    (PRODUCE, "request"): ("topic_data", "partition_data", "index", "name"),
    (FETCH, "response"): ("responses", "partitions", "partition_index", "topic"),
    (SHARE_FETCH, "response"): ("responses", "partitions", "partition_index", "topic"),
}


def _is_error_code(f: FieldSchema) -> bool:
    """The fields summary.response_figures reads error codes from."""
    return f.element == "int16" and not f.is_array and f.name.endswith("ErrorCode")


def _skip_tags(b: bytes, p: int, end: int, known: dict[int, Callable], e: Any, r: list) -> int:
    """A tagged-field section, checked like codec._read_tags: known tags must
    not repeat and their value must fill exactly the declared size."""
    count = b[p]
    if count < 0x80:
        p += 1
    else:
        count, p = prim.read_uvarint(b, p)
    if count > end - p:
        raise prim.Short("tag count exceeds the bytes left")
    seen = ()
    for _ in range(count):
        tag, size, p = prim.read_tag_header(b, p, end)
        stop = p + size
        skim = known.get(tag)
        if skim is not None:
            if tag in seen:
                raise ValueError("tag repeated")
            seen = (*seen, tag)
            if skim(b, p, stop, e, r) != stop:
                raise ValueError("tagged value does not fill its size")
        p = stop
    return p


def _topic_label(name: str | None, topic_id: bytes | None) -> str | None:
    """records.access._topic_label on raw values: the name, else the id's text."""
    if name:
        return name
    return None if topic_id is None else str(prim.uuid_from(topic_id))


class _Size:
    """What codec._min_size reads from a nested struct."""

    __slots__ = ("min_size",)

    def __init__(self, min_size: int) -> None:
        self.min_size = min_size


def _struct_min_size(fields: tuple[FieldSchema, ...], flexible: bool) -> int:
    """The smallest encoding of a struct, as the codec bounds array counts with."""
    return sum(_min_size(f, flexible, _Size(_struct_min_size(f.fields, flexible)) if f.is_struct else None)
               for f in fields) + (1 if flexible else 0)


def _indent(lines: list[str], by: str = "    ") -> list[str]:
    return [by + line for line in lines]


class _SkimGenerator:
    """Writes the skim of one message version: one function per frame layout
    with nested structs inlined (temporaries suffixed by nesting depth), and
    small functions for the values of tagged fields."""

    def __init__(self, label: str, direction: str, record_path: tuple[str, str, str, str] | None) -> None:
        self.label = label
        self.codes = direction == "response"
        self.record_path = record_path
        self.lines: list[str] = []
        self.ns: dict[str, Any] = {
            "_uvar": prim.read_uvarint,
            "_I16": prim.INT16.unpack_from,
            "_I32": prim.INT32.unpack_from,
            "_KVC": _KEY_VERSION_CORR,
            "_rutags": prim.read_unknown_tags,
            "_Short": prim.Short,
            "_str": str,
            "_set": set,
            "_sorted": sorted,
            "_stags": _skip_tags,
            "_rfix": _fixed_array,
            "_rvar": _var_array,
            "_rstr": prim.read_string,
            "_rcstr": prim.read_compact_string,
            "_rbytes": prim.read_bytes,
            "_rcbytes": prim.read_compact_bytes,
            "_label": _topic_label,
        }
        self.counter = 0
        self._topic_locals = "None"  # label expression of the topic level being written

    def name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def _add(self, obj: Any, prefix: str) -> str:
        key = self.name(prefix)
        self.ns[key] = obj
        return key

    # ------------------------------------------------------------- frames
    def request_frame(self, schema: Any, api_key: int, header_version: int) -> str:
        """fn(b) -> (api_key, api_version, correlation_id, client_id,
        expects_response, starts_raw_sasl, record_sets) | None."""
        fn = self.name("_frame")
        lines = ["L = len(b)", "if L < 8: return None", "_k, _ver, _cid = _KVC(b, 0)", "p = 8", "_cl = None"]
        if header_version >= 1:
            lines += ["if L < 10: return None", "_n, = _I16(b, 8)", "p = 10", "if _n >= 0:",
                      "    if p + _n > L: return None",
                      "    _cl = _str(b[p:p + _n], 'utf-8', 'surrogateescape')", "    p += _n",
                      "elif _n != -1: return None"]
        if header_version >= 2:
            lines += ["if p < L and b[p] == 0:", "    p += 1", "else:", "    p = _rutags(b, p, L)[1]"]
        lines += ["e = None", "r = []"]
        body, captured = self.struct_lines(schema.fields, schema.flexible, "top", 0, ("acks",))
        lines += body
        lines.append("if p != L: return None")
        if api_key == PRODUCE:
            acks = captured.get("acks")
            expects = f"{acks} != 0" if acks else "True"
        else:
            expects = "True"
        sasl = "_ver == 0" if api_key == SASL_HANDSHAKE else "False"
        lines.append(f"return _k, _ver, _cid, _cl, {expects}, {sasl}, r")
        self.lines += [f"def {fn}(b):"] + _indent(lines) + [""]
        return fn

    def response_frame(self, schema: Any, header_version: int) -> str:
        """fn(b, assumed) -> (throttle_time_ms, error_code, error_codes, assumed,
        record_sets) | None."""
        fn = self.name("_frame")
        lines = ["L = len(b)", "if L < 4: return None"]
        if header_version >= 1:
            lines += ["if b[4] == 0:", "    p = 5", "else:", "    p = _rutags(b, 4, L)[1]"]
        else:
            lines.append("p = 4")
        lines += ["e = []", "r = []"]
        body, captured = self.struct_lines(schema.fields, schema.flexible, "top", 0,
                                           ("throttle_time_ms", "error_code"))
        lines += body
        throttle, error_code = captured.get("throttle_time_ms", "None"), captured.get("error_code", "None")
        lines += ["if p != L: return None", "if e: e = _sorted(_set(e))",
                  f"return {throttle}, {error_code}, e, assumed, r"]
        self.lines += [f"def {fn}(b, assumed):"] + _indent(lines) + [""]
        return fn

    # ------------------------------------------------------------- structs
    def struct_lines(self, fields: tuple[FieldSchema, ...], flexible: bool, role: str, d: int,
                     top_values: tuple[str, ...] = ()) -> tuple[list[str], dict[str, str]]:
        """Inline lines skimming one struct at nesting depth d, and the locals
        holding the values kept at this level. role: "top", "topic",
        "partition" (levels of the record path) or ""."""
        plain = [f for f in fields if not f.tagged]
        tagged = [f for f in fields if f.tagged]
        captured = self._captured(role, top_values, fields, d)
        if role == "topic":
            self._topic_locals = self._topic_label_expression(plain, captured)
        always = {f.attr for f in plain if self._fixed(f)}
        lines = [f"{local} = None" for attr, local in captured.items() if attr not in always]
        for _index, group, grouped in _field_runs(plain, self._fixed):
            if grouped:
                lines += self._fixed_group(group, captured)
            else:
                f = group[0]
                lines += self._field(f, flexible, self._child_role(role, f), d, captured.get(f.attr))
        if flexible:
            for f in tagged:
                if self.codes and _is_error_code(f) and f.default:
                    raise NotImplementedError(f"{self.label}: tagged {f.attr} with a non-zero default")
                if f.attr in captured:
                    raise NotImplementedError(f"{self.label}: tagged {f.attr} is needed by rows")
            known_key = self._add({f.tag: self._tag_skim(f, flexible) for f in tagged}, "_tags")
            lines += ["if b[p] == 0:", "    p += 1", "else:", f"    p = _stags(b, p, L, {known_key}, e, r)"]
        if role == "partition":
            # inlined inside its topic's loop: the topic's locals are in scope
            index_local = captured.get(self.record_path[2], "None")  # type: ignore[index]
            lines += [f"if _rec{d}:", f"    r.append(({self._topic_locals}, {index_local}, _rec{d}))"]
        return lines, captured

    def _topic_label_expression(self, plain: list[FieldSchema], captured: dict[str, str]) -> str:
        """records.access._topic_label as an expression on the topic level's
        locals; they must be read before the partitions array."""
        name_attr, parts_attr = self.record_path[3], self.record_path[1]  # type: ignore[index]
        order = [f.attr for f in plain]
        for attr in (name_attr, "topic_id"):
            if attr in captured and (attr not in order or parts_attr not in order
                                     or order.index(attr) > order.index(parts_attr)):
                raise NotImplementedError(f"{self.label}: {attr} does not precede {parts_attr}")
        name, topic_id = captured.get(name_attr), captured.get("topic_id")
        if name and topic_id:
            return f"({name} or _label(None, {topic_id}))"
        if name:
            return f"({name} or None)"
        if topic_id:
            return f"_label(None, {topic_id})"
        return "None"

    def _child_role(self, role: str, f: FieldSchema) -> str:
        if self.record_path is None or not f.is_array or f.tagged or not f.is_struct:
            return ""
        if role == "top" and f.attr == self.record_path[0]:
            return "topic"
        if role == "topic" and f.attr == self.record_path[1]:
            return "partition"
        return ""

    def _captured(self, role: str, top_values: tuple[str, ...], fields: tuple[FieldSchema, ...],
                  d: int) -> dict[str, str]:
        """Fields whose values this level keeps: attr -> local name."""
        wanted: set[str] = set(top_values)
        if role == "partition":
            wanted.update((self.record_path[2], "records"))  # type: ignore[index]
        elif role == "topic":
            wanted.update((self.record_path[3], "topic_id"))  # type: ignore[index]
        captured = {}
        for f in fields:
            if f.attr in wanted and not f.is_array and not f.is_struct:
                captured[f.attr] = f"_v{d}_{f.attr}"
        if role == "partition":
            captured["records"] = f"_rec{d}"  # stays None when absent
        return captured

    @staticmethod
    def _fixed(f: FieldSchema) -> bool:
        return not f.is_array and not f.is_struct and f.element in _FIXED

    def _read_fixed(self, f: FieldSchema, at: str) -> str:
        """Expression reading fixed field f at position expression `at`."""
        if f.element == "uuid":
            return f"b[{at}:{at} + 16]"
        if f.element == "bool":
            return f"b[{at}] == 1"
        reader = self._add(_struct.Struct(">" + _FIXED[f.element][0]).unpack_from, "_R")
        return f"{reader}(b, {at})[0]"

    def _fixed_group(self, group: list[FieldSchema], captured: dict[str, str]) -> list[str]:
        lines = []
        offset = 0
        for f in group:
            at = f"p + {offset}" if offset else "p"
            if f.element == "bool":
                lines.append(f"if b[{at}] > 1: raise ValueError('bool byte is not 0 or 1')")
            local = captured.get(f.attr)
            if local is not None:
                lines.append(f"{local} = {self._read_fixed(f, at)}")
                if f.element == "uuid":
                    lines.append(f"if len({local}) != 16: raise _Short('uuid truncated')")
            if self.codes and _is_error_code(f):
                if local is None:
                    local = "_c"
                    lines.append(f"_c = _I16(b, {at})[0]")
                lines.append(f"if {local}: e.append({local})")
            offset += _FIXED[f.element][2]
        lines.append(f"p += {offset}")
        return lines

    def _field(self, f: FieldSchema, flexible: bool, role: str, d: int, local: str | None) -> list[str]:
        """Lines skimming one non-grouped field (also the value of a tagged field)."""
        if f.is_array:
            return self._array(f, flexible, role, d)
        if f.is_struct:
            inner, _captured = self.struct_lines(f.fields, flexible, role, d + 1)  # type: ignore[arg-type]
            if f.nullable:
                return [f"_m{d} = b[p]", "p += 1", f"if _m{d} == 1:", *_indent(inner or ["pass"]),
                        f"elif _m{d} != 255:", "    raise ValueError('bad presence byte for a nullable struct')"]
            return inner
        kind = f.element
        if kind in _FIXED:
            return self._fixed_group([f], {f.attr: local} if local else {})
        n, e = f"_n{d}", f"_e{d}"
        if kind == "string":
            keep = [f"    {local} = _str(b[p:{e}], 'utf-8', 'surrogateescape')"] if local else []
            return self._length_prefixed(n, e, flexible, keep, "_I16", 2, "string length")
        # bytes / records: the codec uses primitives.read_(compact_)bytes
        keep = [f"    {local} = b[p:{e}]"] if local else []
        return self._length_prefixed(n, e, flexible, keep, "_I32", 4, "length")

    @staticmethod
    def _length_prefixed(n: str, e: str, flexible: bool, keep: list[str], size_reader: str, size_bytes: int,
                         what: str) -> list[str]:
        """Lines stepping over a string or bytes value (null allowed): a compact
        varint length + 1 in flexible versions, else a signed size field; `keep`
        lines run with the value's end in `e` before `p` moves there."""
        if flexible:
            return [f"{n} = b[p]", f"if {n} < 128:", "    p += 1", "else:", f"    {n}, p = _uvar(b, p)",
                    f"if {n}:", f"    {e} = p + {n} - 1",
                    f"    if {e} > L: raise _Short('{what} exceeds the bytes left')",
                    *keep, f"    p = {e}"]
        return [f"{n}, = {size_reader}(b, p)", f"p += {size_bytes}", f"if {n} < 0:",
                f"    if {n} != -1: raise ValueError('negative {what}')",
                "else:", f"    {e} = p + {n}",
                f"    if {e} > L: raise _Short('{what} exceeds the bytes left')",
                *keep, f"    p = {e}"]

    def _array(self, f: FieldSchema, flexible: bool, role: str, d: int) -> list[str]:
        kind = f.element
        if f.is_struct:
            min_size = _struct_min_size(f.fields, flexible)  # type: ignore[arg-type]
        elif kind in _FIXED:
            min_size = _FIXED[kind][2]
        elif kind == "string":
            min_size = 1 if flexible else 2
        else:
            min_size = 1 if flexible else 4
        n = f"_n{d}"
        if flexible:
            lines = [f"{n} = b[p]", f"if {n} < 128:", "    p += 1", "else:", f"    {n}, p = _uvar(b, p)", f"{n} -= 1"]
        else:
            lines = [f"{n}, = _I32(b, p)", "p += 4", f"if {n} < -1: raise ValueError('negative array count')"]
        lines += [f"if {n} >= 0:",
                  f"    if {n} * {max(min_size, 1)} > L - p: raise _Short('array count exceeds the bytes left')"]
        if f.is_struct:
            inner, _captured = self.struct_lines(f.fields, flexible, role, d + 1)  # type: ignore[arg-type]
            lines += [f"    for _i{d} in range({n}):", *_indent(inner or ["pass"], "        ")]
        elif kind in _FIXED and kind not in ("bool", "uuid"):
            lines.append(f"    p += {n} * {_FIXED[kind][2]}")  # within the count check above
        elif kind in _FIXED:
            code, _enc, size = _FIXED[kind]
            lines.append(f"    p = _rfix(b, p, {n}, {code!r}, {size}, {kind!r})")
        else:
            lines.append(f"    p = _rvar(b, p, L, {n}, {_element_reader(kind, flexible)})")
        return lines

    def _tag_skim(self, f: FieldSchema, flexible: bool) -> str:
        """A function skimming a tagged field's value: fn(b, p, L, e, r) -> p."""
        fn = self.name("_t")
        body = self._field(f, flexible, "", 0, None)
        self.lines += [f"def {fn}(b, p, L, e, r):"] + _indent(body) + ["    return p", ""]
        return fn

    # ------------------------------------------------------------- finish
    def finish(self) -> dict[str, Any]:
        source = "\n".join(self.lines)
        ns = self.ns
        exec(compile_cached(source, f"<kdissect skim {self.label}>"), ns)  # noqa: S102
        for key, value in list(ns.items()):  # tag tables hold names until the functions exist
            if key.startswith("_tags") and isinstance(value, dict):
                for tag, fn_name in list(value.items()):
                    value[tag] = ns[fn_name]
        return ns


def _fixed_array(b: bytes, p: int, n: int, code: str, size: int, kind: str) -> int:
    """codec._read_fixed_array's checks for bool / uuid arrays."""
    if kind == "bool" and n and max(b[p:p + n]) > 1:
        raise ValueError("bool byte is not 0 or 1")
    return p + n * size


def _var_array(b: bytes, p: int, end: int, n: int, reader: Callable) -> int:
    for _ in range(n):
        _value, p = reader(b, p, end)
    return p


_FRAMES: dict[tuple[int, int, str, int], tuple[Callable, str]] = {}


def frame_skim(api_key: int, version: int, direction: str, header_version: int) -> tuple[Callable, str]:
    """(skim function, its source) of a defined body version with a given
    header version; KeyError if undefined. Requests: fn(frame); responses:
    fn(frame, assumed) (see skim_request / skim_response for the results)."""
    key = (api_key, version, direction, header_version)
    found = _FRAMES.get(key)
    if found is None:
        schema = get_schema(api_key, version, direction)
        gen = _SkimGenerator(f"{schema.name} v{version} header v{header_version}", direction,
                             _RECORD_PATHS.get((api_key, direction)))
        try:
            if direction == "request":
                fn = gen.request_frame(schema, api_key, header_version)
            else:
                fn = gen.response_frame(schema, header_version)
            found = (gen.finish()[fn], "\n".join(gen.lines))
        except NotImplementedError as problem:  # a layout rows cannot skim: always decode fully
            found = (_decline, f"# {problem}")
        _FRAMES[key] = found
    return found


def _decline(b: bytes, assumed: str | None = None) -> None:
    """The skim of a layout the generator does not handle: the full decoder decides."""
    return None


def skim_source(api_key: int, version: int, direction: str) -> str:
    """The generated source of a version with its usual header (for reading and debugging)."""
    flexible = get_schema(api_key, version, direction).flexible
    header_version = header_versions(api_key, version, flexible)[0 if direction == "request" else 1]
    return frame_skim(api_key, version, direction, header_version)[1]


# ------------------------------------------------------------------ requests

# first 4 bytes of a request (api key, api version) -> frame skim
_REQUEST_PLANS: dict[bytes, Callable] = {}


def skim_request(frame: Any) -> tuple | None:
    """(api_key, api_version, correlation_id, client_id, expects_response,
    starts_raw_sasl, record_sets) of a request frame the full decoder accepts;
    None when it would reject it (or anything unexpected happens)."""
    try:
        b = frame if type(frame) is bytes else bytes(frame)
        skim = _REQUEST_PLANS.get(b[:4])
        if skim is None:
            api_key, api_version, _cid = _KEY_VERSION_CORR(b, 0)
            header_version, body_version, _problem = request_layout(api_key, api_version)
            skim = _REQUEST_PLANS[b[:4]] = frame_skim(api_key, body_version, "request", header_version)[0]
        return skim(b)
    except Exception:  # rejected (or a bug): the full decoder decides and explains
        return None


# ------------------------------------------------------------------ responses

# (api key, api version of the request) -> (frame skim, assumed-version text)
_RESPONSE_PLANS: dict[tuple[int, int], tuple[Callable, str | None]] = {}


def _response_plan(api_key: int, api_version: int) -> tuple[Callable, str | None]:
    """As codec._response_plan, with the skim in place of the codec."""
    body_version, assumed = resolve_version(api_key, api_version, "response")
    flexible = get_schema(api_key, body_version, "response").flexible
    header_version = header_versions(api_key, body_version, flexible)[1]
    skim = frame_skim(api_key, body_version, "response", header_version)[0]
    if api_key == API_VERSIONS and body_version > 0:
        v0 = frame_skim(API_VERSIONS, 0, "response", header_version)[0]
        return partial(_api_versions, skim, v0, api_version), assumed
    return skim, assumed


def _api_versions(skim: Callable, v0: Callable, api_version: int, b: bytes, assumed: str | None) -> tuple | None:
    """codec.decode_response: an UNSUPPORTED_VERSION answer may be laid out as v0."""
    if len(b) >= 6 and prim.INT16.unpack_from(b, 4)[0] == UNSUPPORTED_VERSION:
        try:
            found = v0(b, f"ApiVersions v{api_version} response with UNSUPPORTED_VERSION is laid out as v0")
        except Exception:
            found = None
        if found is not None:
            return found
    return skim(b, assumed)


def skim_response(frame: Any, api_key: int, api_version: int) -> tuple | None:
    """(throttle_time_ms, error_code, error_codes, assumed_version, record_sets)
    of a response frame the full decoder accepts, with the values of
    summary.response_figures; None when it would reject it."""
    try:
        plan = _RESPONSE_PLANS.get((api_key, api_version))
        if plan is None:
            plan = _RESPONSE_PLANS[(api_key, api_version)] = _response_plan(api_key, api_version)
        return plan[0](frame if type(frame) is bytes else bytes(frame), plan[1])
    except Exception:
        return None
