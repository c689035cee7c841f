"""Whole frames: header and body, decoded and encoded.

The bodies are read and written by the compiled codecs of `objects.py`
(code written by `generator.py` from the schema); this module adds the
headers, the version rules (versions assumed from the other direction or
newer than the spec, ApiVersions answered with a v0 body), the leftover-bytes
check, and the consumer group protocol inside group-coordination bytes.

Public:
    decode_request(frame) -> Request
    decode_response(frame, api_key, api_version) -> Response
    encode_request(api_key, api_version, correlation_id, client_id, body, tagged_fields=()) -> bytes
    encode_response(api_key, api_version, correlation_id, body, tagged_fields=()) -> bytes
    encode_message(request_or_response) -> bytes (what was decoded, byte for byte)
    new_body(api_key, api_version, direction, **values) -> Struct (defaults from the spec)
    DecodeError (the only exception decoding raises)

Frames exclude the 4-byte size prefix, on input and output.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable

from kdissect.protocol import primitives as prim
from kdissect.protocol.apis import ApiKey
from kdissect.protocol.consumer import EMBEDDED_APIS, decode_embedded
from kdissect.protocol.headers import read_request_header_layout, read_response_header, write_request_header
from kdissect.protocol.model import ConsumerProtocolData, Request, RequestHeader, Response, ResponseHeader, Struct
from kdissect.protocol.objects import (
    MessageCodec,
    body_class,
    build,
    embedded_codec,
    message_codec,
    new_body,
)
from kdissect.protocol.primitives import DecodeError, EncodeError
from kdissect.protocol.schema import UNSUPPORTED_VERSION, header_versions, resolve_version

__all__ = [
    "ConsumerProtocolData", "DecodeError", "EncodeError", "MessageCodec", "Request", "Response", "Struct",
    "body_class", "build", "decode_request", "decode_response", "embedded_codec", "encode_message",
    "encode_request", "encode_response", "frame_with_size", "message_codec", "new_body",
]

_CORRELATION = prim.INT32.unpack_from
# plain ints for the per-frame checks: reading an enum member costs ~0.3 µs in Python 3.11
_API_VERSIONS = int(ApiKey.API_VERSIONS)


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
    if header.api_key in EMBEDDED_APIS:
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
    if api_key == _API_VERSIONS and body_version > 0 and end - pos >= 2 and \
            prim.INT16.unpack_from(buf, pos)[0] == UNSUPPORTED_VERSION:
        # The broker answers an unsupported ApiVersions version with a v0 body.
        try:
            body, stop = message_codec(ApiKey.API_VERSIONS, 0, "response").decode(buf, pos, end)
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
    if api_key in EMBEDDED_APIS:
        decode_embedded(api_key, "response", body)
    return Response(api_key, api_version, header, body, body_version, assumed)


def encode_request_parts(header: RequestHeader, body: Any, body_version: int | None = None) -> bytes:
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


def encode_message(message: Request | Response) -> bytes:
    """The frame (without the size prefix) of a decoded or built request or
    response, laid out as the version it was decoded with: an accepted frame
    encodes back to identical bytes."""
    if isinstance(message, Request):
        return encode_request_parts(message.header, message.body, message.body_version)
    if isinstance(message, Response):
        return encode_response_parts(message.api_key, message.header, message.body, message.body_version)
    raise EncodeError(f"expected a Request or Response, got {type(message).__name__}")


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
