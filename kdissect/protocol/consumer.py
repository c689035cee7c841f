"""The consumer group protocol embedded in group-coordination bytes fields.

JoinGroup, SyncGroup and DescribeGroups carry opaque member metadata and
assignments. When the group's protocol type is "consumer" those bytes are an
int16 version followed by ConsumerProtocolSubscription (metadata) or
ConsumerProtocolAssignment (assignment). Where a message version has no
protocol type field, the bytes are decoded tentatively and kept only if they
parse completely. Anything that does not parse stays raw bytes.
"""

from __future__ import annotations

from typing import Any

from kdissect.protocol import primitives as prim
from kdissect.protocol.apis import ApiKey
from kdissect.protocol.model import ConsumerProtocolData, Struct
from kdissect.protocol.objects import EMBEDDED_NAMES, build, embedded_codec, encode_embedded
from kdissect.protocol.primitives import DecodeError
from kdissect.protocol.schema import embedded_versions

__all__ = ["EMBEDDED_APIS", "decode_embedded", "encode_embedded", "new_embedded", "parse_embedded"]

SUBSCRIPTION = "ConsumerProtocolSubscription"
ASSIGNMENT = "ConsumerProtocolAssignment"
_NAME = EMBEDDED_NAMES  # kind -> structure name
_KIND = {name: kind for kind, name in _NAME.items()}
# the APIs whose bodies can carry the consumer protocol
EMBEDDED_APIS = frozenset(int(key) for key in (ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.DESCRIBE_GROUPS))


def parse_embedded(name: str, raw: Any, tentative: bool = False) -> ConsumerProtocolData | None:
    """Decode consumer-protocol bytes, or None when they do not parse.
    Tentative decodes (protocol type unknown) must consume every byte."""
    if not isinstance(raw, bytes) or len(raw) < 2:
        return None
    (version,) = prim.INT16.unpack_from(raw, 0)
    lo, hi = embedded_versions(name)
    if version < lo:
        return None
    try:
        data, pos = embedded_codec(name, min(version, hi)).decode(raw, 2, len(raw))
    except DecodeError:
        return None
    # Newer versions than the spec knows may append fields: accept the prefix.
    if pos != len(raw) and (version <= hi or tentative):
        return None
    return ConsumerProtocolData(_KIND[name], version, data, raw)


def _is_consumer(body: Struct) -> bool | None:
    """True/False from the protocol type field; None when the version has none."""
    if "protocol_type" not in body._fields:
        return None
    return body.protocol_type == "consumer"


def _convert(items: Any, attr: str, name: str, tentative: bool) -> None:
    for item in items or ():
        parsed = parse_embedded(name, getattr(item, attr), tentative)
        if parsed is not None:
            setattr(item, attr, parsed)


def decode_embedded(api_key: int, direction: str, body: Struct) -> None:
    """Replace consumer-protocol bytes in a decoded body by ConsumerProtocolData."""
    if api_key == ApiKey.DESCRIBE_GROUPS:  # protocol type per group
        if direction == "response":
            for group in body.groups or ():
                if getattr(group, "protocol_type", None) == "consumer":
                    _convert(group.members, "member_metadata", SUBSCRIPTION, False)
                    _convert(group.members, "member_assignment", ASSIGNMENT, False)
        return
    consumer = _is_consumer(body)
    if consumer is False:
        return
    tentative = consumer is None
    if api_key == ApiKey.JOIN_GROUP:
        if direction == "request":
            _convert(body.protocols, "metadata", SUBSCRIPTION, tentative)
        else:
            _convert(body.members, "metadata", SUBSCRIPTION, tentative)
    elif api_key == ApiKey.SYNC_GROUP:
        if direction == "request":
            _convert(body.assignments, "assignment", ASSIGNMENT, tentative)
        else:
            parsed = parse_embedded(ASSIGNMENT, body.assignment, tentative)
            if parsed is not None:
                body.assignment = parsed


def new_embedded(kind: str, version: int, **values: Any) -> ConsumerProtocolData:
    """Build a consumer-protocol subscription/assignment from field values
    (spec defaults for the rest); assign it to a JoinGroup/SyncGroup bytes field."""
    name = _NAME[kind]
    _lo, hi = embedded_versions(name)
    data = build(embedded_codec(name, min(version, hi)).cls, values)
    return ConsumerProtocolData(kind, version, data)
