"""ApiVersions requests kept for the tables that read them, as their frames.

A pairer keeping the messages of some APIs (`Pairer(keep_apis=...)`: the
forensic tallies) keeps an ApiVersions request as its frame, not decoded,
where the skim accepted it (the skim has checked it exactly as the full
decoder would; of an ApiVersions exchange only the request is kept). What
the client tally (kdissect.forensics.clients) reads of it, the client
software's name and version (KIP-511, v3+), is read straight from the bytes
here. Any request the skim turned down is decoded and kept whole.

`ApiVersionsRequestFrame.software()` gives what the client tally reads of
the decoded request (tests/conn/test_kept_api_versions.py compares them on
every bundled capture, on damaged copies and on built frames of every
version).
"""

from __future__ import annotations

from kdissect.conn.kept_produce import length_at, request_body_at

_API_VERSIONS = 18


class ApiVersionsRequestFrame:
    """An ApiVersions request the skim accepted, kept as its frame (header included)."""

    __slots__ = ("frame",)

    def __init__(self, frame: bytes) -> None:
        self.frame = frame

    def software(self) -> tuple[str | None, str | None]:
        """(client software name, its version), None for each before v3."""
        return read_client_software(self.frame)


def read_client_software(b: bytes) -> tuple[str | None, str | None]:
    """`ApiVersionsRequestFrame.software` of a request frame the skim
    accepted (anything else may raise): from v3 on (every such version is
    flexible) the body starts with the two strings."""
    version, at = request_body_at(b, _API_VERSIONS)
    if version < 3:
        return None, None
    found: list[str | None] = []
    for _field in range(2):  # the software's name, then its version
        size, at = length_at(b, at, True, False)
        found.append(b[at:at + size].decode("utf-8", "surrogateescape") if size >= 0 else None)
        at += max(size, 0)
    return found[0], found[1]
