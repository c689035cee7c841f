"""CreateTopics answers kept for the tables that read them, as their frames.

A pairer keeping the messages of some APIs (`Pairer(keep_apis=...)`: the
forensic tallies, the topic names of a Spark run) keeps a CreateTopics
answer that carries no error code as its frame, not decoded, where the skim
accepted it (the skim has checked it exactly as the full decoder would).
All that is read of it is the (topic id, name) pairs it holds
(kdissect.protocol.topics.TopicNames), straight from the bytes here: a full
decode builds every created topic's configuration entries, which made the
answer the costliest message the tallies decoded. An answer carrying an
error code is decoded and kept whole, as is any answer the skim turned down.

`CreateTopicsResponseFrame.topic_pairs()` gives what `TopicNames.learn_body`
finds in the decoded answer, in the same order
(tests/conn/test_kept_create_topics.py compares them on every bundled
capture, on damaged copies and on built frames of every version).
"""

from __future__ import annotations

from kdissect.conn.arrivals import skip_tags_at
from kdissect.conn.kept_produce import length_at
from kdissect.conn.kept_reading import add_id_pair, response_body_version

_CREATE_TOPICS = 19


class CreateTopicsResponseFrame:
    """A CreateTopics response the skim accepted without any error code,
    kept as its frame (header included) and its request's api version."""

    __slots__ = ("frame", "version")

    def __init__(self, frame: bytes, version: int) -> None:
        self.frame = frame
        self.version = version

    def topic_pairs(self) -> list[tuple[str, str]]:
        """(topic id text, name) of every created topic carrying both, in order."""
        version = response_body_version(_CREATE_TOPICS, self.version)
        return read_create_topics_pairs(self.frame, version)


def read_create_topics_pairs(b: bytes, version: int) -> list[tuple[str, str]]:
    """`CreateTopicsResponseFrame.topic_pairs` of a response frame of body
    `version` the skim accepted (anything else may raise): topics carry an
    id from v7 on, and every such version is flexible."""
    pairs: list[tuple[str, str]] = []
    if version < 7:
        return pairs
    at = skip_tags_at(b, 4) + 4  # correlation id, header tags; throttle time
    topics, at = length_at(b, at, True, True)
    for _ in range(max(topics, 0)):
        size, at = length_at(b, at, True, False)  # name
        name = b[at:at + size].decode("utf-8", "surrogateescape") if size > 0 else ""
        at += max(size, 0)
        add_id_pair(pairs, b[at:at + 16], name)
        size, at = length_at(b, at + 18, True, False)  # (after the id and error code) error message
        configs, at = length_at(b, at + max(size, 0) + 6, True, True)  # (after partitions, replication factor)
        for _config in range(max(configs, 0)):
            size, at = length_at(b, at, True, False)  # name
            size, at = length_at(b, at + max(size, 0), True, False)  # value (null: -1)
            at = skip_tags_at(b, at + max(size, 0) + 3)  # (after read-only, source, sensitive)
        at = skip_tags_at(b, at)  # (the topic config error code is a tagged field)
    return pairs
