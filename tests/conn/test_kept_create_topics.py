"""CreateTopics answers kept as frames (kdissect.conn.kept_create_topics)
name the same topic ids as fully decoded ones: the (id, name) pairs, in
order, that `TopicNames` finds in the decoded answer, in every CreateTopics
version, on every bundled capture and on damaged frames (the full decoder is
the oracle); and pairing keeps an answer as its frame exactly where the skim
accepts it and finds no error code."""

from __future__ import annotations

import uuid

import pytest

from kdissect.conn.kept_create_topics import CreateTopicsResponseFrame
from kdissect.conn.pipeline import Analysis
from kdissect.forensics import FORENSIC_APIS
from kdissect.protocol.codec import encode_response
from tests.support.paths import REPO
from tests.support.pipeline import ports_of
from tests.support.skim import (damaged_copies, decoded_topic_pairs, response_frames_read_as_decoded,
                                 topic_pairs_read_as_decoded)

CAPTURES = sorted((REPO / "captures").glob("*.pcap"))
CREATE_TOPICS = 19


def _decoded_pairs(frame: bytes, version: int) -> list:
    return decoded_topic_pairs(frame, CREATE_TOPICS, version)


def _check(frame: bytes, version: int) -> bool:
    return topic_pairs_read_as_decoded(frame, CREATE_TOPICS, version, CreateTopicsResponseFrame)


def test_capture_frames_read_as_decoded() -> None:
    read, with_pairs, versions = response_frames_read_as_decoded(CAPTURES, CREATE_TOPICS, CreateTopicsResponseFrame, damaged_copies)
    assert read >= 10 and with_pairs >= 5
    assert len(versions) >= 2


def _body(version: int) -> dict:
    def topic(name: str, topic_id: uuid.UUID, configs: list | None) -> dict:
        entry: dict = {"name": name, "error_code": 0}
        if version >= 7:
            entry["topic_id"] = topic_id
        if version >= 1:
            entry["error_message"] = None
        if version >= 5:
            entry |= {"num_partitions": 3, "replication_factor": 1, "configs": configs}
        return entry

    configs = [{"name": "cleanup.policy", "value": "delete", "read_only": False, "config_source": 5,
                "is_sensitive": False},
               {"name": "secret\u00e9", "value": None, "read_only": True, "config_source": 4, "is_sensitive": True}]
    topics = [topic("orders", uuid.UUID("5b0c1d2e-3f40-4152-8364-758697a8b9ca"), configs),
              topic("no-id", uuid.UUID(int=0), []), topic("", uuid.UUID(int=7), None),
              topic("payments\u00e9", uuid.UUID(int=1 << 100), configs[:1]),
              topic("orders", uuid.UUID(int=9), None)]
    return {"topics": topics} | ({"throttle_time_ms": 0} if version >= 2 else {})


@pytest.mark.parametrize("version", range(8))
def test_every_version_reads_as_decoded(version: int) -> None:
    """Built frames of each version: topics with configuration entries (a
    null value, an empty list, a null list), a null topic id, an empty name,
    a name given two ids."""
    frame = encode_response(CREATE_TOPICS, version, 7, _body(version))
    assert _check(frame, version)
    pairs = CreateTopicsResponseFrame(frame, version).topic_pairs()
    assert len(pairs) == (3 if version >= 7 else 0)  # orders twice, payments...; nothing without an id or a name


def test_pairing_keeps_answers_without_error_as_frames() -> None:
    """With the forensic APIs kept, a CreateTopics answer is a frame exactly
    where the skim accepted it without an error code; the rows are an
    export's either way."""
    frames = decoded = 0
    for capture in CAPTURES:
        ports = ports_of(capture)
        kept = list(Analysis([str(capture)], ports, keep_apis=FORENSIC_APIS))
        for ex in kept:
            if ex.api_key == CREATE_TOPICS and ex.response is not None:
                if type(ex.response) is CreateTopicsResponseFrame:
                    frames += 1
                    assert not ex.error_codes
                else:
                    decoded += 1
        if any(ex.api_key == CREATE_TOPICS for ex in kept):
            exported = [ex.to_row() for ex in Analysis([str(capture)], ports)]
            assert [ex.to_row() for ex in kept] == exported
    assert frames >= 10
