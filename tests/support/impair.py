"""Seeded capture impairment: rewrite a real capture the way messy captures
look (reordered, duplicated, lost packets; VLAN tags; other link layers;
pcapng, nanosecond pcap, gzip; cut files; short snaplen; rotated files).

Used by the tests to derive many variants from one clean capture.
Every random choice comes from `random.Random(seed)`, so a variant is
reproducible from (input, operation, seed).

This module deliberately does not use kdissect's own reader to load or take
packets apart, so that tests comparing the reader against impaired files are
not checking the reader against itself.

    trace = load_pcap("clean.pcap")
    write_pcap(reorder(trace, seed=3), "reordered.pcap")
    write_pcapng(with_vlan(trace), "vlan.pcapng")
"""

from __future__ import annotations

import gzip
import random
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

ETHERNET, NULL, LOOP, RAW, RAW_BSD, IPV4, IPV6, SLL, SLL2 = 1, 0, 108, 101, 12, 228, 229, 113, 276
_LINK_NAMES = {
    "ethernet": ETHERNET,
    "null": NULL,  # BSD loopback, little-endian family
    "null-be": NULL,  # BSD loopback written by a big-endian host
    "loop": LOOP,
    "raw": RAW,
    "raw12": RAW_BSD,
    "ipv4": IPV4,
    "ipv6": IPV6,
    "sll": SLL,
    "sll2": SLL2,
}
_MASK = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class Packet:
    ts_ns: int  # nanoseconds since the epoch (kept exact, unlike a float)
    data: bytes  # the captured frame, link header included
    wire_len: int
    linktype: int


@dataclass(frozen=True, slots=True)
class Trace:
    packets: tuple[Packet, ...]
    snaplen: int = 262144

    @property
    def linktype(self) -> int:
        return self.packets[0].linktype if self.packets else ETHERNET


# -- reading ----------------------------------------------------------------------


def load_pcap(path: str | Path) -> Trace:
    """Load a classic pcap file (either byte order, micro- or nanosecond)."""
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    magic = raw[:4]
    orders = {
        b"\xd4\xc3\xb2\xa1": ("<", 1000),
        b"\x4d\x3c\xb2\xa1": ("<", 1),
        b"\xa1\xb2\xc3\xd4": (">", 1000),
        b"\xa1\xb2\x3c\x4d": (">", 1),
    }
    if magic not in orders:
        raise ValueError(f"{path}: not a classic pcap file")
    order, frac_ns = orders[magic]
    snaplen, linktype = struct.unpack_from(order + "II", raw, 16)
    packets = []
    pos = 24
    while pos + 16 <= len(raw):
        sec, frac, caplen, wirelen = struct.unpack_from(order + "IIII", raw, pos)
        pos += 16
        packets.append(Packet(sec * 1_000_000_000 + frac * frac_ns, raw[pos : pos + caplen], wirelen, linktype & 0xFFFF))
        pos += caplen
    return Trace(tuple(packets), snaplen)


# -- taking frames apart (Ethernet, SLL, SLL2, raw IP, loopback) -------------------


def ip_packet(pkt: Packet) -> bytes | None:
    """The IP datagram inside a frame, None if the frame carries none."""
    data, lt = pkt.data, pkt.linktype
    if lt == ETHERNET:
        off, ethertype = 14, int.from_bytes(data[12:14], "big")
        while ethertype in (0x8100, 0x88A8):
            ethertype = int.from_bytes(data[off + 2 : off + 4], "big")
            off += 4
        return data[off:] if ethertype in (0x0800, 0x86DD) else None
    if lt == SLL:
        return data[16:] if data[14:16] in (b"\x08\x00", b"\x86\xdd") else None
    if lt == SLL2:
        return data[20:] if data[0:2] in (b"\x08\x00", b"\x86\xdd") else None
    if lt in (RAW, RAW_BSD, IPV4, IPV6):
        return data
    if lt in (NULL, LOOP):
        return data[4:]
    raise ValueError(f"link type {lt} not supported by the impairment tool")


@dataclass(slots=True)
class _Tcp:
    """Offsets of the TCP header inside an IP datagram."""

    version: int
    src: bytes
    dst: bytes
    tcp: int  # offset of the TCP header in the datagram
    payload_len: int


def _tcp_view(ip: bytes) -> _Tcp | None:
    if not ip:
        return None
    if ip[0] >> 4 == 4:
        ihl = (ip[0] & 15) * 4
        if ip[9] != 6:
            return None
        total = int.from_bytes(ip[2:4], "big")
        thl = (ip[ihl + 12] >> 4) * 4
        return _Tcp(4, ip[12:16], ip[16:20], ihl, total - ihl - thl)
    if ip[0] >> 4 == 6:
        if ip[6] != 6:
            return None  # extension headers: not rewritten here
        thl = (ip[52] >> 4) * 4
        return _Tcp(6, ip[8:24], ip[24:40], 40, int.from_bytes(ip[4:6], "big") - thl)
    return None


def _replace_ip(pkt: Packet, new_ip: bytes) -> Packet:
    old_ip = ip_packet(pkt)
    assert old_ip is not None
    head = pkt.data[: len(pkt.data) - len(old_ip)]
    return replace(pkt, data=head + new_ip, wire_len=pkt.wire_len - len(old_ip) + len(new_ip))


def has_payload(pkt: Packet) -> bool:
    ip = ip_packet(pkt)
    view = _tcp_view(ip) if ip else None
    return bool(view and view.payload_len > 0)


def payload_indices(trace: Trace) -> list[int]:
    """Indices of packets carrying TCP payload (candidates for dropping)."""
    return [i for i, p in enumerate(trace.packets) if has_payload(p)]


# -- packet-order impairments -------------------------------------------------------


def reorder(trace: Trace, seed: int, window: int = 3, rate: float = 0.2) -> Trace:
    """Swap packets with one at most `window` places later; no packet moves
    further than `window`. Timestamps travel with their packets."""
    rng = random.Random(seed)
    packets = list(trace.packets)
    i = 0
    while i < len(packets) - 1:
        if rng.random() < rate:
            j = min(len(packets) - 1, i + rng.randint(1, window))
            packets[i], packets[j] = packets[j], packets[i]
            i = j + 1
        else:
            i += 1
    return replace(trace, packets=tuple(packets))


def duplicate(trace: Trace, seed: int, rate: float = 0.1, max_delay: int = 3) -> Trace:
    """Insert copies of random packets up to `max_delay` places after the original."""
    rng = random.Random(seed)
    out: list[Packet] = []
    delayed: list[tuple[int, Packet]] = []
    for i, pkt in enumerate(trace.packets):
        out.append(pkt)
        if rng.random() < rate:
            delayed.append((i + rng.randint(0, max_delay), pkt))
        for due in [d for d in delayed if d[0] <= i]:
            out.append(due[1])
            delayed.remove(due)
    out.extend(p for _, p in delayed)
    return replace(trace, packets=tuple(out))


def drop(trace: Trace, indices: Iterable[int]) -> Trace:
    gone = set(indices)
    return replace(trace, packets=tuple(p for i, p in enumerate(trace.packets) if i not in gone))


def drop_random(trace: Trace, seed: int, count: int) -> tuple[Trace, list[int]]:
    """Drop `count` random payload-carrying packets; returns the trace and the dropped indices."""
    rng = random.Random(seed)
    chosen = sorted(rng.sample(payload_indices(trace), count))
    return drop(trace, chosen), chosen


def cut_head(trace: Trace, count: int) -> Trace:
    """A capture started late: the first `count` packets are missing."""
    return replace(trace, packets=trace.packets[count:])


def split(trace: Trace, per_file: int) -> list[Trace]:
    """Rotated files of `per_file` packets each (like `editcap -c`)."""
    return [replace(trace, packets=trace.packets[i : i + per_file]) for i in range(0, len(trace.packets), per_file)]


def with_snaplen(trace: Trace, snaplen: int) -> Trace:
    """As if captured with `tcpdump -s snaplen`."""
    return Trace(tuple(replace(p, data=p.data[:snaplen]) for p in trace.packets), snaplen)


# -- link layers ----------------------------------------------------------------------


def with_vlan(trace: Trace, vlan_ids: Sequence[int] = (100,)) -> Trace:
    """Add 802.1Q tags to Ethernet frames; two ids give QinQ (outer 802.1ad)."""
    out = []
    for pkt in trace.packets:
        if pkt.linktype != ETHERNET:
            raise ValueError("VLAN tags need Ethernet frames")
        tags = b""
        for n, vid in enumerate(vlan_ids):
            tpid = 0x88A8 if n == 0 and len(vlan_ids) > 1 else 0x8100
            tags += tpid.to_bytes(2, "big") + (vid & 0x0FFF).to_bytes(2, "big")
        data = pkt.data[:12] + tags + pkt.data[12:]
        out.append(replace(pkt, data=data, wire_len=pkt.wire_len + len(tags)))
    return replace(trace, packets=tuple(out), snaplen=trace.snaplen + 4 * len(vlan_ids))


def relink(trace: Trace, link: str) -> Trace:
    """Re-encapsulate every IP packet in another link layer (names in _LINK_NAMES)."""
    linktype = _LINK_NAMES[link]
    out = []
    for pkt in trace.packets:
        ip = ip_packet(pkt)
        if ip is None:
            continue
        version = ip[0] >> 4
        ethertype = b"\x08\x00" if version == 4 else b"\x86\xdd"
        if link == "ethernet":
            head = b"\x00" * 12 + ethertype
        elif link == "sll":
            # packet type 0 (to us), ARPHRD_LOOPBACK, address length 6, address, protocol
            head = struct.pack("!HHH8s", 0, 772, 6, b"\0" * 8) + ethertype
        elif link == "sll2":
            # protocol, reserved, ifindex, ARPHRD, packet type, address length, address
            head = ethertype + struct.pack("!HIHBB8s", 0, 1, 772, 0, 6, b"\0" * 8)
        elif link in ("null", "null-be", "loop"):
            family = 2 if version == 4 else 30
            head = family.to_bytes(4, "little" if link == "null" else "big")
        else:
            head = b""
        data = head + ip
        out.append(Packet(pkt.ts_ns, data, pkt.wire_len - len(pkt.data) + len(data), linktype))
    return Trace(tuple(out), trace.snaplen)


# -- TCP rewrites -------------------------------------------------------------------------


def _rewrite_tcp(pkt: Packet, edit) -> Packet:
    ip = ip_packet(pkt)
    view = _tcp_view(ip) if ip else None
    if view is None:
        return pkt
    new = edit(bytearray(ip), view)
    return pkt if new is None else _replace_ip(pkt, bytes(new))


def shift_sequence(trace: Trace, endpoint: tuple[str, int], delta: int) -> Trace:
    """Add `delta` to the sequence numbers `endpoint` sends (and to the peer's
    acknowledgements of them): crafts wraparound from a real capture."""
    import ipaddress

    addr = ipaddress.ip_address(endpoint[0]).packed
    port = endpoint[1]

    def edit(ip: bytearray, v: _Tcp):
        t = v.tcp
        sport, dport = struct.unpack_from("!HH", ip, t)
        seq, ack = struct.unpack_from("!II", ip, t + 4)
        if v.src == addr and sport == port:
            struct.pack_into("!I", ip, t + 4, (seq + delta) & _MASK)
        elif v.dst == addr and dport == port and ip[t + 13] & 0x10:
            struct.pack_into("!I", ip, t + 8, (ack + delta) & _MASK)
        else:
            return None
        return ip

    return replace(trace, packets=tuple(_rewrite_tcp(p, edit) for p in trace.packets))


def with_ipv6_extensions(trace: Trace) -> Trace:
    """Put a hop-by-hop and a destination-options header (PadN only) in
    front of the TCP header of every IPv6 packet; IPv4 packets are unchanged."""

    def edit(ip: bytearray, v: _Tcp):
        if v.version != 6:
            return None
        hop = bytes([60, 0, 1, 4, 0, 0, 0, 0])  # next: destination options
        dest = bytes([6, 1, 1, 12]) + bytes(12)  # next: TCP; 16 bytes long
        new = ip[:40] + hop + dest + ip[40:]
        new[6] = 0  # next header: hop-by-hop
        struct.pack_into("!H", new, 4, int.from_bytes(ip[4:6], "big") + len(hop) + len(dest))
        return new

    return replace(trace, packets=tuple(_rewrite_tcp(p, edit) for p in trace.packets), snaplen=trace.snaplen + 24)


def zero_ip_lengths(trace: Trace) -> Trace:
    """Set every IPv4 total length to 0, as captures taken on a host with TCP
    segmentation offload show large outgoing segments."""

    def edit(ip: bytearray, v: _Tcp):
        if v.version != 4:
            return None
        ip[2:4] = b"\0\0"
        return ip

    return replace(trace, packets=tuple(_rewrite_tcp(p, edit) for p in trace.packets))


def connection_packets(trace: Trace, endpoint: tuple[str, int]) -> list[int]:
    """Indices of the packets to or from `endpoint`."""
    import ipaddress

    addr = ipaddress.ip_address(endpoint[0]).packed
    found = []
    for i, pkt in enumerate(trace.packets):
        ip = ip_packet(pkt)
        v = _tcp_view(ip) if ip else None
        if v is None:
            continue
        sport, dport = struct.unpack_from("!HH", ip, v.tcp)
        if (v.src == addr and sport == endpoint[1]) or (v.dst == addr and dport == endpoint[1]):
            found.append(i)
    return found


def replay_connection(trace: Trace, endpoint: tuple[str, int], delay_s: float, seq_delta: int) -> Trace:
    """Append a second copy of one connection, `delay_s` after the capture's
    end, with both sides' sequence numbers moved by `seq_delta`: the same
    4-tuple used again by a new connection (port reuse)."""
    indices = connection_packets(trace, endpoint)
    copy = Trace(tuple(trace.packets[i] for i in indices), trace.snaplen)
    peer = _peer_of(copy, endpoint)
    copy = shift_sequence(shift_sequence(copy, endpoint, seq_delta), peer, seq_delta)
    end = max(p.ts_ns for p in trace.packets)
    start = copy.packets[0].ts_ns
    offset = end - start + int(delay_s * 1e9)
    moved = tuple(replace(p, ts_ns=p.ts_ns + offset) for p in copy.packets)
    return replace(trace, packets=trace.packets + moved)


def _peer_of(trace: Trace, endpoint: tuple[str, int]) -> tuple[str, int]:
    import ipaddress

    addr = ipaddress.ip_address(endpoint[0]).packed
    for pkt in trace.packets:
        ip = ip_packet(pkt)
        v = _tcp_view(ip) if ip else None
        if v is None:
            continue
        sport, dport = struct.unpack_from("!HH", ip, v.tcp)
        if v.src == addr and sport == endpoint[1]:
            return str(ipaddress.ip_address(v.dst)), dport
    raise ValueError(f"no packets from {endpoint}")


def repeat(trace: Trace, copies: int, port_step: int = 1) -> Trace:
    """`copies` back-to-back copies of the capture, each later copy's ports
    moved by `port_step` (so each copy's connections are new 4-tuples):
    builds a large capture out of a small real one."""
    span = max(p.ts_ns for p in trace.packets) - min(p.ts_ns for p in trace.packets) + 1_000_000
    out: list[Packet] = []
    for n in range(copies):
        shift = n * port_step

        def edit(ip: bytearray, v: _Tcp, shift: int = shift):
            if not shift:
                return None
            sport, dport = struct.unpack_from("!HH", ip, v.tcp)
            struct.pack_into("!HH", ip, v.tcp, (sport + shift) % 65536, (dport + shift) % 65536)
            return ip

        for p in trace.packets:
            q = _rewrite_tcp(p, edit)
            out.append(replace(q, ts_ns=q.ts_ns + n * span))
    return replace(trace, packets=tuple(out))


# -- writing ---------------------------------------------------------------------------------


def pcap_bytes(trace: Trace, nanosecond: bool = False, big_endian: bool = False, modified: bool = False) -> bytes:
    """Classic pcap; `modified` writes Kuznetzov's variant (magic a1b2cd34,
    8 more bytes per record: interface index, protocol, packet type)."""
    order = ">" if big_endian else "<"
    magic = 0xA1B2CD34 if modified else 0xA1B23C4D if nanosecond else 0xA1B2C3D4
    out = [struct.pack(order + "IHHiIII", magic, 2, 4, 0, 0, trace.snaplen, trace.linktype)]
    extra = struct.pack(order + "IHBx", 1, 0x0800, 0) if modified else b""
    for p in trace.packets:
        if p.linktype != trace.linktype:
            raise ValueError("a pcap file has one link type; use write_pcapng")
        sec, ns = divmod(p.ts_ns, 1_000_000_000)
        frac = ns if nanosecond and not modified else ns // 1000
        out.append(struct.pack(order + "IIII", sec, frac, len(p.data), p.wire_len) + extra)
        out.append(p.data)
    return b"".join(out)


def write_pcap(
    trace: Trace, path: str | Path, nanosecond: bool = False, big_endian: bool = False, compress: bool = False,
    modified: bool = False,
) -> Path:
    data = pcap_bytes(trace, nanosecond, big_endian, modified)
    path = Path(path)
    path.write_bytes(gzip.compress(data, compresslevel=1) if compress else data)
    return path


def _block(order: str, block_type: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    length = len(body) + 12
    return struct.pack(order + "II", block_type, length) + body + struct.pack(order + "I", length)


def pcapng_bytes(trace: Trace, tsresol: int | Sequence[int] = 6, big_endian: bool = False, packet_block: str = "enhanced") -> bytes:
    """pcapng with one interface per (link type, resolution) pair. `tsresol`
    is the if_tsresol byte (6 = microseconds, 9 = ns, 0x80|n = 2^-n); a list
    cycles per packet, so one file mixes interfaces of different resolutions.
    `packet_block` "obsolete" writes the old Packet Block (type 2) and
    "simple" Simple Packet Blocks (type 3: no timestamp, one interface)."""
    order = ">" if big_endian else "<"
    resolutions = [tsresol] if isinstance(tsresol, int) else list(tsresol)
    out = [_block(order, 0x0A0D0D0A, struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, -1))]
    interfaces: dict[tuple[int, int], int] = {}
    for n, p in enumerate(trace.packets):
        res = resolutions[n % len(resolutions)]
        key = (p.linktype, res)
        if key not in interfaces:
            interfaces[key] = len(interfaces)
            options = struct.pack(order + "HH", 9, 1) + bytes([res]) + b"\0\0\0" + struct.pack(order + "HH", 0, 0)
            out.append(_block(order, 1, struct.pack(order + "HHI", p.linktype, 0, trace.snaplen) + options))
        if res & 0x80:
            ticks = (p.ts_ns << (res & 0x7F)) // 1_000_000_000
        else:
            ticks = p.ts_ns * 10**res // 1_000_000_000
        if packet_block == "simple":
            out.append(_block(order, 3, struct.pack(order + "I", p.wire_len) + p.data))
        elif packet_block == "obsolete":
            body = struct.pack(order + "HHIIII", interfaces[key], 0, ticks >> 32, ticks & _MASK, len(p.data), p.wire_len)
            out.append(_block(order, 2, body + p.data))
        else:
            body = struct.pack(order + "IIIII", interfaces[key], ticks >> 32, ticks & _MASK, len(p.data), p.wire_len)
            out.append(_block(order, 6, body + p.data))
    return b"".join(out)


def write_pcapng(
    trace: Trace, path: str | Path, tsresol: int | Sequence[int] = 6, big_endian: bool = False, compress: bool = False,
    packet_block: str = "enhanced",
) -> Path:
    data = pcapng_bytes(trace, tsresol, big_endian, packet_block)
    path = Path(path)
    path.write_bytes(gzip.compress(data, compresslevel=1) if compress else data)
    return path


def mixed_links(trace: Trace, links: Sequence[str] = ("ethernet", "sll2")) -> Trace:
    """Each packet re-encapsulated in the next link type of `links` in turn
    (for pcapng files with several interfaces)."""
    variants = [relink(trace, link) for link in links]
    return Trace(tuple(variants[n % len(variants)].packets[n] for n in range(len(trace.packets))), trace.snaplen)


def cut_file(path: str | Path, keep_bytes: int) -> Path:
    """Cut a file to its first `keep_bytes` bytes (mid-record, if chosen so)."""
    path = Path(path)
    data = path.read_bytes()
    path.write_bytes(data[:keep_bytes])
    return path


def record_offsets(trace: Trace) -> list[int]:
    """Byte offset of each record header in `pcap_bytes(trace)`."""
    offsets, pos = [], 24
    for p in trace.packets:
        offsets.append(pos)
        pos += 16 + len(p.data)
    return offsets


# -- command line ---------------------------------------------------------------------


_USAGE = """usage: python3 -m tests.support.impair IN.pcap OUT [OP ...]

Operations, applied in order (SEED and numbers are integers):
  reorder:SEED  duplicate:SEED  drop:SEED:COUNT  cut-head:N  snaplen:N
  vlan:ID[,ID]  link:NAME (ethernet sll sll2 raw raw12 ipv4 ipv6 null null-be loop)
  ipv6-ext  ip-length-zero  repeat:N
Output (last one wins): pcap (default)  pcap-ns  pcap-be  pcapng  pcapng-ns  gzip
  split:N writes OUT.000, OUT.001, ... of N packets each."""


def main(argv: Sequence[str] | None = None) -> int:
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or args[0] in ("-h", "--help"):
        print(_USAGE)
        return 0 if args[:1] in (["-h"], ["--help"]) else 2
    trace = load_pcap(args[0])
    out = Path(args[1])
    fmt, compress, per_file = "pcap", False, 0
    for op in args[2:]:
        name, _, arg = op.partition(":")
        nums = [int(x) for x in arg.replace(",", ":").split(":") if x.isdigit()]
        if name == "reorder":
            trace = reorder(trace, nums[0])
        elif name == "duplicate":
            trace = duplicate(trace, nums[0])
        elif name == "drop":
            trace, _ = drop_random(trace, nums[0], nums[1])
        elif name == "cut-head":
            trace = cut_head(trace, nums[0])
        elif name == "snaplen":
            trace = with_snaplen(trace, nums[0])
        elif name == "vlan":
            trace = with_vlan(trace, nums)
        elif name == "link":
            trace = relink(trace, arg)
        elif name == "ipv6-ext":
            trace = with_ipv6_extensions(trace)
        elif name == "ip-length-zero":
            trace = zero_ip_lengths(trace)
        elif name == "repeat":
            trace = repeat(trace, nums[0])
        elif name in ("pcap", "pcap-ns", "pcap-be", "pcapng", "pcapng-ns"):
            fmt = name
        elif name == "gzip":
            compress = True
        elif name == "split":
            per_file = nums[0]
        else:
            print(f"unknown operation {op!r}\n{_USAGE}", file=sys.stderr)
            return 2
    parts = split(trace, per_file) if per_file else [trace]
    for n, part in enumerate(parts):
        path = out.with_name(f"{out.name}.{n:03}") if per_file else out
        if fmt.startswith("pcapng"):
            write_pcapng(part, path, tsresol=9 if fmt == "pcapng-ns" else 6, compress=compress)
        else:
            write_pcap(part, path, nanosecond=fmt == "pcap-ns", big_endian=fmt == "pcap-be", compress=compress)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
