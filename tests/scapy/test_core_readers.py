"""The Scapy layers read with the core's readers, so they accept and reject
the same bytes as the core decoder (kdissect.protocol.primitives)."""

from __future__ import annotations

import struct

import pytest
from scapy.packet import Packet, Raw

from kdissect import DecodeError, decode_response
from kdissect.protocol.schema import get_schema
from kdissect.scapy import ApiVersionsResponse, dissect_response
from kdissect.scapy.fields import UVarIntField, VarIntField


def _apiversions_v3_with_tags(entries: list[tuple[int, bytes]]) -> bytes:
    """An ApiVersions v3 response (header v0) whose top-level tag section holds `entries`."""
    body = struct.pack(">h", 0) + b"\x01" + struct.pack(">i", 0)  # no error, no api keys, throttle 0
    tags = bytes((len(entries),)) + b"".join(bytes((tag, len(value))) + value for tag, value in entries)
    return struct.pack(">i", 7) + body + tags


def _core_accepts(frame: bytes) -> bool:
    try:
        decode_response(frame, 18, 3)
    except DecodeError:
        return False
    return True


@pytest.mark.parametrize("entries", [
    [(1, struct.pack(">q", 5))],  # FinalizedFeaturesEpoch
    [(1, struct.pack(">q", 5)), (1, struct.pack(">q", 6))],  # a known tag repeated
    [(30, b"x"), (30, b"yz")],  # unknown tags may repeat
    [(1, struct.pack(">q", 5) + b"\x00")],  # value shorter than its declared size
    [(1, struct.pack(">i", 5))],  # value longer than its declared size
    [(3, b"\x02")],  # ZkMigrationReady: a bool byte that is not 0 or 1
    [(3, b"\x01")],
])
def test_tag_sections_accepted_as_by_the_core(entries: list[tuple[int, bytes]]) -> None:
    frame = _apiversions_v3_with_tags(entries)
    packet = dissect_response(struct.pack(">i", len(frame)) + frame, 18, 3)
    assert (ApiVersionsResponse in packet and Raw not in packet) == _core_accepts(frame)
    assert "finalized_features_epoch" in {f.attr for f in get_schema(18, 3, "response").fields}
    if _core_accepts(frame) and entries[0][0] == 1:
        assert packet[ApiVersionsResponse].finalized_features_epoch == 5


def test_varints_are_checked_as_by_the_core() -> None:
    class Varints(Packet):
        fields_desc = [UVarIntField("u", 0), VarIntField("s", 0)]

    assert Varints(b"\x05\x03").u == 5
    with pytest.raises(Exception, match="non-minimal"):
        Varints(b"\x85\x00\x03")  # 5 written in two bytes: the core rejects it too
    with pytest.raises(Exception, match="out of range"):
        Varints(b"\x00\xff\xff\xff\xff\x7f")  # a zigzag int32 needing more than 32 bits
