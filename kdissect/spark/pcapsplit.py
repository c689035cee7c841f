"""Byte-range splitting of pcap and pcapng files: finding a range's first
record or block without reading the file from its start.

A large file is cut into byte ranges that separate tasks read in parallel.
At each candidate offset of a range, a record header (pcap) or block
(pcapng) is checked for plausibility, then the lengths are followed through
a chain of several consecutive headers that must all be plausible: the RAPCAP
idea. A random offset almost never passes a chain of eight.

pcap: a record header is plausible when its timestamp is near the file's
first packet, its sub-second part in range, and its captured length at most
the snaplen and the wire length; consecutive records must also be close in
time. pcapng: blocks are 4-byte aligned and carry their length at both ends;
a block is plausible when its type is one this reader knows, its length a
multiple of 4 within limits and repeated at its end, and an enhanced packet's
captured length fits the block. Only the byte order of the file's first
section is tried: a range inside a section of the other byte order finds no
boundary, and the file is read by one task (see below).

A range owns the records or blocks that *start* inside it; its last one may
run past its end. The driver looks for each range's boundary in a small
window at the split point (`kdissect.spark.plan`); the task reading a range
walks it from there with the capture reader's own loop and reports where
the walk stopped (the first start at or past its end). Walking from the true
first record only ever lands on true boundaries, so if each range's walk
stops exactly at the next range's boundary, every boundary was true;
otherwise the file is read again the safe way (see plan.py).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import BinaryIO

from kdissect.wire.capture import (
    MAX_PCAPNG_BLOCK,
    PCAPNG_BYTE_ORDER,
    PCAPNG_SHB,
    PcapHeader,
    parse_pcap_header,
    record_limit,
)
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
_WINDOW = 1 << 20  # bytes scanned per read while looking for a boundary


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
    """Parse the pcap global header (and peek the first record's time); None if not pcap."""
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


def find_boundary(stream: BinaryIO, fmt: PcapFormat, start: int, end: int, file_size: int,
                  window: int = _WINDOW) -> int | None:
    """First offset in [start, end) where a valid pcap header chain begins, or
    None; the range is read `window` bytes at a time from `start`."""
    if start <= GLOBAL_HEADER_LEN:
        return GLOBAL_HEADER_LEN if GLOBAL_HEADER_LEN < min(end, file_size) else None
    limit = min(end, file_size)
    # Scan a window at a time; test each offset with a quick single-header
    # check before paying for the chain.
    header = fmt.record_header
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


# -- pcapng ----------------------------------------------------------------------------

# section header, interface description, obsolete packet, simple packet, name
# resolution, interface statistics, enhanced packet, IRIG timestamp, ARINC
# 429, systemd journal export, decryption secrets, custom (two kinds)
KNOWN_BLOCK_TYPES = frozenset({PCAPNG_SHB, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0x0A, 0x00000BAD, 0x40000BAD})
_BLOCK_PREFIX = 28  # enough of a block to judge it: type, length and an enhanced packet's fields


def pcapng_byte_order(stream: BinaryIO) -> str | None:
    """Byte order of a pcapng file's first section ("<" or ">"), None if not pcapng."""
    stream.seek(0)
    head = stream.read(12)
    if len(head) < 12 or int.from_bytes(head[:4], "little") != PCAPNG_SHB:
        return None
    return PCAPNG_BYTE_ORDER.get(head[8:12])


def _block_plausible(prefix: bytes, order: str) -> int:
    """The block's length if its first bytes look like a pcapng block, else 0."""
    if len(prefix) < 12:
        return 0
    block_type, length = struct.unpack_from(order + "II", prefix)
    if block_type not in KNOWN_BLOCK_TYPES or length < 12 or length % 4 or length > MAX_PCAPNG_BLOCK:
        return 0
    if block_type == PCAPNG_SHB and (length < 28 or PCAPNG_BYTE_ORDER.get(prefix[8:12]) != order):
        return 0
    if block_type == 6:
        if length < 32 or len(prefix) < 28:
            return 0
        caplen = struct.unpack_from(order + "I", prefix, 20)[0]
        if caplen > length - 32:
            return 0
    return length


def _block_chain_holds(stream: BinaryIO, order: str, offset: int, file_size: int) -> bool:
    trailer = struct.Struct(order + "I")
    position = offset
    for checked in range(CHAIN_LENGTH):
        if position == file_size:
            return checked > 0
        if position + 12 > file_size:
            return checked > 0  # a block cut by the end of the file after valid ones
        stream.seek(position)
        length = _block_plausible(stream.read(_BLOCK_PREFIX), order)
        if not length:
            return False
        if position + length > file_size:
            # cut by the end of the file (a capture killed mid-write) after
            # whole blocks: the driver's chaining check has the last word. A
            # first block running past the end is taken for a false one.
            return checked > 0
        stream.seek(position + length - 4)
        if trailer.unpack(stream.read(4))[0] != length:
            return False
        position += length
    return True


def find_block_boundary(stream: BinaryIO, order: str, start: int, end: int, file_size: int,
                        window: int = _WINDOW) -> int | None:
    """First 4-byte aligned offset in [start, end) where a chain of plausible
    pcapng blocks begins, or None (read `window` bytes at a time). Offset 0
    (the section header) for the first range."""
    if start == 0:
        return 0 if file_size > 0 and end > 0 else None
    limit = min(end, file_size)
    position = (start + 3) & ~3
    head = struct.Struct(order + "II")
    while position < limit:
        stream.seek(position)
        chunk = stream.read(min(window, limit - position) + 12)
        last = min(len(chunk) - 12, limit - position - 1)
        for index in range(0, last + 1, 4):
            block_type, length = head.unpack_from(chunk, index)
            if block_type in KNOWN_BLOCK_TYPES and 12 <= length <= MAX_PCAPNG_BLOCK and not length % 4 \
                    and _block_chain_holds(stream, order, position + index, file_size):
                return position + index
        if len(chunk) <= 12:
            return None
        position += (last // 4 + 1) * 4
    return None
