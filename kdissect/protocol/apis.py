"""API keys and names: the generated `ApiKey` enum and `api_name`.

    >>> ApiKey.PRODUCE, api_name(18)
    (<ApiKey.PRODUCE: 0>, 'ApiVersions')

`ApiKey` members are ints: compare them with the api key of a header
(``header.api_key == ApiKey.PRODUCE``) or use them as dictionary keys.
"""

from __future__ import annotations

from kdissect.protocol._generated.api_keys import ApiKey
from kdissect.protocol._generated.index import APIS

__all__ = ["ApiKey", "api_name"]


def api_name(api_key: int) -> str:
    """Kafka's name for an api key ("Produce"), or "Unknown<n>"."""
    entry = APIS.get(api_key)
    return entry[0] if entry else f"Unknown{api_key}"
