"""Per-version view of the generated protocol tables.

The generated tables (``kdissect.protocol._generated``) keep fields with
version ranges. This module resolves them for one (api key, version,
direction): which fields exist, which are nullable or tagged, and their
defaults. The codec, the Scapy classes and the summaries all build on it.

Public:
    api_keys() -> list[int]
    api_versions(api_key) -> ApiInfo(name, request=(lo, hi), response=(lo, hi))
    get_schema(api_key, version, "request"|"response") -> MessageSchema
    resolve_version(api_key, version, direction) -> (defined version, problem | None)
    embedded_schema(name, version) -> MessageSchema  (consumer protocol)
    snake_case(spec_name) -> str
"""

from __future__ import annotations

import importlib
import re
import uuid
from functools import lru_cache
from typing import Any, NamedTuple

from kdissect.model.packet import FrozenSlotRecord
from kdissect.protocol._generated.index import APIS
from kdissect.protocol.apis import ApiKey

PRIMITIVE_TYPES = frozenset(
    {"bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64",
     "string", "bytes", "records", "uuid"}
)
ZERO_UUID = uuid.UUID(int=0)
DIRECTIONS = ("request", "response")
API_VERSIONS_SLACK = 4  # newer ApiVersions versions accepted (see resolve_version)
# the error code a broker answers an ApiVersions request of a version it does
# not support with, in a v0 body (the codec and the skim read such answers as v0)
UNSUPPORTED_VERSION = 35


class ApiInfo(NamedTuple):
    name: str
    request: tuple[int, int] | None
    response: tuple[int, int] | None


class FieldSchema(FrozenSlotRecord):
    """One field of a message or struct, resolved for one version."""

    __slots__ = ("name", "attr", "type", "element", "is_array", "nullable", "tagged", "tag", "default", "fields",
                 "flexible", "secret", "struct_name")

    # (the fields, for type checkers: __init__ stores them with _set_fields)
    name: str
    attr: str
    type: str
    element: str
    is_array: bool
    nullable: bool
    tagged: bool
    tag: int | None
    default: Any
    fields: tuple[FieldSchema, ...] | None
    flexible: bool
    secret: bool
    struct_name: str | None

    def __init__(self,
                 name: str,  # spec name, e.g. "PartitionIndex"
                 attr: str,  # snake_case name used on decoded objects
                 type: str,  # spec type, e.g. "int32", "[]string", "[]TopicData", "Cursor"
                 element: str,  # for arrays the element type, else same as type ("struct" for structs)
                 is_array: bool,
                 nullable: bool,
                 tagged: bool,
                 tag: int | None,
                 default: Any,  # resolved default (for arrays: None or the empty-list marker [])
                 fields: tuple[FieldSchema, ...] | None,  # nested struct fields, or None
                 flexible: bool,  # whether the enclosing message version is flexible
                 secret: bool = False,
                 struct_name: str | None = None,  # spec struct name for struct / struct-array types
                 ) -> None:
        self._set_fields(name, attr, type, element, is_array, nullable, tagged, tag, default, fields, flexible,
                         secret, struct_name)

    @property
    def is_struct(self) -> bool:
        return self.fields is not None


class MessageSchema(FrozenSlotRecord):
    __slots__ = ("api_key", "name", "version", "direction", "flexible", "fields", "source", "header_version", "extra")

    # (the fields, for type checkers: __init__ stores them with _set_fields)
    api_key: int | None
    name: str
    version: int
    direction: str
    flexible: bool
    fields: tuple[FieldSchema, ...]
    source: str
    header_version: int | None
    extra: dict

    def __init__(self,
                 api_key: int | None,
                 name: str,  # e.g. "ProduceRequest"
                 version: int,
                 direction: str,
                 flexible: bool,
                 fields: tuple[FieldSchema, ...],
                 source: str,  # spec set the definition came from
                 header_version: int | None = None,  # request/response header version (None for embedded)
                 extra: dict | None = None,  # None: a new empty dict
                 ) -> None:
        self._set_fields(api_key, name, version, direction, flexible, fields, source, header_version,
                         {} if extra is None else extra)


def snake_case(name: str) -> str:
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    text = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", text)
    return text.lower()


def in_range(version: int, span: tuple[int, int | None] | None) -> bool:
    if span is None:
        return False
    lo, hi = span
    return version >= lo and (hi is None or version <= hi)


def api_keys() -> list[int]:
    return sorted(APIS)


def api_versions(api_key: int) -> ApiInfo:
    """Name and merged version spans of one API (KeyError if unknown)."""
    name, _module, req, resp = APIS[api_key]
    return ApiInfo(name, req, resp)


def _api_module(api_key: int) -> Any:
    """The generated module of one API, loaded on first use (the tables of
    every API take about a tenth of a second to load)."""
    return importlib.import_module(f"kdissect.protocol._generated.{APIS[api_key][1]}")


@lru_cache(maxsize=None)
def _segments(api_key: int, direction: str) -> list[dict]:
    module = _api_module(api_key)
    return module.REQUEST if direction == "request" else module.RESPONSE


def _find_segment(segments: list[dict], version: int) -> dict | None:
    for seg in segments:
        lo, hi = seg["versions"]
        if lo <= version <= hi:
            return seg
    return None


def defined_versions(api_key: int, direction: str) -> list[int]:
    if api_key not in APIS:
        return []
    return [v for seg in _segments(api_key, direction) for v in range(seg["versions"][0], seg["versions"][1] + 1)]


def resolve_version(api_key: int, version: int, direction: str) -> tuple[int, str | None]:
    """Map a version to the version whose definition decodes it.

    Returns (version, None) when the version is defined for this direction.
    When it is defined only for the other direction, returns the nearest lower
    defined version and a problem text; likewise an ApiVersions version up to
    API_VERSIONS_SLACK above the newest known. Raises KeyError when neither
    direction knows the version (or the api key is unknown).
    """
    if api_key not in APIS:
        raise KeyError(f"unknown api key {api_key}")
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be 'request' or 'response', not {direction!r}")
    mine = defined_versions(api_key, direction)
    if version in mine:
        return version, None
    other = "response" if direction == "request" else "request"
    if version in defined_versions(api_key, other):
        lower = [v for v in mine if v < version]
        if lower:
            used = max(lower)
            return used, (
                f"{APIS[api_key][0]} {direction} v{version} is not in the spec; "
                f"decoded as v{used}"
            )
    if api_key == ApiKey.API_VERSIONS and mine and max(mine) < version <= max(mine) + API_VERSIONS_SLACK:
        # Clients open with their newest ApiVersions version, which may be newer
        # than the spec; the broker answers such requests with a v0 error body.
        return max(mine), (
            f"ApiVersions {direction} v{version} is newer than the spec; decoded as v{max(mine)}"
        )
    raise KeyError(f"{APIS[api_key][0]} {direction} version {version} is not defined")


def _zero(ftype: str) -> Any:
    if ftype in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
        return 0
    if ftype == "float64":
        return 0.0
    if ftype == "bool":
        return False
    if ftype == "string":
        return ""
    if ftype == "bytes":
        return b""
    if ftype == "uuid":
        return ZERO_UUID
    return None  # records


def _resolve_fields(raw: list[dict], version: int, flexible: bool) -> tuple[FieldSchema, ...]:
    out = []
    for item in raw:
        if not in_range(version, item["versions"]):
            continue
        ftype = item["type"]
        is_array = ftype.startswith("[]")
        base = ftype[2:] if is_array else ftype
        nested = item.get("fields")
        fields = _resolve_fields(nested, version, flexible) if nested is not None else None
        nullable = in_range(version, item.get("nullable"))
        tagged = flexible and in_range(version, item.get("tagged"))
        if "default" in item:
            default = item["default"]
            if base == "uuid" and default is not None and not isinstance(default, uuid.UUID):
                default = uuid.UUID(default) if default else ZERO_UUID
        elif is_array:
            default = []
        elif fields is not None:
            default = None  # a default struct instance; built by the codec
        else:
            default = _zero(base)
        out.append(
            FieldSchema(
                name=item["name"],
                attr=snake_case(item["name"]),
                type=ftype,
                element="struct" if fields is not None else base,
                is_array=is_array,
                nullable=nullable,
                tagged=tagged,
                tag=item.get("tag") if tagged else None,
                default=default,
                fields=fields,
                flexible=flexible,
                secret=bool(item.get("secret")),
                struct_name=base if fields is not None else None,
            )
        )
    return tuple(out)


def header_versions(api_key: int, version: int, flexible: bool) -> tuple[int, int]:
    """(request header version, response header version) for a message version."""
    if api_key == ApiKey.CONTROLLED_SHUTDOWN and version == 0:  # no client id
        request_header = 0
    else:
        request_header = 2 if flexible else 1
    if api_key == ApiKey.API_VERSIONS:  # ApiVersions responses always use header v0
        response_header = 0
    else:
        response_header = 1 if flexible else 0
    return request_header, response_header


@lru_cache(maxsize=None)
def get_schema(api_key: int, version: int, direction: str) -> MessageSchema:
    """Resolved schema of one defined (api key, version, direction); KeyError if undefined."""
    if api_key not in APIS:
        raise KeyError(f"unknown api key {api_key}")
    seg = _find_segment(_segments(api_key, direction), version)
    if seg is None:
        raise KeyError(f"{APIS[api_key][0]} {direction} version {version} is not defined")
    flexible = in_range(version, seg["flexible"])
    req_hdr, resp_hdr = header_versions(api_key, version, flexible)
    return MessageSchema(
        api_key=api_key,
        name=APIS[api_key][0] + ("Request" if direction == "request" else "Response"),
        version=version,
        direction=direction,
        flexible=flexible,
        fields=_resolve_fields(seg["fields"], version, flexible),
        source=seg["source"],
        header_version=req_hdr if direction == "request" else resp_hdr,
    )


@lru_cache(maxsize=None)
def embedded_schema(name: str, version: int) -> MessageSchema:
    """Schema of an embedded consumer-protocol structure (KeyError if undefined)."""
    seg = _find_segment(_embedded_segments(name), version)
    if seg is None:
        raise KeyError(f"{name} version {version} is not defined")
    flexible = in_range(version, seg["flexible"])
    return MessageSchema(
        api_key=None, name=name, version=version, direction="data", flexible=flexible,
        fields=_resolve_fields(seg["fields"], version, flexible), source=seg["source"],
    )


def _embedded_segments(name: str) -> list[dict]:
    """The consumer-protocol tables, loaded on first use (only group
    coordination messages carry them)."""
    return importlib.import_module("kdissect.protocol._generated.embedded").EMBEDDED[name]


def embedded_versions(name: str) -> tuple[int, int]:
    versions = [v for seg in _embedded_segments(name) for v in range(seg["versions"][0], seg["versions"][1] + 1)]
    return min(versions), max(versions)
