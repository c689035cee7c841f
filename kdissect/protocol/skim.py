"""Skim decoders: validate a frame like the full decoder, keep only row figures.

The exchange table needs a handful of values per frame (header fields, acks,
throttle time, error codes, record sets), not the decoded objects. For each
(api key, version, direction) this module writes a second straight-line
function that walks the frame exactly as the generated full decoder in
`codec.py` does: the same length, count, varint, presence-byte, bool and
tagged-field checks and the same leftover-bytes rule, so it accepts exactly
the frames the full decoder accepts. It stores nothing but:

- error codes: every int16 field named ``ErrorCode`` / ``...ErrorCode`` at any
  depth goes into a set (what `summary.response_figures` collects);
- the top-level values a row uses (``acks`` / ``throttle_time_ms`` and
  ``error_code``);
- record sets ``(topic, partition, raw)`` of Produce requests and Fetch /
  ShareFetch responses (what `records.access.record_figures` finds).

Fixed-width fields nobody needs are stepped over without reading them. Their
bounds check is left to what follows: the position only grows, so a position
past the end always ends in a rejection (a failing read, a count or length
check, the leftover-bytes check, or a tagged value not ending where its size
says), which is where the full decoder rejects too. Strings are never decoded
(the full decoder's surrogateescape decoding cannot fail) except topic names.

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
from typing import Any, Callable

from kdissect.protocol import primitives as prim
from kdissect.protocol.codec import _FIXED, _min_size
from kdissect.protocol.codecache import compile_cached
from kdissect.protocol.headers import request_layout
from kdissect.protocol.schema import FieldSchema, get_schema, header_versions, resolve_version

__all__ = ["skim_request", "skim_response", "skim_source"]

PRODUCE, FETCH, API_VERSIONS, SASL_HANDSHAKE, SHARE_FETCH = 0, 1, 18, 17, 78
UNSUPPORTED_VERSION = 35

# Where record sets live: (top-level topics array, partitions array in a
# topic, partition index field, topic name field); records are in "records".
_RECORD_PATHS = {
    (PRODUCE, "request"): ("topic_data", "partition_data", "index", "name"),
    (FETCH, "response"): ("responses", "partitions", "partition_index", "topic"),
    (SHARE_FETCH, "response"): ("responses", "partitions", "partition_index", "topic"),
}
# Top-level values returned besides the end position.
_TOP_VALUES = {"request": ("acks", None), "response": ("throttle_time_ms", "error_code")}


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


class _Struct:
    __slots__ = ("fn", "min_size")

    def __init__(self, fn: str, min_size: int) -> None:
        self.fn = fn
        self.min_size = min_size


class _SkimGenerator:
    """Writes the skim functions of one message version."""

    def __init__(self, label: str, direction: str, record_path: tuple[str, str, str, str] | None) -> None:
        self.label = label
        self.codes = direction == "response"
        self.record_path = record_path
        self.lines: list[str] = []
        self.ns: dict[str, Any] = {
            "_uvar": prim.read_uvarint,
            "_I16": prim.INT16.unpack_from,
            "_I32": prim.INT32.unpack_from,
            "_Short": prim.Short,
            "_str": str,
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

    def name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    # ------------------------------------------------------------- structs
    def struct(self, fields: tuple[FieldSchema, ...], flexible: bool, role: str = "",
               top_values: tuple[str | None, str | None] | None = None) -> _Struct:
        """Skim function of one struct level. role: "top", "topic", "partition"
        (levels of the record path) or ""."""
        nested: dict[str, _Struct] = {}
        for f in fields:
            if f.is_struct:
                nested[f.attr] = self.struct(f.fields, flexible, self._child_role(role, f))  # type: ignore[arg-type]
        min_size = sum(_min_size(f, flexible, nested.get(f.attr)) for f in fields) + (1 if flexible else 0)
        fn = self.name("_s")
        plain = [f for f in fields if not f.tagged]
        tagged = [f for f in fields if f.tagged]
        captured = self._captured(role, top_values, fields)
        body: list[str] = [f"{local} = None" for attr, local in captured.items()
                           if attr not in self._always_read(plain)]
        if role == "topic":
            body.append("_r0 = len(r)")
        index = 0
        while index < len(plain):
            f = plain[index]
            if not f.is_array and not f.is_struct and f.element in _FIXED:
                group = [f]
                while index + len(group) < len(plain) and self._fixed(plain[index + len(group)]):
                    group.append(plain[index + len(group)])
                body += self._fixed_group(group, captured)
                index += len(group)
                continue
            body += self._field(f, flexible, nested.get(f.attr), "L", captured.get(f.attr))
            index += 1
        if flexible:
            known = {f.tag: self._tag_skim(f, flexible, nested.get(f.attr)) for f in tagged}
            for f in tagged:
                if self.codes and _is_error_code(f) and f.default:
                    raise NotImplementedError(f"{self.label}: tagged {f.attr} with a non-zero default")
                if f.attr in captured:
                    raise NotImplementedError(f"{self.label}: tagged {f.attr} is needed by rows")
            known_key = self._add(known, "_tags")
            body += ["if b[p] == 0:", "    p += 1", "else:", f"    p = _stags(b, p, L, {known_key}, e, r)"]
        if role == "partition":
            index_local = captured.get(self.record_path[2]) if self.record_path else None  # type: ignore[index]
            body += ["if _rec:", f"    r.append(({index_local or 'None'}, _rec))"]
        elif role == "topic":
            name_local = captured.get(self.record_path[3], "None")  # type: ignore[index]
            id_local = captured.get("topic_id", "None")
            body += ["if len(r) > _r0:",
                     f"    _lb = _label({name_local}, {id_local})",
                     "    r[_r0:] = [(_lb, _x, _y) for _x, _y in r[_r0:]]"]
        if top_values is not None:
            results = ", ".join(captured.get(name, "None") if name else "None" for name in top_values)
            body.append(f"return p, {results}")
        else:
            body.append("return p")
        self.lines += [f"def {fn}(b, p, L, e, r):"] + ["    " + line for line in body] + [""]
        return _Struct(fn, min_size)

    def _child_role(self, role: str, f: FieldSchema) -> str:
        if self.record_path is None or not f.is_array or f.tagged:
            return ""
        if role == "top" and f.attr == self.record_path[0]:
            return "topic"
        if role == "topic" and f.attr == self.record_path[1]:
            return "partition"
        return ""

    def _captured(self, role: str, top_values: tuple | None, fields: tuple[FieldSchema, ...]) -> dict[str, str]:
        """Fields whose values this level keeps: attr -> local name."""
        wanted: set[str] = set()
        if top_values is not None:
            wanted.update(name for name in top_values if name)
        if role == "partition":
            wanted.update((self.record_path[2], "records"))  # type: ignore[index]
        elif role == "topic":
            wanted.update((self.record_path[3], "topic_id"))  # type: ignore[index]
        captured = {}
        for f in fields:
            if f.attr in wanted and not f.is_array and not f.is_struct:
                captured[f.attr] = "_rec" if f.attr == "records" and role == "partition" else f"_v_{f.attr}"
        if role == "partition" and "records" not in captured:
            captured["records"] = "_rec"  # absent: stays None
        return captured

    def _always_read(self, plain: list[FieldSchema]) -> set[str]:
        """Fixed non-tagged fields: their locals are always assigned."""
        return {f.attr for f in plain if self._fixed(f)}

    @staticmethod
    def _fixed(f: FieldSchema) -> bool:
        return not f.is_array and not f.is_struct and f.element in _FIXED

    def _add(self, obj: Any, prefix: str) -> str:
        key = self.name(prefix)
        self.ns[key] = obj
        return key

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
                lines.append(f"e.add({local})" if local else f"e.add(_I16(b, {at})[0])")
            offset += _FIXED[f.element][2]
        lines.append(f"p += {offset}")
        return lines

    def _field(self, f: FieldSchema, flexible: bool, nested: _Struct | None, end: str,
               local: str | None) -> list[str]:
        """Lines skimming one non-grouped field (also the value of a tagged field)."""
        if f.is_array:
            return self._array(f, flexible, nested, end)
        if f.is_struct:
            assert nested is not None
            call = f"p = {nested.fn}(b, p, {end}, e, r)"
            if f.nullable:
                return ["_m = b[p]", "p += 1", "if _m == 1:", f"    {call}", "elif _m != 255:",
                        "    raise ValueError('bad presence byte for a nullable struct')"]
            return [call]
        kind = f.element
        if kind in _FIXED:
            return self._fixed_group([f], {f.attr: local} if local else {})
        if kind == "string":
            keep = [f"    {local} = _str(b[p:_e], 'utf-8', 'surrogateescape')"] if local else []
            if flexible:
                return ["_n = b[p]", "if _n < 128:", "    p += 1", "else:", "    _n, p = _uvar(b, p)",
                        "if _n:", f"    _e = p + _n - 1",
                        f"    if _e > {end}: raise _Short('string length exceeds the bytes left')",
                        *keep, "    p = _e"]
            return ["_n, = _I16(b, p)", "p += 2", "if _n < 0:",
                    "    if _n != -1: raise ValueError('negative string length')",
                    "else:", "    _e = p + _n",
                    f"    if _e > {end}: raise _Short('string length exceeds the bytes left')",
                    *keep, "    p = _e"]
        # bytes / records: codec uses primitives.read_(compact_)bytes
        keep = [f"    {local} = b[p:_e]"] if local else []
        if flexible:
            return ["_n = b[p]", "if _n < 128:", "    p += 1", "else:", "    _n, p = _uvar(b, p)",
                    "if _n:", "    _e = p + _n - 1",
                    f"    if _n - 1 > {end} - p: raise _Short('length exceeds the bytes left')",
                    *keep, "    p = _e"]
        return ["_n, = _I32(b, p)", "p += 4", "if _n < 0:",
                "    if _n != -1: raise ValueError('negative length')",
                "else:", "    _e = p + _n",
                f"    if _e > {end}: raise _Short('length exceeds the bytes left')",
                *keep, "    p = _e"]

    def _array(self, f: FieldSchema, flexible: bool, nested: _Struct | None, end: str) -> list[str]:
        kind = f.element
        if nested is not None:
            min_size = nested.min_size
        elif kind in _FIXED:
            min_size = _FIXED[kind][2]
        elif kind == "string":
            min_size = 1 if flexible else 2
        else:
            min_size = 1 if flexible else 4
        if flexible:
            lines = ["_n = b[p]", "if _n < 128:", "    p += 1", "else:", "    _n, p = _uvar(b, p)", "_n -= 1"]
        else:
            lines = ["_n, = _I32(b, p)", "p += 4", "if _n < -1: raise ValueError('negative array count')"]
        lines += ["if _n >= 0:",
                  f"    if _n * {max(min_size, 1)} > {end} - p: raise _Short('array count exceeds the bytes left')"]
        if nested is not None:
            lines += ["    for _ in range(_n):", f"        p = {nested.fn}(b, p, {end}, e, r)"]
        elif kind in _FIXED and kind not in ("bool", "uuid"):
            lines.append(f"    p += _n * {_FIXED[kind][2]}")  # within the count check above
        elif kind in _FIXED:
            code, _enc, size = _FIXED[kind]
            lines.append(f"    p = _rfix(b, p, _n, {code!r}, {size}, {kind!r})")
        else:
            if kind == "string":
                reader = "_rcstr" if flexible else "_rstr"
            else:
                reader = "_rcbytes" if flexible else "_rbytes"
            lines.append(f"    p = _rvar(b, p, {end}, _n, {reader})")
        return lines

    def _tag_skim(self, f: FieldSchema, flexible: bool, nested: _Struct | None) -> str:
        fn = self.name("_t")
        body = self._field(f, flexible, nested, "L", None)
        self.lines += [f"def {fn}(b, p, L, e, r):"] + ["    " + line for line in body] + ["    return p", ""]
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


def _generate(api_key: int, version: int, direction: str) -> tuple[Callable, str]:
    schema = get_schema(api_key, version, direction)
    gen = _SkimGenerator(f"{schema.name} v{version}", direction, _RECORD_PATHS.get((api_key, direction)))
    top = gen.struct(schema.fields, schema.flexible, "top", _TOP_VALUES[direction])
    ns = gen.finish()
    return ns[top.fn], "\n".join(gen.lines)


_SKIMS: dict[tuple[int, int, str], Callable] = {}


def skim_function(api_key: int, version: int, direction: str) -> Callable:
    """The skim of a defined body version: fn(buf, pos, end, codes, record_sets)
    -> (end position, first top value, second top value). KeyError if undefined."""
    key = (api_key, version, direction)
    fn = _SKIMS.get(key)
    if fn is None:
        fn = _SKIMS[key] = _generate(api_key, version, direction)[0]
    return fn


def skim_source(api_key: int, version: int, direction: str) -> str:
    """The generated source (for reading and debugging)."""
    return _generate(api_key, version, direction)[1]


# ------------------------------------------------------------------ requests

# first 4 bytes of a request (api key, api version) -> (header version, body skim)
_REQUEST_PLANS: dict[bytes, tuple[int, Callable]] = {}
_CLIENT_ID = prim.INT16.unpack_from
_KEY_VERSION_CORR = _struct.Struct(">hhi").unpack_from


def _request_plan(api_key: int, api_version: int) -> tuple[int, Callable] | None:
    try:
        header_version, body_version, _problem = request_layout(api_key, api_version)
        return header_version, skim_function(api_key, body_version, "request")
    except KeyError:
        return None


def skim_request(frame: Any) -> tuple | None:
    """(api_key, api_version, correlation_id, client_id, expects_response,
    starts_raw_sasl, record_sets) of a request frame the full decoder accepts;
    None when it would reject it (or anything unexpected happens)."""
    try:
        b = frame if type(frame) is bytes else bytes(frame)
        end = len(b)
        if end < 8:
            return None
        plan = _REQUEST_PLANS.get(b[:4])
        api_key, api_version, correlation_id = _KEY_VERSION_CORR(b, 0)
        if plan is None:
            plan = _request_plan(api_key, api_version)
            if plan is None:
                return None
            _REQUEST_PLANS[b[:4]] = plan
        header_version, skim = plan
        client_id = None
        p = 8
        if header_version >= 1:
            if end < 10:
                return None
            n = _CLIENT_ID(b, 8)[0]
            p = 10
            if n >= 0:
                if p + n > end:
                    return None
                client_id = str(b[p:p + n], "utf-8", "surrogateescape")
                p += n
            elif n != -1:
                return None
            if header_version >= 2:
                if p < end and b[p] == 0:
                    p += 1
                else:
                    p = prim.read_unknown_tags(b, p, end)[1]
        sets: list = []
        p, acks, _unused = skim(b, p, end, None, sets)
        if p != end:
            return None
        if api_key == PRODUCE:
            return (api_key, api_version, correlation_id, client_id, (-1 if acks is None else acks) != 0,
                    False, sets)
        return (api_key, api_version, correlation_id, client_id, True,
                api_key == SASL_HANDSHAKE and api_version == 0, sets)
    except Exception:  # rejected (or a bug): the full decoder decides and explains
        return None


# ------------------------------------------------------------------ responses

_RESPONSE_PLANS: dict[tuple[int, int], tuple[int, int, Callable, str | None]] = {}


def _response_plan(api_key: int, api_version: int) -> tuple[int, int, Callable, str | None]:
    """As codec._response_plan: (header version, body version, skim, assumed)."""
    body_version, assumed = resolve_version(api_key, api_version, "response")
    flexible = get_schema(api_key, body_version, "response").flexible
    header_version = header_versions(api_key, body_version, flexible)[1]
    return header_version, body_version, skim_function(api_key, body_version, "response"), assumed


def skim_response(frame: Any, api_key: int, api_version: int) -> tuple | None:
    """(throttle_time_ms, error_code, error_codes, assumed_version, record_sets)
    of a response frame the full decoder accepts, with the values of
    summary.response_figures; None when it would reject it."""
    try:
        plan = _RESPONSE_PLANS.get((api_key, api_version))
        if plan is None:
            plan = _RESPONSE_PLANS[(api_key, api_version)] = _response_plan(api_key, api_version)
        header_version, body_version, skim, assumed = plan
        b = frame if type(frame) is bytes else bytes(frame)
        end = len(b)
        if end < 4:
            return None
        p = 4
        if header_version >= 1:
            p = prim.read_unknown_tags(b, 4, end)[1]
        if api_key == API_VERSIONS and body_version > 0 and end - p >= 2 and \
                prim.INT16.unpack_from(b, p)[0] == UNSUPPORTED_VERSION:
            # codec.decode_response: such an answer may be laid out as v0
            found = _skim_body(skim_function(API_VERSIONS, 0, "response"), b, p, end)
            if found is not None:
                throttle, error_code, codes, sets = found
                return (throttle, error_code, codes,
                        f"ApiVersions v{api_version} response with UNSUPPORTED_VERSION is laid out as v0", sets)
        found = _skim_body(skim, b, p, end)
        if found is None:
            return None
        throttle, error_code, codes, sets = found
        return throttle, error_code, codes, assumed, sets
    except Exception:
        return None


def _skim_body(skim: Callable, b: bytes, p: int, end: int) -> tuple | None:
    codes: set[int] = set()
    sets: list = []
    try:
        p, throttle, error_code = skim(b, p, end, codes, sets)
    except Exception:
        return None
    if p != end:
        return None
    codes.discard(0)
    return throttle, error_code, sorted(codes) if codes else [], sets
