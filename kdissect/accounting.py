"""What a run did with its input, so that nothing is dropped without a count.

`Accounting` is a flat dataclass of counters. It is additive: the Spark job
computes one per connection and sums them, the single process keeps one.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass(slots=True)
class Accounting:
    packets: int = 0  # packets read from the capture files
    non_tcp_packets: int = 0  # packets that are not TCP over IP
    undecodable_packets: int = 0  # damaged headers, unsupported link types, IP fragments
    damaged_files: int = 0  # files with damage or a cut; the rest of such a file is not read
    unread_file_bytes: int = 0  # file bytes after damage, not decoded
    segments: int = 0  # TCP segments fed to the dissector
    connections: int = 0  # TCP connections seen
    kafka_connections: int = 0  # classified as Kafka
    non_kafka_connections: int = 0  # ignored: not on a Kafka port and not Kafka-shaped
    non_kafka_bytes: int = 0  # payload bytes of ignored connections
    tls_connections: int = 0  # of those, TLS on a Kafka port (encrypted: not decoded)
    stream_bytes: int = 0  # payload bytes of Kafka connections (captured or not)
    framed_bytes: int = 0  # bytes in complete Kafka frames (size prefix included)
    request_frames: int = 0  # complete request frames
    response_frames: int = 0  # complete response frames
    decoded_frames: int = 0  # complete frames decoded without error
    truncated_frames: int = 0  # frames with bytes lost or cut by snaplen
    malformed_frames: int = 0  # complete frames that failed to decode
    raw_sasl_frames: int = 0  # raw SASL tokens after a SaslHandshake v0 (counted, not decoded)
    gap_bytes: int = 0  # bytes lost in the capture (sequence-number holes)
    gaps: int = 0  # places where the framing lost step with the stream
    snaplen_bytes: int = 0  # bytes on the wire but cut by the capture's snaplen
    skipped_bytes: int = 0  # captured bytes not framed (while resynchronising)
    resyncs: int = 0  # frame boundaries found again by hunting
    exchanges: int = 0  # rows produced
    ok: int = 0
    no_response: int = 0
    orphan_responses: int = 0
    malformed: int = 0
    truncated: int = 0
    acks0_requests: int = 0  # requests that expect no response (Produce acks=0)
    unreadable_responses: int = 0  # response fragments too short to hold a correlation id

    def __add__(self, other: Accounting) -> Accounting:
        total = Accounting()
        for f in fields(self):
            setattr(total, f.name, getattr(self, f.name) + getattr(other, f.name))
        return total

    def add(self, other: Accounting) -> None:
        """In-place sum."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def add_read_stats(self, stats: Any) -> None:
        """Fold in the capture reader's counts (kdissect.capture.ReadStats)."""
        self.packets += stats.packets
        self.non_tcp_packets += stats.non_tcp
        self.undecodable_packets += stats.undecodable + stats.ip_fragments
        self.damaged_files += stats.damaged_files
        self.unread_file_bytes += stats.unread_bytes

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Accounting:
        names = {f.name for f in fields(cls)}
        return cls(**{k: int(v or 0) for k, v in values.items() if k in names})

    def summary_lines(self) -> list[str]:
        """A short human-readable summary, a few lines."""
        lines = []
        if self.packets:
            lines.append(
                f"packets: {self.packets} read, {self.non_tcp_packets} not TCP, "
                f"{self.undecodable_packets} undecodable"
                + (f"; {self.damaged_files} damaged files ({self.unread_file_bytes} bytes unread)"
                   if self.damaged_files else "")
            )
        lines += [
            f"connections: {self.kafka_connections} Kafka, {self.non_kafka_connections} other "
            + (f"({self.tls_connections} TLS, not decoded) " if self.tls_connections else "")
            + f"({self.non_kafka_bytes} bytes ignored); {self.segments} segments",
            f"frames: {self.request_frames} requests, {self.response_frames} responses, "
            f"{self.framed_bytes} bytes framed, {self.decoded_frames} decoded, "
            f"{self.malformed_frames} malformed, {self.truncated_frames} truncated, "
            f"{self.raw_sasl_frames} raw SASL",
            f"exchanges: {self.exchanges} ({self.ok} ok, {self.no_response} no response, "
            f"{self.orphan_responses} orphan responses, {self.malformed} malformed, "
            f"{self.truncated} truncated; {self.acks0_requests} expect no response)",
            f"losses: {self.gap_bytes} bytes in {self.gaps} gaps, {self.snaplen_bytes} bytes cut by snaplen, "
            f"{self.skipped_bytes} bytes skipped while resynchronising ({self.resyncs} resyncs)",
        ]
        if self.unreadable_responses:
            lines.append(f"unreadable response fragments: {self.unreadable_responses}")
        return lines
