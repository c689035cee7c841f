"""Skim decoders: validate a frame like the full decoder, keep only row figures.

The exchange table needs a handful of values per frame (header fields, acks,
throttle time, error codes, record sets), not the decoded objects. A skim
decoder checks a frame exactly as the full decoder does and keeps only
those (`skim_code` writes them: one function per frame layout). This module
finds the skim of a frame and runs it; it is compiled with mypyc
(kdissect/native.py), as are the skims of Produce, Fetch and ShareFetch
(`_generated.skims`), so pairing's calls stay C calls down to them.

Public:
    skim_request(frame) -> (api_key, api_version, correlation_id, client_id,
                            expects_response, starts_raw_sasl, record_sets) | None
    skim_response(frame, api_key, api_version) -> (throttle_time_ms, error_code,
                            error_codes, assumed_version, record_sets) | None
    frame_skim(api_key, version, direction, header_version) -> the skim of one layout

None means "rejected": the caller decodes with the full decoder, which raises
the exact DecodeError. Neither function raises.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, Final, cast

from kdissect.protocol import primitives as prim
from kdissect.protocol._generated.skims import REQUEST_SKIMS, RESPONSE_SKIMS, RequestFigures, ResponseFigures
from kdissect.protocol.apis import ApiKey
from kdissect.protocol.headers import request_layout
from kdissect.protocol.schema import UNSUPPORTED_VERSION, get_schema, header_versions, resolve_version
from kdissect.protocol.skim_code import compiled_skim

__all__ = ["frame_skim", "skim_request", "skim_response"]

RequestSkim = Callable[[bytes], RequestFigures | None]
ResponseSkim = Callable[[bytes, str | None], ResponseFigures | None]

# (the tables are Final: the compiled module holds them, no lookup by name)
_FRAMES: Final[dict[tuple[int, int, str, int], Callable[..., Any]]] = {}


def frame_skim(api_key: int, version: int, direction: str, header_version: int) -> Callable[..., Any]:
    """The skim function of a defined body version with a given header
    version; KeyError if undefined. Requests: fn(frame); responses:
    fn(frame, assumed) (see skim_request / skim_response for the results).
    The layouts of `skim_code.AHEAD_APIS` come compiled from
    `_generated.skims`, the others are written and compiled on first use."""
    key = (api_key, version, direction, header_version)
    found = _FRAMES.get(key)
    if found is None:
        ahead: dict[tuple[int, int, int], Callable[..., Any]] = \
            REQUEST_SKIMS if direction == "request" else RESPONSE_SKIMS  # type: ignore[assignment]
        found = ahead.get((api_key, version, header_version))
        if found is None:
            found = compiled_skim(api_key, version, direction, header_version)
        _FRAMES[key] = found
    return found


# ------------------------------------------------------------------ requests

# first 4 bytes of a request (api key, api version) -> frame skim
_REQUEST_PLANS: Final[dict[bytes, RequestSkim]] = {}


def skim_request(frame: Any) -> RequestFigures | None:
    """(api_key, api_version, correlation_id, client_id, expects_response,
    starts_raw_sasl, record_sets) of a request frame the full decoder accepts;
    None when it would reject it (or anything unexpected happens)."""
    try:
        b: bytes = frame if type(frame) is bytes else bytes(frame)
        skim = _REQUEST_PLANS.get(b[:4])
        if skim is None:
            api_key, api_version = prim.INT16.unpack_from(b, 0)[0], prim.INT16.unpack_from(b, 2)[0]
            header_version, body_version, _problem = request_layout(api_key, api_version)
            skim = cast(RequestSkim, frame_skim(api_key, body_version, "request", header_version))
            _REQUEST_PLANS[b[:4]] = skim
        return skim(b)
    except Exception:  # rejected (or a bug): the full decoder decides and explains
        return None


# ------------------------------------------------------------------ responses

# (api key, api version of the request) -> (frame skim, assumed-version text)
_RESPONSE_PLANS: Final[dict[tuple[int, int], tuple[ResponseSkim, str | None]]] = {}


def _response_plan(api_key: int, api_version: int) -> tuple[ResponseSkim, str | None]:
    """As codec._response_plan, with the skim in place of the codec."""
    body_version, assumed = resolve_version(api_key, api_version, "response")
    flexible = get_schema(api_key, body_version, "response").flexible
    header_version = header_versions(api_key, body_version, flexible)[1]
    skim = cast(ResponseSkim, frame_skim(api_key, body_version, "response", header_version))
    if api_key == ApiKey.API_VERSIONS and body_version > 0:
        v0 = cast(ResponseSkim, frame_skim(ApiKey.API_VERSIONS, 0, "response", header_version))
        return partial(_api_versions, skim, v0, api_version), assumed
    return skim, assumed


def _api_versions(skim: ResponseSkim, v0: ResponseSkim, api_version: int, b: bytes,
                  assumed: str | None) -> ResponseFigures | None:
    """codec.decode_response: an UNSUPPORTED_VERSION answer may be laid out as v0."""
    if len(b) >= 6 and prim.INT16.unpack_from(b, 4)[0] == UNSUPPORTED_VERSION:
        try:
            found = v0(b, f"ApiVersions v{api_version} response with UNSUPPORTED_VERSION is laid out as v0")
        except Exception:
            found = None
        if found is not None:
            return found
    return skim(b, assumed)


def skim_response(frame: Any, api_key: int, api_version: int) -> ResponseFigures | None:
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
