"""Topics as messages name them: the one label of a topic (`topic_label`),
and topic ids -> names, learned from any message that carries both
(`TopicNames`).

A label is the topic's name, or, where a message names the topic by id only,
the id's text. Produce v13+, Fetch v13+, OffsetCommit/OffsetFetch v10+,
ShareFetch and the KIP-848 heartbeats name topics by id only. The names come
from other messages that carry the id beside the name: Metadata (v10+),
CreateTopics (v7+), DeleteTopics (v6+), DescribeTopicPartitions, the group
Describe responses and the share-group offset APIs (`ID_BEARING_APIS`; found
from the specs: every struct with a uuid `TopicId` beside a string `Name`,
`TopicName` or `Topic`).

`TopicNames` is additive: `merge` of two resolvers is the resolver of both
inputs, whatever the order, so a Spark job can learn per task and merge at
the driver. An id named two different ways (two clusters in one archive)
resolves to the smallest name and is counted in `conflicts`. The records
table, the skims and the forensic tables all label topics here.
"""

from __future__ import annotations

from typing import Any, Iterable
from uuid import UUID

from kdissect.protocol.apis import ApiKey
from kdissect.protocol.primitives import uuid_from

# APIs whose requests or responses carry a topic id beside its name
ID_BEARING_APIS = frozenset(int(key) for key in (
    ApiKey.METADATA, ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.DESCRIBE_TOPIC_PARTITIONS,
    ApiKey.CONSUMER_GROUP_DESCRIBE, ApiKey.SHARE_GROUP_DESCRIBE, ApiKey.STREAMS_GROUP_DESCRIBE,
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, ApiKey.ALTER_SHARE_GROUP_OFFSETS, ApiKey.DELETE_SHARE_GROUP_OFFSETS,
))
NULL_TOPIC_ID = "00000000-0000-0000-0000-000000000000"
_NAME_FIELDS = ("name", "topic_name", "topic")

# topic id (16 raw bytes) -> its text: a capture carries few topics, and a
# lookup is cheaper than building and printing a UUID for every partition
_TOPIC_ID_TEXT: dict[bytes, str] = {}


def topic_label(name: str | None, topic_id: Any) -> str | None:
    """A topic's label: its name, else its id's text (`topic_id`: a decoded
    UUID, or the 16 raw bytes a skim reads), else None."""
    if name:
        return name
    if topic_id is None:
        return None
    if type(topic_id) is not bytes:
        raw = isinstance(topic_id, (bytearray, memoryview))
        return str(uuid_from(topic_id) if raw else topic_id)
    text = _TOPIC_ID_TEXT.get(topic_id)
    if text is None:
        text = str(uuid_from(topic_id))
        if len(_TOPIC_ID_TEXT) < 4096:
            _TOPIC_ID_TEXT[topic_id] = text
    return text


# values that hold no struct, passed over without asking for `_fields`
# (a failed attribute lookup costs more than this test; a Metadata
# response's replica lists are long lists of ints)
_LEAVES = frozenset({int, str, bool, bytes, float, type(None), UUID})


def _pairs(value: Any, found: list[tuple[str, str]]) -> None:
    """Every (id, name) of structs holding both, anywhere below `value`."""
    if isinstance(value, list):
        for item in value:
            if type(item) not in _LEAVES and (isinstance(item, (list, tuple)) or hasattr(item, "_fields")):
                _pairs(item, found)
        return
    fields = getattr(value, "_fields", None)
    if fields is None:
        return
    if "topic_id" in fields:
        topic_id = getattr(value, "topic_id", None)
        if topic_id is not None and str(topic_id) != NULL_TOPIC_ID:
            for field in _NAME_FIELDS:
                if field in fields:
                    name = getattr(value, field, None)
                    if isinstance(name, str) and name:
                        found.append((str(topic_id), name))
                        break
    for field in fields:
        child = getattr(value, field, None)
        if type(child) not in _LEAVES and (isinstance(child, list) or hasattr(child, "_fields")):
            _pairs(child, found)


class TopicNames:
    """What the capture says each topic id is called."""

    __slots__ = ("names", "conflicts")

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.conflicts = 0  # ids seen with two different names

    def learn_exchange(self, ex: Any) -> list[str]:
        """Learn from an exchange's decoded request and response, or the
        frames they were kept as (only APIs in ID_BEARING_APIS are read);
        the ids it named for the first time."""
        if ex.api_key not in ID_BEARING_APIS:
            return []
        new: list[str] = []
        for message in (ex.request, ex.response):
            if message is None:
                continue
            # a message kept as its frame reads its own pairs (kdissect.conn.kept_metadata)
            read_pairs = getattr(message, "topic_pairs", None)
            if read_pairs is not None:
                new.extend(self.learn_pairs(read_pairs()))
                continue
            body = getattr(message, "body", None)
            if body is not None:
                new.extend(self.learn_body(body))
        return new

    def learn_body(self, body: Any) -> list[str]:
        """Learn from a decoded body; the ids it named for the first time."""
        found: list[tuple[str, str]] = []
        _pairs(body, found)
        return self.learn_pairs(found)

    def learn_pairs(self, found: list[tuple[str, str]]) -> list[str]:
        """Learn (id, name) pairs in order; the ids named for the first time."""
        return [topic_id for topic_id, name in found if self.add(topic_id, name)]

    def add(self, topic_id: str, name: str) -> bool:
        """True when the id had no name before."""
        known = self.names.get(topic_id)
        if known is None:
            self.names[topic_id] = name
            return True
        if known != name:
            self.conflicts += 1
            self.names[topic_id] = min(known, name)
        return False

    def merge(self, other: TopicNames) -> None:
        for topic_id, name in other.names.items():
            self.add(topic_id, name)
        self.conflicts += other.conflicts

    def name(self, label: str | None) -> str | None:
        """The topic's name for a label (a name, or an id's text)."""
        if label is None:
            return None
        return self.names.get(label, label)

    def topic_id(self, label: str | None) -> str | None:
        """The id of a label: the label itself when it is a known or
        uuid-shaped id, else the id a message paired with that name (the
        smallest, when a name had several)."""
        if label is None:
            return None
        if label in self.names or _uuid_shaped(label):
            return label
        ids = self._ids_by_name().get(label)
        return min(ids) if ids else None

    def _ids_by_name(self) -> dict[str, list[str]]:
        by_name: dict[str, list[str]] = {}
        for topic_id, name in self.names.items():
            by_name.setdefault(name, []).append(topic_id)
        return by_name

    def unresolved(self, labels: Iterable[str | None]) -> list[str]:
        """The labels that are topic ids no message named, sorted."""
        return sorted({label for label in labels
                       if label is not None and label not in self.names and _uuid_shaped(label)})


def _uuid_shaped(text: str) -> bool:
    """Whether a label is a uuid's text form (how record_sets labels topics known only by id)."""
    return (len(text) == 36 and text[8] == text[13] == text[18] == text[23] == "-"
            and all(c in "0123456789abcdef-" for c in text.lower()))
