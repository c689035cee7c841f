"""Kafka for Scapy: frame headers, one body class per API and direction, and
TCP reassembly that pairs responses with their requests.

    >>> from kdissect.scapy import *
    >>> frame = KafkaRequest(api_version=6, correlation_id=3, client_id="x") / \\
    ...     MetadataRequest(topics=[MetadataRequestTopic(name="t")], allow_auto_topic_creation=0)
    >>> packets = sniff(offline="capture.pcap", session=TCPSession)   # Kafka layers on port 9092
    >>> for packet in kafka_packets(["tls.pcap"], ports=[9093], tls_keylogs=["client.keys"]):
    ...     packet.time, packet.kafka_origin.client, packet.summary()     # Kafka inside TLS too

Scapy's TCPSession sees TCP payload only, so it cannot read Kafka inside TLS;
`kafka_packets` (kdissect.scapy.captures) reads capture files through the
core pipeline (reassembly -> TLS with key logs or a pcapng's secrets ->
framing -> pairing) and yields each Kafka frame as a packet of these layers.

Importing this module binds TCP port 9092; `bind_kafka(port)` adds others.
The body and struct classes are generated at import time from the same
protocol tables as the core codec (see kdissect.scapy.messages).
"""

from __future__ import annotations

from kdissect.shared.extras import require

require("scapy", "kdissect.scapy")  # one line naming the extra, not scapy's ModuleNotFoundError

from kdissect.scapy import fields
from kdissect.scapy.layers import (
    KafkaBody,
    KafkaEmbeddedBody,
    KafkaRequest,
    KafkaResponse,
    KafkaSaslToken,
    KafkaStruct,
    bind_kafka,
    dissect_response,
    remember_response,
    unbind_kafka,
)
from kdissect.scapy.captures import FrameOrigin, KafkaPackets, kafka_packets
from kdissect.scapy.fields import show_secrets
from kdissect.scapy.messages import generate as _generate

GENERATED: dict[str, type] = _generate()
globals().update(GENERATED)

bind_kafka(9092)

__all__ = [
    "KafkaRequest", "KafkaResponse", "KafkaSaslToken", "KafkaBody", "KafkaEmbeddedBody", "KafkaStruct", "bind_kafka", "unbind_kafka",
    "dissect_response", "remember_response", "fields", "show_secrets", "kafka_packets", "KafkaPackets", "FrameOrigin",
    *sorted(GENERATED),
]
