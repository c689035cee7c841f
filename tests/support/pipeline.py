"""Helpers for the pipeline tests: run kdissect, compare exchange sets, and map
packets of an impaired trace to the stream bytes they carried.

The packet-to-bytes mapping parses TCP headers here with struct (on top of
`kdissect.impair.ip_packet`), independently of kdissect's capture reader and
reassembler, so tests can say which exchanges a dropped packet touched.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

from kdissect.exchange import Exchange
from kdissect.impair import Trace, ip_packet
from kdissect.pipeline import analyze

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
        parsed.append((index, _endpoint(src, sport), _endpoint(dst, dport), seq, ip_payload - header, flags))
    base: dict[tuple[str, str], int] = {}
    for index, src, dst, seq, length, flags in parsed:
        key = (src, dst)
        if flags & 0x02:
            base[key] = seq + 1
        elif length and key not in base:
            base[key] = seq
        elif length and key in base and seq < base[key] and (base[key] - seq) < (1 << 30):
            base[key] = seq  # a lower sequence number seen later (reordering)
    out = []
    for index, src, dst, seq, length, flags in parsed:
        if length > 0:
            out.append(PacketBytes(index, src, dst, seq - base[(src, dst)], length))
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
