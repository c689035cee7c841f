"""What the readers of kept answers (kdissect.conn.kept_*) share: the body
version an answer is read as, and a topic's (id, name) pair when it has both.

A kept answer holds its frame and the api version its header named; its
body is read with the definition `resolve_version` picks for that version
(the version itself, or the nearest lower one the spec defines). That
choice depends only on (api key, version), and the tallies read kept
answers once or more per exchange, so it is made once.
"""

from __future__ import annotations

from typing import Final

from kdissect.protocol.schema import resolve_version
from kdissect.protocol.topics import topic_label

# api key << 16 | api version -> the response body version (an int key:
# no tuple is built for a lookup)
_RESPONSE_BODY_VERSIONS: Final[dict[int, int]] = {}
_NULL_ID: Final = bytes(16)


def response_body_version(api_key: int, version: int) -> int:
    """The version whose response definition reads this answer's body.
    Raises KeyError as `resolve_version` does for a version neither direction knows."""
    key = api_key << 16 | version
    found = _RESPONSE_BODY_VERSIONS.get(key)
    if found is None:
        found = _RESPONSE_BODY_VERSIONS[key] = resolve_version(api_key, version, "response")[0]
    return found


def add_id_pair(pairs: list[tuple[str, str]], raw_id: bytes, name: str) -> None:
    """Append a topic's (id text, name) to `pairs` when it has both: a name,
    and a 16-byte id that is not all zeros."""
    if name and raw_id != _NULL_ID:
        label = topic_label(None, raw_id)
        if label is not None:
            pairs.append((label, name))
