"""Bounded decompression for Kafka's record codecs.

`decompress(codec_id, data, limit)` never raises and never produces more than
`limit` bytes: every codec is driven through a streaming decompressor (or a
declared-length check first, for snappy blocks) so a small batch that would
inflate to gigabytes stops at the cap. Codec libraries are optional: a missing
one is reported as a problem for the batches that need it.
"""

from __future__ import annotations

import io
import zlib
from _thread import _local as _thread_local  # (threading.local, without importing threading at start)
from typing import Any

from kdissect.model.packet import SlotRecord
from kdissect.records import unsnappy
from kdissect.records.unsnappy import XERIAL_MAGIC, SnappyStop, inflate_snappy
from kdissect.records.xxh32 import xxh32

# The codec libraries (python-snappy, lz4, zstandard) load on first use: most
# runs never meet a compressed batch and importing them costs several ms at
# every start. Until then each name holds _UNLOADED; after, the module or None
# when it cannot be imported (tests may set them to None too).
_UNLOADED: Any = object()
_snappy: Any = _UNLOADED
_lz4frame: Any = _UNLOADED
_zstd: Any = _UNLOADED


def _load(name: str) -> Any:
    """The codec library held in global `name`, imported if not yet tried."""
    library = globals()[name]
    if library is _UNLOADED:
        try:
            if name == "_snappy":
                import snappy as library  # type: ignore[no-redef]
            elif name == "_lz4frame":
                import lz4.frame as library  # type: ignore[no-redef]
            else:
                import zstandard as library  # type: ignore[no-redef]
        except Exception:  # pragma: no cover - depends on the environment
            library = None
        globals()[name] = library
    return library

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
_LIBRARY_GLOBAL = {SNAPPY: "_snappy", LZ4: "_lz4frame", ZSTD: "_zstd"}


def codec_library(codec_id: int) -> Any:
    """The library of a magic-2 codec id that needs one (snappy, lz4, zstd),
    imported on first use; None when it cannot be imported."""
    return _load(_LIBRARY_GLOBAL[codec_id])

DEFAULT_LIMIT = 64 * 1024 * 1024
_PIECE = 64 * 1024  # compressed input fed per call
_OUTPUT_STEP = 1 << 20  # output asked for per call: keeps transient copies small

LZ4_MAGIC = b"\x04\x22\x4d\x18"  # 0x184D2204 little-endian

_LIBRARY = {GZIP: "zlib", SNAPPY: "python-snappy", LZ4: "lz4", ZSTD: "zstandard"}


def available_codecs() -> dict[str, bool]:
    """Which codec libraries could be imported (for diagnostics)."""
    return {
        "gzip": True,
        "snappy": _load("_snappy") is not None,
        "lz4": _load("_lz4frame") is not None,
        "zstd": _load("_zstd") is not None,
    }


class Inflated(SlotRecord):
    __slots__ = ("data", "problems", "over_limit", "notes")

    def __init__(self, data: bytes, problems: list[str] | None = None, over_limit: bool = False,
                 notes: list[str] | None = None) -> None:
        self.data = data
        self.problems = [] if problems is None else problems
        self.over_limit = over_limit
        self.notes = [] if notes is None else notes  # harmless observations (legacy framing)


def decompress(codec_id: int, data: bytes, limit: int = DEFAULT_LIMIT, *, magic: int = 2) -> Inflated:
    """Decompress `data` with Kafka codec `codec_id`, producing at most `limit` bytes."""
    try:
        if codec_id == GZIP:
            return _gunzip(data, limit)
        if codec_id == SNAPPY:
            return _unsnappy(data, limit)
        if codec_id == LZ4:
            if _load("_lz4frame") is None:
                return Inflated(b"", ["lz4 codec unavailable (lz4 not installed)"])
            return _unlz4(data, limit, magic)
        if codec_id == ZSTD:
            if _load("_zstd") is None:
                return Inflated(b"", ["zstd codec unavailable (zstandard not installed)"])
            return _unzstd(data, limit)
        return Inflated(b"", [f"unknown compression codec {codec_id}"])
    except Exception as problem:  # a codec library choking on hostile bytes
        return Inflated(b"", [f"{_LIBRARY.get(codec_id, 'codec')} failed: {type(problem).__name__}: {problem}"])


def _trim(out: bytearray, limit: int) -> bytes:
    del out[limit:]  # in place: no second copy of a large buffer
    return bytes(out)


def _over(limit: int) -> str:
    return f"decompressed size exceeds the limit of {limit} bytes; stopped there"


def _gunzip(data: bytes, limit: int) -> Inflated:
    # Input goes in pieces so that a corrupt stream still yields what came
    # before the damage (zlib drops a call's output when it raises).
    out = bytearray()
    start = 0
    while start < len(data):
        inflater = zlib.decompressobj(wbits=47)  # gzip or zlib header, auto-detected
        pos = start
        piece = b""
        output_bound = False  # the last call stopped at its output size: call again first
        while not inflater.eof:
            if not piece and not output_bound:
                if pos >= len(data):
                    return Inflated(bytes(out), ["gzip stream ends early"])
                piece = data[pos : pos + _PIECE]
                pos += len(piece)
            step = min(limit - len(out) + 1, _OUTPUT_STEP)
            saved = inflater.copy()
            try:
                chunk = inflater.decompress(piece, step)
            except zlib.error as problem:
                out += _salvage(saved, piece, limit - len(out))
                return Inflated(_trim(out, limit), [f"gzip data corrupt: {problem}"])
            output_bound = len(chunk) == step
            out += chunk
            if len(out) > limit:
                return Inflated(_trim(out, limit), [_over(limit)], over_limit=True)
            piece = inflater.unconsumed_tail
        start = pos - len(inflater.unused_data)  # where this member ended
        if not data.startswith(b"\x1f\x8b", start):  # another gzip member follows?
            rest = data[start:]
            if rest.strip(b"\x00"):
                return Inflated(bytes(out), [f"{len(rest)} bytes of trailing data after the gzip stream"])
            break
    return Inflated(bytes(out))


def _salvage(inflater, piece: bytes, room: int, step: int = 4096) -> bytes:
    """Output of `piece` up to the damage, fed in ever smaller steps to copies of
    the inflater taken before the failing call (forensics: keep what is readable;
    zlib drops all output of a call that raises)."""
    got = bytearray()
    for at in range(0, len(piece), step):
        part = piece[at : at + step]
        saved = inflater.copy()
        try:
            got += inflater.decompress(part, room - len(got) + 1)
        except zlib.error:
            if step > 1:
                got += _salvage(saved, part, room - len(got), max(step // 64, 1))
            break
        if len(got) > room:
            break
    return bytes(got)


def _unsnappy(data: bytes, limit: int) -> Inflated:
    library = _load("_snappy")
    if library is None:
        return Inflated(b"", ["snappy codec unavailable (python-snappy not installed)"])
    try:
        return Inflated(inflate_snappy(library, data, limit))
    except SnappyStop as stop:
        return Inflated(stop.inflated, [_snappy_problem(stop)], over_limit=stop.reason == unsnappy.OVER_LIMIT)


def _snappy_problem(stop: SnappyStop) -> str:
    """The text of where records.unsnappy stopped."""
    if stop.reason == unsnappy.HEADER_CUT:
        return "xerial snappy header truncated"
    if stop.reason == unsnappy.CHUNK_HEADER_CUT:
        return "xerial snappy chunk header truncated"
    if stop.reason == unsnappy.CHUNK_OVERRUN:
        return f"xerial snappy chunk of {stop.value} bytes runs past the data"
    if stop.reason == unsnappy.PREAMBLE_UNREADABLE:
        return "snappy block length preamble unreadable"
    if stop.reason == unsnappy.OVER_LIMIT:
        return f"snappy block declares {stop.value} bytes, over the limit; " + _over(stop.room)
    return f"snappy data corrupt: {stop.cause}"


def _lz4_header_length(frame: bytes, pos: int) -> int | None:
    """Length of the frame descriptor (FLG .. before HC), or None if unreadable."""
    if pos + 6 > len(frame):
        return None
    flags = frame[pos + 4]
    return 2 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0)


def repair_lz4_header(data: bytes) -> tuple[bytes, list[str]]:
    """Give every LZ4 frame in `data` a correct header checksum.

    Kafka before KIP-57 (message format magic 0) computed the checksum over the
    magic number and descriptor instead of the descriptor alone. Such frames are
    fixed here; the notes say what was found. Only the first frame is handled:
    Kafka writes one frame per message set.
    """
    notes: list[str] = []
    if not data.startswith(LZ4_MAGIC):
        return data, notes
    desc_len = _lz4_header_length(data, 0)
    if desc_len is None or 4 + desc_len >= len(data):
        return data, notes
    checksum_at = 4 + desc_len
    stored = data[checksum_at]
    correct = (xxh32(data[4:checksum_at]) >> 8) & 0xFF
    if stored == correct:
        return data, notes
    legacy = (xxh32(data[0:checksum_at]) >> 8) & 0xFF
    if stored == legacy:
        notes.append("lz4 frame uses Kafka's pre-KIP-57 header checksum")
    else:
        notes.append("lz4 frame header checksum mismatch (decoded anyway)")
    return data[:checksum_at] + bytes([correct]) + data[checksum_at + 1 :], notes


def _unlz4(data: bytes, limit: int, magic: int) -> Inflated:
    data, notes = repair_lz4_header(data)
    # The old checksum is expected from magic 0/1 writers (a note); a checksum
    # matching neither rule, or the old one in a magic-2 batch, is a problem.
    problems = [n for n in notes if "mismatch" in n or (magic >= 2 and "KIP-57" in n)]
    quiet = [n for n in notes if n not in problems]
    out = bytearray()
    start = 0
    while start < len(data):
        inflater = _lz4frame.LZ4FrameDecompressor()
        pos = start
        piece = b""
        while not inflater.eof:
            if inflater.needs_input:
                if pos >= len(data):
                    return Inflated(bytes(out), problems + ["lz4 frame ends early"], notes=quiet)
                piece = data[pos : pos + _PIECE]
                pos += len(piece)
            try:
                chunk = inflater.decompress(piece, max_length=min(limit - len(out) + 1, _OUTPUT_STEP))
            except RuntimeError as problem:
                return Inflated(bytes(out), problems + [f"lz4 data corrupt: {problem}"], notes=quiet)
            if not chunk and not piece and not inflater.needs_input and not inflater.eof:
                return Inflated(bytes(out), problems + ["lz4 decompressor made no progress"], notes=quiet)
            piece = b""  # the decompressor keeps any input it did not use yet
            out += chunk
            if len(out) > limit:
                return Inflated(_trim(out, limit), problems + [_over(limit)], True, quiet)
        start = pos - len(inflater.unused_data or b"")
        if not data.startswith(LZ4_MAGIC, start):
            if start < len(data):
                problems.append(f"{len(data) - start} bytes of trailing data after the lz4 frame")
            break
    return Inflated(bytes(out), problems, notes=quiet)


# One ZstdDecompressor per thread, reused: making one (its decompression
# context) costs about as much as inflating a batch of a few kB; each
# stream_reader starts a fresh session on it (a damaged frame before leaves
# nothing behind), and a decompressor serves one operation at a time.
_zstd_decompressors = _thread_local()


def _zstd_decompressor() -> Any:
    """This thread's decompressor of the zstandard module loaded (a test may swap the module)."""
    held = getattr(_zstd_decompressors, "held", None)
    if held is None or held[0] is not _zstd:
        held = _zstd_decompressors.held = (_zstd, _zstd.ZstdDecompressor())
    return held[1]


def _unzstd(data: bytes, limit: int) -> Inflated:
    # Kafka's zstd frames may omit the content size, so one-shot decompression
    # is not possible; read through a stream reader with an explicit budget.
    reader = _zstd_decompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
    out = bytearray()
    try:
        while len(out) <= limit:
            chunk = reader.read(min(1 << 20, limit - len(out) + 1))
            if not chunk:
                break
            out += chunk
    except _zstd.ZstdError as problem:
        return Inflated(bytes(out), [f"zstd data corrupt: {problem}"])
    if len(out) > limit:
        return Inflated(_trim(out, limit), [_over(limit)], over_limit=True)
    return Inflated(bytes(out))


def zstd_content_size(header: bytes) -> int | None:
    """The content size a zstd frame header declares (the frame's first 18
    bytes hold all of it), or None: not stored, damaged, no zstd library."""
    if _load("_zstd") is None:
        return None
    try:
        size: int = _zstd.frame_content_size(header)
    except Exception:
        return None
    return size if size >= 0 else None
