"""Helpers for the record payload tests: sample records and independent builders."""

from __future__ import annotations

import zlib

from kdissect.records.model import Record

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
LEGACY_CODECS = ("none", "gzip", "snappy", "lz4")  # magic 0/1 predate zstd
KAFKA_PYTHON_CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def sample_records(count: int = 7, *, with_headers: bool = True) -> list[Record]:
    """Varied records: null key/value, empty and binary bytes, unicode, headers."""
    out = []
    for i in range(count):
        key = None if i % 5 == 3 else f"key-{i}".encode()
        value = None if i % 7 == 5 else (f"välue {i} ".encode() * (i + 1) + bytes(range(i % 256)))
        headers = [("trace", f"t{i}".encode()), ("empty", b""), ("null", None)] if with_headers and i % 2 else []
        out.append(Record(offset=0, timestamp=1_700_000_000_000 + 17 * i, key=key, value=value, headers=headers))
    return out


def essence(records, *, headers: bool = True, timestamps: bool = True) -> list[tuple]:
    """What a round trip must preserve, as comparable tuples."""
    return [
        (r.key, r.value, list(r.headers) if headers else None, r.timestamp if timestamps else None)
        for r in records
    ]


def kafka_python_batch(records, magic: int, codec: str, base_offset: int = 0) -> bytes:
    """The same records built by kafka-python's own builders (an independent encoder)."""
    if magic == 2:
        from kafka.record.default_records import DefaultRecordBatchBuilder

        builder = DefaultRecordBatchBuilder(2, KAFKA_PYTHON_CODEC_IDS[codec], False, -1, -1, -1, 1 << 24)
        for i, r in enumerate(records):
            builder.append(i, r.timestamp, r.key, r.value, list(r.headers))
        raw = bytearray(builder.build())
    else:
        from kafka.record.legacy_records import LegacyRecordBatchBuilder

        builder = LegacyRecordBatchBuilder(magic, KAFKA_PYTHON_CODEC_IDS[codec], 1 << 24)
        for i, r in enumerate(records):
            builder.append(i, r.timestamp if magic else None, r.key, r.value)
        raw = bytearray(builder.build())
    raw[0:8] = base_offset.to_bytes(8, "big", signed=True)
    return bytes(raw)


def gzip_bomb_batch(inflated_size: int, *, base_offset: int = 0) -> bytes:
    """A magic-2 gzip batch whose single record's value is `inflated_size` zero bytes.

    Built in a streaming way (1 MiB at a time) so making it stays cheap.
    """
    import struct

    import crc32c

    from kdissect.records.wire import write_varint

    # attributes, timestamp delta, offset delta, key, then the value's length
    body_head = bytes([0]) + write_varint(0) + write_varint(0) + write_varint(4) + b"bomb" + write_varint(inflated_size)
    record_len = len(body_head) + inflated_size + 1
    deflater = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [deflater.compress(write_varint(record_len) + body_head)]
    zeros = bytes(1 << 20)
    left = inflated_size
    while left:
        step = min(left, len(zeros))
        parts.append(deflater.compress(zeros[:step]))
        left -= step
    parts.append(deflater.compress(write_varint(0)))  # header count
    parts.append(deflater.flush())
    section = b"".join(parts)
    after_crc = struct.pack(">hiqqqhii", 1, 0, 0, 0, -1, -1, -1, 1) + section
    after_length = struct.pack(">ib", -1, 2) + struct.pack(">I", crc32c.crc32c(after_crc)) + after_crc
    return struct.pack(">qi", base_offset, len(after_length)) + after_length


# -- crafted captures --------------------------------------------------------


def _kstring(text: str | None) -> bytes:
    import struct

    if text is None:
        return struct.pack(">h", -1)
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def produce_request(correlation_id: int, topic: str, partition: int, records: bytes,
                    version: int = 3, client_id: str = "crafted") -> bytes:
    """A Produce v0-v3 request frame (size prefix included), written by hand from the
    spec: header v1 (api key, version, correlation id, client id), then the
    transactional id (v3+), acks, timeout, [topic name, [partition index, records]]."""
    import struct

    body = struct.pack(">hhi", 0, version, correlation_id) + _kstring(client_id)
    if version >= 3:
        body += _kstring(None)
    body += struct.pack(">hi", 1, 30_000)
    body += struct.pack(">i", 1) + _kstring(topic) + struct.pack(">i", 1)
    body += struct.pack(">ii", partition, len(records)) + records
    return struct.pack(">i", len(body)) + body


def produce_response(correlation_id: int, topic: str, partition: int, base_offset: int,
                     version: int = 3) -> bytes:
    """Produce v0-v3 response: correlation id; [name, [index, error, base offset,
    log append time (v2+)]], throttle time (v1+)."""
    import struct

    body = struct.pack(">i", correlation_id) + struct.pack(">i", 1) + _kstring(topic)
    body += struct.pack(">i", 1) + struct.pack(">ihq", partition, 0, base_offset)
    if version >= 2:
        body += struct.pack(">q", -1)
    if version >= 1:
        body += struct.pack(">i", 0)
    return struct.pack(">i", len(body)) + body


def write_tcp_pcap(path, exchanges: list[tuple[bytes, bytes]], *, client=("10.0.0.1", 40000),
                   broker=("10.0.0.2", 9092), mss: int = 60_000) -> None:
    """A pcap of one TCP connection (handshake, then each request and its response,
    then FIN) carrying the given (request bytes, response bytes) pairs."""
    import socket

    import dpkt

    c_ip, b_ip = socket.inet_aton(client[0]), socket.inet_aton(broker[0])
    seq = {0: 1000, 1: 5000}
    clock = [1_700_000_000.0]

    def packet(writer, side: int, flags: int, payload: bytes = b"") -> None:
        src, dst = (c_ip, b_ip) if side == 0 else (b_ip, c_ip)
        sport, dport = (client[1], broker[1]) if side == 0 else (broker[1], client[1])
        tcp = dpkt.tcp.TCP(sport=sport, dport=dport, seq=seq[side], ack=0 if flags == dpkt.tcp.TH_SYN else seq[1 - side], flags=flags,
                           win=65535, data=payload)
        ip = dpkt.ip.IP(src=src, dst=dst, p=dpkt.ip.IP_PROTO_TCP, ttl=64, data=tcp)
        ip.len = 20 + len(bytes(tcp))
        eth = dpkt.ethernet.Ethernet(src=b"\x02" * 6, dst=b"\x04" * 6, type=dpkt.ethernet.ETH_TYPE_IP, data=ip)
        clock[0] += 0.0005
        writer.writepkt(bytes(eth), ts=clock[0])
        seq[side] = (seq[side] + len(payload) + (1 if flags & (dpkt.tcp.TH_SYN | dpkt.tcp.TH_FIN) else 0)) % 2**32

    with open(path, "wb") as handle:
        writer = dpkt.pcap.Writer(handle, snaplen=262144, linktype=dpkt.pcap.DLT_EN10MB)
        packet(writer, 0, dpkt.tcp.TH_SYN)
        packet(writer, 1, dpkt.tcp.TH_SYN | dpkt.tcp.TH_ACK)
        packet(writer, 0, dpkt.tcp.TH_ACK)
        for request, response in exchanges:
            for side, data in ((0, request), (1, response)):
                for start in range(0, len(data), mss):
                    packet(writer, side, dpkt.tcp.TH_ACK | dpkt.tcp.TH_PUSH, data[start : start + mss])
        packet(writer, 0, dpkt.tcp.TH_FIN | dpkt.tcp.TH_ACK)
        packet(writer, 1, dpkt.tcp.TH_FIN | dpkt.tcp.TH_ACK)
        packet(writer, 0, dpkt.tcp.TH_ACK)
