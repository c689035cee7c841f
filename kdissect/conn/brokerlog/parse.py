"""Reading Apache Kafka's request log: one `LogEntry` per "Completed request:" line.

The broker writes, per completed request, with `kafka.request.logger` at DEBUG
(Kafka 2.8 and later, KIP-673):

    [2026-11-26 06:45:25,722] DEBUG Completed request:{"isForwarded":false,
    "requestHeader":{"requestApiKey":22,"requestApiVersion":4,"correlationId":2,
    "clientId":"try","requestApiKeyName":"INIT_PRODUCER_ID"},"request":{...},
    "response":{...},"connection":"127.0.0.1:39947-127.0.0.1:49730-2-0",
    "totalTimeMs":7.671,"requestQueueTimeMs":0.764,...,"securityProtocol":"PLAINTEXT",
    "principal":"User:ANONYMOUS","listener":"PLAINTEXT","clientInformation":{...}}
    (kafka.request.logger)

(the `request`/`response` bodies are there at TRACE, and in 4.x at DEBUG too).
The line's JSON goes to msgspec, which fills `LogEntry`'s typed fields (the
header, the times, the identity) and skips every other member: the bodies
are scanned to find their end, never turned into objects nor kept, so what
they hold (SASL tokens, SCRAM proofs, record data) cannot reach an output.
(Measured: 3.2 us a line of 970 bytes, against 6.3 us with two regular
expressions on the header and the tail; 1.8 us read a block of lines at a
time, `read_batches`; see benchmarks/README.md.) A line msgspec refuses (a
damaged body, invalid UTF-8) is read by the general path: the json module on
the `requestHeader` object and on the members from `"connection"` on, alone.

When the native reader is built (`_native_lines`, C: tools/build_native.py,
kdissect/native.py), a block whose every line is the plain case (log4j's
default layout, strictly valid JSON, the fields the join reads without
escapes, IPv4 endpoints) is read by it into `Entry` objects with the same
values; it declines any other block, which the path above reads as before.
Its entries hold no Python objects for the broker times until they are read.

The text forms older than 2.8 are not read (they are counted as bad request
lines). Times: the line's leading timestamp (`yyyy-MM-dd HH:mm:ss,SSS`, `T` or
space, `,` or `.`, optionally followed by `Z` or a `+hh:mm` offset); a time
without a zone is taken as UTC (configure log4j2's `%d{...}{UTC}`); the join
estimates any remaining offset.

Files: a log and its rotated files (`server-request.log`, `.1`, `.2`, dated
suffixes, gzipped or not) are read as one, ordered by the first timestamp in
each file; a file cut mid-line (rotation, truncation, a live log) yields every
complete line, and the cut line is counted.
"""

from __future__ import annotations

import io
import os
import re
from datetime import date
from operator import attrgetter, itemgetter
from typing import IO, TYPE_CHECKING, Any, Iterable, Iterator, Sequence

from kdissect.model.exchange import endpoint
from kdissect.failures import InputError

if TYPE_CHECKING:
    from kdissect.conn.brokerlog.decoder import LogEntry

MARKER = "Completed request:"
_MARKER_BYTES = MARKER.encode()
_HEADER = '"requestHeader":'
_CONNECTION = '"connection":'
_TIME = re.compile(r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[,.](\d{1,9}))?\s*(Z|[+-]\d\d:?\d\d)?")
# local:port-remote:port-processor[-index]; hosts may be IPv6 (colons, no dashes)
_CONNECTION_ID = re.compile(r"^(.+?):(\d+)-(.+?):(\d+)-(.+)$")


# the entries' classes: `LogEntry` (kdissect.conn.brokerlog.decoder, msgspec) once
# a line is decoded by it, and the native reader's `Entry` when it is built;
# the join's chunks check their entries' types against this set
ENTRY_TYPES: set[type] = set()


def _native_reader() -> Any:
    """The native reader (tools/build_native.py), when built for these sources; else None."""
    try:
        from kdissect.conn.brokerlog import _native_lines  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _native_lines


_native_lines: Any = _native_reader()
if _native_lines is not None:
    ENTRY_TYPES.add(_native_lines.Entry)


def _decoder() -> Any:
    """The msgspec path (kdissect.conn.brokerlog.decoder), imported when first
    needed: a run whose lines the native reader takes never imports msgspec
    (10 ms of imports)."""
    from kdissect.conn.brokerlog import decoder

    ENTRY_TYPES.add(decoder.LogEntry)
    return decoder


def __getattr__(name: str) -> Any:
    if name in ("LogEntry", "_Header", "_Software", "_decode_entry", "_REFUSED"):
        return getattr(_decoder(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class LogReadStats:
    """What reading the log files met; lines = request + other + bad."""

    __slots__ = ("files", "lines", "request_lines", "other_lines", "bad_lines", "cut_lines", "bytes")

    def __init__(self) -> None:
        self.files = 0
        self.lines = 0
        self.request_lines = 0  # "Completed request:" lines read into entries
        self.other_lines = 0  # lines of anything else (other loggers, blank lines, stack traces)
        self.bad_lines = 0  # with the marker but not readable (damaged, pre-2.8 text form, no time)
        self.cut_lines = 0  # of bad_lines: the last line of a file that ends mid-line
        self.bytes = 0

    def to_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}


_seconds_cache: dict[str, int] = {}
_host_cache: dict[str, str] = {}


class _ConnectionEnds(dict):
    """connection id -> (client, broker) endpoints or None (`_endpoints`,
    which fills this memo); `[id]` reads an id not seen yet."""

    __slots__ = ()

    def __missing__(self, connection: str) -> tuple[str, str] | None:
        return _endpoints(connection)


_connection_cache: dict[str, tuple[str, str] | None] = _ConnectionEnds()


def _timegm(year: int, month: int, day: int, hour: int, minute: int, second: int) -> int:
    """calendar.timegm's arithmetic (the month checked, the rest counted as
    given), without importing calendar (and with it locale: 3 ms at start)."""
    days = date(year, month, 1).toordinal() - _EPOCH_ORDINAL + day - 1
    return ((days * 24 + hour) * 60 + minute) * 60 + second


_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()


def line_time(text: str) -> int | None:
    """The first timestamp in `text` as ns since the epoch (UTC unless a zone is given)."""
    match = _TIME.search(text)
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    key = match.group(0)[:19]
    seconds = _seconds_cache.get(key)
    if seconds is None:
        try:
            seconds = _timegm(int(year), int(month), int(day), int(hour), int(minute), int(second))
        except (ValueError, OverflowError):
            return None
        if len(_seconds_cache) < 100_000:
            _seconds_cache[key] = seconds
    ns = seconds * 1_000_000_000
    if fraction:
        ns += int(fraction.ljust(9, "0"))
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        ns -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60) * 1_000_000_000
    return ns


def _host(text: str) -> str:
    host = _host_cache.get(text)
    if host is None:
        if text.replace(".", "").isdigit():
            host = text  # IPv4 as Java writes it
        else:
            import ipaddress

            try:
                host = ipaddress.ip_address(text.strip("[]")).compressed
            except ValueError:
                host = text
        if len(_host_cache) < 65536:
            _host_cache[text] = host
    return host


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _endpoints(connection: str) -> tuple[str, str] | None:
    """(client, broker) endpoints of a broker connection id."""
    found = _connection_cache.get(connection, False)
    if found is False:
        ids = _CONNECTION_ID.match(connection)
        found = None if ids is None else (endpoint(_host(ids.group(3)), int(ids.group(4))),
                                          endpoint(_host(ids.group(1)), int(ids.group(2))))
        if len(_connection_cache) < 65536:
            _connection_cache[connection] = found
    return found  # type: ignore[return-value]


def _finished(entry: LogEntry, ts: int) -> LogEntry | None:
    """The entry with the reader's fields set; None if its connection id is not one."""
    connection = entry.connection
    ends = _connection_cache.get(connection) or _endpoints(connection)
    if ends is None:
        return None
    entry.ts = ts
    entry.client, entry.broker = ends
    header = entry.header
    entry.key = (ends[0], header.correlationId, header.requestApiKey)
    entry.matched = False
    return entry


def _json_part(line: str, start: int) -> str | None:
    """The line's JSON: from after the marker to its last "}"."""
    end = line.rfind("}")
    return line[start:end + 1] if end > start else None


def _general_entry(line: str, start: int, ts: int) -> LogEntry | None:
    """A line whose whole JSON does not decode (damaged or odd bodies): the
    `requestHeader` object and the members from `connection` on, each read
    by the json module on its own; the bodies between them are not read."""
    header_at = line.find(_HEADER, start)
    tail_at = line.rfind(_CONNECTION, start)
    end = line.rfind("}")
    if header_at < 0 or tail_at < header_at or end < tail_at:
        return None
    try:
        import json

        header, _ = json.JSONDecoder().raw_decode(line, header_at + len(_HEADER))
        tail = json.loads("{" + line[tail_at:end + 1])
    except ValueError:
        return None
    if not isinstance(header, dict) or not isinstance(tail, dict):
        return None
    api_key, api_version, correlation_id = (header.get("requestApiKey"), header.get("requestApiVersion"),
                                            header.get("correlationId"))
    connection = tail.get("connection")
    if not (isinstance(api_key, int) and isinstance(api_version, int) and isinstance(correlation_id, int)
            and isinstance(connection, str)):
        return None
    decoder = _decoder()
    information = tail.get("clientInformation")
    software = None
    if isinstance(information, dict):
        software = decoder._Software(_text(information.get("softwareName")), _text(information.get("softwareVersion")))
    entry = decoder.LogEntry(
        header=decoder._Header(api_key, api_version, correlation_id, _text(header.get("clientId"))),
        connection=connection,
        total_ms=_number(tail.get("totalTimeMs")), request_queue_ms=_number(tail.get("requestQueueTimeMs")),
        local_ms=_number(tail.get("localTimeMs")), remote_ms=_number(tail.get("remoteTimeMs")),
        throttle_ms=_number(tail.get("throttleTimeMs")), response_queue_ms=_number(tail.get("responseQueueTimeMs")),
        send_ms=_number(tail.get("sendTimeMs")), security_protocol=_text(tail.get("securityProtocol")),
        principal=_text(tail.get("principal")), listener=_text(tail.get("listener")), information=software)
    return _finished(entry, ts)


def _entry_of_text(line: str, start: int, ts: int) -> LogEntry | None:
    part = _json_part(line, start)
    if part is not None:
        decoder = _decoder()
        try:
            return _finished(decoder._decode_entry(part), ts)
        except decoder._REFUSED:
            pass
    return _general_entry(line, start, ts)


def parse_line(line: str) -> LogEntry | None | bool:
    """The entry of a request-log line; False for a line that is not one
    (no marker); None for a line with the marker that cannot be read."""
    at = line.find(MARKER)
    if at < 0:
        return False
    ts = line_time(line[:at])
    if ts is None:
        return None
    return _entry_of_text(line, at + len(MARKER), ts)


def _open_text(path: str):
    with open(path, "rb") as probe:
        magic = probe.read(2)
    if magic == b"\x1f\x8b":
        import gzip

        return gzip.open(path, "rt", encoding="utf-8", errors="replace", newline="\n")
    return open(path, encoding="utf-8", errors="replace", newline="\n")


def _zlib_error() -> type[BaseException]:
    """zlib's error (a damaged gzip member), if gzip was ever used; else OSError."""
    import sys

    return getattr(sys.modules.get("zlib"), "error", OSError)


def _looks_like_text(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096)
    except OSError:
        return False
    if head[:2] == b"\x1f\x8b":
        return True
    return b"\0" not in head


def request_log_files(inputs: Sequence[str]) -> list[str]:
    """The files named, found under directories (recursively) or matched by
    globs. Under a directory only files with ".log" in their name are taken
    (server-request.log, request.log.1, request.log.2026-11-26-06.gz); files
    met in directories or globs that are not text (captures, binaries) are
    left out. A file named explicitly must exist."""
    found: list[str] = []
    for item in inputs:
        if os.path.isfile(item):
            found.append(item)
            continue
        if os.path.isdir(item):
            candidates = sorted(os.path.join(r, n) for r, _, names in os.walk(item) for n in names if ".log" in n)
        elif any(char in item for char in "*?["):
            import glob

            candidates = sorted(glob.glob(item, recursive=True))
            if not candidates:
                raise InputError(f"--broker-log {item}: no file matches")
        else:
            raise InputError(f"--broker-log {item}: no such file or directory")
        found.extend(c for c in candidates if os.path.isfile(c) and _looks_like_text(c))
    unique = list(dict.fromkeys(os.path.abspath(p) for p in found))
    if not unique:
        raise InputError(f"--broker-log: no log files found in {', '.join(inputs)}")
    return unique


def _first_time(path: str, probe_lines: int = 2000) -> int | None:
    """The first request line's time in a file (for ordering rotated files)."""
    try:
        with _open_text(path) as handle:
            for i, line in enumerate(handle):
                if i >= probe_lines:
                    break
                at = line.find(MARKER)
                if at >= 0:
                    ts = line_time(line[:at])
                    if ts is not None:
                        return ts
    except (OSError, EOFError):
        return None
    return None


def ordered_files(paths: Sequence[str]) -> list[str]:
    """Files in the time order of their first request line (rotated files
    read as one log, whatever their suffixes); files without one last."""
    keyed = [(_first_time(p), i, p) for i, p in enumerate(paths)]
    keyed.sort(key=lambda item: (item[0] is None, item[0] or 0, item[1]))
    return [p for _, _, p in keyed]


_seconds_of_bytes: dict[bytes, int] = {}  # b"yyyy-MM-dd HH:mm:ss" -> seconds since the epoch (UTC)
_MILLIS_NS = {b"%03d" % n: n * 1_000_000 for n in range(1000)}  # b"SSS" -> ns


def _fast_time(line: bytes) -> int | None:
    """The time of a line starting "[yyyy-MM-dd HH:mm:ss,SSS]" (log4j's default), else None."""
    if len(line) < 25 or line[0] != 91 or line[24] != 93 or line[20] != 44:  # "[", "]", ","
        return None
    millis = _MILLIS_NS.get(line[21:24])
    if millis is None:
        return None
    stamp = line[1:20]
    seconds = _seconds_of_bytes.get(stamp)
    if seconds is None:
        whole = line_time(stamp.decode("ascii", "replace"))
        if whole is None:
            return None
        seconds = whole // 1_000_000_000
        if len(_seconds_of_bytes) < 100_000:
            _seconds_of_bytes[stamp] = seconds
    return seconds * 1_000_000_000 + millis


def _open_binary(path: str):
    with open(path, "rb") as probe:
        magic = probe.read(2)
    if magic == b"\x1f\x8b":
        import gzip

        return gzip.open(path, "rb")
    return open(path, "rb")


def read_entries(paths: Sequence[str], stats: LogReadStats | None = None) -> Iterator[LogEntry]:
    """Stream the entries of the log files (see `ordered_files`), counting
    every line in `stats` (complete once a file is done or the stream is
    closed). A damaged gzip file yields what came before the damage (the rest
    counts as one cut line). The entries of `read_batches`, one by one."""
    for batch in read_batches(paths, stats):
        yield from batch


_BATCH_ENTRIES = 256  # entries per batch (a few more when lines took the general path)
_BLOCK_BYTES = 1 << 16  # a plain file is read 64 KiB at a time (its complete lines; a block stays in the CPU's cache)


class _Counts:
    """What one file's reading met so far (added to LogReadStats at its end)."""

    __slots__ = ("lines", "size", "requests", "others", "bad", "cut")

    def __init__(self) -> None:
        self.lines = self.size = self.requests = self.others = self.bad = self.cut = 0


def read_batches(paths: Sequence[str], stats: LogReadStats | None = None) -> Iterator[list[LogEntry]]:
    """The entries of the log files in lists (a block's, or at most
    `_BATCH_ENTRIES`; never empty), in order, counted as `read_entries` says. The
    join takes them a list at a time (a list's iterator hands each entry
    over in C, where a generator would be resumed per entry).

    A plain file is read in blocks of complete lines (`_block_batches`):
    a block whose every line has log4j's default layout is read by a few
    calls over all its lines (`_block_entries`); any other block, and a
    gzipped file, line by line (`_line_batches`). Both read the same
    entries from the same lines."""
    stats = stats if stats is not None else LogReadStats()
    for path in ordered_files(paths):
        stats.files += 1
        try:
            handle = _open_binary(path)
        except OSError as problem:
            raise InputError(f"cannot read {path}: {problem.strerror or problem}") from None
        counts = _Counts()
        try:
            with handle:
                if isinstance(handle, io.BufferedReader):
                    yield from _block_batches(handle, counts)
                else:  # gzip: line by line, so that a damaged member loses no line before the damage
                    yield from _line_batches(handle, counts)
        finally:
            stats.lines += counts.lines
            stats.bytes += counts.size
            stats.request_lines += counts.requests
            stats.other_lines += counts.others
            stats.bad_lines += counts.bad
            stats.cut_lines += counts.cut


# log4j's default layout, "[%d] %p %m (%c)%n", of a request line:
#   [yyyy-MM-dd HH:mm:ss,SSS] DEBUG Completed request:{...} (kafka.request.logger)
_LINE_ENDS = frozenset((b"} (kafka.request.logger)\n",))
_end_of = itemgetter(slice(-25, None))  # "} (kafka.request.logger)\n"
_LEVELS = frozenset(b"] %s Completed request:{" % level for level in (b"DEBUG", b"TRACE"))
_level_of = itemgetter(slice(24, 51))  # "] DEBUG Completed request:{"
_stamp_of = itemgetter(slice(0, 24))  # "[yyyy-MM-dd HH:mm:ss,SSS"
_json_of = itemgetter(slice(50, -24))  # from the marker's "{" to the line's last "}"
_connection_of = attrgetter("connection")


class _StampTimes(dict):
    """b"[yyyy-MM-dd HH:mm:ss,SSS" -> ns since the epoch as `_fast_time`
    reads it (None: not a time), remembered (lines share their millisecond);
    emptied at `_STAMPS_KEPT` stamps, so that a long log keeps the stamps of
    its latest lines (they come in time order)."""

    __slots__ = ()

    def __missing__(self, stamp: bytes) -> int | None:
        ts = _fast_time(stamp + b"]")
        if len(self) >= _STAMPS_KEPT:
            self.clear()
        self[stamp] = ts
        return ts


_STAMPS_KEPT = 100_000
_stamp_times = _StampTimes()


def _block_entries(lines: list[bytes]) -> list[LogEntry] | None:
    """The entries of `lines` (a block's complete lines, with their
    newlines), or None when one of them needs the per-line path: a line of
    another layout or without the marker, a time `_fast_time` does not read,
    JSON msgspec refuses, a connection id that is not one.

    Each check is one call over the whole block, and together they mean
    what the per-line path finds on each line: the marker first at byte 32
    (log4j's "[stamp] LEVEL " before it), the line's last "}" just before
    " (kafka.request.logger)" (which has none), so the JSON msgspec gets is
    the same bytes. The reader's own fields are set as there (whatever a
    line held under their names overwritten)."""
    if not (all(map(_LEVELS.__contains__, map(_level_of, lines)))
            and all(map(_LINE_ENDS.__contains__, map(_end_of, lines)))):
        return None
    times = list(map(_stamp_times.__getitem__, map(_stamp_of, lines)))
    if None in times:
        return None
    decoder = _decoder()
    views: Iterator[memoryview] = map(memoryview, lines)  # type: ignore[arg-type]  # (its generic constructor)
    try:  # (views of the lines' bytes: the JSON is not copied out first; 8% of the decoding)
        entries = list(map(decoder._decode_entry, map(_json_of, views)))
    except decoder._REFUSED:
        return None
    ends = list(map(_connection_cache.__getitem__, map(_connection_of, entries)))
    if None in ends:
        return None
    for entry, ts, (client, broker) in zip(entries, times, ends):  # type: ignore[misc]  # (no None: checked)
        entry.ts = ts  # type: ignore[assignment]
        entry.client = client
        entry.broker = broker
        header = entry.header
        entry.key = (client, header.correlationId, header.requestApiKey)
        entry.matched = False
    return entries


def _block_batches(handle: IO[bytes], counts: _Counts) -> Iterator[list[LogEntry]]:
    """A plain file's entries, a block of complete lines at a time (memory:
    a block, plus a line longer than one). Small blocks: the lines split,
    checked and decoded while they are in the CPU's cache (the benchmark's
    20,024 lines in 35 ms at 64 KiB, against 49-51 ms line by line; with
    `bytes.split`, which compares byte by byte where `readlines` uses
    memchr: 40 ms at 64 KiB, 50 ms at 256 KiB, 56 ms at 1 MiB)."""
    native = None if _native_lines is None else _native_lines.block_entries
    rest = b""
    try:
        while True:
            chunk = handle.read(_BLOCK_BYTES)
            if not chunk:
                break
            data = rest + chunk if rest else chunk
            if native is not None:  # the native reader: a block of plain lines (else None, read below)
                cut = data.rfind(b"\n") + 1
                entries = native(data, cut) if cut else None
                if entries is not None:
                    rest = data[cut:]
                    counts.lines += len(entries)
                    counts.size += cut
                    counts.requests += len(entries)
                    yield entries
                    continue
            lines = io.BytesIO(data).readlines()  # (memchr: bytes.split compares byte by byte)
            rest = b"" if lines[-1].endswith(b"\n") else lines.pop()  # the line the block cut
            if not lines:
                continue
            entries = _block_entries(lines)
            if entries is None:
                yield from _line_batches(io.BytesIO(data[:len(data) - len(rest)]), counts)
                continue
            counts.lines += len(lines)
            counts.size += len(data) - len(rest)
            counts.requests += len(entries)
            yield entries  # (about 70 entries of 970 bytes)
    except OSError:  # (what line-by-line reading counts for it: the line being read, cut)
        counts.lines += 1
        counts.bad += 1
        counts.cut += 1
        return
    if rest:  # the last line, without a newline
        yield from _line_batches(io.BytesIO(rest), counts)


def _line_batches(handle: Iterable[bytes], counts: _Counts) -> Iterator[list[LogEntry]]:
    """The entries of `handle`'s lines, one line at a time.

    Per line: the marker is found and the time read from the line's bytes;
    the JSON from the marker to the last "}" goes to msgspec as a view of the
    line's bytes (neither copied nor decoded to text first). A line msgspec
    cannot take (invalid UTF-8, a damaged body, another layout) is decoded to
    text and read by `parse_line`'s general path."""
    marker, skip = _MARKER_BYTES, len(_MARKER_BYTES)
    decoder = _decoder()
    decode = decoder._decode_entry
    connections = _connection_cache
    decode_error = decoder._REFUSED
    seconds_of, millis_of = _seconds_of_bytes, _MILLIS_NS
    lines = size = requests = others = bad = cut = 0
    last_stamp, last_ts = b"", None  # (a line with the marker is longer than b"")
    batch: list[LogEntry] = []
    append = batch.append
    try:
        try:
            for line in handle:
                lines += 1
                size += len(line)
                at = line.find(marker)
                if at < 0:
                    others += 1
                    continue
                # the time: log4j's default "[yyyy-MM-dd HH:mm:ss,SSS]" first (_fast_time, inline),
                # read from the line's first 25 bytes alone: the previous line's when they are
                # the same (most lines of a busy log share their millisecond with the one before)
                ts: int | None
                stamp = line[:25]
                if stamp == last_stamp:
                    ts = last_ts
                else:
                    seconds = seconds_of.get(line[1:20])
                    millis = millis_of.get(line[21:24])
                    if seconds is not None and millis is not None and line[0] == 91 and line[20] == 44 \
                            and line[24] == 93:
                        ts = seconds * 1_000_000_000 + millis
                    else:
                        ts = _fast_time(line)
                    last_stamp, last_ts = stamp, ts
                end = line.rfind(b"}")
                entry = None
                if ts is not None and end > at:
                    try:
                        entry = decode(memoryview(line)[at + skip:end + 1])
                    except decode_error:
                        pass
                    else:
                        connection = entry.connection
                        ends = connections.get(connection) or _endpoints(connection)
                        if ends is not None:
                            entry.ts = ts
                            entry.client, entry.broker = ends
                            header = entry.header
                            entry.key = (ends[0], header.correlationId, header.requestApiKey)
                            entry.matched = False
                            requests += 1
                            append(entry)
                            if len(batch) >= _BATCH_ENTRIES:
                                yield batch
                                batch = []
                                append = batch.append
                            continue
                        entry = None
                if entry is None:
                    found = parse_line(line.decode("utf-8", "replace"))
                    if found is None or found is False:  # (the marker is there: not False)
                        bad += 1
                        if not line.endswith(b"\n"):
                            cut += 1
                    else:
                        requests += 1
                        append(found)  # type: ignore[arg-type]
        except (OSError, EOFError, _zlib_error()):  # gzip.BadGzipFile is an OSError
            lines += 1
            bad += 1
            cut += 1
        if batch:
            yield batch
    finally:
        counts.lines += lines
        counts.size += size
        counts.requests += requests
        counts.others += others
        counts.bad += bad
        counts.cut += cut
