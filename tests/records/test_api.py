"""The records Python API on decoded messages: every spec path to a `records` field."""

from __future__ import annotations

import uuid

import pytest

from kdissect import decode_request, decode_response, encode_request, encode_response
from kdissect.records import exchange_columns, iter_records, record_sets
from kdissect.records.encode import encode_message_set, encode_record_batch
from kdissect.records.render import render_records
from tests.support.records import essence, produce_request, sample_records

TOPIC_ID = uuid.UUID("01a202ae-7124-7130-b391-90430a227b64")


def _produce(version: int, raw: bytes):
    topic = {"partition_data": [{"index": 3, "records": raw}]}
    topic.update({"topic_id": TOPIC_ID} if version >= 13 else {"name": "orders"})
    body = {"acks": -1, "timeout_ms": 1000, "topic_data": [topic]}
    return decode_request(encode_request(0, version, 11, "api-test", body))


def _fetch(api_key: int, version: int, raw: bytes):
    partition = {"partition_index": 4, "records": raw}
    topic = {"partitions": [partition]}
    topic.update({"topic_id": TOPIC_ID} if api_key == 78 or version >= 13 else {"topic": "orders"})
    frame = encode_response(api_key, version, 12, {"responses": [topic]})
    return decode_response(frame, api_key, version)


@pytest.mark.parametrize("version", [3, 9, 11, 13])
def test_produce_request_paths(version):
    records = sample_records(5)
    request = _produce(version, encode_record_batch(records, "zstd", base_offset=0))
    sets = list(record_sets(0, version, request.body, "request"))
    expected_topic = str(TOPIC_ID) if version >= 13 else "orders"
    assert [(t, p) for t, p, _raw in sets] == [(expected_topic, 3)]
    found = list(iter_records(request))
    assert essence(r.record for r in found) == essence(records)
    assert {(r.topic, r.partition, r.batch.codec) for r in found} == {(expected_topic, 3, "zstd")}
    columns = exchange_columns(0, version, request.body, None)
    assert columns == {"records": 5, "record_bytes": None, "codecs": ["zstd"], "record_problems": []}


@pytest.mark.parametrize("api_key, version", [(1, 0), (1, 4), (1, 12), (1, 13), (1, 16), (78, 0)])
def test_fetch_response_paths(api_key, version):
    records = sample_records(4)
    raw = encode_record_batch(records, "lz4", base_offset=40) + encode_record_batch(records[:2], "none", base_offset=44)
    if api_key == 1 and version < 4:
        raw = encode_message_set(records, 1, "snappy", base_offset=40) + encode_message_set(records[:2], 1, base_offset=44)
    response = _fetch(api_key, version, raw[:-7])  # the broker cut the last batch
    found = list(iter_records(response, api_key, version))
    assert [r.record.offset for r in found][:4] == [40, 41, 42, 43]
    expected_topic = "orders" if api_key == 1 and version < 13 else str(TOPIC_ID)
    assert {(r.topic, r.partition) for r in found} == {(expected_topic, 4)}
    columns = exchange_columns(api_key, version, None, response.body)
    assert columns["record_problems"] == [] and columns["codecs"]
    lines = render_records(response, api_key, version)
    assert lines[0] == f"records {expected_topic} partition 4:" and any("partial batch" in line for line in lines)


def test_request_without_records_and_other_apis():
    assert list(record_sets(3, 12, {"topics": []}, "response")) == []
    assert exchange_columns(3, 12, None, {"topics": []}) == {}
    empty = _produce(9, b"")
    assert list(iter_records(empty)) == [] and exchange_columns(0, 9, empty.body, None)["records"] == 0


def test_handwritten_produce_frame_decodes_through_protocol():
    frame = produce_request(5, "hand", 1, encode_record_batch(sample_records(2), "gzip"), version=3)
    request = decode_request(frame[4:])
    assert [(r.topic, r.partition, r.record.key) for r in iter_records(request)] == [
        ("hand", 1, b"key-0"), ("hand", 1, b"key-1")]
