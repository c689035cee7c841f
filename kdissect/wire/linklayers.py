"""Decode one captured frame (link layer, IPv4/IPv6, TCP) into a TcpSegment.

Hand-written with `struct` rather than dpkt objects: this runs once per
packet and dominates reading time, so it only looks at the bytes it needs.
`decode_frame` is the one link-layer decode of the project: the capture
reader's record and block loops (CLI and Spark alike) call it on the frame
where it lies in their read buffer, so a frame is never copied, only its TCP
payload. It tells a non-TCP packet apart from a damaged one so the reader can
count both. `segment_from_frame` is the simple form for a frame in its own
bytes object (tools and tests).
"""

from __future__ import annotations

import struct
from typing import Any

from kdissect.model.packet import TcpSegment

# Link-layer header types (LINKTYPE_* values as stored in pcap/pcapng files).
LINKTYPE_NULL = 0  # BSD loopback, 4-byte address family in the writer's byte order
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW_BSD = 12  # DLT_RAW on most BSDs
LINKTYPE_RAW_OPENBSD = 14  # DLT_RAW on OpenBSD
LINKTYPE_RAW = 101
LINKTYPE_LOOP = 108  # OpenBSD loopback, address family in network byte order
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_LINUX_SLL2 = 276

SUPPORTED_LINKTYPES = frozenset(
    {
        LINKTYPE_NULL,
        LINKTYPE_ETHERNET,
        LINKTYPE_RAW_BSD,
        LINKTYPE_RAW_OPENBSD,
        LINKTYPE_RAW,
        LINKTYPE_LOOP,
        LINKTYPE_LINUX_SLL,
        LINKTYPE_IPV4,
        LINKTYPE_IPV6,
        LINKTYPE_LINUX_SLL2,
    }
)

# Outcomes of decode_frame other than a segment.
NOT_TCP = 1  # a well-formed packet that is not TCP over IP (ARP, UDP, ICMP, ...)
UNDECODABLE = 2  # link/IP/TCP header damaged or cut before the TCP header ends
IP_FRAGMENT = 3  # part of a fragmented IP datagram (not reassembled; counted)
UNSUPPORTED_LINK = 4  # link type this reader does not know

_ETHERTYPE_IPV4 = 0x0800
_ETHERTYPE_IPV6 = 0x86DD
_VLAN_ETHERTYPES = (0x8100, 0x88A8, 0x9100)  # 802.1Q, 802.1ad (QinQ), old QinQ
# BSD address-family values for IPv6 differ per OS: Linux 10, NetBSD/OpenBSD 24,
# FreeBSD 28, Darwin 30.
_AF_INET = 2
_AF_INET6 = (10, 24, 28, 30)
# IPv6 extension headers whose length is (byte 1 + 1) * 8.
_IPV6_EXT_8 = frozenset({0, 43, 60, 135, 139, 140, 253, 254})

_H = struct.Struct("!H")
_TCP = struct.Struct("!HHIIBB")
# version/IHL, total length, flags/fragment offset, protocol, addresses
_IPV4 = struct.Struct("!BxHxxHxBxx4s4s")

# Ethernet + IPv4 header without options + TCP header, as one unpack (the
# common case, taken first): ethertype, version/IHL, total length,
# flags/fragment offset, protocol, addresses, then the TCP fields of _TCP.
_ETHERNET_IPV4_TCP = struct.Struct("!12xHBxHxxHxBxx4s4sHHIIBB")

# every port number as one shared int: a segment's ports are these objects,
# not fresh ints, so the segments and connections kept in memory share them
# (typed Any: compiled (kdissect/native.py), an int taken from a tuple of
# ints would be unboxed and a fresh int made for the segment)
_PORTS: tuple[Any, ...] = tuple(range(1 << 16))

_NAME_CACHE_LIMIT = 1 << 16
_v4_names: dict[bytes, str] = {}
_v6_names: dict[bytes, str] = {}


def _v4(raw: bytes) -> str:
    name = _v4_names.get(raw)
    if name is None:
        if len(_v4_names) >= _NAME_CACHE_LIMIT:
            _v4_names.clear()
        name = _v4_names[raw] = "%d.%d.%d.%d" % (raw[0], raw[1], raw[2], raw[3])  # as inet_ntop writes it
    return name


def _v6(raw: bytes) -> str:
    name = _v6_names.get(raw)
    if name is None:
        if len(_v6_names) >= _NAME_CACHE_LIMIT:
            _v6_names.clear()
        import socket  # only here: importing it costs a few ms at every start

        name = _v6_names[raw] = socket.inet_ntop(socket.AF_INET6, raw)
    return name


def _after_ethertype(data: bytes, ethertype: int, offset: int, end: int) -> tuple[int, int]:
    """Skip VLAN tags; return (ip_offset, ip_version) or (status, -1)."""
    while ethertype in _VLAN_ETHERTYPES:
        if end < offset + 4:
            return UNDECODABLE, -1
        ethertype = (data[offset + 2] << 8) | data[offset + 3]
        offset += 4
    if ethertype == _ETHERTYPE_IPV4:
        return offset, 4
    if ethertype == _ETHERTYPE_IPV6:
        return offset, 6
    return NOT_TCP, -1


def _family_version(family: int) -> int:
    if family == _AF_INET:
        return 4
    if family in _AF_INET6:
        return 6
    return -1


def locate_ip(linktype: int, data: bytes, start: int = 0, end: int | None = None) -> tuple[int, int]:
    """Where the IP header of the frame data[start:end] starts: (offset in
    `data`, 4 or 6), or (status, -1) when the frame carries no IP or cannot
    be decoded."""
    if end is None:
        end = len(data)
    n = end - start
    if linktype == LINKTYPE_ETHERNET:
        if n < 14:
            return UNDECODABLE, -1
        return _after_ethertype(data, (data[start + 12] << 8) | data[start + 13], start + 14, end)
    if linktype == LINKTYPE_LINUX_SLL:
        if n < 16:
            return UNDECODABLE, -1
        return _after_ethertype(data, (data[start + 14] << 8) | data[start + 15], start + 16, end)
    if linktype == LINKTYPE_LINUX_SLL2:
        if n < 20:
            return UNDECODABLE, -1
        return _after_ethertype(data, (data[start] << 8) | data[start + 1], start + 20, end)
    if linktype in (LINKTYPE_RAW, LINKTYPE_RAW_BSD, LINKTYPE_RAW_OPENBSD, LINKTYPE_IPV4, LINKTYPE_IPV6):
        if n < 1:
            return UNDECODABLE, -1
        version = data[start] >> 4
        if version not in (4, 6):
            return UNDECODABLE, -1
        return start, version
    if linktype == LINKTYPE_NULL or linktype == LINKTYPE_LOOP:
        if n < 4:
            return UNDECODABLE, -1
        if linktype == LINKTYPE_LOOP:
            family = int.from_bytes(data[start : start + 4], "big")
        else:
            # Written in the capturing host's byte order: whichever reading is
            # small is the right one.
            family = int.from_bytes(data[start : start + 4], "little")
            if family > 0xFFFF:
                family = int.from_bytes(data[start : start + 4], "big")
        version = _family_version(family)
        if version < 0:
            return NOT_TCP, -1
        return start + 4, version
    return UNSUPPORTED_LINK, -1


def decode_frame(linktype: int, data: bytes, start: int, caplen: int, wire_len: int, ts: Any, capture_index: int,
                 frame_number: int, order_ts: Any) -> TcpSegment | int:
    """Decode the frame data[start:start + caplen] (wire_len bytes on the wire)
    to a TcpSegment, or return NOT_TCP / UNDECODABLE / IP_FRAGMENT /
    UNSUPPORTED_LINK. Never raises on any bytes. `ts` and `order_ts` (ints,
    ns) go into the segment as the caller's objects, usually one shared
    object (typed Any so that a compiled build does not make two new ints)."""
    if linktype == LINKTYPE_ETHERNET and caplen >= 54:
        # Ethernet + IPv4 without options + TCP, the common case, in one unpack
        (ethertype, v_ihl, total, frag, proto, src_raw, dst_raw, sport, dport, seq, ack, offset_byte,
         flags) = _ETHERNET_IPV4_TCP.unpack_from(data, start)
        if (ethertype == 0x0800 and v_ihl == 0x45 and proto == 6 and not frag & 0x3FFF and total >= 20
                and offset_byte >= 0x50):
            ip_end = 14 + total
            if ip_end > wire_len and ip_end > caplen:
                ip_end = wire_len if wire_len > caplen else caplen  # a length beyond the frame itself is bogus
            payload_at = 34 + (offset_byte >> 4) * 4
            payload_len = ip_end - payload_at
            if payload_len >= 0:
                stop = ip_end if ip_end <= caplen else caplen
                return TcpSegment(capture_index, frame_number, ts, _v4_names.get(src_raw) or _v4(src_raw),
                                  _PORTS[sport], _v4_names.get(dst_raw) or _v4(dst_raw), _PORTS[dport], seq, ack, flags,
                                  data[start + payload_at : start + stop] if payload_at < stop else b"",
                                  payload_len, order_ts)
    # anything else (options, fragments, IPv6, other link types): the general path
    return decode_frame_general(linktype, data, start, caplen, wire_len, ts, capture_index, frame_number, order_ts)


def decode_frame_general(linktype: int, data: bytes, start: int, caplen: int, wire_len: int, ts: Any,
                         capture_index: int, frame_number: int, order_ts: Any) -> TcpSegment | int:
    """decode_frame without its Ethernet/IPv4/TCP short cut: every link type,
    IPv4 with options, IPv6 with extension headers. (Tests compare the two.)"""
    n = start + caplen  # end of the captured frame in `data`
    wire_end = start + wire_len
    off, version = locate_ip(linktype, data, start, n)
    if version < 0:
        return off
    if version == 4:
        if n < off + 20:
            return UNDECODABLE
        v_ihl, total, frag, proto, src_raw, dst_raw = _IPV4.unpack_from(data, off)
        ihl = (v_ihl & 15) * 4
        if v_ihl >> 4 != 4 or ihl < 20 or n < off + ihl:
            return UNDECODABLE
        if proto != 6:
            return NOT_TCP
        if frag & 0x3FFF:  # MF flag or a fragment offset
            return IP_FRAGMENT
        if total == 0:
            # Segmentation offload on the capturing host leaves the length 0;
            # the wire length is then the best evidence.
            ip_end = wire_end
        elif total < ihl:
            return UNDECODABLE
        else:
            ip_end = off + total
            if ip_end > wire_end and ip_end > n:
                ip_end = max(wire_end, n)  # a length beyond the frame itself is bogus
        src = _v4_names.get(src_raw) or _v4(src_raw)
        dst = _v4_names.get(dst_raw) or _v4(dst_raw)
        tcp = off + ihl
    else:
        if n < off + 40:
            return UNDECODABLE
        if data[off] >> 4 != 6:
            return UNDECODABLE
        plen = (data[off + 4] << 8) | data[off + 5]
        next_header = data[off + 6]
        raw = data[off + 8 : off + 24]
        src = _v6_names.get(raw) or _v6(raw)
        raw = data[off + 24 : off + 40]
        dst = _v6_names.get(raw) or _v6(raw)
        tcp = off + 40
        ip_end = tcp + plen if plen else wire_end
        if ip_end > wire_end and ip_end > n:
            ip_end = max(wire_end, n)  # a length beyond the frame itself is bogus
        while next_header != 6:
            if n < tcp + 8:
                return UNDECODABLE if next_header in _IPV6_EXT_8 or next_header in (44, 51) else NOT_TCP
            if next_header in _IPV6_EXT_8:
                next_header, tcp = data[tcp], tcp + (data[tcp + 1] + 1) * 8
            elif next_header == 44:  # fragment header
                if ((data[tcp + 2] << 8) | data[tcp + 3]) & 0xFFF9:
                    return IP_FRAGMENT
                next_header, tcp = data[tcp], tcp + 8
            elif next_header == 51:  # authentication header
                next_header, tcp = data[tcp], tcp + (data[tcp + 1] + 2) * 4
            else:
                return NOT_TCP
    if n < tcp + 20:
        return UNDECODABLE
    sport, dport, seq, ack, offset_byte, flags = _TCP.unpack_from(data, tcp)
    payload_at = tcp + (offset_byte >> 4) * 4
    payload_len = ip_end - payload_at
    if offset_byte >> 4 < 5 or payload_len < 0:
        return UNDECODABLE
    payload = data[payload_at : ip_end if ip_end <= n else n]
    return TcpSegment(capture_index, frame_number, ts, src, _PORTS[sport], dst, _PORTS[dport], seq, ack, flags, payload,
                      payload_len, order_ts)


def segment_from_frame(linktype: int, ts: int, data: bytes, wire_len: int, capture_index: int,
                       frame_number: int) -> TcpSegment | None:
    """The TCP segment in one captured frame (its own bytes), or None for anything else."""
    result = decode_frame(linktype, data, 0, len(data), wire_len, ts, capture_index, frame_number, ts)
    return result if type(result) is TcpSegment else None
