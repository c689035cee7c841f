"""Scapy-built requests over a real socket to a real Tansu broker on loopback;
replies dissected with the layers, and the same traffic sniffed live with
Scapy's TCPSession.

Expected values come from what the test itself asked for (topic names,
partition counts, produced records), from the core codec
(`kdissect.decode_response`) and from the error table of the Kafka spec.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from scapy.sendrecv import AsyncSniffer
from scapy.sessions import TCPSession

import kdissect
from kdissect.protocol.errors import error_name
from kdissect.records import decode_records
from kdissect.scapy import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    CreatableTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    FetchRequest,
    FetchResponse,
    KafkaBody,
    KafkaRequest,
    KafkaResponse,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
    bind_kafka,
    dissect_response,
)
from tools.lab.net import LabError
from tools.lab.tansu import tansu_broker
from tests.support.scapy import exchange

pytestmark = pytest.mark.broker

TOPIC = "scapy-made"
RECORDS = [(b"k0", b"first value"), (None, b"second"), (b"k2", b"")]


def _batch() -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    for offset, (key, value) in enumerate(RECORDS):
        builder.append(offset, timestamp=1_700_000_000_000 + offset, key=key, value=value, headers=[])
    return bytes(builder.build())


class Client:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.correlation_id = 0
        self.sent: list[tuple[int, int, int]] = []

    def ask(self, version: int, body: KafkaBody) -> KafkaResponse:
        self.correlation_id += 1
        request = KafkaRequest(api_version=version, correlation_id=self.correlation_id,
                               client_id="kdissect-scapy") / body
        frame = exchange(self.sock, bytes(request))
        self.sent.append((request.api_key, version, self.correlation_id))
        return dissect_response(frame, request.api_key, version)


@pytest.fixture(scope="module")
def broker():
    try:
        with tansu_broker() as running:
            yield running
    except LabError as problem:  # pragma: no cover - machine without the lab
        pytest.fail(f"cannot start Tansu: {problem}")


def test_scapy_requests_against_tansu(broker):
    bind_kafka(broker.port)
    started = threading.Event()
    sniffer = AsyncSniffer(iface="lo", filter=f"tcp port {broker.port}", session=TCPSession,
                           started_callback=started.set, store=True)
    sniffer.start()
    assert started.wait(10), "the live sniffer did not start"
    time.sleep(0.2)
    with socket.create_connection((broker.host, broker.port), timeout=10) as sock:
        client = Client(sock)

        # ApiVersions v3: the layer and the core decode the same bytes the same way
        reply = client.ask(3, ApiVersionsRequest(client_software_name="kdissect-scapy",
                                                 client_software_version="1"))
        body = reply[ApiVersionsResponse]
        core = kdissect.decode_response(bytes(reply)[4:], 18, 3)
        assert body.error_code == 0
        assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == \
            [(k.api_key, k.min_version, k.max_version) for k in core.body.api_keys]
        supported = {k.api_key: k.max_version for k in body.api_keys}

        def version(api_key: int, wanted: int) -> int:
            return min(wanted, supported[api_key])

        # CreateTopics: the topic we asked for, then TOPIC_ALREADY_EXISTS the second time
        create = CreateTopicsRequest(topics=[CreatableTopic(name=TOPIC, num_partitions=2, replication_factor=1)],
                                     timeout_ms=5000)
        first = client.ask(version(19, 7), create)[CreateTopicsResponse]
        assert [(t.name, t.error_code) for t in first.topics] == [(TOPIC, 0)]
        again = client.ask(version(19, 7), create)[CreateTopicsResponse]
        assert [error_name(t.error_code) for t in again.topics] == ["TOPIC_ALREADY_EXISTS"]

        # Metadata: two partitions, the broker is where we connected
        meta_version = version(3, 12)
        meta = client.ask(meta_version, MetadataRequest(
            topics=[MetadataRequestTopic(name=TOPIC), MetadataRequestTopic(name="no-such-topic")],
            allow_auto_topic_creation=0))[MetadataResponse]
        assert [(b.host, b.port) for b in meta.brokers] == [(broker.host, broker.port)]
        by_name = {t.name: t for t in meta.topics}
        assert sorted(p.partition_index for p in by_name[TOPIC].partitions) == [0, 1]
        assert error_name(by_name["no-such-topic"].error_code) == "UNKNOWN_TOPIC_OR_PARTITION"

        # Produce a kafka-python-built batch, then Fetch it back
        produce_version = version(0, 9)
        produced = client.ask(produce_version, ProduceRequest(acks=1, timeout_ms=5000, topic_data=[
            TopicProduceData(name=TOPIC, partition_data=[PartitionProduceData(index=1, records=_batch())])]))
        part = produced[ProduceResponse].responses[0].partition_responses[0]
        assert (part.index, part.error_code, part.base_offset) == (1, 0, 0)

        fetch_version = version(1, 12)
        fetch = FetchRequest(replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20,
                             isolation_level=0, session_id=0, session_epoch=-1,
                             topics=[FetchRequest.FetchTopic(topic=TOPIC, partitions=[
                                 FetchRequest.FetchPartition(partition=1, fetch_offset=0,
                                                             partition_max_bytes=1 << 20)])])
        fetched = client.ask(fetch_version, fetch)[FetchResponse]
        data = fetched.responses[0].partitions[0]
        assert data.error_code == 0 and data.high_watermark == len(RECORDS)
        records = [r for batch in decode_records(data.records) for r in batch.records]
        assert [(r.key, r.value) for r in records] == RECORDS

    # the live sniffer saw every exchange as Kafka layers with decoded bodies
    time.sleep(0.5)
    packets = sniffer.stop()
    seen = {"request": set(), "response": set()}
    for packet in packets:
        layer = packet
        while layer:
            if isinstance(layer, (KafkaRequest, KafkaResponse)) and isinstance(layer.payload, KafkaBody):
                kind = "request" if isinstance(layer, KafkaRequest) else "response"
                seen[kind].add((layer.kafka_api_key(), layer.kafka_api_version(), layer.correlation_id))
            layer = layer.payload
    assert seen["request"] == set(client.sent)
    assert seen["response"] == set(client.sent)
