"""Request and response headers, and cheap checks on raw frame prefixes.

Header versions follow the message's flexibility (request header v2 /
response header v1 for flexible versions) with two exceptions: ApiVersions
responses always use response header v0, and ControlledShutdown v0 requests
have no client id (request header v0). The client id is never a compact
string, even in header v2.
"""

from __future__ import annotations

import struct
from functools import lru_cache

from kdissect.protocol import primitives as prim
from kdissect.protocol._generated.index import APIS
from kdissect.protocol.apis import ApiKey, api_name
from kdissect.protocol.model import RequestHeader, ResponseHeader
from kdissect.protocol.primitives import DecodeError
from kdissect.protocol.schema import API_VERSIONS_SLACK, get_schema, header_versions, resolve_version

__all__ = [
    "api_name", "client_id_is_text", "looks_like_request", "peek_client_id", "peek_request_header",
    "read_request_header",
    "read_request_header_layout", "read_response_header", "request_layout", "write_request_header",
]

_HEAD = prim.INT16  # reused layouts
_KEY_VERSION_CORR = struct.Struct(">hhi")
# plain ints for the per-frame checks: reading an enum member costs ~0.3 µs in Python 3.11
_CONTROLLED_SHUTDOWN = int(ApiKey.CONTROLLED_SHUTDOWN)


@lru_cache(maxsize=None)
def _union_span(api_key: int) -> tuple[int, int] | None:
    entry = APIS.get(api_key)
    if entry is None:
        return None
    spans = [s for s in (entry[2], entry[3]) if s is not None]
    low, high = min(s[0] for s in spans), max(s[1] for s in spans)
    if api_key == ApiKey.API_VERSIONS:
        high += API_VERSIONS_SLACK  # clients probe with versions newer than the spec
    return low, high


@lru_cache(maxsize=None)
def request_layout(api_key: int, api_version: int) -> tuple[int, int, str | None]:
    """(request header version, body version, assumed-version problem | None).
    KeyError when the version is defined in neither direction."""
    body_version, problem = resolve_version(api_key, api_version, "request")
    flexible = get_schema(api_key, body_version, "request").flexible
    return header_versions(api_key, api_version if problem is None else body_version, flexible)[0], \
        body_version, problem


def peek_request_header(frame: bytes) -> tuple[int, int, int] | None:
    """(api_key, api_version, correlation_id) from the first 8 bytes, or None."""
    try:
        if len(frame) < 8:
            return None
        return _KEY_VERSION_CORR.unpack_from(frame, 0)
    except Exception:
        return None


def peek_client_id(prefix: bytes, api_key: int, api_version: int) -> str | None:
    """The client id from the captured start of a request header (a frame
    cut short still has it), or None when absent or not all captured."""
    if api_key == _CONTROLLED_SHUTDOWN and api_version == 0:  # ControlledShutdown v0: no client id
        return None
    if len(prefix) < 10:
        return None
    length = _HEAD.unpack_from(prefix, 8)[0]
    if length < 0 or 10 + length > len(prefix):
        return None
    return prefix[10 : 10 + length].decode("utf-8", "replace")


def looks_like_request(prefix: bytes, frame_size: int, text_client_id: bool = True) -> bool:
    """Whether `prefix` (the first bytes of a frame of `frame_size` bytes,
    size prefix excluded) plausibly starts a Kafka request: known api key,
    version within the union of its request/response versions, and a client
    id length that fits in the frame. With `text_client_id` (the default),
    the client id's bytes in `prefix` must also be printable: enough to take
    a header on sight. Without it, a client id with control bytes (a hostile
    client's, or a binary one) passes too, and the caller must find other
    evidence (the whole frame decoding). Never raises."""
    try:
        if frame_size < 8 or len(prefix) < 8:
            return False
        api_key, api_version, _corr = _KEY_VERSION_CORR.unpack_from(prefix, 0)
        span = _union_span(api_key)
        if span is None or not span[0] <= api_version <= span[1]:
            return False
        if api_key == _CONTROLLED_SHUTDOWN and api_version == 0:  # no client id
            return True
        if frame_size < 10:
            return False
        if len(prefix) >= 10:
            (length,) = _HEAD.unpack_from(prefix, 8)
            if length < -1 or length > frame_size - 10:
                return False
            if text_client_id and not client_id_is_text(prefix):
                return False
        return True
    except Exception:
        return False


def client_id_is_text(prefix: bytes) -> bool:
    """Whether the client id bytes in `prefix` (a request's first bytes, its
    header v1+ shape assumed) hold no C0 control byte or DEL. Never raises."""
    if len(prefix) < 10:
        return True
    (length,) = _HEAD.unpack_from(prefix, 8)
    shown = prefix[10:10 + max(length, 0)]
    return not any(byte < 0x20 or byte == 0x7F for byte in shown)


def read_request_header(buf: bytes) -> tuple[RequestHeader, int, int, str | None]:
    """Decode the header; returns (header, body offset, body version, assumed problem)."""
    header, pos, _layout = read_request_header_layout(buf)
    return header, pos, _layout[1], _layout[2]


def read_request_header_layout(buf: bytes) -> tuple[RequestHeader, int, tuple[int, int, str | None]]:
    """Like read_request_header, also returning the cached request_layout tuple."""
    end = len(buf)
    if end < 8:
        raise DecodeError(0, "header", f"frame of {end} bytes is too short for a request header")
    api_key, api_version, correlation_id = _KEY_VERSION_CORR.unpack_from(buf, 0)
    try:
        layout = request_layout(api_key, api_version)
    except KeyError:
        if api_key not in APIS:
            raise DecodeError(0, "header.api_key", f"unknown api key {api_key}") from None
        raise DecodeError(2, "header.api_version",
                          f"{api_name(api_key)} request version {api_version} is not defined") from None
    header_version = layout[0]
    client_id = None
    tags: list[tuple[int, bytes]] = []
    pos = 8
    if header_version >= 1:
        if end < 10:
            raise DecodeError(8, "header.client_id", "truncated")
        (length,) = _HEAD.unpack_from(buf, 8)
        pos = 10
        if length >= 0:
            if pos + length > end:
                raise DecodeError(8, "header.client_id", f"length {length} exceeds the {end - pos} bytes left")
            client_id = str(buf[pos:pos + length], "utf-8", "surrogateescape")
            pos += length
        elif length != -1:
            raise DecodeError(8, "header.client_id", f"negative length {length}")
        if header_version >= 2:
            if pos < end and buf[pos] == 0:
                pos += 1
            else:
                start = pos
                try:
                    tags, pos = prim.read_unknown_tags(buf, pos, end)
                except Exception as problem:
                    reason = "truncated" if isinstance(problem, IndexError) else str(problem)
                    raise DecodeError(start, "header.tagged_fields", reason) from None
    header = RequestHeader(api_key, api_version, correlation_id, client_id, tags, header_version)
    return header, pos, layout


def read_response_header(buf: bytes, header_version: int) -> tuple[ResponseHeader, int]:
    if len(buf) < 4:
        raise DecodeError(0, "header", f"frame of {len(buf)} bytes is too short for a response header")
    (correlation_id,) = prim.INT32.unpack_from(buf, 0)
    pos = 4
    tags: list[tuple[int, bytes]] = []
    if header_version >= 1:
        try:
            tags, pos = prim.read_unknown_tags(buf, pos, len(buf))
        except DecodeError:
            raise
        except Exception as problem:
            reason = "truncated" if isinstance(problem, IndexError) else str(problem)
            raise DecodeError(pos, "header.tagged_fields", reason) from None
    return ResponseHeader(correlation_id, tags, header_version), pos


def write_request_header(header: RequestHeader, flexible: bool) -> bytes:
    version = header_versions(header.api_key, header.api_version, flexible)[0]
    out = bytearray(_KEY_VERSION_CORR.pack(header.api_key, header.api_version, header.correlation_id))
    if version >= 1:
        out += prim.len16(header.client_id)
    if version >= 2:
        out += prim.write_unknown_tags(header.tagged_fields)
    return bytes(out)
