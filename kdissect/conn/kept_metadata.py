"""Metadata answers and requests kept for the tables that read them, as their frames.

A pairer keeping the messages of some APIs (`Pairer(keep_apis=...)`: the
forensic tallies, the topic names of a Spark run) keeps a Metadata answer
that carries no error code as its frame, not decoded, where the skim
accepted it (the skim has checked it exactly as the full decoder would).
What is read of it is the (topic id, name) pairs it holds
(kdissect.protocol.topics.TopicNames), straight from the bytes here: a full
decode builds every broker, partition and replica list, and a UUID object
per topic, which cost about as much as the rest of the exchange. An answer
carrying an error code is decoded and kept whole (the per-partition errors
are wanted too), as is any answer the skim turned down. A Metadata request
the skim accepted is kept as its frame too (`MetadataRequestFrame`): from
version 10 on it may name topics by id and name.

`MetadataResponseFrame.topic_pairs()` and `MetadataRequestFrame.topic_pairs()`
give what `TopicNames.learn_body` finds in the decoded message, in the same order (tests/conn/test_kept_metadata.py
compares them on every bundled capture and on built frames of every version).
"""

from __future__ import annotations

from kdissect.conn.arrivals import skip_tags_at
from kdissect.conn.kept_produce import length_at, request_body_at
from kdissect.conn.kept_reading import add_id_pair, response_body_version

_METADATA = 3


class MetadataResponseFrame:
    """A Metadata response the skim accepted without any error code, kept
    as its frame (header included) and its request's api version."""

    __slots__ = ("frame", "version")

    def __init__(self, frame: bytes, version: int) -> None:
        self.frame = frame
        self.version = version

    def topic_pairs(self) -> list[tuple[str, str]]:
        """(topic id text, name) of every topic carrying both, in order."""
        version = response_body_version(_METADATA, self.version)
        return read_metadata_pairs(self.frame, version)


def read_metadata_pairs(b: bytes, version: int) -> list[tuple[str, str]]:
    """`MetadataResponseFrame.topic_pairs` of a response frame of body
    `version` the skim accepted (anything else may raise): topics carry an
    id from v10 on, and every such version is flexible."""
    pairs: list[tuple[str, str]] = []
    if version < 10:
        return pairs
    at = skip_tags_at(b, 4) + 4  # correlation id, header tags; throttle time
    brokers, at = length_at(b, at, True, True)
    for _ in range(max(brokers, 0)):
        size, at = length_at(b, at + 4, True, False)  # (after the node id) host
        size, at = length_at(b, at + max(size, 0) + 4, True, False)  # (after the port) rack
        at = skip_tags_at(b, at + max(size, 0))
    size, at = length_at(b, at, True, False)  # cluster id
    topics, at = length_at(b, at + max(size, 0) + 4, True, True)  # (after the controller id)
    for _ in range(max(topics, 0)):
        size, at = length_at(b, at + 2, True, False)  # (after the error code) name
        name = b[at:at + size].decode("utf-8", "surrogateescape") if size > 0 else ""
        at += max(size, 0)
        add_id_pair(pairs, b[at:at + 16], name)
        partitions, at = length_at(b, at + 17, True, True)  # (after the id and is-internal)
        for _ in range(max(partitions, 0)):
            at += 14  # error code, index, leader, leader epoch
            for _nodes in range(3):  # replicas, in-sync replicas, offline replicas
                count, at = length_at(b, at, True, True)
                at += 4 * max(count, 0)
            at = skip_tags_at(b, at)
        at = skip_tags_at(b, at + 4)  # (after the authorized operations)
    return pairs


class MetadataRequestFrame:
    """A Metadata request the skim accepted, kept as its frame (header included)."""

    __slots__ = ("frame",)

    def __init__(self, frame: bytes) -> None:
        self.frame = frame

    def topic_pairs(self) -> list[tuple[str, str]]:
        """(topic id text, name) of every topic carrying both, in order."""
        return read_metadata_request_pairs(self.frame)


def read_metadata_request_pairs(b: bytes) -> list[tuple[str, str]]:
    """`MetadataRequestFrame.topic_pairs` of a request frame the skim
    accepted (anything else may raise): topics carry an id from v10 on, and
    every such version is flexible; the topics are the body's first field."""
    pairs: list[tuple[str, str]] = []
    version, at = request_body_at(b, _METADATA)
    if version < 10:
        return pairs
    topics, at = length_at(b, at, True, True)  # (null: -1)
    for _ in range(max(topics, 0)):
        raw = b[at:at + 16]
        size, at = length_at(b, at + 16, True, False)  # name (null: -1)
        name = b[at:at + size].decode("utf-8", "surrogateescape") if size > 0 else ""
        at = skip_tags_at(b, at + max(size, 0))
        add_id_pair(pairs, raw, name)
    return pairs
