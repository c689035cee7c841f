"""Kafka packets from capture files through the core pipeline: TLS included.

Scapy's `TCPSession` reassembles TCP payload only, so it cannot read Kafka
inside TLS. `kafka_packets` takes the core's one path instead (capture
reading -> TCP reassembly -> TLS decryption with key logs or a pcapng's
Decryption Secrets Blocks -> Kafka framing -> pairing) and turns each frame
the core cuts into a Scapy packet:

    >>> from kdissect.scapy import kafka_packets, MetadataResponse
    >>> packets = kafka_packets(["tls.pcap"], ports=[9093], tls_keylogs=["client.keys"])
    >>> for packet in packets:
    ...     packet.time, packet.kafka_origin.client, packet.kafka_origin.broker
    ...     if MetadataResponse in packet: ...
    >>> packets.summary_lines()      # the core's accounting, TLS line included

Each packet is a `KafkaRequest`, a `KafkaResponse` decoded with the api key
and version of the request the core paired it with, or a `KafkaSaslToken`
(raw SASL token after SaslHandshake v0), in the order of the packets that
complete the frames. Plaintext connections come out the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Iterator, NamedTuple, Sequence

from scapy.config import conf
from scapy.packet import Packet
from scapy.utils import EDecimal

from kdissect.model.accounting import Accounting
from kdissect.conn.detect import DEFAULT_PORTS
from kdissect.conn.pairing import PairedFrame
from kdissect.conn.pipeline import Analysis
from kdissect.scapy.layers import KafkaRequest, KafkaResponse, KafkaSaslToken, dissect_response

__all__ = ["FrameOrigin", "KafkaPackets", "kafka_packets", "frame_packet"]

_NS_PER_SECOND = 1_000_000_000


class FrameOrigin(NamedTuple):
    """Where a frame was seen: `packet.kafka_origin` of kafka_packets' packets."""

    client: str  # "ip:port" ("[v6]:port")
    broker: str
    from_client: bool  # a request or a client's raw SASL token
    stream: int  # the core's stream number (the `stream` column of `kdissect export`)
    capture: str | None  # the file of the packet that completed the frame
    frame_number: int  # that packet's number in its file (from 1, as tshark counts)
    tls: bool  # decrypted from TLS
    complete: bool  # False: bytes of the frame were lost or cut by snaplen (the packet holds what was captured)


class KafkaPackets:
    """The Kafka packets of a capture set (iterate once); `accounting` is
    the core's, complete once the iteration is over."""

    def __init__(self, paths: Sequence[str | Path], ports: Iterable[int] = DEFAULT_PORTS,
                 tls_keylogs: Sequence[str | Path] = (), detect: bool = True) -> None:
        self._run = Analysis(paths, ports, detect, keep_messages=False, tls_keylogs=tls_keylogs)

    @property
    def accounting(self) -> Accounting:
        return self._run.accounting

    def summary_lines(self) -> list[str]:
        """What the CLI prints to stderr (counts only, never secrets)."""
        return self._run.summary_lines()

    def __iter__(self) -> Iterator[Packet]:
        for heard in self._run.frames():
            yield frame_packet(heard)


def kafka_packets(paths: Sequence[str | Path], ports: Iterable[int] = DEFAULT_PORTS,
                  tls_keylogs: Sequence[str | Path] = (), detect: bool = True) -> KafkaPackets:
    """The Kafka frames of capture files as Scapy packets, through the core
    pipeline: TLS connections decrypted with `tls_keylogs` (NSS key log
    files) and with the secrets a pcapng carries. `ports`: the brokers'
    ports (other connections are found by shape unless `detect` is False)."""
    return KafkaPackets(paths, ports, tls_keylogs, detect)


def frame_packet(heard: PairedFrame) -> Packet:
    """The Scapy packet of one frame the core cut and paired."""
    frame = heard.frame
    wire = frame.size.to_bytes(4, "big", signed=True) + frame.data
    try:
        if heard.raw_sasl:
            packet: Packet = KafkaSaslToken(wire)
        elif heard.from_client:
            packet = KafkaRequest(wire)
        elif heard.api_key is not None and heard.api_version is not None:
            packet = dissect_response(wire, heard.api_key, heard.api_version)
        else:  # its request was not seen (yet): the header only, the body raw
            packet = KafkaResponse(wire)
    except Exception:  # noqa: BLE001 - capture content must not stop the iteration (as in _cut)
        packet = conf.raw_layer(wire)
    packet.time = EDecimal(frame.ts) / _NS_PER_SECOND
    # (set on the instance: Packet.__setattr__ would look for a field of that name first)
    object.__setattr__(packet, "kafka_origin", FrameOrigin(
        heard.client, heard.broker, heard.from_client, heard.stream, heard.capture, frame.frame_number,
        heard.tls, frame.complete))
    return packet
