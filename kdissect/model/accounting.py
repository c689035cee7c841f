"""What a run did with its input, so that nothing is dropped without a count.

`Accounting` is a flat record of counters (its `__slots__` name them all).
It is additive: the Spark job computes one per connection and sums them,
the single process keeps one.
The counters fall into buckets that add up (`balance()` lists any that do
not, and the tests hold every capture to it):

* every TCP payload byte of the capture (`payload_bytes`, what tshark sums
  as `tcp.len`) is a Kafka stream byte, a byte of another connection, a
  retransmitted copy, a byte from before the capture joined a stream, or a
  straggler after a close;
* every Kafka stream byte is in a complete frame, in an incomplete frame,
  skipped while resynchronising after a loss, or skipped before the first
  frame boundary of a stream the capture joined mid-way; bytes that were
  never captured (`gap_bytes`) are counted apart, as they are not payload;
* every request or response frame is decoded, malformed, truncated, a raw
  SASL token, or a whole response of unknown API (its request is missing);
* every exchange has one status.
"""

from __future__ import annotations

from typing import Any

from kdissect.model.packet import TableRecord, fields_of


class Counts:
    """A layer's counters, declared once in its class body (`name: int = 0`,
    named as Accounting's fields). An instance starts at the class's zeros
    and holds in its __dict__ only the counters it changed: making one costs
    no generated __init__ (a compile per class at start), and folding one
    into the Accounting (`Accounting.add_counts`) reads only those."""

    def to_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in type(self).__annotations__}

    def __repr__(self) -> str:
        changed = ", ".join(f"{name}={value!r}" for name, value in vars(self).items())
        return f"{type(self).__name__}({changed})"


class Accounting(TableRecord):
    packets: int = 0  # packets read from the capture files
    non_tcp_packets: int = 0  # packets that are not TCP over IP
    undecodable_packets: int = 0  # damaged headers, unsupported link types, IP fragments
    duplicate_packets: int = 0  # copies of a packet another file of the set also holds
    damaged_files: int = 0  # files with damage or a cut; the rest of such a file is not read
    unread_file_bytes: int = 0  # file bytes after damage, not decoded
    segments: int = 0  # TCP segments fed to the dissector
    payload_bytes: int = 0  # TCP payload bytes of those segments (on the wire, as tcp.len)
    retransmitted_bytes: int = 0  # copies of stream bytes already seen
    # bytes before the first byte seen of a stream (capture joined mid-way)
    before_start_bytes: int = 0
    after_close_bytes: int = 0  # payload of stray segments after their connection closed
    connections: int = 0  # TCP connections seen
    empty_connections: int = 0  # of those, without any payload (a SYN and a RST, a scan)
    kafka_connections: int = 0  # classified as Kafka
    # with payload but not Kafka (not on a Kafka port nor Kafka-shaped, or TLS)
    non_kafka_connections: int = 0
    non_kafka_bytes: int = 0  # payload bytes of those
    tls_connections: int = 0  # TLS connections (on a Kafka port, or a ClientHello on any port)
    encrypted_connections: int = 0  # of those, none of whose bytes were decrypted (no key, ...)
    tls_bytes: int = 0  # payload bytes of TLS connections (ciphertext)
    tls_plaintext_bytes: int = 0  # decrypted Kafka bytes (counted again in stream_bytes)
    tls_other_bytes: int = 0  # decrypted bytes that are not Kafka
    evicted_connections: int = 0  # closed early because too many were open at once
    stream_bytes: int = 0  # payload bytes of Kafka connections seen (captured or cut by snaplen)
    framed_bytes: int = 0  # bytes in complete Kafka frames (size prefix included)
    incomplete_frame_bytes: int = 0  # seen bytes of incomplete frames
    skipped_bytes: int = 0  # seen bytes not framed, while resynchronising after a loss
    mid_stream_bytes: int = 0  # seen bytes before the first frame of a stream joined mid-way
    snaplen_bytes: int = 0  # of the seen bytes, those cut by the capture's snaplen
    gap_bytes: int = 0  # bytes never captured (sequence-number holes; not payload)
    tail_gap_bytes: int = 0  # of gap_bytes: acknowledged at the end of a connection but never captured
    gaps: int = 0  # places where a Kafka stream lost step after lost bytes
    resyncs: int = 0  # frame boundaries found again after a loss
    mid_stream_starts: int = 0  # streams whose first frame boundary was found by hunting
    request_frames: int = 0  # request frames, complete or not
    response_frames: int = 0  # response frames, complete or not
    decoded_frames: int = 0  # complete frames decoded
    malformed_frames: int = 0  # complete frames that failed to decode
    truncated_frames: int = 0  # frames with bytes lost or cut by snaplen
    # whole responses whose request is missing and whose API trial decoding cannot tell
    undecoded_frames: int = 0
    raw_sasl_frames: int = 0  # raw SASL tokens after a SaslHandshake v0 (counted, not decoded)
    unreadable_responses: int = 0  # of malformed/truncated: too short to hold a correlation id
    exchanges: int = 0  # rows produced
    ok: int = 0  # status ok: paired and decoded (with error codes or without)
    # of `ok`: with a non-zero error code anywhere; of those, with only
    # codes the protocol uses in its normal flow (kdissect.conn.normal_flow)
    ok_with_errors: int = 0
    ok_normal_flow_only: int = 0
    inexact: int = 0  # status inexact: a body decoded with an assumed version left bytes over
    no_response: int = 0
    orphan_responses: int = 0
    malformed: int = 0
    truncated: int = 0
    # requests sent while the broker muted the connection (KIP-219 throttling)
    sent_while_muted: int = 0
    acks0_requests: int = 0  # requests that expect no response (Produce acks=0)
    acks0_answered: int = 0  # of those, answered anyway
    acks0_released: int = 0  # held past their timeout, or past the bound, without an answer
    early_responses: int = 0  # responses seen before their request (held, then paired or orphaned)
    assumed_apis: int = 0  # orphan responses decoded by trial with one API version
    ambiguous_apis: int = 0  # orphan responses that several API versions decode
    unknown_apis: int = 0  # orphan responses no API version decodes
    # of decoded_frames: bodies decoded with an assumed version that left bytes over
    inexact_frames: int = 0

    def __add__(self, other: Accounting) -> Accounting:
        total = Accounting()
        for name in fields_of(Accounting):
            setattr(total, name, getattr(self, name) + getattr(other, name))
        return total

    def add(self, other: Accounting) -> None:
        """In-place sum."""
        for name in fields_of(Accounting):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def add_counts(self, counts: Counts) -> None:
        """Fold in a layer's Counts (the dissector's ConnectionStats,
        kdissect.conn.pairing_stats.PairingStats)."""
        for name, value in vars(counts).items():
            setattr(self, name, getattr(self, name) + value)

    def add_read_stats(self, stats: Any) -> None:
        """Fold in the capture reader's counts (kdissect.wire.capture.ReadStats)."""
        self.packets += stats.packets
        self.non_tcp_packets += stats.non_tcp
        self.undecodable_packets += stats.undecodable + stats.ip_fragments
        self.duplicate_packets += getattr(stats, "duplicate_packets", 0)
        self.damaged_files += stats.damaged_files
        self.unread_file_bytes += stats.unread_bytes

    def add_reassembly_stats(self, stats: Any) -> None:
        """Fold in the reassembler's counts (kdissect.wire.reassembly.ReassemblyStats)."""
        self.retransmitted_bytes += stats.retransmitted_bytes
        self.before_start_bytes += stats.before_start_bytes
        self.after_close_bytes += stats.after_close_bytes
        self.tail_gap_bytes += stats.tail_gap_bytes

    def add_framing_stats(self, stats: Any) -> None:
        """Fold in one FrameReader's counts (kdissect.conn.framing.FramingStats)."""
        self.stream_bytes += stats.seen_bytes
        self.framed_bytes += stats.framed_bytes
        self.incomplete_frame_bytes += stats.incomplete_frame_bytes
        self.skipped_bytes += stats.skipped_bytes
        self.mid_stream_bytes += stats.mid_stream_bytes
        self.snaplen_bytes += stats.snaplen_bytes
        self.gap_bytes += stats.gap_bytes
        self.resyncs += stats.resyncs
        self.mid_stream_starts += stats.mid_stream_starts

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Accounting:
        return cls(**{k: int(v or 0) for k, v in values.items() if k in cls.__slots__})

    def balance(self) -> list[str]:
        """The buckets that do not add up (empty when all is well)."""
        wrong = []
        plain_kafka = self.stream_bytes - self.tls_plaintext_bytes  # Kafka bytes not inside TLS
        payload = (plain_kafka + self.tls_bytes + self.non_kafka_bytes + self.retransmitted_bytes
                   + self.before_start_bytes + self.after_close_bytes)
        if payload != self.payload_bytes:
            wrong.append(f"payload bytes {self.payload_bytes} != Kafka {plain_kafka} + TLS {self.tls_bytes} + other "
                         f"{self.non_kafka_bytes} + retransmitted {self.retransmitted_bytes} + before start "
                         f"{self.before_start_bytes} + after close {self.after_close_bytes} (= {payload})")
        stream = self.framed_bytes + self.incomplete_frame_bytes + self.skipped_bytes + self.mid_stream_bytes
        if stream != self.stream_bytes:
            wrong.append(f"stream bytes {self.stream_bytes} != framed {self.framed_bytes} + incomplete "
                         f"{self.incomplete_frame_bytes} + skipped {self.skipped_bytes} + mid-stream "
                         f"{self.mid_stream_bytes} (= {stream})")
        frames = (self.decoded_frames + self.malformed_frames + self.truncated_frames + self.raw_sasl_frames
                  + self.undecoded_frames)
        if frames != self.request_frames + self.response_frames:
            wrong.append(f"frames {self.request_frames} + {self.response_frames} != decoded {self.decoded_frames}"
                         f" + malformed {self.malformed_frames} + truncated {self.truncated_frames} + raw SASL "
                         f"{self.raw_sasl_frames} + undecoded {self.undecoded_frames}")
        if not 0 <= self.ok_normal_flow_only <= self.ok_with_errors <= self.ok:
            wrong.append(f"paired {self.ok} >= with error codes {self.ok_with_errors} >= only normal-flow codes "
                         f"{self.ok_normal_flow_only} does not hold")
        statuses = self.ok + self.inexact + self.no_response + self.orphan_responses + self.malformed + self.truncated
        if statuses != self.exchanges:
            wrong.append(f"exchanges {self.exchanges} != sum of statuses {statuses}")
        conns = self.kafka_connections + self.non_kafka_connections + self.empty_connections + \
            self.encrypted_connections
        if conns != self.connections:
            wrong.append(f"connections {self.connections} != Kafka {self.kafka_connections} + other "
                         f"{self.non_kafka_connections} + empty {self.empty_connections} + encrypted "
                         f"{self.encrypted_connections}")
        return wrong

    def summary_lines(self) -> list[str]:
        """A short human-readable summary, a few lines."""
        lines = []
        if self.packets:
            lines.append(
                f"packets: {self.packets} read, {self.non_tcp_packets} not TCP, "
                f"{self.undecodable_packets} undecodable"
                + (f", {self.duplicate_packets} duplicates of packets in another file"
                   if self.duplicate_packets else "")
                + (f"; {self.damaged_files} damaged files ({self.unread_file_bytes} bytes unread)"
                   if self.damaged_files else "")
            )
        plain_kafka = self.stream_bytes - self.tls_plaintext_bytes
        lines += [
            f"connections: {self.kafka_connections} Kafka, {self.non_kafka_connections} other "
            f"({self.non_kafka_bytes} bytes), {self.empty_connections} without payload"
            + (f", {self.encrypted_connections} encrypted and not decrypted" if self.encrypted_connections else "")
            + (f" ({self.tls_connections} TLS in all)" if self.tls_connections else "")
            + (f", {self.evicted_connections} closed early (too many open)" if self.evicted_connections else "")
            + f"; {self.segments} segments",
            f"bytes: {self.payload_bytes} TCP payload = {plain_kafka} Kafka + "
            + (f"{self.tls_bytes} TLS + " if self.tls_connections else "")
            + f"{self.non_kafka_bytes} other"
            f" + {self.retransmitted_bytes} retransmitted + {self.before_start_bytes} before the capture joined"
            f" + {self.after_close_bytes} after close",
            "kafka bytes" + (f" (with {self.tls_plaintext_bytes} decrypted)" if self.tls_plaintext_bytes else "")
            + f": {self.framed_bytes} in frames, {self.incomplete_frame_bytes} in incomplete frames"
            f" ({self.snaplen_bytes} cut by snaplen), {self.skipped_bytes} skipped resynchronising "
            f"({self.resyncs} resyncs), {self.mid_stream_bytes} before the first frame of "
            f"{self.mid_stream_starts} streams joined mid-way",
            f"lost: {self.gap_bytes} bytes never captured"
            + (f" ({self.tail_gap_bytes} acknowledged at a connection's end)" if self.tail_gap_bytes else "")
            + f"; {self.gaps} losses of step",
            f"frames: {self.request_frames} requests, {self.response_frames} responses: "
            f"{self.decoded_frames} decoded, {self.malformed_frames} malformed, {self.truncated_frames} truncated, "
            f"{self.raw_sasl_frames} raw SASL"
            + (f", {self.undecoded_frames} of unknown API" if self.undecoded_frames else "")
            + (f" ({self.inexact_frames} decoded with an assumed version, bytes left over)"
               if self.inexact_frames else ""),
            f"exchanges: {self.exchanges} ({statuses_text(self.ok, self.ok_with_errors, self.ok_normal_flow_only)}, "
            + (f"{self.inexact} inexact, " if self.inexact else "")
            + f"{self.no_response} no response, "
            f"{self.orphan_responses} orphan responses, {self.malformed} malformed, "
            f"{self.truncated} truncated; {self.acks0_requests} expect no response"
            + (f", {self.acks0_answered} of them answered" if self.acks0_answered else "") + ")",
        ]
        if self.orphan_responses:
            lines.append(f"orphans: {self.assumed_apis} decoded by trial, {self.ambiguous_apis} ambiguous, "
                         f"{self.unknown_apis} undecodable")
        if self.unreadable_responses:
            lines.append(f"unreadable response fragments: {self.unreadable_responses}")
        return lines


def statuses_text(paired: int, with_errors: int, normal_flow_only: int) -> str:
    """How the exchanges of status ok read in a summary: paired, split by
    error codes, so that "ok" is never read as "no error"."""
    text = f"{paired} paired: {paired - with_errors} without error codes, {with_errors} with error codes"
    if with_errors:
        text += f" ({normal_flow_only} of them only normal-flow codes)"
    return text
