"""Helpers for the pipeline tests: run kdissect, compare exchange sets, and map
packets of an impaired trace to the stream bytes they carried.

The packet-to-bytes mapping parses TCP headers here with struct (on top of
`tests.support.impair.ip_packet`), independently of kdissect's capture reader and
reassembler, so tests can say which exchanges a dropped packet touched.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

from kdissect.model.exchange import Exchange
from kdissect.conn.pipeline import analyze
from tests.support.impair import Trace, ip_packet

CAPTURES = Path(__file__).resolve().parent.parent.parent / "captures"


def run(paths, ports=(9092,)) -> tuple[list[Exchange], object]:
    exchanges, accounting = analyze([str(p) for p in paths], ports)
    return list(exchanges), accounting


def ports_of(capture: Path) -> tuple[int, ...]:
    """The broker port from the capture's manifest, 9092 if none."""
    name = capture.name
    for suffix in (".gz", ".pcapng", ".pcap"):
        name = name.removesuffix(suffix)
    manifest = capture.with_name(name + ".manifest.json")
    if manifest.exists():
        port = json.loads(manifest.read_text()).get("port")
        if isinstance(port, int):
            return (port,)
    return (9092,)


def identity(ex: Exchange) -> tuple:
    return (ex.client, ex.broker, ex.correlation_id, ex.api_key, ex.api_version)


def content(ex: Exchange) -> tuple:
    """What an exchange says, without where in the files it was found."""
    return identity(ex) + (ex.client_id, ex.status, tuple(ex.error_codes), ex.error_code,
                           ex.throttle_time_ms, ex.request_bytes, ex.response_bytes,
                           ex.records, _micro(ex.request_ts), _micro(ex.response_ts))


def _micro(ts: float | None) -> float | None:
    # pcapng/nanosecond files carry the same instants with more digits; compare to the microsecond
    return None if ts is None else round(ts, 6)


def content_untimed(ex: Exchange) -> tuple:
    return content(ex)[:-2]


@dataclass
class PacketBytes:
    index: int  # position in the trace
    src: str  # "ip:port"
    dst: str
    start: int  # stream offset of the first payload byte in this direction
    length: int  # payload bytes on the wire
    header_len: int = 0  # link + IP + TCP header bytes before the payload


def _ip_text(raw: bytes) -> str:
    import ipaddress

    return str(ipaddress.ip_address(raw))


def _endpoint(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def packet_bytes(trace: Trace) -> list[PacketBytes]:
    """Each payload-carrying packet and the stream offsets it covers.

    Offsets count from the byte after the SYN's sequence number (or from the
    lowest sequence number seen when the SYN is not in the trace), per
    direction, like the reassembler's chunk offsets. Assumes no wraparound.
    """
    parsed = []
    for index, pkt in enumerate(trace.packets):
        ip = ip_packet(pkt)
        if not ip:
            continue
        if ip[0] >> 4 == 4:
            ihl = (ip[0] & 15) * 4
            if ip[9] != 6:
                continue
            src, dst = _ip_text(ip[12:16]), _ip_text(ip[16:20])
            total = struct.unpack_from(">H", ip, 2)[0]
            tcp = ip[ihl:]
            ip_payload = total - ihl
        else:
            if ip[6] != 6:
                continue
            src, dst = _ip_text(ip[8:24]), _ip_text(ip[24:40])
            tcp = ip[40:]
            ip_payload = struct.unpack_from(">H", ip, 4)[0]
        sport, dport, seq = struct.unpack_from(">HHI", tcp, 0)
        header = (tcp[12] >> 4) * 4
        flags = tcp[13]
        payload_len = ip_payload - header
        headers = len(pkt.data) - len(ip) + (len(ip) - len(tcp)) + header
        parsed.append((index, _endpoint(src, sport), _endpoint(dst, dport), seq, payload_len, flags, headers))
    base: dict[tuple[str, str], int] = {}
    for index, src, dst, seq, length, flags, _ in parsed:
        key = (src, dst)
        if flags & 0x02:
            base[key] = seq + 1
        elif length and key not in base:
            base[key] = seq
        elif length and key in base and seq < base[key] and (base[key] - seq) < (1 << 30):
            base[key] = seq  # a lower sequence number seen later (reordering)
    out = []
    for index, src, dst, seq, length, flags, headers in parsed:
        if length > 0:
            out.append(PacketBytes(index, src, dst, seq - base[(src, dst)], length, headers))
    return out


def touched(exchange: Exchange, lost: list[PacketBytes]) -> bool:
    """Whether any lost packet carried bytes of the exchange's request or response frame."""
    for p in lost:
        if exchange.request_offset is not None and (p.src, p.dst) == (exchange.client, exchange.broker):
            start, end = exchange.request_offset, exchange.request_offset + 4 + exchange.request_bytes
            if p.start < end and start < p.start + p.length:
                return True
        if exchange.response_offset is not None and (p.src, p.dst) == (exchange.broker, exchange.client):
            start, end = exchange.response_offset, exchange.response_offset + 4 + exchange.response_bytes
            if p.start < end and start < p.start + p.length:
                return True
    return False


def reference_captures(limit_bytes: int = 3 << 20) -> list[Path]:
    """Clean captures from captures/ small enough for quick impairment tests."""
    found = []
    for pattern in ("*.pcap", "*.pcapng"):
        found += [p for p in CAPTURES.glob(pattern) if 1000 < p.stat().st_size <= limit_bytes]
    return sorted(found)


# -- hand-built Kafka conversations ------------------------------------------
# Frames are packed with struct from the protocol guide's layouts, so the
# expected values in tests are the ones written here, not kdissect's output.

from kdissect.model.packet import ACK, FIN, PSH, SYN, TcpSegment  # noqa: E402


def kstring(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def sized(frame: bytes) -> bytes:
    return struct.pack(">i", len(frame)) + frame


def request_v0_header(api_key: int, version: int, cid: int, client_id: str = "test-client") -> bytes:
    return struct.pack(">hhi", api_key, version, cid) + kstring(client_id)


def heartbeat_request(cid: int, client_id: str = "test-client") -> bytes:
    """Heartbeat v0: group_id, generation_id, member_id."""
    return sized(request_v0_header(12, 0, cid, client_id) + kstring("group") + struct.pack(">i", 1) + kstring("m1"))


def heartbeat_response(cid: int, error_code: int = 0) -> bytes:
    return sized(struct.pack(">ih", cid, error_code))


def metadata_request(cid: int, topics: list[str]) -> bytes:
    """Metadata v0: topics array."""
    body = struct.pack(">i", len(topics)) + b"".join(kstring(t) for t in topics)
    return sized(request_v0_header(3, 0, cid) + body)


def metadata_response(cid: int, topics: list[tuple[str, int]]) -> bytes:
    """Metadata v0: no brokers, each topic with an error code and no partitions."""
    body = struct.pack(">i", 0) + struct.pack(">i", len(topics))
    for name, error in topics:
        body += struct.pack(">h", error) + kstring(name) + struct.pack(">i", 0)
    return sized(struct.pack(">i", cid) + body)


def produce_v0_request(cid: int, acks: int) -> bytes:
    """Produce v0 with no topics: acks, timeout, topics array."""
    return sized(request_v0_header(0, 0, cid) + struct.pack(">hii", acks, 1000, 0))


def produce_v0_response(cid: int) -> bytes:
    return sized(struct.pack(">ii", cid, 0))


def sasl_handshake_request(cid: int, mechanism: str = "PLAIN") -> bytes:
    return sized(request_v0_header(17, 0, cid) + kstring(mechanism))


def sasl_handshake_response(cid: int, error_code: int = 0) -> bytes:
    return sized(struct.pack(">ih", cid, error_code) + struct.pack(">i", 1) + kstring("PLAIN"))


class Conversation:
    """TcpSegments of one TCP connection, with real sequence numbers and times."""

    def __init__(self, client=("10.0.0.1", 40000), broker=("10.0.0.2", 9092), isn=(1000, 5000),
                 start_ts: float = 1_700_000_000.0, capture_index: int = 0, numbering=None):
        # times are kept as int nanoseconds, as the capture reader gives them
        self.client, self.broker = client, broker
        self.seq = [isn[0], isn[1]]  # next sequence number: client, server
        self.ts = round(start_ts * 1_000_000) * 1000  # microsecond-exact, in ns
        self.capture_index = capture_index
        self.numbering = numbering if numbering is not None else [0]  # shared packet counter
        self.segments: list[TcpSegment] = []

    def _segment(self, from_client: bool, flags: int, payload: bytes = b"", wire_len: int | None = None,
                 advance: float = 0.001) -> TcpSegment:
        self.ts += round(advance * 1_000_000) * 1000
        self.numbering[0] += 1
        side = 0 if from_client else 1
        src, dst = (self.client, self.broker) if from_client else (self.broker, self.client)
        length = len(payload) if wire_len is None else wire_len
        seg = TcpSegment(self.capture_index, self.numbering[0], self.ts, src[0], src[1], dst[0], dst[1],
                         self.seq[side] & 0xFFFFFFFF, self.seq[1 - side] & 0xFFFFFFFF, flags, payload, length)
        self.seq[side] += length + (1 if flags & (SYN | FIN) else 0)
        self.segments.append(seg)
        return seg

    def handshake(self) -> "Conversation":
        self._segment(True, SYN)
        self._segment(False, SYN | ACK)
        self._segment(True, ACK)
        return self

    def send(self, payload: bytes, advance: float = 0.001) -> TcpSegment:
        return self._segment(True, PSH | ACK, payload, advance=advance)

    def reply(self, payload: bytes, advance: float = 0.001) -> TcpSegment:
        return self._segment(False, PSH | ACK, payload, advance=advance)

    def lose(self, from_client: bool, length: int) -> None:
        """Bytes sent but not captured: advance the sequence number only."""
        self.seq[0 if from_client else 1] += length

    def truncated(self, from_client: bool, payload: bytes, captured: int) -> TcpSegment:
        return self._segment(from_client, PSH | ACK, payload[:captured], wire_len=len(payload))

    def close(self) -> "Conversation":
        self._segment(True, FIN | ACK)
        self._segment(False, FIN | ACK)
        self._segment(True, ACK)
        return self


def dissect(segments, ports=(9092,), detect=True):
    from kdissect.conn.pipeline import Dissector

    dissector = Dissector(ports, detect, ["test.pcap"])
    out = []
    for seg in segments:
        out += dissector.feed(seg)
    out += dissector.finish()
    return out, dissector.accounting


def write_pcap(path, segments) -> Path:
    """A classic microsecond pcap (Ethernet) holding `segments`, built with struct."""
    import ipaddress

    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1)]
    for seg in segments:
        src, dst = ipaddress.ip_address(seg.src), ipaddress.ip_address(seg.dst)
        tcp = struct.pack(">HHIIBBHHH", seg.sport, seg.dport, seg.seq, seg.ack, 5 << 4, seg.flags, 65535, 0, 0)
        if src.version == 4:
            ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + 20 + seg.payload_len, 0, 0, 64, 6, 0,
                             src.packed, dst.packed)
            ethertype = 0x0800
        else:
            ip = struct.pack(">IHBB16s16s", 6 << 28, 20 + seg.payload_len, 6, 64, src.packed, dst.packed)
            ethertype = 0x86DD
        frame = b"\x00" * 12 + struct.pack(">H", ethertype) + ip + tcp + seg.payload
        wire = len(frame) + seg.payload_len - len(seg.payload)
        seconds, nanos = divmod(seg.ts, 1_000_000_000)
        micros = nanos // 1000
        out.append(struct.pack("<IIII", seconds, micros, len(frame), wire) + frame)
    Path(path).write_bytes(b"".join(out))
    return Path(path)
