"""The topics and consumer groups an exchange's decoded messages name, for
`--topic` and `--group` (kdissect.filters.selection).

A topic is named by a struct that holds partitions and a topic name (`name`,
`topic`, `topic_name`) or a topic id (named through `TopicNames` when some
message of the capture set paired the id with a name), or by a list of topic
names (`topic_names`, `topics` of strings). A group is a `group_id` field
anywhere, a `groups` list of strings (DescribeGroups, DeleteGroups), or a
FindCoordinator key of type 0 (group). Messages are read generically by
their decoded field names, so every API and version is covered the same way.
"""

from __future__ import annotations

from typing import Any

from kdissect.protocol.topics import NULL_TOPIC_ID, TopicNames

_TOPIC_NAME_FIELDS = ("name", "topic", "topic_name")
_TOPIC_LISTS = ("topic_names", "topics")
_FIND_COORDINATOR = 10


def _walk(value: Any, names: TopicNames | None, topics: set[str], groups: set[str]) -> None:
    if isinstance(value, (list, tuple)):
        for item in value:
            if hasattr(item, "_fields") or isinstance(item, (list, tuple)):
                _walk(item, names, topics, groups)
        return
    fields = getattr(value, "_fields", None)
    if not fields:
        return
    if any("partition" in field for field in fields):
        label = next((getattr(value, f) for f in _TOPIC_NAME_FIELDS
                      if f in fields and isinstance(getattr(value, f, None), str) and getattr(value, f)), None)
        if label is None and "topic_id" in fields:
            topic_id = getattr(value, "topic_id", None)
            if topic_id is not None and str(topic_id) != NULL_TOPIC_ID:
                label = names.name(str(topic_id)) if names is not None else str(topic_id)
        if label:
            topics.add(label)
    for field in fields:
        child = getattr(value, field, None)
        if field == "group_id" and isinstance(child, str) and child:
            groups.add(child)
        elif isinstance(child, list) and child and isinstance(child[0], str):
            if field == "groups":
                groups.update(child)
            elif field in _TOPIC_LISTS:
                topics.update(child)
        elif hasattr(child, "_fields") or isinstance(child, list):
            _walk(child, names, topics, groups)


def mentions(ex: Any, names: TopicNames | None) -> tuple[set[str], set[str]]:
    """(topics, groups) the exchange's decoded request and response name."""
    topics: set[str] = set()
    groups: set[str] = set()
    for message in (ex.request, ex.response):
        body = getattr(message, "body", None)
        if body is not None:
            _walk(body, names, topics, groups)
    request = getattr(ex.request, "body", None)
    if ex.api_key == _FIND_COORDINATOR and request is not None and getattr(request, "key_type", 0) == 0:
        key = getattr(request, "key", None)
        if isinstance(key, str) and key:
            groups.add(key)
        keys = getattr(request, "coordinator_keys", None)
        if isinstance(keys, list):
            groups.update(k for k in keys if isinstance(k, str) and k)
    return topics, groups


def capture_topic_names(paths: list[str], ports: Any, detect: bool, tls_keylogs: Any = ()) -> dict[str, str]:
    """Topic id -> name, from every message of the capture set that pairs
    them (kdissect.protocol.topics): one pass that decodes only those
    messages, for a run whose parts each see some connections only (Spark)."""
    from kdissect.conn.pipeline import analyze
    from kdissect.protocol.topics import ID_BEARING_APIS

    names = TopicNames()
    exchanges, _accounting = analyze(paths, ports, detect, keep_apis=ID_BEARING_APIS, tls_keylogs=tls_keylogs)
    for ex in exchanges:
        names.learn_exchange(ex)
        ex.request = ex.response = None
    return dict(names.names)
