"""Cut one direction of a reassembled TCP stream into Kafka frames.

Every Kafka message on the wire is `int32 size` followed by `size` bytes. A
`FrameReader` is one direction's `reassembly.DirectionSink`: it hears the
direction's captured bytes (`data`), lost bytes (`gap`) and snaplen-cut
bytes (`truncated`) in stream order and hands each `Frame` to `on_frame`:

* while in step with the stream, frames are cut by their size fields alone;
* when bytes are missing inside a frame whose size is known, the frame is still
  handed on, marked incomplete, with the header bytes that were captured, and
  reading resumes at its end (the size says where the next frame starts);
* when the position of the next frame is unknown (lost bytes where a size field
  should be, a capture that starts mid-connection, an insane size), the reader
  hunts. A position is a frame start when its size is sane, the caller's
  `plausible` test accepts the bytes after the size field, and either the
  caller is `sure` of it from those bytes alone (a response to a request
  the capture holds) or, once the whole frame has arrived, the caller
  `confirm`s it (it decodes; for a response, it also ends exactly where a
  packet ended). A candidate is never judged before its end has arrived,
  so a resynchronisation does not emit a frame that is not one.

A frame's time and packet are those of the piece that completed it (how
tshark labels a reassembled PDU); `first_ts` is the time of the piece that
carried its first byte.

Every byte a reader hears ends in exactly one of `FramingStats`' buckets:
complete frames, incomplete frames (their captured and snaplen-cut bytes),
bytes skipped while resynchronising after a loss, or bytes skipped before
the first frame boundary of a stream the capture joined mid-way; lost bytes
are counted apart (`gap_bytes`).
"""

from __future__ import annotations

import re
from struct import Struct
from typing import Callable, Protocol

from kdissect.model.packet import SlotRecord

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
# Frames from this size on are collected as a list of pieces, joined once.
_BIG_FRAME = 256 << 10
HUNT_MAX_SIZE = 128 << 20
# While hunting, a candidate frame up to this size is held until its end
# arrives so it can be confirmed; a larger one needs the caller to be sure.
HUNT_HOLD = 1 << 20
# Where a hunted size field may start: big-endian, so a size up to
# HUNT_MAX_SIZE (0x08000000) begins with a byte 0x00-0x08. Zero-width, to
# find every position.
_SIZE_CANDIDATE = re.compile(rb"(?=[\x00-\x08])")
# Bytes after the size field handed to `plausible` while hunting.
HUNT_PREFIX = 64

# plausible(prefix_after_size_field, frame_size) -> bool
Plausible = Callable[[bytes, int], bool]
# confirm(frame_bytes_after_size_field, ends_at_a_packet_end) -> bool
Confirm = Callable[[bytes, bool], bool]
# sure(prefix_after_size_field, frame_size, starts_at_a_packet_start) -> bool
Sure = Callable[[bytes, int, bool], bool]


class Stamp(Protocol):
    """Where bytes were seen: the time (ns) and packet a frame is labelled with."""

    ts: int
    capture_index: int
    frame_number: int


class Frame(SlotRecord):
    """One size-prefixed Kafka frame (or what was captured of it)."""

    __slots__ = ("direction", "offset", "size", "data", "complete", "ts", "capture_index", "frame_number",
                 "missing", "first_ts")

    def __init__(self, direction: int, offset: int, size: int, data: bytes, complete: bool, ts: int,
                 capture_index: int, frame_number: int, missing: str | None = None,
                 first_ts: int | None = None) -> None:
        self.direction = direction  # 0 = initiator -> responder, 1 = the reverse
        self.offset = offset  # stream offset of the size field
        self.size = size  # the size field: bytes after the prefix on the wire
        self.data = data  # frame bytes after the size prefix; a prefix of them if not complete
        self.complete = complete  # False when bytes inside the frame were lost or cut by snaplen
        self.ts = ts  # time (ns) of the packet that completed the frame
        self.capture_index = capture_index
        self.frame_number = frame_number
        self.missing = missing  # why incomplete: "snaplen", "gap", "end" or "oversized"
        self.first_ts = ts if first_ts is None else first_ts  # time (ns) of the packet with its first byte


class FramingStats(SlotRecord):
    """What one reader did with the bytes of its direction."""

    __slots__ = ("seen_bytes", "framed_bytes", "frames", "incomplete_frames", "incomplete_frame_bytes", "gap_bytes",
                 "snaplen_bytes", "skipped_bytes", "mid_stream_bytes", "resyncs", "mid_stream_starts")

    def __init__(self, seen_bytes: int = 0, framed_bytes: int = 0, frames: int = 0, incomplete_frames: int = 0,
                 incomplete_frame_bytes: int = 0, gap_bytes: int = 0, snaplen_bytes: int = 0, skipped_bytes: int = 0,
                 mid_stream_bytes: int = 0, resyncs: int = 0, mid_stream_starts: int = 0) -> None:
        self.seen_bytes = seen_bytes  # bytes heard: captured or cut by snaplen (not lost ones)
        self.framed_bytes = framed_bytes  # bytes of complete frames (size prefix included)
        self.frames = frames
        self.incomplete_frames = incomplete_frames
        # seen bytes (captured or snaplen-cut) of incomplete frames
        self.incomplete_frame_bytes = incomplete_frame_bytes
        self.gap_bytes = gap_bytes  # bytes lost in the capture (not seen at all)
        self.snaplen_bytes = snaplen_bytes  # bytes on the wire but not captured
        self.skipped_bytes = skipped_bytes  # seen bytes not in a frame, while resynchronising after a loss
        # seen bytes before the first frame boundary of a stream joined mid-way
        self.mid_stream_bytes = mid_stream_bytes
        self.resyncs = resyncs  # times a frame boundary was found again after a loss
        self.mid_stream_starts = mid_stream_starts  # streams whose first boundary was found by hunting (0 or 1)


_SYNC, _SKIP, _HUNT = 0, 1, 2


class _Stamp:
    __slots__ = ("ts", "capture_index", "frame_number")

    def __init__(self, ts: int, capture_index: int, frame_number: int) -> None:
        self.ts = ts
        self.capture_index = capture_index
        self.frame_number = frame_number


_NO_STAMP = _Stamp(0, -1, -1)


def opens_partial_frame(data: bytes) -> bool:
    """Whether `data`, heard in step at a frame boundary, holds only part of
    the frame its size field announces: a reader then completes no frame and
    only keeps the bytes (`_cut`), so it may as well be made later."""
    if len(data) < 4:
        return True
    size: int = _unpack_int32(data, 0)[0]
    return 0 <= size <= MAX_FRAME_SIZE and size + 4 > len(data)


class FrameReader:
    """Frames of one direction: a DirectionSink handing frames to `on_frame`."""

    __slots__ = (
        "direction", "plausible", "confirm", "sure", "min_size", "stats", "on_frame", "on_hunt",
        "max_buffered", "_state", "_buf", "_pos", "_end", "_buf_ts", "_marks", "_last",
        "_skip_end", "_skip_start", "_skip_size", "_skip_header", "_skip_why", "_skip_seen", "_skip_first_ts",
        "_big", "_big_have", "_big_size", "_big_pos", "_big_first_ts", "_joined", "_piece_start",
    )

    def __init__(
        self,
        direction: int,
        plausible: Plausible,
        aligned: bool,
        min_size: int,
        on_frame: Callable[[Frame], None],
        confirm: Confirm | None = None,
        sure: Sure | None = None,
    ) -> None:
        self.direction = direction
        self.plausible = plausible
        self.confirm = confirm  # None: a plausible candidate is accepted at once
        self.sure = sure
        self.min_size = min_size  # smallest believable frame when hunting
        self.stats = FramingStats()
        self.on_frame = on_frame
        # called (no arguments) whenever the reader loses step with the stream
        self.on_hunt: Callable[[], None] | None = None
        self.max_buffered = MAX_BUFFERED_FRAME
        self._state = _SYNC if aligned else _HUNT
        self._joined = not aligned  # hunting for the first boundary of a stream joined mid-way
        self._buf = bytearray()  # captured, contiguous bytes starting at stream offset _pos
        self._pos = 0
        self._end = 0  # stream offset just past everything heard so far
        self._buf_ts = 0  # time of the piece that carried _buf's first byte
        # while hunting: (stream offset where a piece ended, its stamp), for
        # the times of frames cut from held bytes and for packet ends
        self._marks: list[tuple[int, Stamp]] | None = None if aligned else []
        self._piece_start = -1  # stream offset where the first held piece began (-1: mid-piece)
        self._last: Stamp | None = None  # the piece heard last (for finish)
        # the incomplete frame being skipped while in _SKIP
        self._skip_end = 0
        self._skip_start = 0
        self._skip_size = 0
        self._skip_header = b""
        self._skip_why = ""
        self._skip_seen = 0  # seen bytes of it so far
        self._skip_first_ts = 0
        # a large frame being collected as a list of pieces (joined once at
        # the end: one copy instead of append + slice)
        self._big: list[bytes] | None = None
        self._big_have = 0  # body bytes collected
        self._big_size = 0  # the frame's size field
        self._big_pos = 0  # stream offset of its size field
        self._big_first_ts = 0

    @property
    def started(self) -> bool:
        """Whether any bytes have been heard yet."""
        return self._last is not None

    def set_aligned(self, aligned: bool) -> None:
        """Before the first bytes: does the stream start at a frame boundary?"""
        self._state = _SYNC if aligned else _HUNT
        self._joined = not aligned
        self._marks = None if aligned else []

    @property
    def in_step(self) -> bool:
        return self._state != _HUNT

    @property
    def pending_bytes(self) -> int:
        """Captured bytes held back waiting for the rest of a frame."""
        return len(self._buf) + (self._big_have + 4 if self._big is not None else 0)

    # -- the DirectionSink ---------------------------------------------------

    def data(self, offset: int, payload: bytes, stamp: Stamp) -> None:
        """Captured bytes at stream `offset` (the next one), seen in `stamp`'s packet."""
        length = len(payload)
        self._last = stamp
        stats = self.stats
        stats.seen_bytes += length
        if offset != self._end:
            if not self._align(offset, length, stamp):
                return
            cut = self._end - offset
            if cut > 0:
                payload = payload[cut:]
                length -= cut
        if self._state == _SYNC and self._big is None and not self._buf and length >= 4:
            size = _unpack_int32(payload, 0)[0]
            if size + 4 == length:
                # a piece holding exactly one whole frame (most packets)
                pos = self._pos
                self._pos = self._end = offset + length
                stats.frames += 1
                stats.framed_bytes += length
                ts = stamp.ts
                self.on_frame(Frame(self.direction, pos, size, payload[4:], True, ts, stamp.capture_index,
                                    stamp.frame_number, None, ts))
                return
        self._end += length
        if self._big is not None:
            self._grow_big(payload, stamp)
        elif self._state == _SYNC:
            self._cut(payload, stamp)
        elif self._state == _SKIP:
            self._skip_data(payload, stamp)
        else:
            self._hunt_data(payload, stamp)

    def gap(self, offset: int, length: int, stamp: Stamp) -> None:
        """`length` bytes at `offset` were never captured."""
        self._last = stamp
        if offset != self._end and not self._align(offset, length, stamp):
            return
        self._hole(length, "gap", stamp)

    def truncated(self, offset: int, length: int, prefix: bytes, stamp: Stamp) -> None:
        """`length` bytes on the wire at `offset`, of which `prefix` was captured."""
        if prefix:
            self.data(offset, prefix, stamp)
        self._last = stamp
        if length > len(prefix):
            self.stats.seen_bytes += length - len(prefix)
            self._hole(length - len(prefix), "snaplen", stamp)

    def finish(self) -> None:
        """End of stream: what is held is an incomplete frame or unframed bytes."""
        last = self._last if self._last is not None else _NO_STAMP
        if self._big is not None:
            self._unbig()
        if self._state == _HUNT and self._buf:
            self._hunt(last, final=True)
            if self._big is not None:
                self._unbig()
        if self._state == _SYNC and len(self._buf) >= 4:
            size = _unpack_int32(self._buf, 0)[0]
            self._begin_skip(self._pos, size, bytes(self._buf[4 : 4 + size]), "end", len(self._buf),
                             self._buf_ts)
            self._buf = bytearray()
        if self._state == _SKIP:
            # the frame's end was never seen: report what we have of it
            self._emit_incomplete(last)
            self._state = _SYNC
        self._drop(len(self._buf))
        self._buf = bytearray()
        self._marks = []

    def _align(self, offset: int, length: int, stamp: Stamp) -> bool:
        """Bytes that do not start where the last ones ended (a caller that
        skipped or repeated bytes): a skip is a gap; a repeat is trimmed.
        False when nothing of the piece is new."""
        if offset > self._end:
            self._hole(offset - self._end, "gap", stamp)
            return True
        return offset + length > self._end

    def _drop(self, n: int) -> None:
        """n seen bytes go unframed: skipped while resynchronising, or before
        the first boundary of a stream joined mid-way."""
        if n <= 0:
            return
        if self._joined:
            self.stats.mid_stream_bytes += n
        else:
            self.stats.skipped_bytes += n

    # -- in step -------------------------------------------------------------

    def _cut(self, data: bytes | bytearray, stamp: Stamp) -> None:
        """In step: cut complete frames; keep the unfinished tail in _buf."""
        buf = self._buf
        carried = len(buf)
        if carried:
            buf += data
            data = buf
        n = len(data)
        i = 0
        stats = self.stats
        direction = self.direction
        on_frame = self.on_frame
        ts = stamp.ts
        ci, fn = stamp.capture_index, stamp.frame_number
        view = None  # copies below go through a memoryview: one copy, not two
        while n - i >= 4:
            size = _unpack_int32(data, i)[0]
            first_ts = self._buf_ts if i < carried else ts
            if size < 0 or size > MAX_FRAME_SIZE:
                # not a frame boundary after all: look for the next one
                if view is not None:
                    view.release()
                rest = bytearray(data[i:])
                self._buf = bytearray()
                self._pos += i
                self._lose_step()
                self._marks = [(self._end, stamp)]
                self._piece_start = -1
                self._buf = rest
                self._buf_ts = first_ts
                self._hunt(stamp, final=False)
                return
            end = i + 4 + size
            if end > n:
                if size > self.max_buffered:
                    # too big to hold: keep its start, skip the rest
                    if view is not None:
                        view.release()
                    self._begin_skip(self._pos + i, size, bytes(data[i + 4 : i + 4 + HEADER_KEEP]), "oversized",
                                     n - i, first_ts)
                    self._buf = bytearray()
                    return
                if size >= _BIG_FRAME:
                    # collect the rest piece by piece (see _grow_big)
                    body = view[i + 4 : n].tobytes() if view is not None else bytes(data[i + 4 : n])
                    if view is not None:
                        view.release()
                    self._big = [body]
                    self._big_have = len(body)
                    self._big_size = size
                    self._big_pos = self._pos + i
                    self._big_first_ts = first_ts
                    self._pos += i
                    self._buf = bytearray()
                    return
                break
            if view is None:
                view = memoryview(data)
            stats.frames += 1
            stats.framed_bytes += 4 + size
            on_frame(Frame(direction, self._pos + i, size, view[i + 4 : end].tobytes(), True, ts, ci, fn, None,
                           first_ts))
            i = end
        if view is not None:
            view.release()
        if i >= carried:
            self._buf_ts = ts  # the tail starts inside this piece
        if data is buf:
            if i:
                del buf[:i]
        elif i < n:
            self._buf = bytearray(memoryview(data)[i:]) if i else bytearray(data)
        else:
            self._buf = bytearray()
        self._pos += i

    def _grow_big(self, data: bytes, stamp: Stamp) -> None:
        """The next piece of a large frame in progress."""
        parts = self._big
        assert parts is not None
        need = self._big_size - self._big_have
        if len(data) < need:
            parts.append(data)
            self._big_have += len(data)
            return
        parts.append(data if len(data) == need else data[:need])
        size = self._big_size
        self._big = None
        self._big_have = 0
        stats = self.stats
        stats.frames += 1
        stats.framed_bytes += 4 + size
        self._pos = self._big_pos + 4 + size
        self.on_frame(Frame(self.direction, self._big_pos, size, b"".join(parts), True, stamp.ts,
                            stamp.capture_index, stamp.frame_number, None, self._big_first_ts))
        if len(data) > need:
            self._cut(data[need:], stamp)

    def _unbig(self) -> None:
        """Back to a plain buffer holding the frame's start (before a hole or the end)."""
        parts = self._big
        assert parts is not None
        self._buf = bytearray(_INT32.pack(self._big_size)) + b"".join(parts)
        self._buf_ts = self._big_first_ts
        self._big = None
        self._big_have = 0

    # -- incomplete frames ---------------------------------------------------

    def _skip_data(self, data: bytes, stamp: Stamp) -> None:
        room = self._skip_end - (self._end - len(data))
        if room > len(data):
            self._skip_seen += len(data)
            return
        # this piece reaches the end of the frame being skipped
        self._skip_seen += room
        self._emit_incomplete(stamp)
        self._state = _SYNC
        self._pos = self._skip_end
        rest = data[room:]
        if rest:
            self._buf_ts = stamp.ts
            self._cut(rest, stamp)

    def _hole(self, length: int, why: str, stamp: Stamp) -> None:
        if length <= 0:
            return
        if self._big is not None:
            self._unbig()
        if self._state == _HUNT and self._buf:
            # no more contiguous bytes will come: decide with what is held
            self._hunt(stamp, final=True)
            if self._big is not None:
                self._unbig()
        stats = self.stats
        if why == "gap":
            stats.gap_bytes += length
        else:
            stats.snaplen_bytes += length
        hole_start = self._end
        self._end += length
        seen = 0 if why == "gap" else length  # snaplen-cut bytes were on the wire
        if self._state == _SYNC and len(self._buf) >= 4:
            # the size is known: skip to the frame's end
            size = _unpack_int32(self._buf, 0)[0]
            self._begin_skip(self._pos, size, bytes(self._buf[4 : 4 + size]), why, len(self._buf), self._buf_ts)
            self._buf = bytearray()
        if self._state == _SKIP:
            if self._skip_why != why and self._skip_why == "snaplen":
                self._skip_why = why  # a gap is the worse loss; report it
            if seen:
                self._skip_seen += max(0, min(self._skip_end, self._end) - hole_start)
            if self._end < self._skip_end:
                return
            self._emit_incomplete(stamp)
            self._state = _SYNC
            self._pos = self._skip_end
            self._buf = bytearray()
            if seen:
                self._drop(self._end - max(self._skip_end, hole_start))
            if self._end == self._skip_end:
                return  # the hole ended exactly at the frame's end: still in step
        elif seen:
            self._drop(seen)  # snaplen-cut bytes where no frame is known
        # the hole covers where a size field should be: we lost step
        if self._buf:
            self._drop(len(self._buf))
            self._buf = bytearray()
        if self._state != _HUNT:
            self._lose_step()
        self._marks = []
        self._pos = self._end

    def _begin_skip(self, start: int, size: int, header: bytes, why: str, seen: int, first_ts: int) -> None:
        self._state = _SKIP
        self._skip_start = start
        self._skip_size = size
        self._skip_end = start + 4 + size
        self._skip_header = header
        self._skip_why = why
        self._skip_seen = seen
        self._skip_first_ts = first_ts

    def _emit_incomplete(self, stamp: Stamp) -> None:
        stats = self.stats
        stats.incomplete_frames += 1
        stats.incomplete_frame_bytes += self._skip_seen
        self.on_frame(Frame(self.direction, self._skip_start, self._skip_size, self._skip_header, False,
                            stamp.ts, stamp.capture_index, stamp.frame_number, self._skip_why,
                            self._skip_first_ts))
        self._skip_header = b""
        self._skip_seen = 0

    def _lose_step(self) -> None:
        self._state = _HUNT
        if self.on_hunt is not None:
            self.on_hunt()

    # -- hunting for a frame boundary ----------------------------------------

    def _hunt_data(self, data: bytes, stamp: Stamp) -> None:
        if not self._buf:
            self._buf_ts = stamp.ts
            self._piece_start = self._end - len(data)
        self._buf += data
        marks = self._marks
        assert marks is not None  # (a list while hunting)
        marks.append((self._end, stamp))
        self._hunt(stamp, final=False)

    def _hunt(self, stamp: Stamp, final: bool) -> None:
        """Find the first confirmed frame start in _buf.

        `final` means no more contiguous bytes will follow _buf (a hole or the
        end comes next), so decide with the bytes that are there.
        """
        buf = self._buf
        n = len(buf)
        plausible = self.plausible
        confirm = self.confirm
        sure = self.sure
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
            if not min_size <= size <= HUNT_MAX_SIZE:
                continue
            have = n - q - 4
            need = size if size < HUNT_PREFIX else HUNT_PREFIX
            if have < need and not final:
                p = q
                break  # wait for more bytes before judging this position
            if have < 8 and have < size:
                continue
            prefix = bytes(buf[q + 4 : q + 4 + min(have, need)])
            if not plausible(prefix, size):
                continue
            if confirm is None or (sure is not None and sure(prefix, size, self._is_packet_start(self._pos + q))):
                found = q
                break
            if have >= size:
                end = self._pos + q + 4 + size
                if confirm(bytes(buf[q + 4 : q + 4 + size]), self._is_packet_end(end)):
                    found = q
                    break
                continue
            if final or size > HUNT_HOLD:
                continue  # cannot be confirmed
            p = q
            break  # hold it until its end arrives
        if found < 0:
            keep_from = n if final else p
            self._drop(keep_from)
            del buf[:keep_from]
            self._advance(keep_from)
            return
        self._drop(found)
        if self._joined:
            self.stats.mid_stream_starts += 1
            self._joined = False
        else:
            self.stats.resyncs += 1
        del buf[:found]
        self._advance(found)
        self._state = _SYNC
        self._cut_held(stamp)

    def _advance(self, n: int) -> None:
        """_buf lost its first n bytes: move _pos, forget marks before it and
        take the first byte's time from the piece that now holds it."""
        self._pos += n
        marks = self._marks
        assert marks is not None
        gone = 0
        while gone < len(marks) and marks[gone][0] <= self._pos:
            gone += 1
        if gone:
            del marks[:gone]
        if marks:
            self._buf_ts = marks[0][1].ts

    def _is_packet_end(self, offset: int) -> bool:
        marks = self._marks
        assert marks is not None
        return any(end == offset for end, _ in marks)

    def _is_packet_start(self, offset: int) -> bool:
        marks = self._marks
        assert marks is not None
        return offset == self._piece_start or any(end == offset for end, _ in marks[:-1])

    def _cut_held(self, stamp: Stamp) -> None:
        """In step again: hear the held bytes again, piece by piece as they
        arrived, so each frame is labelled with the piece that completed it."""
        data = bytes(self._buf)
        marks = self._marks
        assert marks is not None
        self._buf = bytearray()
        self._marks = []
        start = self._pos
        end_of_all = self._end
        self._end = start
        self.stats.seen_bytes -= len(data)
        at = 0
        for end, mark in marks:
            piece_end = min(end, end_of_all) - start
            if piece_end > at:
                self.data(start + at, data[at:piece_end], mark)
                at = piece_end
        if at < len(data):
            self.data(start + at, data[at:], stamp)


