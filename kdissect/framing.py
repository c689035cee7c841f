"""Cut one direction of a reassembled TCP stream into Kafka frames.

Every Kafka message on the wire is `int32 size` followed by `size` bytes. A
`FrameReader` is fed the ordered chunks of one direction (captured data, lost
bytes, snaplen-truncated data) and returns `Frame`s:

* while in step with the stream, frames are cut by their size fields alone;
* when bytes are missing inside a frame whose size is known, the frame is still
  returned, marked incomplete, with the header bytes that were captured, and
  reading resumes at its end (the size says where the next frame starts);
* when the position of the next frame is unknown (lost bytes where a size field
  should be, a capture that starts mid-connection, an insane size), the reader
  hunts: it tries each captured position and accepts the first whose size is
  sane and whose following bytes the caller's `plausible` test accepts.

A frame's time and packet are those of the chunk that completed it, which is
how tshark labels a reassembled PDU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from struct import Struct
from typing import Callable, Protocol

from kdissect.packet import SlotRecord

_INT32 = Struct(">i")
_unpack_int32 = _INT32.unpack_from

# Sizes accepted while hunting for a frame boundary. In step with the stream
# any non-negative size up to MAX_FRAME_SIZE is believed.
MAX_FRAME_SIZE = 1 << 30
# Frames larger than this are not held in memory: their first HEADER_KEEP
# bytes are kept and the rest is skipped (the frame comes out incomplete,
# missing="oversized"), so memory stays bounded whatever a size field says.
MAX_BUFFERED_FRAME = 128 << 20
HEADER_KEEP = 64 << 10
# Frames from this size on are collected as a list of chunks, joined once.
_BIG_FRAME = 256 << 10
HUNT_MAX_SIZE = 128 << 20
# Where a hunted size field may start: big-endian, so a size up to
# HUNT_MAX_SIZE (0x08000000) begins with a byte 0x00-0x08. Zero-width, to
# find every position.
_SIZE_CANDIDATE = re.compile(rb"(?=[\x00-\x08])")
# Bytes after the size field handed to `plausible` while hunting.
HUNT_PREFIX = 64

# plausible(prefix_after_size_field, frame_size) -> bool
Plausible = Callable[[bytes, int], bool]


class ChunkLike(Protocol):
    kind: str
    offset: int
    length: int
    data: bytes
    ts: float
    capture_index: int
    frame_number: int


class Stamp(Protocol):
    """Where bytes were seen: the time and packet a frame is labelled with."""

    ts: float
    capture_index: int
    frame_number: int


class _DataChunk:
    """A "data" chunk made up by `push_data` when it cannot take its short cut."""

    __slots__ = ("offset", "length", "data", "ts", "capture_index", "frame_number")
    kind = "data"

    def __init__(self, offset: int, data: bytes, where: Stamp) -> None:
        self.offset = offset
        self.length = len(data)
        self.data = data
        self.ts = where.ts
        self.capture_index = where.capture_index
        self.frame_number = where.frame_number


class Frame(SlotRecord):
    """One size-prefixed Kafka frame (or what was captured of it)."""

    __slots__ = ("direction", "offset", "size", "data", "complete", "ts", "capture_index", "frame_number",
                 "missing")

    def __init__(self, direction: int, offset: int, size: int, data: bytes, complete: bool, ts: float,
                 capture_index: int, frame_number: int, missing: str | None = None) -> None:
        self.direction = direction  # 0 = initiator -> responder, 1 = the reverse
        self.offset = offset  # stream offset of the size field
        self.size = size  # the size field: bytes after the prefix on the wire
        self.data = data  # frame bytes after the size prefix; a prefix of them if not complete
        self.complete = complete  # False when bytes inside the frame were lost or cut by snaplen
        self.ts = ts  # time of the packet that completed the frame
        self.capture_index = capture_index
        self.frame_number = frame_number
        self.missing = missing  # why incomplete: "snaplen" or "gap"


@dataclass(slots=True)
class FramingStats:
    """What one reader did with the bytes of its direction."""

    framed_bytes: int = 0  # bytes of complete frames (size prefix included)
    frames: int = 0
    incomplete_frames: int = 0
    incomplete_frame_bytes: int = 0  # stream bytes covered by incomplete frames
    gap_bytes: int = 0  # bytes lost in the capture (not seen at all)
    snaplen_bytes: int = 0  # bytes on the wire but not captured
    skipped_bytes: int = 0  # captured bytes discarded while hunting for a boundary
    resyncs: int = 0  # times a frame boundary was found by hunting


_SYNC, _SKIP, _HUNT = 0, 1, 2


class FrameReader:
    """Frames of one direction. Feed chunks in stream order with `push`."""

    __slots__ = (
        "direction", "plausible", "min_size", "stats", "_state", "_buf", "_pos",
        "_end", "_skip_end", "_skip_start", "_skip_size", "_skip_header", "_skip_why",
        "on_hunt", "_last", "max_buffered", "_big", "_big_have", "_big_size", "_big_pos",
        "plausible_exact",
    )

    def __init__(
        self,
        direction: int,
        plausible: Plausible,
        aligned: bool = True,
        min_size: int = 4,
    ) -> None:
        self.direction = direction
        self.plausible = plausible
        self.min_size = min_size  # smallest believable frame when hunting
        self.stats = FramingStats()
        self._state = _SYNC if aligned else _HUNT
        self._buf = bytearray()  # captured, contiguous bytes starting at _pos
        self._pos = 0
        self._end = 0  # stream offset just past everything pushed so far
        # the incomplete frame being skipped while in _SKIP
        self._skip_end = 0
        self._skip_start = 0
        self._skip_size = 0
        self._skip_header = b""
        self._skip_why = ""
        # called (no arguments) whenever the reader loses step with the stream
        self.on_hunt: Callable[[], None] | None = None
        self._last: ChunkLike | None = None  # the chunk pushed last (for finish)
        self.max_buffered = MAX_BUFFERED_FRAME
        # optional second test for a hunted frame that ends exactly where the
        # captured bytes end (a packet boundary): so exact a fit is itself
        # strong evidence, so this test may be looser than `plausible`
        self.plausible_exact: Plausible | None = None
        # a large frame being collected as a list of chunks (joined once at
        # the end: one copy instead of append + slice)
        self._big: list[bytes] | None = None
        self._big_have = 0  # body bytes collected
        self._big_size = 0  # the frame's size field
        self._big_pos = 0  # stream offset of its size field

    @property
    def started(self) -> bool:
        """Whether any chunk has been pushed yet."""
        return self._last is not None

    def set_aligned(self, aligned: bool) -> None:
        """Before the first push: does the stream start at a frame boundary?"""
        self._state = _SYNC if aligned else _HUNT

    @property
    def in_step(self) -> bool:
        return self._state != _HUNT

    @property
    def pending_bytes(self) -> int:
        """Captured bytes held back waiting for the rest of a frame."""
        return len(self._buf) + (self._big_have + 4 if self._big is not None else 0)

    def push_data(self, offset: int, data: bytes, where: Stamp) -> list[Frame]:
        """Same as `push` of a "data" chunk of `data` at stream `offset`
        whose ts / capture_index / frame_number are those of `where` (the
        segment that delivered it), without building the chunk."""
        length = len(data)
        if offset != self._end or self._state != _SYNC or self._big is not None or length < 4:
            return self.push(_DataChunk(offset, data, where))
        self._last = where
        buf = self._buf
        if not buf:
            size = _unpack_int32(data, 0)[0]
            if size + 4 == length:
                # a chunk holding exactly one whole frame (most packets)
                pos = self._pos
                self._pos = self._end = offset + length
                stats = self.stats
                stats.frames += 1
                stats.framed_bytes += length
                return [Frame(self.direction, pos, size, data[4:], True,
                              where.ts, where.capture_index, where.frame_number)]
        out: list[Frame] = []
        self._end += length
        self._cut(data, where, out)
        return out

    def push(self, chunk: ChunkLike) -> list[Frame]:
        self._last = chunk
        offset, length = chunk.offset, chunk.length
        if self._big is not None:
            if chunk.kind == "data" and offset == self._end:
                return self._grow_big(chunk)
            self._unbig()
        if (length >= 4 and offset == self._end and self._state == _SYNC and not self._buf
                and chunk.kind == "data"):
            # fast path: a chunk holding exactly one whole frame (most packets)
            data = chunk.data
            size = _unpack_int32(data, 0)[0]
            if size + 4 == length:
                pos = self._pos
                self._pos = self._end = offset + length
                stats = self.stats
                stats.frames += 1
                stats.framed_bytes += length
                return [Frame(self.direction, pos, size, data[4:], True,
                              chunk.ts, chunk.capture_index, chunk.frame_number)]
        out: list[Frame] = []
        if offset > self._end:  # the reassembler skipped bytes without saying so
            self._hole(offset - self._end, "gap", chunk, out)
        elif offset < self._end:  # overlap with what we already have: trim it
            cut = self._end - offset
            if cut >= length:
                return out
            offset += cut
            length -= cut
            if chunk.kind == "gap":
                data = b""
            else:
                data = chunk.data[cut:]
            return self._push_parts(chunk, data, length, out)
        return self._push_parts(chunk, chunk.data, length, out)

    def _push_parts(self, chunk: ChunkLike, data: bytes, length: int, out: list[Frame]) -> list[Frame]:
        kind = chunk.kind
        if kind == "data":
            self._data(data, chunk, out)
        elif kind == "gap":
            self._hole(length, "gap", chunk, out)
        else:  # truncated: a captured prefix, then bytes cut by snaplen
            if data:
                self._data(data, chunk, out)
            if length > len(data):
                self._hole(length - len(data), "snaplen", chunk, out)
        return out

    def finish(self) -> list[Frame]:
        """End of stream: what is held is an incomplete frame or unframed bytes."""
        out: list[Frame] = []
        if self._big is not None:
            self._unbig()
        if self._state == _HUNT and self._buf:
            self._hunt(self._last, out, final=True)
            if self._big is not None:
                self._unbig()
        if self._state == _SKIP:
            # the frame's end was never seen: report what we have of it
            self._emit_incomplete(out, self._last)
            self._state = _SYNC
        elif self._state == _SYNC and len(self._buf) >= 4:
            size = _unpack_int32(self._buf, 0)[0]
            self._begin_skip(self._pos, size, bytes(self._buf[4 : 4 + size]), "end")
            self._buf = bytearray()
            self._emit_incomplete(out, self._last)
            self._state = _SYNC
        self.stats.skipped_bytes += len(self._buf)
        self._buf = bytearray()
        return out

    # -- captured bytes ------------------------------------------------------

    def _data(self, data: bytes, chunk: ChunkLike, out: list[Frame]) -> None:
        self._end += len(data)
        if self._state == _SKIP:
            room = self._skip_end - (self._end - len(data))
            if room > len(data):
                return
            # this chunk reaches the end of the frame being skipped
            self._emit_incomplete(out, chunk)
            self._state = _SYNC
            self._pos = self._skip_end
            data = data[room:]
            if not data:
                return
        if self._state == _SYNC:
            self._cut(data, chunk, out)
        else:
            self._buf += data
            self._hunt(chunk, out, final=False)

    def _cut(self, data: bytes, chunk: ChunkLike, out: list[Frame]) -> None:
        """In step: cut complete frames; keep the unfinished tail in _buf."""
        buf = self._buf
        if buf:
            buf += data
            data = buf
        n = len(data)
        i = 0
        stats = self.stats
        direction = self.direction
        view = None  # copies below go through a memoryview: one copy, not two
        while n - i >= 4:
            size = _unpack_int32(data, i)[0]
            if size < 0 or size > MAX_FRAME_SIZE:
                # not a frame boundary after all: look for the next one
                if view is not None:
                    view.release()
                self._buf = bytearray(data[i + 1 :])
                self._pos += i
                self._lose_step()
                self._pos += 1
                stats.skipped_bytes += 1
                self._hunt(chunk, out, final=False)
                return
            end = i + 4 + size
            if end > n:
                if size > self.max_buffered:
                    # too big to hold: keep its start, skip the rest
                    if view is not None:
                        view.release()
                    self._begin_skip(self._pos + i, size, bytes(data[i + 4 : i + 4 + HEADER_KEEP]), "oversized")
                    self._buf = bytearray()
                    return
                if size >= _BIG_FRAME:
                    # collect the rest chunk by chunk (see _grow_big)
                    body = view[i + 4 : n].tobytes() if view is not None else bytes(data[i + 4 : n])
                    if view is not None:
                        view.release()
                    self._big = [body]
                    self._big_have = len(body)
                    self._big_size = size
                    self._big_pos = self._pos + i
                    self._pos += i
                    self._buf = bytearray()
                    return
                break
            if view is None:
                view = memoryview(data)
            out.append(
                Frame(direction, self._pos + i, size, view[i + 4 : end].tobytes(), True,
                      chunk.ts, chunk.capture_index, chunk.frame_number)
            )
            stats.frames += 1
            stats.framed_bytes += 4 + size
            i = end
        if view is not None:
            view.release()
        if data is buf:
            if i:
                del buf[:i]
        elif i < n:
            self._buf = bytearray(memoryview(data)[i:]) if i else bytearray(data)
        else:
            self._buf = bytearray()
        self._pos += i

    def _grow_big(self, chunk: ChunkLike) -> list[Frame]:
        """The next data chunk of a large frame in progress."""
        data = chunk.data
        parts = self._big
        assert parts is not None
        need = self._big_size - self._big_have
        self._end += len(data)
        if len(data) < need:
            parts.append(data)
            self._big_have += len(data)
            return []
        parts.append(data if len(data) == need else data[:need])
        size = self._big_size
        out = [Frame(self.direction, self._big_pos, size, b"".join(parts), True,
                     chunk.ts, chunk.capture_index, chunk.frame_number)]
        self._big = None
        self._big_have = 0
        stats = self.stats
        stats.frames += 1
        stats.framed_bytes += 4 + size
        self._pos = self._big_pos + 4 + size
        if len(data) > need:
            self._cut(data[need:], chunk, out)
        return out

    def _unbig(self) -> None:
        """Back to a plain buffer holding the frame's start (before a hole or the end)."""
        parts = self._big
        assert parts is not None
        self._buf = bytearray(_INT32.pack(self._big_size)) + b"".join(parts)
        self._big = None
        self._big_have = 0

    # -- missing bytes -------------------------------------------------------

    def _hole(self, length: int, why: str, chunk: ChunkLike, out: list[Frame]) -> None:
        if length <= 0:
            return
        if self._big is not None:
            self._unbig()
        stats = self.stats
        if why == "gap":
            stats.gap_bytes += length
        else:
            stats.snaplen_bytes += length
        self._end += length
        if self._state == _SYNC and len(self._buf) >= 4:
            # the size is known: skip to the frame's end
            size = _unpack_int32(self._buf, 0)[0]
            self._begin_skip(self._pos, size, bytes(self._buf[4 : 4 + size]), why)
            self._buf = bytearray()
        elif self._state == _HUNT and self._buf:
            self._hunt(chunk, out, final=True)
            if self._big is not None:
                self._unbig()
            if self._state == _SYNC and len(self._buf) >= 4:
                size = _unpack_int32(self._buf, 0)[0]
                self._begin_skip(self._pos, size, bytes(self._buf[4 : 4 + size]), why)
                self._buf = bytearray()
        if self._state == _SKIP:
            if self._skip_why != why and self._skip_why == "snaplen":
                self._skip_why = why  # a gap is the worse loss; report it
            if self._end < self._skip_end:
                return
            self._emit_incomplete(out, chunk)
            self._state = _SYNC
            self._pos = self._skip_end
            self._buf = bytearray()
            if self._end == self._skip_end:
                return  # the hole ended exactly at the frame's end: still in step
        # the hole covers where a size field should be: we lost step
        if self._buf:
            stats.skipped_bytes += len(self._buf)
            self._buf = bytearray()
        if self._state != _HUNT:
            self._lose_step()
        self._pos = self._end

    def _begin_skip(self, start: int, size: int, header: bytes, why: str) -> None:
        self._state = _SKIP
        self._skip_start = start
        self._skip_size = size
        self._skip_end = start + 4 + size
        self._skip_header = header
        self._skip_why = why

    def _emit_incomplete(self, out: list[Frame], chunk: ChunkLike | None) -> None:
        stats = self.stats
        stats.incomplete_frames += 1
        stats.incomplete_frame_bytes += 4 + self._skip_size
        if chunk is None:
            ts, ci, fn = 0.0, -1, -1
        else:
            ts, ci, fn = chunk.ts, chunk.capture_index, chunk.frame_number
        out.append(Frame(self.direction, self._skip_start, self._skip_size, self._skip_header,
                         False, ts, ci, fn, self._skip_why))
        self._skip_header = b""

    def _lose_step(self) -> None:
        self._state = _HUNT
        if self.on_hunt is not None:
            self.on_hunt()

    # -- hunting for a frame boundary ----------------------------------------

    def _hunt(self, chunk: ChunkLike | None, out: list[Frame], final: bool) -> None:
        """Find the first plausible frame start in _buf.

        `final` means no more contiguous bytes will follow _buf (a hole or the
        end comes next), so decide with the bytes that are there.
        """
        buf = self._buf
        n = len(buf)
        plausible = self.plausible
        min_size = self.min_size
        p = max(0, n - 3)  # where to resume when no candidate is left
        found = -1
        # only positions whose first two bytes allow a size <= HUNT_MAX_SIZE
        # are worth a look; the regex finds them in C
        for match in _SIZE_CANDIDATE.finditer(buf):
            q = match.start()
            if q + 4 > n:
                p = q
                break
            size = _unpack_int32(buf, q)[0]
            if min_size <= size <= HUNT_MAX_SIZE:
                have = n - q - 4
                need = size if size < HUNT_PREFIX else HUNT_PREFIX
                if have < need and not final:
                    p = q
                    break  # wait for more bytes before judging this position
                if have >= 8 or have >= size:
                    prefix = bytes(buf[q + 4 : q + 4 + min(have, need)])
                    if plausible(prefix, size) or (
                        have == size and self.plausible_exact is not None and self.plausible_exact(prefix, size)
                    ):
                        found = q
                        break
        if found < 0:
            keep_from = n if final else p
            self.stats.skipped_bytes += keep_from
            del buf[:keep_from]
            self._pos += keep_from
            return
        self.stats.skipped_bytes += found
        self.stats.resyncs += 1
        del buf[:found]
        self._pos += found
        self._state = _SYNC
        if chunk is not None:
            data = bytes(buf)
            self._buf = bytearray()
            self._cut(data, chunk, out)
