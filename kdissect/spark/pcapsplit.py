"""Byte-range splitting of classic pcap files.

A large pcap is cut into byte ranges that separate tasks read in parallel.
A range's first record is found without reading the file from the start, by
the RAPCAP idea: at each candidate offset, read a record header and check it
is plausible (timestamp near the file's first packet, sub-second part in
range, captured length <= snaplen and <= wire length), then follow the
lengths through a chain of several consecutive headers that must all be
plausible and close in time to each other. A random offset almost never
passes a chain of eight.

A range owns the records that *start* inside it; its last record may run past
its end. Every range also reports where its walk stopped (the first record
start at or past its end). The driver checks that this equals the next
non-empty range's boundary: walking from the true first record (offset 24)
only ever lands on true boundaries, so if every link agrees, every boundary
was true. If a link disagrees the file is read by one task instead.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import BinaryIO, Iterator

from kdissect.capture import PcapHeader, parse_pcap_header
from kdissect.failures import InputError

GLOBAL_HEADER_LEN = 24

# Limits for the plausibility check; generous so real records always pass.
MAX_RECORD = 262144  # as the capture reader: larger means a damaged header
TS_SLACK_BEFORE = 86400  # a day before the first packet
TS_SLACK_AFTER = 366 * 86400  # a year after it
# Consecutive records of a chain must be this close in time: a false header
# whose length happens to land on a true record is caught by its timestamp.
MAX_STEP_SECONDS = 86400
CHAIN_LENGTH = 8


def record_limit(snaplen: int) -> int:
    """Largest captured length the capture reader accepts (it stops at a larger one)."""
    return max(MAX_RECORD, snaplen) if snaplen <= (256 << 20) else MAX_RECORD


@dataclass(frozen=True)
class PcapFormat:
    header: PcapHeader
    first_ts_sec: int | None  # seconds of the first record, None if no record

    @property
    def record_header(self) -> struct.Struct:
        return struct.Struct(self.header.byte_order + "IIII")

    @property
    def record_header_size(self) -> int:
        return self.header.record_header_size

    @property
    def max_caplen(self) -> int:
        snaplen = self.header.snaplen
        return snaplen if 0 < snaplen <= MAX_RECORD else record_limit(snaplen)


def read_format(stream: BinaryIO) -> PcapFormat | None:
    """Parse the global header (and peek the first record's time); None if not pcap."""
    stream.seek(0)
    head = stream.read(GLOBAL_HEADER_LEN + 4)
    try:
        header = parse_pcap_header(head)
    except InputError:
        return None
    first = None
    if len(head) >= GLOBAL_HEADER_LEN + 4:
        first = struct.unpack(header.byte_order + "I", head[24:28])[0]
    return PcapFormat(header, first)


def plausible(fmt: PcapFormat, sec: int, frac: int, caplen: int, wirelen: int) -> bool:
    if frac >= fmt.header.ticks_per_second:
        return False
    if caplen > wirelen or caplen > fmt.max_caplen or wirelen == 0 or wirelen > (1 << 24):
        return False
    if fmt.first_ts_sec is not None:
        if not fmt.first_ts_sec - TS_SLACK_BEFORE <= sec <= fmt.first_ts_sec + TS_SLACK_AFTER:
            return False
    return True


def _chain_holds(stream: BinaryIO, fmt: PcapFormat, offset: int, file_size: int) -> bool:
    header = fmt.record_header
    size = fmt.record_header_size
    position = offset
    previous = None
    for checked in range(CHAIN_LENGTH):
        if position == file_size:
            return checked > 0  # the chain ran exactly to the end of the file
        if position + size > file_size:
            return checked > 0  # a header cut by the end of the file after valid records
        stream.seek(position)
        sec, frac, caplen, wirelen = header.unpack(stream.read(16))
        if not plausible(fmt, sec, frac, caplen, wirelen):
            return False
        if previous is not None and abs(sec - previous) > MAX_STEP_SECONDS:
            return False
        previous = sec
        position += size + caplen
        if position > file_size:
            # A record cut short by the end of the file (a capture killed
            # mid-write) ends the chain. Accepting it unchecked is safe: a
            # wrong boundary is caught when the driver chains the ranges.
            return True
    return True


def find_boundary(stream: BinaryIO, fmt: PcapFormat, start: int, end: int, file_size: int) -> int | None:
    """First offset in [start, end) where a valid header chain begins, or None."""
    if start <= GLOBAL_HEADER_LEN:
        return GLOBAL_HEADER_LEN if GLOBAL_HEADER_LEN < min(end, file_size) else None
    limit = min(end, file_size)
    # Scan a window at a time; test each offset with a quick single-header
    # check before paying for the chain.
    header = fmt.record_header
    window = 1 << 20
    position = start
    while position < limit:
        stream.seek(position)
        chunk = stream.read(min(window, limit - position) + 16)
        last = min(len(chunk) - 16, limit - position - 1)
        for index in range(0, last + 1):
            sec, frac, caplen, wirelen = header.unpack_from(chunk, index)
            if plausible(fmt, sec, frac, caplen, wirelen) and _chain_holds(
                stream, fmt, position + index, file_size
            ):
                return position + index
        if len(chunk) <= 16:
            # Too few bytes left for a header: no record starts here.
            return None
        position += last + 1
    return None


@dataclass
class WalkResult:
    records: int
    # first record start at or past the range end; the file size if the walk
    # reached the end of the file
    stop: int
    damaged_at: int = -1  # offset of a record header the capture reader would stop at
    cut_bytes: int = 0  # bytes of a last record cut short by the end of the file


def walk_records(stream: BinaryIO, fmt: PcapFormat, boundary: int, end: int, result: WalkResult | None = None
                 ) -> Iterator[tuple[float, bytes, int]]:
    """Yield (ts, captured bytes, wire length) for the records starting in [boundary, end).

    Trusts the length fields (the boundary is a true one) and stops where the
    capture reader stops: at a record longer than the snaplen limit (damage)
    or one cut short by the end of the file. `result`, if given, is filled in.
    """
    header = fmt.header
    unpack = fmt.record_header.unpack_from
    size = header.record_header_size
    limit = record_limit(header.snaplen)
    ticks = header.ticks_per_second
    stream.seek(boundary)
    read = stream.read
    position = boundary
    records = 0
    try:
        while position < end:
            head = read(size)
            if len(head) < size:
                if result is not None:
                    result.cut_bytes = len(head)
                position = -1
                return
            sec, frac, caplen, wirelen = unpack(head)
            if caplen > limit:
                if result is not None:
                    result.damaged_at = position
                position = -1
                return
            data = read(caplen)
            if len(data) < caplen:
                if result is not None:
                    result.cut_bytes = size + len(data)
                position = -1
                return
            records += 1
            yield sec * 1_000_000_000 + frac * (1_000_000_000 // ticks), data, wirelen
            position += size + caplen
    finally:
        if result is not None:
            result.records = records
            result.stop = position


def count_records(stream: BinaryIO, fmt: PcapFormat, boundary: int, end: int, file_size: int) -> WalkResult:
    """What `walk_records` would do, reading only record headers."""
    header = fmt.header
    unpack = fmt.record_header.unpack
    size = header.record_header_size
    limit = record_limit(header.snaplen)
    position = boundary
    records = 0
    while position < end:
        if position == file_size:
            break
        if position + size > file_size:
            return WalkResult(records, file_size, cut_bytes=file_size - position)
        stream.seek(position)
        caplen = unpack(stream.read(16))[2]
        if caplen > limit:
            return WalkResult(records, file_size, damaged_at=position)
        following = position + size + caplen
        if following > file_size:
            return WalkResult(records, file_size, cut_bytes=file_size - position)
        records += 1
        position = following
    return WalkResult(records, position)
