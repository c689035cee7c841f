"""JoinGroup exchanges kept for the tables that read them, as their frames.

A pairer keeping the messages of some APIs (`Pairer(keep_apis=...)`: the
forensic tallies) keeps a JoinGroup request, and an answer that carries no
error code, as its frame, not decoded, where the skim accepted it (the skim
has checked it exactly as the full decoder would). The group tally
(kdissect.forensics.groups) reads a few fields of them: the group, member
id and protocol type of the request; the generation, protocol, leader,
member id and the members' ids of the answer. A full decode builds every
protocol's and member's metadata besides, which made the JoinGroup answer
one of the costliest messages the tallies decoded. An answer carrying an
error code is decoded and kept whole, as is any message the skim turned
down.

Each frame's `body` is a small object holding those fields under the
decoded body's names (None where the version has no such field, as the
tally reads a decoded body with getattr), so the tally reads either form
alike (tests/conn/test_kept_join_group.py compares them with the full
decoder's on every bundled capture, on damaged copies and on built frames
of every version).
"""

from __future__ import annotations

from kdissect.conn.arrivals import int16_at, int32_at, skip_tags_at
from kdissect.conn.kept_produce import length_at, request_body_at
from kdissect.conn.kept_reading import response_body_version

_JOIN_GROUP = 11


def _string_at(b: bytes, at: int, flexible: bool) -> tuple[str | None, int]:
    """A (nullable) string at `at`, as the decoder reads it, and the offset after it."""
    size, at = length_at(b, at, flexible, False)
    if size < 0:
        return None, at
    return b[at:at + size].decode("utf-8", "surrogateescape"), at + size


class JoinGroupRequestFields:
    """What the group tally reads of a JoinGroup request."""

    __slots__ = ("group_id", "member_id", "protocol_type")

    def __init__(self, group_id: str | None, member_id: str | None, protocol_type: str | None) -> None:
        self.group_id = group_id
        self.member_id = member_id
        self.protocol_type = protocol_type


class JoinGroupRequestFrame:
    """A JoinGroup request the skim accepted, kept as its frame (header included)."""

    __slots__ = ("frame",)

    def __init__(self, frame: bytes) -> None:
        self.frame = frame

    @property
    def body(self) -> JoinGroupRequestFields:
        return read_join_group_request(self.frame)


def read_join_group_request(b: bytes) -> JoinGroupRequestFields:
    """`JoinGroupRequestFrame.body` of a request frame the skim accepted
    (anything else may raise)."""
    version, at = request_body_at(b, _JOIN_GROUP)
    flexible = version >= 6
    group_id, at = _string_at(b, at, flexible)
    at += 8 if version >= 1 else 4  # session timeout, rebalance timeout
    member_id, at = _string_at(b, at, flexible)
    if version >= 5:
        _instance, at = _string_at(b, at, flexible)  # group instance id
    protocol_type, at = _string_at(b, at, flexible)
    return JoinGroupRequestFields(group_id, member_id, protocol_type)


class JoinGroupMember:
    """A member of a JoinGroup answer, as the group tally reads it."""

    __slots__ = ("member_id",)

    def __init__(self, member_id: str | None) -> None:
        self.member_id = member_id


class JoinGroupAnswerFields:
    """What the group tally reads of a JoinGroup answer."""

    __slots__ = ("error_code", "generation_id", "protocol_type", "protocol_name", "leader", "member_id", "members")

    def __init__(self, error_code: int, generation_id: int, protocol_type: str | None, protocol_name: str | None,
                 leader: str | None, member_id: str | None, members: list[JoinGroupMember]) -> None:
        self.error_code = error_code
        self.generation_id = generation_id
        self.protocol_type = protocol_type  # (None before v7, which has no such field)
        self.protocol_name = protocol_name
        self.leader = leader
        self.member_id = member_id
        self.members = members


class JoinGroupResponseFrame:
    """A JoinGroup response the skim accepted without any error code, kept
    as its frame (header included) and its request's api version."""

    __slots__ = ("frame", "version")

    def __init__(self, frame: bytes, version: int) -> None:
        self.frame = frame
        self.version = version

    @property
    def body(self) -> JoinGroupAnswerFields:
        version = response_body_version(_JOIN_GROUP, self.version)
        return read_join_group_response(self.frame, version)


def read_join_group_response(b: bytes, version: int) -> JoinGroupAnswerFields:
    """`JoinGroupResponseFrame.body` of a response frame of body `version`
    the skim accepted (anything else may raise)."""
    flexible = version >= 6
    at = skip_tags_at(b, 4) if flexible else 4  # correlation id (header tags)
    if version >= 2:
        at += 4  # throttle time
    error_code = int16_at(b, at)
    generation_id = int32_at(b, at + 2)
    at += 6
    protocol_type: str | None = None
    if version >= 7:
        protocol_type, at = _string_at(b, at, flexible)
    protocol_name, at = _string_at(b, at, flexible)
    leader, at = _string_at(b, at, flexible)
    if version >= 9:
        at += 1  # skip assignment
    member_id, at = _string_at(b, at, flexible)
    count, at = length_at(b, at, flexible, True)
    members: list[JoinGroupMember] = []
    for _ in range(max(count, 0)):
        member, at = _string_at(b, at, flexible)
        members.append(JoinGroupMember(member))
        if version >= 5:
            _instance, at = _string_at(b, at, flexible)  # group instance id
        size, at = length_at(b, at, flexible, True)  # metadata
        at += max(size, 0)
        if flexible:
            at = skip_tags_at(b, at)
    return JoinGroupAnswerFields(error_code, generation_id, protocol_type, protocol_name, leader, member_id, members)
