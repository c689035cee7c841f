"""Which API answered? Trial decoding of a response whose request is missing.

A response frame names only its correlation id; its layout depends on the
request's API key and version. When the request is not in the capture (it
was sent before the capture started, or lost), the layouts that decode the
frame exactly (every byte consumed, every check passed) are the candidates:

* ApiVersions first (its response header is the same in every version, and
  clients send it first on every connection);
* then the (API, version) pairs this connection already used, newest first;
* then every response layout the protocol tables know.

The first step that finds exactly one layout wins; a step that finds
several is ambiguous. The result is an `Identified` with a verdict:
"assumed" (one layout), "ambiguous" (several; none is applied) or
"unknown" (none).
"""

from __future__ import annotations

from typing import Iterable, NamedTuple

API_VERSIONS = 18


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


def identify(data: bytes, used: Iterable[tuple[int, int]] = (), everything: bool = True) -> Identified:
    """The response layout(s) that decode `data` (a frame after its size
    field); `everything=False` skips the last step (every layout: a few
    milliseconds per frame)."""
    used = list(dict.fromkeys(used))
    steps = [
        [layout for layout in _all_layouts() if layout[0] == API_VERSIONS],
        used,
    ]
    if everything:
        steps.append(_all_layouts())
    for step in steps:
        matches = tuple(layout for layout in step if fits(data, *layout))
        if len(matches) == 1:
            return Identified("assumed", matches[0][0], matches[0][1], matches)
        if matches:
            return Identified("ambiguous", None, None, matches)
    return Identified("unknown", None, None, ())
