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

from kdissect.packet import SlotRecord


class Accounting(SlotRecord):
    __slots__ = ("packets", "non_tcp_packets", "undecodable_packets", "duplicate_packets", "damaged_files",
                 "unread_file_bytes", "segments", "payload_bytes", "retransmitted_bytes", "before_start_bytes",
                 "after_close_bytes", "connections", "empty_connections", "kafka_connections", "non_kafka_connections",
                 "non_kafka_bytes", "tls_connections", "encrypted_connections", "tls_bytes", "tls_plaintext_bytes",
                 "tls_other_bytes", "evicted_connections", "stream_bytes", "framed_bytes", "incomplete_frame_bytes",
                 "skipped_bytes", "mid_stream_bytes", "snaplen_bytes", "gap_bytes", "tail_gap_bytes", "gaps", "resyncs",
                 "mid_stream_starts", "request_frames", "response_frames", "decoded_frames", "malformed_frames",
                 "truncated_frames", "undecoded_frames", "raw_sasl_frames", "unreadable_responses", "exchanges", "ok",
                 "ok_with_errors", "ok_normal_flow_only",
                 "inexact", "no_response", "orphan_responses", "malformed", "truncated", "sent_while_muted",
                 "acks0_requests",
                 "acks0_answered", "acks0_released", "early_responses", "assumed_apis", "ambiguous_apis",
                 "unknown_apis", "inexact_frames")

    def __init__(self, packets: int = 0, non_tcp_packets: int = 0, undecodable_packets: int = 0,
                 duplicate_packets: int = 0, damaged_files: int = 0, unread_file_bytes: int = 0, segments: int = 0,
                 payload_bytes: int = 0, retransmitted_bytes: int = 0, before_start_bytes: int = 0,
                 after_close_bytes: int = 0, connections: int = 0, empty_connections: int = 0,
                 kafka_connections: int = 0, non_kafka_connections: int = 0, non_kafka_bytes: int = 0,
                 tls_connections: int = 0, encrypted_connections: int = 0, tls_bytes: int = 0,
                 tls_plaintext_bytes: int = 0, tls_other_bytes: int = 0, evicted_connections: int = 0,
                 stream_bytes: int = 0, framed_bytes: int = 0, incomplete_frame_bytes: int = 0, skipped_bytes: int = 0,
                 mid_stream_bytes: int = 0, snaplen_bytes: int = 0, gap_bytes: int = 0, tail_gap_bytes: int = 0,
                 gaps: int = 0, resyncs: int = 0, mid_stream_starts: int = 0, request_frames: int = 0,
                 response_frames: int = 0, decoded_frames: int = 0, malformed_frames: int = 0,
                 truncated_frames: int = 0, undecoded_frames: int = 0, raw_sasl_frames: int = 0,
                 unreadable_responses: int = 0, exchanges: int = 0, ok: int = 0, ok_with_errors: int = 0,
                 ok_normal_flow_only: int = 0, inexact: int = 0, no_response: int = 0,
                 orphan_responses: int = 0, malformed: int = 0, truncated: int = 0, sent_while_muted: int = 0,
                 acks0_requests: int = 0, acks0_answered: int = 0, acks0_released: int = 0, early_responses: int = 0,
                 assumed_apis: int = 0, ambiguous_apis: int = 0, unknown_apis: int = 0,
                 inexact_frames: int = 0) -> None:
        self.packets = packets  # packets read from the capture files
        self.non_tcp_packets = non_tcp_packets  # packets that are not TCP over IP
        self.undecodable_packets = undecodable_packets  # damaged headers, unsupported link types, IP fragments
        self.duplicate_packets = duplicate_packets  # copies of a packet another file of the set also holds
        self.damaged_files = damaged_files  # files with damage or a cut; the rest of such a file is not read
        self.unread_file_bytes = unread_file_bytes  # file bytes after damage, not decoded
        self.segments = segments  # TCP segments fed to the dissector
        self.payload_bytes = payload_bytes  # TCP payload bytes of those segments (on the wire, as tcp.len)
        self.retransmitted_bytes = retransmitted_bytes  # copies of stream bytes already seen
        # bytes before the first byte seen of a stream (capture joined mid-way)
        self.before_start_bytes = before_start_bytes
        self.after_close_bytes = after_close_bytes  # payload of stray segments after their connection closed
        self.connections = connections  # TCP connections seen
        self.empty_connections = empty_connections  # of those, without any payload (a SYN and a RST, a scan)
        self.kafka_connections = kafka_connections  # classified as Kafka
        # with payload but not Kafka (not on a Kafka port nor Kafka-shaped, or TLS)
        self.non_kafka_connections = non_kafka_connections
        self.non_kafka_bytes = non_kafka_bytes  # payload bytes of those
        self.tls_connections = tls_connections  # TLS connections (on a Kafka port, or a ClientHello on any port)
        self.encrypted_connections = encrypted_connections  # of those, none of whose bytes were decrypted (no key, ...)
        self.tls_bytes = tls_bytes  # payload bytes of TLS connections (ciphertext)
        self.tls_plaintext_bytes = tls_plaintext_bytes  # decrypted Kafka bytes (counted again in stream_bytes)
        self.tls_other_bytes = tls_other_bytes  # decrypted bytes that are not Kafka
        self.evicted_connections = evicted_connections  # closed early because too many were open at once
        self.stream_bytes = stream_bytes  # payload bytes of Kafka connections seen (captured or cut by snaplen)
        self.framed_bytes = framed_bytes  # bytes in complete Kafka frames (size prefix included)
        self.incomplete_frame_bytes = incomplete_frame_bytes  # seen bytes of incomplete frames
        self.skipped_bytes = skipped_bytes  # seen bytes not framed, while resynchronising after a loss
        self.mid_stream_bytes = mid_stream_bytes  # seen bytes before the first frame of a stream joined mid-way
        self.snaplen_bytes = snaplen_bytes  # of the seen bytes, those cut by the capture's snaplen
        self.gap_bytes = gap_bytes  # bytes never captured (sequence-number holes; not payload)
        self.tail_gap_bytes = tail_gap_bytes  # of gap_bytes: acknowledged at the end of a connection but never captured
        self.gaps = gaps  # places where a Kafka stream lost step after lost bytes
        self.resyncs = resyncs  # frame boundaries found again after a loss
        self.mid_stream_starts = mid_stream_starts  # streams whose first frame boundary was found by hunting
        self.request_frames = request_frames  # request frames, complete or not
        self.response_frames = response_frames  # response frames, complete or not
        self.decoded_frames = decoded_frames  # complete frames decoded
        self.malformed_frames = malformed_frames  # complete frames that failed to decode
        self.truncated_frames = truncated_frames  # frames with bytes lost or cut by snaplen
        # whole responses whose request is missing and whose API trial decoding cannot tell
        self.undecoded_frames = undecoded_frames
        self.raw_sasl_frames = raw_sasl_frames  # raw SASL tokens after a SaslHandshake v0 (counted, not decoded)
        self.unreadable_responses = unreadable_responses  # of malformed/truncated: too short to hold a correlation id
        self.exchanges = exchanges  # rows produced
        self.ok = ok  # status ok: paired and decoded (with error codes or without)
        # of `ok`: with a non-zero error code anywhere; of those, with only
        # codes the protocol uses in its normal flow (kdissect.normal_flow)
        self.ok_with_errors = ok_with_errors
        self.ok_normal_flow_only = ok_normal_flow_only
        self.inexact = inexact  # status inexact: a body decoded with an assumed version left bytes over
        self.no_response = no_response
        self.orphan_responses = orphan_responses
        self.malformed = malformed
        self.truncated = truncated
        # requests sent while the broker muted the connection (KIP-219 throttling)
        self.sent_while_muted = sent_while_muted
        self.acks0_requests = acks0_requests  # requests that expect no response (Produce acks=0)
        self.acks0_answered = acks0_answered  # of those, answered anyway
        self.acks0_released = acks0_released  # held past their timeout, or past the bound, without an answer
        self.early_responses = early_responses  # responses seen before their request (held, then paired or orphaned)
        self.assumed_apis = assumed_apis  # orphan responses decoded by trial with one API version
        self.ambiguous_apis = ambiguous_apis  # orphan responses that several API versions decode
        self.unknown_apis = unknown_apis  # orphan responses no API version decodes
        # of decoded_frames: bodies decoded with an assumed version that left bytes over
        self.inexact_frames = inexact_frames

    def __add__(self, other: Accounting) -> Accounting:
        total = Accounting()
        for name in self.__slots__:
            setattr(total, name, getattr(self, name) + getattr(other, name))
        return total

    def add(self, other: Accounting) -> None:
        """In-place sum."""
        for name in self.__slots__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def add_read_stats(self, stats: Any) -> None:
        """Fold in the capture reader's counts (kdissect.capture.ReadStats)."""
        self.packets += stats.packets
        self.non_tcp_packets += stats.non_tcp
        self.undecodable_packets += stats.undecodable + stats.ip_fragments
        self.duplicate_packets += getattr(stats, "duplicate_packets", 0)
        self.damaged_files += stats.damaged_files
        self.unread_file_bytes += stats.unread_bytes

    def add_reassembly_stats(self, stats: Any) -> None:
        """Fold in the reassembler's counts (kdissect.reassembly.ReassemblyStats)."""
        self.retransmitted_bytes += stats.retransmitted_bytes
        self.before_start_bytes += stats.before_start_bytes
        self.after_close_bytes += stats.after_close_bytes
        self.tail_gap_bytes += stats.tail_gap_bytes

    def add_framing_stats(self, stats: Any) -> None:
        """Fold in one FrameReader's counts (kdissect.framing.FramingStats)."""
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
