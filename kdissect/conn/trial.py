"""Which API answered? Trial decoding of a response whose request is missing.

A response frame names only its correlation id; its layout depends on the
request's API key and version. When the request is not in the capture (it
was sent before the capture started, or lost), the layouts that decode the
frame exactly (every byte consumed, every check passed) are the candidates:

* an ApiVersions response listing at least one API is taken at once (clients
  send ApiVersions first on every connection, and a broker always lists its
  APIs);
* otherwise the frame is tried against every response layout the protocol
  tables know, and its API is taken only when the layouts that fit are all
  versions of one API.

Versions of one API often share a layout (ApiVersions v3 and v4); the bytes
cannot tell them apart, so the newest that fits is applied and all of them
are listed (`candidates`).

Several layouts often fit small responses (an error code alone, a throttle
time and an error code: Heartbeat v1-v3 and LeaveGroup v1-v2 are the same
bytes); the connection's history cannot tell them apart, so such a frame is
"ambiguous" and its candidates are listed, the versions the connection used
first. The result is an `Identified` with a verdict: "assumed" (one layout),
"ambiguous" (several; none is applied) or "unknown" (none).
"""

from __future__ import annotations

from typing import Iterable, NamedTuple

from kdissect.protocol.apis import ApiKey

API_VERSIONS = int(ApiKey.API_VERSIONS)


class Identified(NamedTuple):
    verdict: str  # "assumed", "ambiguous" or "unknown"
    api_key: int | None
    api_version: int | None
    candidates: tuple[tuple[int, int], ...]  # the layouts of the deciding step


_ALL: list[tuple[int, int]] | None = None


def _all_layouts() -> list[tuple[int, int]]:
    global _ALL
    if _ALL is None:
        from kdissect.protocol.schema import api_keys, api_versions

        layouts = []
        for key in api_keys():
            span = api_versions(key).response
            if span:
                layouts += [(key, version) for version in range(span[0], span[1] + 1)]
        _ALL = layouts
    return _ALL


def fits(data: bytes, api_key: int, api_version: int) -> bool:
    """Whether the (api, version) response layout decodes `data` exactly."""
    from kdissect.protocol.skim import skim_response

    found = skim_response(data, api_key, api_version)
    return found is not None and not found[3]  # an assumed version is not an exact fit


def _lists_apis(data: bytes, api_version: int) -> bool:
    from kdissect.protocol import decode_response

    try:
        return bool(decode_response(data, API_VERSIONS, api_version).body.api_keys)
    except Exception:  # noqa: BLE001 - any failure means: not such a response
        return False


def _read_alike(data: bytes, layouts: list[tuple[int, int]]) -> bool:
    """Whether every layout reads the same values from `data` (versions of one
    API that share a layout; fields a version lacks or leaves null aside)."""
    from kdissect.protocol import decode_response
    from kdissect.protocol.render import to_jsonable

    readings = []
    for key, version in layouts:
        try:
            body = to_jsonable(decode_response(data, key, version).body)
        except Exception:  # noqa: BLE001 - it fitted, so this should not happen; then they differ
            return False
        readings.append({name: value for name, value in body.items() if value is not None}
                        if isinstance(body, dict) else body)
    return all(reading == readings[0] for reading in readings)


def identify(data: bytes, used: Iterable[tuple[int, int]] = (), everything: bool = True) -> Identified:
    """The response layout(s) that decode `data` (a frame after its size
    field). `used`: the (API, version) pairs the connection used, listed
    first among ambiguous candidates. `everything=False` skips trying every
    layout (a few milliseconds per frame) and gives "unknown" when the frame
    is not an ApiVersions response."""
    listing = [layout for layout in _all_layouts()
               if layout[0] == API_VERSIONS and fits(data, *layout) and _lists_apis(data, layout[1])]
    if listing:
        newest = listing[-1]
        return Identified("assumed", newest[0], newest[1], tuple(listing))
    if not everything:
        return Identified("unknown", None, None, ())
    matches = [layout for layout in _all_layouts() if fits(data, *layout)]
    if matches and len({key for key, _ in matches}) == 1 and _read_alike(data, matches):
        newest = matches[-1]
        return Identified("assumed", newest[0], newest[1], tuple(matches))
    if matches:
        preferred = [layout for layout in dict.fromkeys(used) if layout in matches]
        ordered = preferred + [layout for layout in matches if layout not in preferred]
        return Identified("ambiguous", None, None, tuple(ordered))
    return Identified("unknown", None, None, ())
