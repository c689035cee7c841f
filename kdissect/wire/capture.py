"""Read capture files (pcap, pcapng, gzip-compressed either) into TcpSegments.

Several files given together are one capture set: `capture_index` is a
file's position when the files are ordered by their first packet's time,
then path; `frame_number` counts packets from 1 per file, as tshark does; and
the files' packets are merged by time, identical copies of a packet in
several files counted once (the rule: `kdissect.wire.captureset`).

Times are integers: nanoseconds since the Unix epoch (`TcpSegment.ts`,
`Frame.ts`), exact to the file's resolution. pcap: seconds * 10**9 plus
microseconds * 1000 or nanoseconds. pcapng: an interface's ticks converted
with integer arithmetic, exactly for if_tsresol 10^-k with k <= 9 and
rounded to the nearest nanosecond for finer decimal resolutions and for
2^-k; if_tsoffset (whole seconds) is added as seconds * 10**9. Simple packet
blocks carry no time: ts 0. `CaptureSet.resolutions` gives each file's
ticks per second (10**6, 10**9, 2**20, ...).

One record loop reads pcap (`_pcap_records`) and one block loop reads pcapng
(`_pcapng_blocks`), for the CLI (a whole file, streamed in chunks, possibly
gzip), for the Spark job's byte ranges (`read_range`) and its pre-pass
(`scan_range`), and for tools (`iter_frames`). Each decodes a packet where
it lies in the read buffer with `kdissect.wire.linklayers.decode_frame`, so only
TCP payloads are copied. Memory does not grow with the file. A damaged file
yields every packet before the damage; what follows is counted in
`ReadStats`, never silently lost. A path that cannot be opened or is not a
capture at all raises `InputError` with a one-line message.

Formats: pcap (micro/nanosecond magic, either byte order, Kuznetzov's
modified variant), pcapng (any number of sections and interfaces, each with
its own link type, timestamp resolution and offset; enhanced, obsolete and
simple packet blocks; decryption secrets blocks, collected in
`CaptureSet.secrets`), and gzip of either, recognised by magic number, not
by file name.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO, Callable, Final, NamedTuple, Protocol

from kdissect.wire import stores  # captures given as store URIs (its own imports are light)
from kdissect.wire.captureset import DuplicateFilter, merge_files, timestamp_unit
from kdissect.failures import InputError
from kdissect.wire.linklayers import (
    IP_FRAGMENT,
    NOT_TCP,
    SUPPORTED_LINKTYPES,
    UNSUPPORTED_LINK,
    decode_frame,
    segment_from_frame,
)
from kdissect.model.packet import FrozenSlotRecord, SlotRecord, TcpSegment, fields_of

__all__ = [
    "CaptureFile",
    "CaptureSet",
    "FileRange",
    "Frame",
    "PcapHeader",
    "ReadStats",
    "Secret",
    "Walk",
    "capture_set_order",
    "describe_captures",
    "interface_from_description",
    "iter_frames",
    "parse_pcap_header",
    "pcapng_head",
    "read_file",
    "read_range",
    "read_segments",
    "scan_range",
    "segment_from_frame",
]

_CHUNK = 1 << 20
_FIRST_READ = 64 << 10  # bytes of a whole file's first read
_RANGE_TAIL = 16 << 10  # bytes read at a time past a byte range's end (the rest of its last record)
# Wireshark refuses records larger than this unless the snaplen says otherwise;
# a bigger length field means the record header is damaged.
_MAX_RECORD = 262144
MAX_PCAPNG_BLOCK: Final = 64 << 20
NS_PER_SECOND = 1_000_000_000
_END = 1 << 126  # beyond any file offset

_PCAP_MAGICS = {
    # magic as read little-endian -> (byte order, ticks per second, record header size)
    0xA1B2C3D4: ("<", 1_000_000, 16),
    0xA1B23C4D: ("<", 1_000_000_000, 16),
    0xA1B2CD34: ("<", 1_000_000, 24),  # Kuznetzov's modified pcap: 8 more bytes per record
    0xD4C3B2A1: (">", 1_000_000, 16),
    0x4D3CB2A1: (">", 1_000_000_000, 16),
    0x34CDB2A1: (">", 1_000_000, 24),
}
PCAPNG_SHB: Final = 0x0A0D0D0A
PCAPNG_BYTE_ORDER = {b"\x4d\x3c\x2b\x1a": "<", b"\x1a\x2b\x3c\x4d": ">"}
_GZIP_MAGIC = b"\x1f\x8b"
# pcapng block types read here (Final, like the loops' other constants: the
# compiled loops then compare with literals instead of looking up a global per packet)
_IDB: Final = 1
_OBSOLETE_PACKET: Final = 2
_SIMPLE_PACKET: Final = 3
_ENHANCED_PACKET: Final = 6
_SECRETS: Final = 0x0000000A

# what a loop produces: TCP segments (decoded in place), undecoded frames, or
# nothing but the walk's counts (the Spark pre-pass)
SEGMENTS: Final = 0
FRAMES: Final = 1
SCAN: Final = 2


class ReadStats(SlotRecord):
    """Per-run reading accounting; additive across files and runs."""

    __slots__ = ("files", "packets", "bytes", "tcp_segments", "non_tcp", "undecodable", "ip_fragments", "cut_records",
                 "damaged_files", "unread_bytes", "duplicate_packets", "problems")

    def __init__(self, files: int = 0, packets: int = 0, bytes: int = 0, tcp_segments: int = 0, non_tcp: int = 0,
                 undecodable: int = 0, ip_fragments: int = 0, cut_records: int = 0, damaged_files: int = 0,
                 unread_bytes: int = 0, duplicate_packets: int = 0, problems: list[str] | None = None) -> None:
        self.files = files
        self.packets = packets  # records read (every packet, TCP or not)
        self.bytes = bytes  # captured bytes of those records
        self.tcp_segments = tcp_segments
        self.non_tcp = non_tcp  # well-formed packets that are not TCP/IP
        self.undecodable = undecodable  # damaged or cut link/IP/TCP headers, unsupported link types
        self.ip_fragments = ip_fragments  # fragmented IP datagrams (not reassembled)
        self.cut_records = cut_records  # a last record cut short by the end of the file
        self.damaged_files = damaged_files  # files with a damaged record or block header
        self.unread_bytes = unread_bytes  # file bytes after damage or a cut, not decoded
        # TCP segments dropped as copies of one from another file (captureset)
        self.duplicate_packets = duplicate_packets
        self.problems = [] if problems is None else problems

    def add(self, other: ReadStats) -> None:
        for name in fields_of(type(self)):
            if name == "problems":
                self.problems.extend(other.problems)
            else:
                setattr(self, name, getattr(self, name) + getattr(other, name))


class PcapHeader(FrozenSlotRecord):
    __slots__ = ("byte_order", "ticks_per_second", "snaplen", "linktype", "record_header_size", "version")

    # (the fields, for type checkers: __init__ stores them with _set_fields)
    byte_order: str
    ticks_per_second: int
    snaplen: int
    linktype: int
    record_header_size: int
    version: tuple[int, int]

    def __init__(self,
                 byte_order: str,  # "<" or ">"
                 ticks_per_second: int,  # 1_000_000 (microsecond) or 1_000_000_000 (nanosecond)
                 snaplen: int,
                 linktype: int,
                 record_header_size: int = 16,
                 version: tuple[int, int] = (2, 4),
                 ) -> None:
        self._set_fields(byte_order, ticks_per_second, snaplen, linktype, record_header_size, version)


class Frame(SlotRecord):
    """One captured packet before decoding."""

    __slots__ = ("capture_index", "frame_number", "linktype", "ts", "data", "wire_len", "interface", "order_ts")

    def __init__(self, capture_index: int, frame_number: int, linktype: int, ts: int, data: bytes,
                 wire_len: int, interface: int = 0, order_ts: int | None = None) -> None:
        self.capture_index = capture_index
        self.frame_number = frame_number
        self.linktype = linktype
        self.ts = ts  # int: nanoseconds since the Unix epoch (0: no time, a simple packet block)
        self.data = data
        self.wire_len = wire_len
        self.interface = interface
        self.order_ts = ts if order_ts is None else order_ts  # feed time (see kdissect.wire.captureset)


class Secret(NamedTuple):
    """A pcapng Decryption Secrets Block: `kind` is its secrets type (0x544c534b
    "TLSK": a TLS key log; 0x57474b4c: WireGuard; ...), `data` its bytes. The
    repr never shows the bytes."""

    kind: int
    data: bytes

    def __repr__(self) -> str:
        return f"Secret(kind=0x{self.kind:08x}, {len(self.data)} bytes)"

    def __str__(self) -> str:
        return self.__repr__()


class SecretSink(Protocol):
    """Where a reader puts the decryption secrets it meets: a list, or one
    whose own `append` does more (the pipeline hands each to the TLS layer).
    A protocol, not `list`: compiled (kdissect/native.py), a `list` is
    appended to directly, past a subclass's `append`."""

    def append(self, secret: Secret, /) -> None: ...


def parse_pcap_header(head: bytes) -> PcapHeader:
    """Parse a pcap global header (the first 24 bytes); InputError if it is not one."""
    if len(head) < 24:
        raise InputError("file too short for a pcap header")
    magic = int.from_bytes(head[:4], "little")
    try:
        order, ticks, record_size = _PCAP_MAGICS[magic]
    except KeyError:
        raise InputError("not a pcap file (bad magic number)") from None
    major, minor, _zone, _sigfigs, snaplen, linktype = struct.unpack_from(order + "HHiIII", head, 4)
    # The upper bits of the link-type field carry FCS information.
    return PcapHeader(order, ticks, snaplen, linktype & 0xFFFF, record_size, (major, minor))


def record_limit(snaplen: int) -> int:
    """Largest captured length a pcap record may have; a larger one is damage."""
    return max(_MAX_RECORD, snaplen) if snaplen <= (256 << 20) else _MAX_RECORD


# -- pcapng interfaces and sections ------------------------------------------------

# An interface as the block loop uses it: (linktype, mul, div, offset_ns,
# snaplen, ticks per second); a packet's time is ticks * mul // div (rounded
# to nearest) + offset_ns. Built from its description (linktype, snaplen,
# if_tsresol byte, if_tsoffset seconds), which is what the Spark plan carries.
Interface = tuple[int, int, int, int, int, int]
InterfaceDescription = tuple[int, int, int, int]


def interface_from_description(description: Sequence[int]) -> Interface:
    linktype, snaplen, tsresol, tsoffset = description
    if tsresol & 0x80:  # 2^-k seconds per tick
        resolution = 1 << (tsresol & 0x7F)
        mul, div = NS_PER_SECOND, resolution
    else:  # 10^-k
        resolution = 10 ** tsresol
        mul, div = (NS_PER_SECOND // resolution, 1) if tsresol <= 9 else (1, resolution // NS_PER_SECOND)
    if div != 1 and mul % div == 0:  # 2^-k with k <= 9: whole nanoseconds per tick
        mul, div = mul // div, 1
    return linktype, mul, div, tsoffset * NS_PER_SECOND, snaplen, resolution


def _interface_description(buf: bytes, body: int, end: int, order: str) -> InterfaceDescription:
    linktype, _reserved, snaplen = struct.unpack_from(order + "HHI", buf, body)
    tsresol = 6
    tsoffset = 0
    opt = body + 8
    while opt + 4 <= end:
        code, size = struct.unpack_from(order + "HH", buf, opt)
        value = buf[opt + 4 : min(end, opt + 4 + size)]
        if code == 0:
            break
        if code == 9 and len(value) >= 1:  # if_tsresol
            tsresol = value[0]
        elif code == 14 and len(value) >= 8:  # if_tsoffset, seconds
            tsoffset = struct.unpack_from(order + "q", value)[0]
        opt += 4 + ((size + 3) & ~3)
    return linktype, snaplen, tsresol, tsoffset


class Section(SlotRecord):
    """The pcapng section in force: byte order and interfaces (read modes:
    `Interface` tuples; SCAN: the descriptions seen since the walk's start or
    its last section header)."""

    __slots__ = ("order", "interfaces")

    def __init__(self, order: str = "<", interfaces: list[Any] | None = None) -> None:
        self.order = order
        self.interfaces = [] if interfaces is None else interfaces


class Walk(SlotRecord):
    """Where a loop stands and how it ended. `number` is the frame number of
    the last packet read (start it at first frame - 1); `order_ts` the running
    maximum time of the file's packets (the feed time, see captureset); `stop`
    the file offset of the first record or block at or past the walk's end,
    or the file's end, and -1 when damage or a cut ended the walk."""

    __slots__ = ("number", "order_ts", "stop", "damaged_at", "damage", "leftover", "cut_bytes", "events", "ticks")

    def __init__(self, number: int = 0, order_ts: int = 0, stop: int = -1, damaged_at: int = -1, damage: str = "",
                 leftover: int = 0, cut_bytes: int = 0, events: list[Any] | None = None,
                 ticks: dict[Any, Any] | None = None) -> None:
        self.number = number
        self.order_ts = order_ts
        self.stop = stop
        self.damaged_at = damaged_at  # file offset of the damaged record or block
        self.damage = damage  # what was damaged
        self.leftover = leftover  # bytes already read from the damage on
        self.cut_bytes = cut_bytes  # bytes of a last packet cut short by the end of the file
        # pcapng: ("section", offset, byte order) / ("interface", offset,
        # description) in file order, and (SCAN) the largest ticks per (part, interface
        # id, interfaces described in the part so far), part 0 being the section
        # in force at the walk's start and part n the n-th section header met
        self.events = [] if events is None else events
        self.ticks = {} if ticks is None else ticks

    def damaged(self, at: int, damage: str, leftover: int) -> None:
        self.damaged_at, self.damage, self.leftover, self.stop = at, damage, leftover, -1

    def cut(self, leftover: int) -> None:
        self.cut_bytes, self.stop = leftover, -1


# -- the loops -----------------------------------------------------------------------
#
# Both read from `buf` at `pos` (buf[0] being file offset `base`), call
# `more()` for the next chunk (b"" at the end), handle the packets that start
# before file offset `end`, and leave their state and how they ended in
# `walk`. A packet cut by a chunk boundary is completed from the start of the
# next chunk and the loop then goes on inside that chunk, so only that
# packet's bytes are copied, never a whole chunk.


def _pcap_records(more: Callable[[], bytes], header: PcapHeader, buf: bytes, pos: int, base: int, end: int,
                  walk: Walk, mode: int, capture_index: int, stats: ReadStats) -> Iterator[Any]:
    """The pcap record loop."""
    unpack = struct.Struct(header.byte_order + "IIII").unpack_from
    mult = NS_PER_SECOND // header.ticks_per_second
    hsize = header.record_header_size
    limit = record_limit(header.snaplen)
    linktype = header.linktype
    decode = decode_frame
    ci = capture_index
    number = walk.number
    # the packet's time and the running latest are passed on as one int
    # object when equal (typed Any: compiled, kdissect/native.py, two ints
    # would be made, and a kept segment would hold both)
    latest: Any = walk.order_ts
    after: tuple[bytes, int, int] | None = None  # (chunk, where to go on in it, its file offset)
    try:
        while True:
            size = len(buf)
            stop_at = end - base
            while pos < stop_at and pos + hsize <= size:
                sec, frac, caplen, wirelen = unpack(buf, pos)
                if caplen > limit:
                    rest = size - pos + (len(after[0]) - after[1] if after is not None else 0)
                    walk.damaged(base + pos, f"packet {number + 1} has an implausible length {caplen}", rest)
                    return
                data_at = pos + hsize
                if data_at + caplen > size:
                    break
                number += 1
                pos = data_at + caplen
                ts: Any = sec * 1_000_000_000 + frac * mult
                if ts > latest:
                    latest = ts
                if mode == SEGMENTS:
                    stats.packets += 1
                    stats.bytes += caplen
                    result = decode(linktype, buf, data_at, caplen, wirelen, ts, ci, number, latest)
                    if type(result) is TcpSegment:
                        stats.tcp_segments += 1
                        yield result
                    elif result == NOT_TCP:
                        stats.non_tcp += 1
                    elif result == IP_FRAGMENT:
                        stats.ip_fragments += 1
                    else:
                        stats.undecodable += 1
                elif mode == FRAMES:
                    stats.packets += 1
                    stats.bytes += caplen
                    yield Frame(ci, number, linktype, ts, buf[data_at:pos], wirelen, 0, latest)
            if pos >= stop_at:
                walk.stop = base + pos
                return
            if after is not None:
                # the straddling record is done: go on in the chunk itself
                buf, pos, base = after
                after = None
                continue
            chunk = more()
            if not chunk:
                if pos < len(buf):
                    walk.cut(len(buf) - pos)
                else:
                    walk.stop = base + pos
                return
            left = len(buf) - pos
            if left >= hsize:
                need = hsize + unpack(buf, pos)[2] - left
                if 0 < need < len(chunk):
                    after = (chunk, need, base + len(buf))
                    buf, pos, base = buf[pos:] + chunk[:need], 0, base + pos
                    continue
            buf, pos, base = buf[pos:] + chunk, 0, base + pos
    finally:
        walk.number = number
        walk.order_ts = latest


_BLOCK_HEAD = {"<": struct.Struct("<II").unpack_from, ">": struct.Struct(">II").unpack_from}
_ENHANCED = {"<": struct.Struct("<IIIII").unpack_from, ">": struct.Struct(">IIIII").unpack_from}
_OBSOLETE = {"<": struct.Struct("<HHIIII").unpack_from, ">": struct.Struct(">HHIIII").unpack_from}
_U32 = {"<": struct.Struct("<I").unpack_from, ">": struct.Struct(">I").unpack_from}
_U32_PAIR = _BLOCK_HEAD


def _pcapng_blocks(more: Callable[[], bytes], section: Section, buf: bytes, pos: int, base: int, end: int,
                   walk: Walk, mode: int, capture_index: int, stats: ReadStats, name: str,
                   secrets: SecretSink | None) -> Iterator[Any]:
    """The pcapng block loop. `section` is the section in force at `pos` and
    is kept up to date; decryption secrets go to `secrets` as they are met."""
    order = section.order
    head, trailer, enhanced = _BLOCK_HEAD[order], _U32[order], _ENHANCED[order]
    interfaces = section.interfaces
    decode = decode_frame
    ci = capture_index
    number = walk.number
    latest: Any = walk.order_ts  # (Any: see _pcap_records)
    part = 0  # SCAN: section headers met
    most = walk.ticks  # SCAN: the largest ticks per (part, interface, interfaces described)
    warned: set[int] = set()
    after: tuple[bytes, int, int] | None = None
    stop_at = end - base  # blocks starting here or later are not this walk's
    # the header fields as ints (compiled: unboxed once, then native
    # comparisons and offsets instead of generic ones on objects)
    block_type: int
    length: int
    iface: int
    caplen: int
    try:
        while True:
            if pos >= stop_at:
                walk.stop = base + pos
                return
            left = len(buf) - pos
            if left < 12:
                if after is not None:
                    buf, pos, base = after
                    after = None
                elif chunk := more():
                    buf, pos, base = buf[pos:] + chunk, 0, base + pos
                elif left:
                    walk.cut(left)
                    return
                else:
                    walk.stop = base + pos
                    return
                stop_at = end - base
                continue
            block_type, length = head(buf, pos)
            if block_type == PCAPNG_SHB:  # the same in either byte order
                order = PCAPNG_BYTE_ORDER.get(buf[pos + 8 : pos + 12], "")
                if not order:
                    walk.damaged(base + pos, f"damaged section header after packet {number}", left)
                    return
                head, trailer, enhanced = _BLOCK_HEAD[order], _U32[order], _ENHANCED[order]
                length = head(buf, pos)[1]
            if length < 12 or length % 4 or length > MAX_PCAPNG_BLOCK:
                walk.damaged(base + pos, f"damaged block header after packet {number}", left)
                return
            if left < length:
                if after is not None:  # (cannot happen: that buffer holds exactly this block)
                    buf, pos, base = buf[pos:] + after[0][after[1]:], 0, base + pos
                    after = None
                else:
                    chunk = more()
                    if not chunk:
                        walk.cut(left)
                        return
                    need = length - left
                    if need < len(chunk):
                        after = (chunk, need, base + len(buf))
                        buf, pos, base = buf[pos:] + chunk[:need], 0, base + pos
                    else:
                        buf, pos, base = buf[pos:] + chunk, 0, base + pos
                stop_at = end - base
                continue
            if trailer(buf, pos + length - 4)[0] != length:
                walk.damaged(base + pos, f"damaged block after packet {number}", left)
                return
            body = pos + 8
            body_end = pos + length - 4
            if block_type == _ENHANCED_PACKET or block_type == _OBSOLETE_PACKET:
                number += 1
                if body_end - body < 20:
                    caplen = -1
                elif block_type == _ENHANCED_PACKET:
                    iface, ts_hi, ts_lo, caplen, wirelen = enhanced(buf, body)
                else:
                    iface, _drops, ts_hi, ts_lo, caplen, wirelen = _OBSOLETE[order](buf, body)
                data_at = body + 20
                if mode == SCAN:
                    if 0 <= caplen and data_at + caplen <= body_end:
                        key = (part, iface, len(interfaces))
                        ticks = (ts_hi << 32) | ts_lo
                        if ticks > most.get(key, -1):
                            most[key] = ticks
                elif caplen < 0:
                    stats.packets += 1
                    stats.undecodable += 1
                    stats.problems.append(f"{name}: packet {number} is malformed (block too short)")
                elif iface >= len(interfaces) or data_at + caplen > body_end:
                    stats.packets += 1
                    stats.bytes += max(0, body_end - data_at)
                    stats.undecodable += 1
                    stats.problems.append(f"{name}: packet {number} is malformed")
                else:
                    linktype, mul, div, offset, _snaplen, _resolution = interfaces[iface]
                    ticks = (ts_hi << 32) | ts_lo
                    ts: Any = (ticks * mul if div == 1 else (ticks * mul + div // 2) // div) + offset
                    if ts > latest:
                        latest = ts
                    stats.packets += 1
                    stats.bytes += caplen
                    if mode == SEGMENTS:
                        result = decode(linktype, buf, data_at, caplen, wirelen, ts, ci, number, latest)
                        if type(result) is TcpSegment:
                            stats.tcp_segments += 1
                            yield result
                        else:
                            _count_other(result, linktype, stats, name, warned)  # type: ignore[arg-type]  # not a segment: an int
                    else:
                        yield Frame(ci, number, linktype, ts, buf[data_at : data_at + caplen], wirelen, iface, latest)
            elif block_type == _SIMPLE_PACKET:  # no time, interface 0
                number += 1
                if mode == SCAN:
                    pass
                elif body_end - body < 4:
                    stats.packets += 1
                    stats.undecodable += 1
                    stats.problems.append(f"{name}: packet {number} is malformed (block too short)")
                elif not interfaces:
                    stats.packets += 1
                    stats.undecodable += 1
                    stats.problems.append(f"{name}: packet {number} precedes any interface")
                else:
                    (wirelen,) = trailer(buf, body)
                    linktype, _mul, _div, _offset, snaplen, _resolution = interfaces[0]
                    caplen = min(wirelen, body_end - body - 4, snaplen or wirelen)
                    stats.packets += 1
                    stats.bytes += caplen
                    if mode == SEGMENTS:
                        result = decode(linktype, buf, body + 4, caplen, wirelen, 0, ci, number, latest)
                        if type(result) is TcpSegment:
                            stats.tcp_segments += 1
                            yield result
                        else:
                            _count_other(result, linktype, stats, name, warned)  # type: ignore[arg-type]  # not a segment: an int
                    else:
                        yield Frame(ci, number, linktype, 0, buf[body + 4 : body + 4 + caplen], wirelen, 0, latest)
            elif block_type == _IDB:
                if body_end - body < 8:
                    walk.damaged(base + pos, f"damaged interface description after packet {number}", left)
                    return
                description = _interface_description(buf, body, body_end, order)
                walk.events.append(("interface", base + pos, description))
                if mode == SCAN:
                    interfaces.append(description)
                else:
                    interfaces.append(interface_from_description(description))
            elif block_type == PCAPNG_SHB:
                section.order = order
                section.interfaces = interfaces = []
                walk.events.append(("section", base + pos, order))
                if mode == SCAN:
                    part += 1
            elif block_type == _SECRETS and mode != SCAN:
                if body_end - body >= 8:
                    kind, size = _U32_PAIR[order](buf, body)
                    if size <= body_end - body - 8:
                        if secrets is not None:
                            secrets.append(Secret(kind, bytes(buf[body + 8 : body + 8 + size])))
                        pos += length
                        continue
                stats.problems.append(f"{name}: damaged decryption secrets block after packet {number}")
            pos += length
    finally:
        walk.number = number
        walk.order_ts = latest


def _count_other(result: int, linktype: int, stats: ReadStats, name: str, warned: set[int]) -> None:
    """Count a packet decode_frame did not make a segment of."""
    if result == NOT_TCP:
        stats.non_tcp += 1
    elif result == IP_FRAGMENT:
        stats.ip_fragments += 1
    else:
        stats.undecodable += 1
        if result == UNSUPPORTED_LINK and linktype not in warned:
            warned.add(linktype)
            stats.problems.append(f"{name}: unsupported link type {linktype}")


# -- files ---------------------------------------------------------------------------


def open_raw(path: str | Path) -> BinaryIO:
    """Open a capture file's bytes: a local path with open(), a store URI
    (s3://, hdfs://, file://) as a file read by ranges (kdissect.wire.stores)."""
    text = str(path)
    if ":/" in text[:16]:  # a URI (pathlib may have folded its "//")
        if stores.is_uri(text):
            return stores.open_input(text)  # type: ignore[return-value]
    return open(path, "rb")


def _open(path: Path) -> BinaryIO:
    """Open a capture, transparently decompressing gzip (detected by magic)."""
    try:
        raw = open_raw(path)
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a capture file") from None
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot open: {exc.strerror or exc}") from None
    try:
        magic = raw.read(2)
        raw.seek(0)
    except OSError as exc:
        raw.close()
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if magic == _GZIP_MAGIC:
        return _GzipStream(raw)  # type: ignore[return-value]
    return raw


class _GzipStream:
    """Decompress gzip (possibly several members) chunk by chunk, never more
    than asked for at once (a small file may inflate enormously). Unlike
    GzipFile, a cut or corrupt stream hands back everything decompressed
    before the problem, then ends, noting it in `problem`."""

    def __init__(self, raw: BinaryIO):
        self.raw = raw
        self.inflater = zlib.decompressobj(wbits=31)
        self.unused = b""  # compressed input not yet inflated
        self.produced = 0
        self.problem: str | None = None
        self.done = False
        self.in_member = False  # inside a gzip member (its end not yet seen)

    def read(self, n: int) -> bytes:
        out: list[bytes] = []
        size = 0
        while size < n and not self.done:
            piece = self.unused or self.raw.read(1 << 16)
            self.unused = b""
            if not piece:
                self.done = True
                if self.in_member:
                    self.problem = "compressed data ends early (file cut)"
                break
            try:
                data = self.inflater.decompress(piece, n - size)
            except zlib.error as exc:
                if not self.in_member and not piece.strip(b"\0"):
                    continue  # zero padding after the last member
                if not self.produced and not out:
                    raise
                self.problem = f"corrupt compressed data ({exc}); rest of file not read"
                self.done = True
                break
            self.in_member = True
            out.append(data)
            size += len(data)
            if self.inflater.eof:
                self.unused = self.inflater.unused_data
                self.inflater = zlib.decompressobj(wbits=31)
                self.in_member = False
            else:
                self.unused = self.inflater.unconsumed_tail
        self.produced += size
        return b"".join(out)

    def close(self) -> None:
        self.raw.close()


_STREAM_ERRORS = (OSError, EOFError, zlib.error)


def _read_head(path: Path, stream: BinaryIO) -> bytes:
    try:
        # a first look of the size a store's driver keeps of each file's head
        # (stores.HEAD_BYTES): finding the first packet reads no more, most often
        head = stream.read(min(_FIRST_READ, max(_CHUNK, 64)))  # (at least the pcap header, whatever the chunk size)
    except _STREAM_ERRORS as exc:
        raise InputError(f"{path}: unreadable or corrupt compressed data ({exc})") from None
    if len(head) < 4:
        raise InputError(f"{path}: empty or too short to be a capture file")
    return head



class _FileReader:
    """One whole file, streamed (plain or gzip): its packets through the
    format's loop, its problems counted into `stats`."""

    def __init__(self, path: Path, capture_index: int, stats: ReadStats, secrets: SecretSink | None = None):
        self.path = path
        self.capture_index = capture_index
        self.stats = stats
        self.secrets = secrets
        self.section = Section()
        self.stream = _open(path)
        try:
            self.head = _read_head(path, self.stream)
        except InputError:
            self.stream.close()
            raise
        magic = int.from_bytes(self.head[:4], "little")
        if magic in _PCAP_MAGICS:
            self.kind = "pcap"
            if len(self.head) < 24:
                self.stream.close()
                raise InputError(f"{path}: file too short for a pcap header")
            self.pcap = parse_pcap_header(self.head)
        elif magic == PCAPNG_SHB:
            self.kind = "pcapng"
        else:
            self.stream.close()
            raise InputError(f"{path}: not a pcap or pcapng capture file")

    @property
    def resolution(self) -> int:
        """Ticks per second: the pcap header's, or the finest of the pcapng
        interfaces described so far (10**6 before any)."""
        if self.kind == "pcap":
            return self.pcap.ticks_per_second
        return max((iface[5] for iface in self.section.interfaces), default=1_000_000)

    def _more(self) -> bytes:
        """Next chunk; b"" at the end or when the stream broke (counted)."""
        try:
            return self.stream.read(_CHUNK)
        except _STREAM_ERRORS as exc:
            self.stats.damaged_files += 1
            self.stats.problems.append(f"{self.path.name}: read error ({exc}); rest of file not read")
            return b""

    def _drain(self) -> int:
        """Count the bytes left in the stream (after damage)."""
        total = 0
        try:
            while chunk := self.stream.read(_CHUNK):
                total += len(chunk)
        except _STREAM_ERRORS:
            pass
        return total

    def items(self, mode: int = SEGMENTS) -> Iterator[Any]:
        """The file's TCP segments (SEGMENTS) or undecoded frames (FRAMES)."""
        stats = self.stats
        walk = Walk()
        name = self.path.name
        try:
            stats.files += 1
            if self.kind == "pcap":
                if mode == SEGMENTS and self.pcap.linktype not in SUPPORTED_LINKTYPES:
                    stats.problems.append(f"{name}: unsupported link type {self.pcap.linktype}")
                yield from _pcap_records(self._more, self.pcap, self.head, 24, 0, _END, walk, mode,
                                         self.capture_index, stats)
            else:
                yield from _pcapng_blocks(self._more, self.section, self.head, 0, 0, _END, walk, mode,
                                          self.capture_index, stats, name, self.secrets)
            if walk.damaged_at == 0:
                raise InputError(f"{self.path}: damaged pcapng section header")
            if walk.damaged_at >= 0:
                rest = walk.leftover + self._drain()
                stats.damaged_files += 1
                stats.unread_bytes += rest
                stats.problems.append(f"{name}: {walk.damage}; {rest} bytes after it not read")
            elif walk.cut_bytes:
                _count_cut(stats, name, walk)
            problem = getattr(self.stream, "problem", None)
            if problem:
                stats.damaged_files += 1
                stats.problems.append(f"{name}: {problem}")
        finally:
            self.stream.close()


def _count_cut(stats: ReadStats, name: str, walk: Walk) -> None:
    stats.cut_records += 1
    stats.unread_bytes += walk.cut_bytes
    stats.problems.append(f"{name}: file ends inside packet {walk.number + 1} ({walk.cut_bytes} bytes of it dropped)")


# -- a capture set -----------------------------------------------------------------


class CaptureFile(FrozenSlotRecord):
    """A file of a capture set, as found before reading it."""

    __slots__ = ("path", "format", "first_ts", "resolution")

    # (the fields, for type checkers: __init__ stores them with _set_fields)
    path: Path
    format: str
    first_ts: int | None
    resolution: int

    def __init__(self,
                 path: Path,
                 format: str,  # "pcap" or "pcapng" (after decompression)
                 first_ts: int | None,  # ns of the first packet; None: no packets
                 resolution: int,  # ticks per second (pcapng: finest interface described before the first packet)
                 ) -> None:
        self._set_fields(path, format, first_ts, resolution)


def _describe(path: Path) -> CaptureFile:
    reader = _FileReader(path, 0, ReadStats())
    frames = reader.items(FRAMES)
    first = None
    try:
        for frame in frames:
            first = frame.ts
            break
        return CaptureFile(path, reader.kind, first, reader.resolution)
    finally:
        frames.close()  # type: ignore[attr-defined]  # (a generator)


def describe_captures(paths: Sequence[str | Path]) -> list[CaptureFile]:
    """The files of a capture set in capture order: first packet time, then
    path; files without packets last. Raises InputError for files that are
    missing or not captures, before anything is read."""
    found = [_describe(Path(p)) for p in paths]
    found.sort(key=lambda f: (f.first_ts is None, f.first_ts or 0, str(f.path)))
    return found


def capture_set_order(paths: Sequence[str | Path]) -> list[Path]:
    """The paths of a capture set in capture order (see describe_captures)."""
    return [f.path for f in describe_captures(paths)]


class CaptureSet:
    """Several files read as one capture (see kdissect.wire.captureset for the
    order and the duplicate rule). `stats` accumulates while iterating;
    `secrets` collects the pcapng decryption secrets as they are read, each
    before the packets that follow it in its file."""

    def __init__(self, paths: Sequence[str | Path], stats: ReadStats | None = None):
        if isinstance(paths, (str, Path)):
            paths = [paths]
        self.files = describe_captures(paths)
        self.paths = [f.path for f in self.files]
        self.resolutions = [f.resolution for f in self.files]  # ticks per second, per file
        self.stats = stats if stats is not None else ReadStats()
        self.secrets: SecretSink = []

    @property
    def finest_resolution(self) -> int:
        """The largest ticks per second of any file (10**6 for an empty set)."""
        return max(self.resolutions, default=1_000_000)

    @property
    def timestamp_unit(self) -> str:
        """'us' when every file's times are whole microseconds, else 'ns'."""
        return timestamp_unit(self.resolutions)

    def _open(self, index: int, mode: int) -> Iterator[Any]:
        return _FileReader(self.paths[index], index, self.stats, self.secrets).items(mode)

    def _merged(self, mode: int, dedup: DuplicateFilter | None) -> Iterator[Any]:
        if len(self.paths) == 1:
            return self._open(0, mode)
        return merge_files([f.first_ts for f in self.files], lambda index: self._open(index, mode), dedup)

    def segments(self) -> Iterator[TcpSegment]:
        """TCP segments in feed order, duplicates across files dropped and counted."""
        return self._merged(SEGMENTS, DuplicateFilter(counts=self.stats))

    def frames(self) -> Iterator[Frame]:
        """Undecoded packets in feed order (no duplicate filtering)."""
        return self._merged(FRAMES, None)

    def __iter__(self) -> Iterator[TcpSegment]:
        return self.segments()


def read_segments(paths: Sequence[str | Path], stats: ReadStats | None = None) -> Iterator[TcpSegment]:
    """TCP segments of a capture set in feed order. Pass a ReadStats to get
    the reading accounting (it is filled in as the iterator advances)."""
    return CaptureSet(paths, stats).segments()


def iter_frames(paths: Sequence[str | Path], stats: ReadStats | None = None) -> Iterator[Frame]:
    """Undecoded packets of a capture set (for tools and tests)."""
    return CaptureSet(paths, stats).frames()


def read_file(path: str | Path, capture_index: int, stats: ReadStats, secrets: SecretSink | None = None,
              mode: int = SEGMENTS) -> Iterator[Any]:
    """The TCP segments (or frames) of one whole file, plain or gzip, as the
    capture set's file `capture_index` (the Spark job's tasks for files it
    does not split)."""
    return _FileReader(Path(path), capture_index, stats, secrets).items(mode)


def leading_secrets(path: str | Path) -> list[Secret]:
    """The decryption secrets a capture file holds before its first packet
    (where `editcap --inject-secrets` puts them); [] for pcap."""
    secrets: list[Secret] = []
    items = read_file(path, 0, ReadStats(), secrets, mode=FRAMES)
    try:
        next(iter(items), None)
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()
    return secrets


# -- byte ranges (the Spark job) ---------------------------------------------------------


def pcapng_head(stream: BinaryIO) -> tuple[str, list[tuple[int, InterfaceDescription]], int] | None:
    """The head of a pcapng file: its first section's byte order, the
    interface descriptions that directly follow the section header (with
    their offsets), and the offset of the first block after them; None if
    the file does not start with a section header."""
    stream.seek(0)
    first = stream.read(12)
    if len(first) < 12 or int.from_bytes(first[:4], "little") != PCAPNG_SHB:
        return None
    order = PCAPNG_BYTE_ORDER.get(first[8:12])
    if order is None:
        return None
    head = struct.Struct(order + "II")
    position = head.unpack_from(first)[1]
    described: list[tuple[int, InterfaceDescription]] = []
    while True:
        stream.seek(position)
        prefix = stream.read(8)
        if len(prefix) < 8:
            break
        block_type, length = head.unpack(prefix)
        if block_type != _IDB or length < 20 or length % 4 or length > MAX_PCAPNG_BLOCK:
            break
        block = prefix + stream.read(length - 8)
        if len(block) < length:
            break
        described.append((position, _interface_description(block, 8, length - 4, order)))
        position += length
    return order, described, position


class FileRange(FrozenSlotRecord):
    """The packets of a plain (uncompressed) file that start in [start, end),
    `start` being a true record or block boundary, with what a reader needs
    to know there: the frame number of the first packet, the file's running
    maximum time before it (ns), and for pcapng the section in force (byte
    order and interface descriptions)."""

    __slots__ = ("path", "capture_index", "format", "start", "end", "first_frame", "order_ts", "byte_order",
                 "interfaces")

    # (the fields, for type checkers: __init__ stores them with _set_fields)
    path: str
    capture_index: int
    format: str
    start: int
    end: int
    first_frame: int
    order_ts: int
    byte_order: str
    interfaces: tuple[InterfaceDescription, ...]

    def __init__(self,
                 path: str,
                 capture_index: int,
                 format: str,  # "pcap" or "pcapng"
                 start: int,
                 end: int,
                 first_frame: int = 1,
                 order_ts: int = 0,
                 byte_order: str = "<",
                 interfaces: tuple[InterfaceDescription, ...] = (),
                 ) -> None:
        self._set_fields(path, capture_index, format, start, end, first_frame, order_ts, byte_order, interfaces)


class _RangeStream:
    """A byte range's bytes, chunk by chunk: up to its end, then (the last
    record's rest) in small pieces, so no range reads far into the next."""

    def __init__(self, path: str, offset: int, end: int | None = None) -> None:
        self.stream: BinaryIO
        if stores.is_uri(path):  # blocks counted from the range's start, the last one cut at its end
            self.stream = stores.open_input(path, origin=offset, until=end)  # type: ignore[assignment]
        else:
            self.stream = open_raw(path)
        self.stream.seek(offset)
        self.size = self.stream.seek(0, 2)
        self.stream.seek(offset)
        self.position = offset
        self.end = self.size if end is None else min(end, self.size)

    def more(self) -> bytes:
        left = self.end - self.position
        chunk = self.stream.read(min(_CHUNK, left) if left > 0 else _RANGE_TAIL)
        self.position += len(chunk)
        return chunk

    def file_head(self, count: int) -> bytes:
        """The file's first `count` bytes (the pcap header), the position kept."""
        self.stream.seek(0)
        head = self.stream.read(count)
        self.stream.seek(self.position)
        return head


def _range_loop(part: FileRange, stream: _RangeStream, walk: Walk, mode: int, stats: ReadStats,
                secrets: SecretSink | None) -> Iterator[Any]:
    name = part.path.rsplit("/", 1)[-1]
    head = stream.more()
    if part.format == "pcap":
        header = parse_pcap_header(stream.file_head(24))
        return _pcap_records(stream.more, header, head, 0, part.start, part.end, walk, mode, part.capture_index,
                             stats)
    if mode == SCAN:  # a scan lists only the interfaces it meets (its part 0 inherits the rest)
        section = Section(part.byte_order)
    else:
        section = Section(part.byte_order, [interface_from_description(d) for d in part.interfaces])
    return _pcapng_blocks(stream.more, section, head, 0, part.start, part.end, walk, mode, part.capture_index,
                          stats, name, secrets)


def read_range(part: FileRange, stats: ReadStats, secrets: SecretSink | None = None,
               mode: int = SEGMENTS, walk: Walk | None = None) -> Iterator[Any]:
    """The TCP segments (or frames) of a byte range, counted into `stats` as
    the whole-file reader counts them; `walk`, if given, is left holding how
    the read ended (its number and order_ts are set from `part`)."""
    stream = _RangeStream(part.path, part.start, part.end)
    if walk is None:
        walk = Walk()
    walk.number, walk.order_ts = part.first_frame - 1, part.order_ts
    name = part.path.rsplit("/", 1)[-1]
    try:
        if part.start == 0:
            stats.files += 1
        if (mode == SEGMENTS and part.format == "pcap" and part.start == 0):
            linktype = parse_pcap_header(stream.file_head(24)).linktype
            if linktype not in SUPPORTED_LINKTYPES:
                stats.problems.append(f"{name}: unsupported link type {linktype}")
        yield from _range_loop(part, stream, walk, mode, stats, secrets)
        if walk.damaged_at >= 0:
            rest = stream.size - walk.damaged_at
            stats.damaged_files += 1
            stats.unread_bytes += rest
            stats.problems.append(f"{name}: {walk.damage}; {rest} bytes after it not read")
        elif walk.cut_bytes:
            _count_cut(stats, name, walk)
    finally:
        stream.stream.close()


def scan_range(part: FileRange) -> Walk:
    """What read_range would meet, without decoding: the packet count
    (`walk.number` - first_frame + 1), where it stops, damage or a cut, the
    running maximum time, and for pcapng the section and interface blocks and
    the largest ticks per interface (see Walk)."""
    stream = _RangeStream(part.path, part.start, part.end)
    walk = Walk(part.first_frame - 1, part.order_ts)
    try:
        for _ in _range_loop(part, stream, walk, SCAN, ReadStats(), None):
            pass
    finally:
        stream.stream.close()
    return walk
