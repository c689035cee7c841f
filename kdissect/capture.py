"""Read capture files (pcap, pcapng, gzip-compressed either) into TcpSegments.

Several files given together are one capture set, ordered by the timestamp of
their first packet and then by path; `TcpSegment.capture_index` is a file's
position in that order and `frame_number` counts packets from 1 per file, as
tshark does.

Files are read in large chunks and parsed with `struct`, so memory does not grow
with the file. A damaged file yields every packet before the damage; what
follows is counted in `ReadStats`, never silently lost. A path that cannot be
opened or is not a capture at all raises `InputError` with a one-line message.

Formats: pcap (micro/nanosecond magic, either byte order, Kuznetzov's
modified variant), pcapng (any number of sections and interfaces, each with
its own link type, timestamp resolution and offset; enhanced, obsolete and
simple packet blocks, the last having no time: ts 0.0), and gzip of either,
recognised by magic number, not by file name. Link layers and IP are decoded
in `kdissect.linklayers`.

The pcap header parser and record iterator are public so the Spark job can
split files into byte ranges and decode them itself with `segment_from_frame`.
"""

from __future__ import annotations

import itertools
import struct
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from kdissect.failures import InputError
from kdissect.linklayers import (
    ETHERNET_IPV4_TCP,
    IP_FRAGMENT,
    LINKTYPE_ETHERNET,
    NOT_TCP,
    SUPPORTED_LINKTYPES,
    UNSUPPORTED_LINK,
    decode_frame,
    ipv4_name,
    ipv4_names,
    segment_from_frame,
)
from kdissect.packet import SlotRecord, TcpSegment

__all__ = [
    "CaptureSet",
    "Frame",
    "PcapHeader",
    "PcapRecord",
    "ReadStats",
    "capture_set_order",
    "iter_frames",
    "iter_pcap_records",
    "parse_pcap_header",
    "read_segments",
    "segment_from_frame",
]

_CHUNK = 1 << 20
# Wireshark refuses records larger than this unless the snaplen says otherwise;
# a bigger length field means the record header is damaged.
_MAX_RECORD = 262144
_MAX_PCAPNG_BLOCK = 64 << 20

_PCAP_MAGICS = {
    # magic as read little-endian -> (byte order, ticks per second, record header size)
    0xA1B2C3D4: ("<", 1_000_000, 16),
    0xA1B23C4D: ("<", 1_000_000_000, 16),
    0xA1B2CD34: ("<", 1_000_000, 24),  # Kuznetzov's modified pcap: 8 more bytes per record
    0xD4C3B2A1: (">", 1_000_000, 16),
    0x4D3CB2A1: (">", 1_000_000_000, 16),
    0x34CDB2A1: (">", 1_000_000, 24),
}
_PCAPNG_SHB = 0x0A0D0D0A
_PCAPNG_BYTE_ORDER_MAGIC = 0x1A2B3C4D
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(slots=True)
class ReadStats:
    """Per-run reading accounting; additive across files and runs."""

    files: int = 0
    packets: int = 0  # records read (every packet, TCP or not)
    bytes: int = 0  # captured bytes of those records
    tcp_segments: int = 0
    non_tcp: int = 0  # well-formed packets that are not TCP/IP
    undecodable: int = 0  # damaged or cut link/IP/TCP headers, unsupported link types
    ip_fragments: int = 0  # fragmented IP datagrams (not reassembled)
    cut_records: int = 0  # a last record cut short by the end of the file
    damaged_files: int = 0  # files with a damaged record or block header
    unread_bytes: int = 0  # file bytes after damage or a cut, not decoded
    problems: list[str] = field(default_factory=list)

    def add(self, other: ReadStats) -> None:
        for name in self.__slots__:
            if name == "problems":
                self.problems.extend(other.problems)
            else:
                setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass(slots=True, frozen=True)
class PcapHeader:
    byte_order: str  # "<" or ">"
    ticks_per_second: int  # 1_000_000 (microsecond) or 1_000_000_000 (nanosecond)
    snaplen: int
    linktype: int
    record_header_size: int = 16
    version: tuple[int, int] = (2, 4)


@dataclass(slots=True, frozen=True)
class PcapRecord:
    offset: int  # of the packet data within the buffer
    ts: float
    captured_len: int
    wire_len: int


class Frame(SlotRecord):
    """One captured packet before decoding."""

    __slots__ = ("capture_index", "frame_number", "linktype", "ts", "data", "wire_len", "interface")

    def __init__(self, capture_index: int, frame_number: int, linktype: int, ts: float, data: bytes,
                 wire_len: int, interface: int = 0) -> None:
        self.capture_index = capture_index
        self.frame_number = frame_number
        self.linktype = linktype
        self.ts = ts
        self.data = data
        self.wire_len = wire_len
        self.interface = interface


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


def _record_limit(snaplen: int) -> int:
    return max(_MAX_RECORD, snaplen) if snaplen <= (256 << 20) else _MAX_RECORD


def iter_pcap_records(buffer: bytes, header: PcapHeader, start: int = 24) -> Iterator[PcapRecord]:
    """Records whose header and data lie wholly inside `buffer` from `start`.

    Stops at the first record that runs past the end of the buffer; raises
    ValueError at a record header that cannot be right (length over the limit),
    with the record's offset in the message.
    """
    rec = struct.Struct(header.byte_order + "IIII")
    ticks = header.ticks_per_second
    hsize = header.record_header_size
    limit = _record_limit(header.snaplen)
    pos = start
    end = len(buffer)
    while pos + hsize <= end:
        sec, frac, caplen, wirelen = rec.unpack_from(buffer, pos)
        if caplen > limit:
            raise ValueError(f"implausible record length {caplen} at byte {pos}")
        data_at = pos + hsize
        if data_at + caplen > end:
            return
        yield PcapRecord(data_at, sec * 1_000_000_000 + frac * (1_000_000_000 // ticks), caplen, wirelen)
        pos = data_at + caplen


def _open(path: Path) -> BinaryIO:
    """Open a capture, transparently decompressing gzip (detected by magic)."""
    try:
        raw = open(path, "rb")
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
        out = []
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
        head = stream.read(_CHUNK)
    except _STREAM_ERRORS as exc:
        raise InputError(f"{path}: unreadable or corrupt compressed data ({exc})") from None
    if len(head) < 4:
        raise InputError(f"{path}: empty or too short to be a capture file")
    return head


class _FileReader:
    """Reads one file, yielding Frames and counting problems into `stats`."""

    def __init__(self, path: Path, capture_index: int, stats: ReadStats):
        self.path = path
        self.capture_index = capture_index
        self.stats = stats
        self.stream = _open(path)
        try:
            self.head = _read_head(path, self.stream)
        except InputError:
            self._close()
            raise
        magic = int.from_bytes(self.head[:4], "little")
        if magic in _PCAP_MAGICS:
            self.kind = "pcap"
            if len(self.head) < 24:
                self._close()
                raise InputError(f"{path}: file too short for a pcap header")
            self.pcap = parse_pcap_header(self.head)
        elif magic == _PCAPNG_SHB:
            self.kind = "pcapng"
        else:
            self._close()
            raise InputError(f"{path}: not a pcap or pcapng capture file")

    def _close(self) -> None:
        self.stream.close()

    # -- problem accounting -------------------------------------------------

    def _drain(self) -> int:
        """Count the bytes left in the stream (after damage)."""
        total = 0
        try:
            while chunk := self.stream.read(_CHUNK):
                total += len(chunk)
        except _STREAM_ERRORS:
            pass
        return total

    def _damaged(self, what: str, leftover: int) -> None:
        rest = leftover + self._drain()
        self.stats.damaged_files += 1
        self.stats.unread_bytes += rest
        self.stats.problems.append(f"{self.path.name}: {what}; {rest} bytes after it not read")

    def _cut(self, leftover: int, frame_number: int) -> None:
        self.stats.cut_records += 1
        self.stats.unread_bytes += leftover
        self.stats.problems.append(
            f"{self.path.name}: file ends inside packet {frame_number} ({leftover} bytes of it dropped)"
        )

    def _more(self) -> bytes:
        """Next chunk; b"" at the end or when the stream broke (counted)."""
        try:
            return self.stream.read(_CHUNK)
        except _STREAM_ERRORS as exc:
            self.stats.damaged_files += 1
            self.stats.problems.append(f"{self.path.name}: read error ({exc}); rest of file not read")
            return b""

    # -- formats ------------------------------------------------------------

    def frames(self) -> Iterator[Frame]:
        try:
            self.stats.files += 1
            if self.kind == "pcap":
                yield from self._pcap_frames()
            else:
                yield from self._pcapng_frames()
            problem = getattr(self.stream, "problem", None)
            if problem:
                self.stats.damaged_files += 1
                self.stats.problems.append(f"{self.path.name}: {problem}")
        finally:
            self._close()

    def _pcap_frames(self) -> Iterator[Frame]:
        header = self.pcap
        rec = struct.Struct(header.byte_order + "IIII")
        unpack = rec.unpack_from
        ticks = header.ticks_per_second
        hsize = header.record_header_size
        limit = _record_limit(header.snaplen)
        linktype = header.linktype
        ci = self.capture_index
        stats = self.stats
        buf = self.head
        pos = 24
        number = 0
        while True:
            end = len(buf)
            while pos + hsize <= end:
                sec, frac, caplen, wirelen = unpack(buf, pos)
                if caplen > limit:
                    self._damaged(f"packet {number + 1} has an implausible length {caplen}", end - pos)
                    return
                data_at = pos + hsize
                if data_at + caplen > end:
                    break
                number += 1
                stats.packets += 1
                stats.bytes += caplen
                yield Frame(ci, number, linktype, sec * 1_000_000_000 + frac * (1_000_000_000 // ticks), buf[data_at : data_at + caplen], wirelen)
                pos = data_at + caplen
            more = self._more()
            if not more:
                if pos < len(buf):
                    self._cut(len(buf) - pos, number + 1)
                return
            buf = buf[pos:] + more
            pos = 0

    def pcap_segments(self) -> Iterator[TcpSegment]:
        """TCP segments of a pcap file, decoded inside the record loop (the
        same accounting as frames() followed by decode_frame)."""
        self.stats.files += 1
        try:
            header = self.pcap
            unpack = struct.Struct(header.byte_order + "IIII").unpack_from
            scale = 1_000_000_000 // header.ticks_per_second
            hsize = header.record_header_size
            limit = _record_limit(header.snaplen)
            linktype = header.linktype
            ethernet = linktype == LINKTYPE_ETHERNET
            unpack_headers = ETHERNET_IPV4_TCP.unpack_from
            v4_names = ipv4_names
            if linktype not in SUPPORTED_LINKTYPES:
                self.stats.problems.append(f"{self.path.name}: unsupported link type {linktype}")
            ci = self.capture_index
            stats = self.stats
            buf = self.head
            pos = 24
            number = 0
            after: tuple[bytes, int] | None = None  # (chunk, where to go on in it) after a straddling record
            while True:
                end = len(buf)
                while pos + hsize <= end:
                    sec, frac, caplen, wirelen = unpack(buf, pos)
                    if caplen > limit:
                        rest = end - pos + (len(after[0]) - after[1] if after is not None else 0)
                        self._damaged(f"packet {number + 1} has an implausible length {caplen}", rest)
                        return
                    data_at = pos + hsize
                    if data_at + caplen > end:
                        break
                    number += 1
                    pos = data_at + caplen
                    stats.packets += 1
                    stats.bytes += caplen
                    ts = sec * 1_000_000_000 + frac * scale
                    if ethernet and caplen >= 54:
                        # Ethernet + IPv4 without options + TCP, the common
                        # case, taken apart in place (decode_frame does the
                        # same for every frame, after slicing it out)
                        (ethertype, v_ihl, total, frag, proto, src_raw, dst_raw, sport, dport, seq, ack,
                         offset_byte, flags) = unpack_headers(buf, data_at)
                        if (ethertype == 0x0800 and v_ihl == 0x45 and proto == 6 and not frag & 0x3FFF
                                and total >= 20 and offset_byte >= 0x50):
                            ip_end = 14 + total
                            if ip_end > wirelen and ip_end > caplen:
                                ip_end = wirelen if wirelen > caplen else caplen
                            start = 34 + (offset_byte >> 4) * 4
                            payload_len = ip_end - start
                            if payload_len >= 0:
                                stop = ip_end if ip_end <= caplen else caplen
                                stats.tcp_segments += 1
                                yield TcpSegment(ci, number, ts, v4_names.get(src_raw) or ipv4_name(src_raw), sport,
                                                 v4_names.get(dst_raw) or ipv4_name(dst_raw), dport, seq, ack, flags,
                                                 buf[data_at + start : data_at + stop] if start < stop else b"",
                                                 payload_len)
                                continue
                    result = decode_frame(linktype, ts, buf[data_at:pos], wirelen, ci, number)
                    if type(result) is TcpSegment:
                        stats.tcp_segments += 1
                        yield result
                    elif result == NOT_TCP:
                        stats.non_tcp += 1
                    elif result == IP_FRAGMENT:
                        stats.ip_fragments += 1
                    else:
                        stats.undecodable += 1
                if after is not None:
                    # the straddling record is done: go on in the chunk itself
                    chunk, at = after
                    after = None
                    if pos < len(buf):  # (cannot happen: that buffer held one whole record)
                        buf, pos = buf[pos:] + chunk[at:], 0
                    else:
                        buf, pos = chunk, at
                    continue
                more = self._more()
                if not more:
                    if pos < len(buf):
                        self._cut(len(buf) - pos, number + 1)
                    break
                left = len(buf) - pos
                if left >= hsize:
                    need = hsize + unpack(buf, pos)[2] - left
                    if 0 < need < len(more):
                        # A record cut by the chunk boundary: complete it from
                        # the start of the next chunk, then read on in that
                        # chunk at an offset. Only the record's bytes are
                        # copied, not the whole chunk.
                        buf = buf[pos:] + more[:need]
                        pos = 0
                        after = (more, need)
                        continue
                buf = buf[pos:] + more
                pos = 0
            problem = getattr(self.stream, "problem", None)
            if problem:
                self.stats.damaged_files += 1
                self.stats.problems.append(f"{self.path.name}: {problem}")
        finally:
            self._close()

    def _pcapng_frames(self) -> Iterator[Frame]:
        buf = self.head
        pos = 0
        number = 0
        order = "<"
        interfaces: list[tuple[int, int, int, int, int]] = []  # linktype, seconds per tick, offset, snaplen
        ci = self.capture_index
        stats = self.stats
        while True:
            if len(buf) - pos < 12:
                more = self._more()
                if more:
                    buf = buf[pos:] + more
                    pos = 0
                    continue
                if pos < len(buf):
                    self._cut(len(buf) - pos, number + 1)
                return
            block_type = int.from_bytes(buf[pos : pos + 4], "little" if order == "<" else "big")
            if block_type == _PCAPNG_SHB:
                bom = buf[pos + 8 : pos + 12]
                if bom == b"\x4d\x3c\x2b\x1a":
                    order = "<"
                elif bom == b"\x1a\x2b\x3c\x4d":
                    order = ">"
                else:
                    if number == 0 and pos == 0:
                        raise InputError(f"{self.path}: damaged pcapng section header")
                    self._damaged(f"damaged section header after packet {number}", len(buf) - pos)
                    return
                interfaces = []
            (length,) = struct.unpack_from(order + "I", buf, pos + 4)
            if length < 12 or length % 4 or length > _MAX_PCAPNG_BLOCK:
                if number == 0 and pos == 0:
                    raise InputError(f"{self.path}: damaged pcapng section header")
                self._damaged(f"damaged block header after packet {number}", len(buf) - pos)
                return
            while len(buf) - pos < length:
                more = self._more()
                if not more:
                    self._cut(len(buf) - pos, number + 1)
                    return
                buf = buf[pos:] + more
                pos = 0
            (trailer,) = struct.unpack_from(order + "I", buf, pos + length - 4)
            if trailer != length:
                self._damaged(f"damaged block after packet {number}", len(buf) - pos)
                return
            body = pos + 8
            body_end = pos + length - 4
            if block_type in (6, 2, 3) and body_end - body < (4 if block_type == 3 else 20):
                number += 1
                stats.packets += 1
                stats.undecodable += 1
                stats.problems.append(f"{self.path.name}: packet {number} is malformed (block too short)")
            elif block_type in (6, 2):  # enhanced / obsolete packet block
                if block_type == 6:
                    iface, ts_hi, ts_lo, caplen, wirelen = struct.unpack_from(order + "IIIII", buf, body)
                    data_at = body + 20
                else:
                    iface, _drops, ts_hi, ts_lo, caplen, wirelen = struct.unpack_from(order + "HHIIII", buf, body)
                    data_at = body + 20
                number += 1
                stats.packets += 1
                if iface >= len(interfaces) or data_at + caplen > body_end:
                    stats.bytes += max(0, body_end - data_at)
                    stats.undecodable += 1
                    stats.problems.append(f"{self.path.name}: packet {number} is malformed")
                else:
                    linktype, tick, scale_div, offset, _snap = interfaces[iface]
                    stats.bytes += caplen
                    ts = ((ts_hi << 32) | ts_lo) * tick // scale_div + offset
                    yield Frame(ci, number, linktype, ts, buf[data_at : data_at + caplen], wirelen, iface)
            elif block_type == 3:  # simple packet block: no timestamp, interface 0
                (wirelen,) = struct.unpack_from(order + "I", buf, body)
                number += 1
                stats.packets += 1
                if not interfaces:
                    stats.undecodable += 1
                    stats.problems.append(f"{self.path.name}: packet {number} precedes any interface")
                else:
                    linktype, _tick, _div, _offset, snap = interfaces[0]
                    caplen = min(wirelen, body_end - body - 4, snap or wirelen)
                    stats.bytes += caplen
                    yield Frame(ci, number, linktype, 0, buf[body + 4 : body + 4 + caplen], wirelen)
            elif block_type == 1:  # interface description
                if body_end - body < 8:
                    self._damaged(f"damaged interface description after packet {number}", len(buf) - pos)
                    return
                interfaces.append(self._interface(buf, body, body_end, order))
            pos += length

    @staticmethod
    def _interface(buf: bytes, body: int, end: int, order: str) -> tuple[int, int, int, int, int]:
        """linktype, then ts -> ns as ts * tick // div, the offset in ns, snaplen"""
        linktype, _reserved, snaplen = struct.unpack_from(order + "HHI", buf, body)
        tick, div = 1000, 1
        offset = 0
        opt = body + 8
        while opt + 4 <= end:
            code, size = struct.unpack_from(order + "HH", buf, opt)
            value = buf[opt + 4 : min(end, opt + 4 + size)]
            if code == 0:
                break
            if code == 9 and len(value) >= 1:  # if_tsresol
                resolution = value[0]
                if resolution & 0x80:
                    tick, div = 1_000_000_000, 1 << (resolution & 0x7F)
                elif resolution <= 9:
                    tick, div = 10 ** (9 - resolution), 1
                else:
                    tick, div = 1, 10 ** (resolution - 9)
            elif code == 14 and len(value) >= 8:  # if_tsoffset, seconds
                offset = struct.unpack_from(order + "q", value)[0] * 1_000_000_000
            opt += 4 + ((size + 3) & ~3)
        return linktype, tick, div, offset, snaplen


def _first_timestamp(path: Path) -> float | None:
    """Time of the first packet, None when the file has none."""
    reader = _FileReader(path, 0, ReadStats())
    frames = reader.frames()
    try:
        for frame in frames:
            return frame.ts
        return None
    finally:
        frames.close()


def capture_set_order(paths: Sequence[str | Path]) -> list[Path]:
    """The files of a capture set in order: first packet time, then path.

    Files without packets sort last. Raises InputError for files that are
    missing or not captures, before anything is read."""
    keyed = []
    for p in paths:
        path = Path(p)
        first = _first_timestamp(path)
        keyed.append((first is None, first or 0, str(path), path))
    keyed.sort(key=lambda k: k[:3])
    return [k[3] for k in keyed]


def resolution_of(path: str | Path) -> int:
    """Ticks per second of a capture file's times (pcapng: nanoseconds, the
    finest that times are kept at)."""
    reader = _FileReader(Path(path), 0, ReadStats())
    try:
        return reader.pcap.ticks_per_second if reader.kind == "pcap" else 1_000_000_000
    finally:
        reader._close()


class CaptureSet:
    """Several files read as one capture; `stats` accumulates while iterating."""

    def __init__(self, paths: Sequence[str | Path], stats: ReadStats | None = None):
        if isinstance(paths, (str, Path)):
            paths = [paths]
        self.paths = capture_set_order(paths)
        self.stats = stats if stats is not None else ReadStats()

    @property
    def finest_resolution(self) -> int:
        """Ticks per second of the finest-grained file of the set."""
        return max((resolution_of(path) for path in self.paths), default=1_000_000)

    def frames(self) -> Iterator[Frame]:
        for index, path in enumerate(self.paths):
            yield from _FileReader(path, index, self.stats).frames()

    def segments(self) -> Iterator[TcpSegment]:
        # chained in C: a segment passes through no generator but its file's
        return itertools.chain.from_iterable(self._per_file_segments())

    def _per_file_segments(self) -> Iterator[Iterator[TcpSegment]]:
        """Each file's segment iterator, the file opened when its turn comes."""
        stats = self.stats
        warned: set[int] = set()
        for index, path in enumerate(self.paths):
            reader = _FileReader(path, index, stats)
            if reader.kind == "pcap":
                # the common case, without a Frame per packet
                yield reader.pcap_segments()
                continue
            frames = ((f.linktype, f.frame_number, f.ts, f.data, f.wire_len) for f in reader.frames())
            yield decode_frames(frames, index, path.name, stats, warned)

    __iter__ = segments


def decode_frames(frames: Iterable[tuple[int, int, float, bytes, int]], capture_index: int, source: str,
                  stats: ReadStats, warned: set[int]) -> Iterator[TcpSegment]:
    """TCP segments of (linktype, frame number, ts, data, wire length) frames,
    counting every other frame into `stats`; an unsupported link type is named
    once per `warned` set. (The pcap fast path inlines the same counting.)"""
    for linktype, number, ts, data, wire_len in frames:
        result = decode_frame(linktype, ts, data, wire_len, capture_index, number)
        if type(result) is TcpSegment:
            stats.tcp_segments += 1
            yield result
        elif result == NOT_TCP:
            stats.non_tcp += 1
        elif result == IP_FRAGMENT:
            stats.ip_fragments += 1
        else:
            stats.undecodable += 1
            if result == UNSUPPORTED_LINK and linktype not in warned:
                warned.add(linktype)
                stats.problems.append(f"{source}: unsupported link type {linktype}")


def read_segments(paths: Sequence[str | Path], stats: ReadStats | None = None) -> Iterator[TcpSegment]:
    """TCP segments of a capture set in capture order. Pass a ReadStats to get
    the reading accounting (it is filled in as the iterator advances)."""
    return CaptureSet(paths, stats).segments()


def iter_frames(paths: Sequence[str | Path], stats: ReadStats | None = None) -> Iterator[Frame]:
    """Undecoded packets of a capture set (for tools and tests)."""
    return CaptureSet(paths, stats).frames()

