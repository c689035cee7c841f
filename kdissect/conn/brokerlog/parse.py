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
Only two small pieces of each line are decoded: the `requestHeader` object and
the tail from `"connection"` on. The bodies are never decoded nor kept, so what
they hold (SASL tokens, SCRAM proofs, record data) cannot reach an output, and
a line costs the same whatever the size of its bodies.

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

import os
import re
from typing import Iterator, Sequence

from kdissect.model.exchange import endpoint
from kdissect.failures import InputError

MARKER = "Completed request:"
_HEADER = '"requestHeader":'
_CONNECTION = '"connection":'
_TIME = re.compile(r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[,.](\d{1,9}))?\s*(Z|[+-]\d\d:?\d\d)?")
# local:port-remote:port-processor[-index]; hosts may be IPv6 (colons, no dashes)
_CONNECTION_ID = re.compile(r"^(.+?):(\d+)-(.+?):(\d+)-(.+)$")
# The usual shapes, read by one match each (anything else goes to the json module)
_STRING = r'"([^"\\]*(?:\\.[^"\\]*)*)"'
_NUMBER = r"(-?[0-9.]+(?:[eE][-+]?[0-9]+)?)"
_FAST_HEADER = re.compile(r'"requestHeader":\{"requestApiKey":(\d+),"requestApiVersion":(\d+),"correlationId":(-?\d+),'
                          r'"clientId":(?:null|' + _STRING + ")[,}]")
_FAST_TAIL = re.compile(r'"connection":"([^"\\]*)","totalTimeMs":' + _NUMBER + r',"requestQueueTimeMs":' + _NUMBER
                        + r',"localTimeMs":' + _NUMBER + r',"remoteTimeMs":' + _NUMBER + r',"throttleTimeMs":' + _NUMBER
                        + r',"responseQueueTimeMs":' + _NUMBER + r',"sendTimeMs":' + _NUMBER
                        + r',(?:"temporaryMemoryBytes":\d+,)?(?:"messageConversionsTime":' + _NUMBER + r',)?'
                        + r'"securityProtocol":"([^"\\]*)","principal":' + _STRING + r',"listener":"([^"\\]*)"'
                        + r',"clientInformation":\{"softwareName":' + _STRING + r',"softwareVersion":' + _STRING + r"\}")


class LogEntry:
    """One completed request as the broker logged it (header, timing, identity)."""

    __slots__ = ("ts", "client", "broker", "connection", "api_key", "api_version", "correlation_id", "client_id",
                 "total_ms", "request_queue_ms", "local_ms", "remote_ms", "throttle_ms", "response_queue_ms",
                 "send_ms", "security_protocol", "principal", "listener", "software", "matched")

    def __init__(self, ts: int, client: str, broker: str, connection: str, api_key: int, api_version: int,
                 correlation_id: int, client_id: str | None, times: tuple, security_protocol: str | None,
                 principal: str | None, listener: str | None, software: str | None) -> None:
        self.ts = ts  # ns since the epoch, the log line's time (the request's completion)
        self.client = client  # ip:port of the client, as kdissect writes endpoints
        self.broker = broker
        self.connection = connection  # the broker's connection id
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        (self.total_ms, self.request_queue_ms, self.local_ms, self.remote_ms, self.throttle_ms,
         self.response_queue_ms, self.send_ms) = times
        self.security_protocol = security_protocol
        self.principal = principal
        self.listener = listener
        self.software = software  # clientInformation: "name/version"
        self.matched = False

    def __repr__(self) -> str:
        return "LogEntry(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__) + ")"


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
_connection_cache: dict[str, tuple[str, str] | None] = {}


def line_time(text: str) -> int | None:
    """The first timestamp in `text` as ns since the epoch (UTC unless a zone is given)."""
    match = _TIME.search(text)
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    key = match.group(0)[:19]
    seconds = _seconds_cache.get(key)
    if seconds is None:
        import calendar

        try:
            seconds = calendar.timegm((int(year), int(month), int(day), int(hour), int(minute), int(second)))
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


def _unescaped(text: str | None) -> str | None:
    if text is None or "\\" not in text:
        return text
    import json

    return json.loads('"' + text + '"')


def _fast_entry(line: str, start: int, ts: int) -> LogEntry | None:
    """The usual layout of a line (the header first, the tail's fields in
    Kafka's order) read with two regular expressions; None if it is not that."""
    header = _FAST_HEADER.search(line, start)
    if header is None:
        return None
    tail_at = line.rfind(_CONNECTION, header.end())
    if tail_at < 0:
        return None
    tail = _FAST_TAIL.match(line, tail_at)
    if tail is None:
        return None
    ends = _endpoints(tail.group(1))
    if ends is None:
        return None
    g = tail.groups()
    times = (float(g[1]), float(g[2]), float(g[3]), float(g[4]), float(g[5]), float(g[6]), float(g[7]))
    name, version = _unescaped(g[12]), _unescaped(g[13])
    software = f"{name}/{version}" if name or version else None
    return LogEntry(ts, ends[0], ends[1], g[0], int(header.group(1)), int(header.group(2)), int(header.group(3)),
                    _unescaped(header.group(4)), times, g[9], _unescaped(g[10]), g[11], software)


def _fast_time(line: str, at: int) -> int | None:
    """The time of a line starting "[yyyy-MM-dd HH:mm:ss,SSS]" (log4j's default), else None."""
    if at < 25 or line[0] != "[" or line[24] != "]" or line[20] != ",":
        return None
    seconds = _seconds_cache.get(line[1:20])
    millis = line[21:24]
    if seconds is None or not millis.isdigit():
        return None
    return seconds * 1_000_000_000 + int(millis) * 1_000_000


def parse_line(line: str) -> LogEntry | None | bool:
    """The entry of a request-log line; False for a line that is not one
    (no marker); None for a line with the marker that cannot be read."""
    at = line.find(MARKER)
    if at < 0:
        return False
    ts = _fast_time(line, at)
    if ts is None:
        ts = line_time(line[:at])
        if ts is None:
            return None
    start = at + len(MARKER)
    entry = _fast_entry(line, start, ts)
    if entry is not None:
        return entry
    header_at = line.find(_HEADER, start)
    tail_at = line.rfind(_CONNECTION, start)
    end = line.rfind("}")
    if header_at < 0 or tail_at < header_at or end < tail_at:
        return None
    try:
        import json  # (the usual lines never get here: see _FAST_START)

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
    ids = _CONNECTION_ID.match(connection)
    if ids is None:
        return None
    broker = endpoint(_host(ids.group(1)), int(ids.group(2)))
    client = endpoint(_host(ids.group(3)), int(ids.group(4)))
    times = tuple(_number(tail.get(name)) for name in (
        "totalTimeMs", "requestQueueTimeMs", "localTimeMs", "remoteTimeMs", "throttleTimeMs",
        "responseQueueTimeMs", "sendTimeMs"))
    information = tail.get("clientInformation")
    software = None
    if isinstance(information, dict):
        name, version = _text(information.get("softwareName")), _text(information.get("softwareVersion"))
        software = f"{name}/{version}" if name or version else None
    return LogEntry(ts, client, broker, connection, api_key, api_version, correlation_id,
                    _text(header.get("clientId")), times, _text(tail.get("securityProtocol")),
                    _text(tail.get("principal")), _text(tail.get("listener")), software)


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
    import glob

    found: list[str] = []
    for item in inputs:
        if os.path.isfile(item):
            found.append(item)
            continue
        if os.path.isdir(item):
            candidates = sorted(os.path.join(r, n) for r, _, names in os.walk(item) for n in names if ".log" in n)
        elif any(char in item for char in "*?["):
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


# log4j's default layout "[yyyy-MM-dd HH:mm:ss,SSS] LEVEL " and the header in
# Kafka's order, in one match from the line's start (the per-line fast path)
_FAST_START = re.compile(r'\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\] [A-Z]+ Completed request:\{'
                         r'(?:"isForwarded":(?:true|false),)?"requestHeader":\{"requestApiKey":(\d+),'
                         r'"requestApiVersion":(\d+),"correlationId":(-?\d+),"clientId":(?:null|' + _STRING + ")[,}]")


def _seconds(text: str) -> int:
    seconds = _seconds_cache.get(text)
    if seconds is None:
        import calendar

        seconds = calendar.timegm((int(text[:4]), int(text[5:7]), int(text[8:10]), int(text[11:13]),
                                   int(text[14:16]), int(text[17:19])))
        if len(_seconds_cache) < 100_000:
            _seconds_cache[text] = seconds
    return seconds


def read_entries(paths: Sequence[str], stats: LogReadStats | None = None) -> Iterator[LogEntry]:
    """Stream the entries of the log files (see `ordered_files`), counting
    every line in `stats` (complete once a file is done or the stream is
    closed). A damaged gzip file yields what came before the damage (the rest
    counts as one cut line)."""
    stats = stats if stats is not None else LogReadStats()
    start_match = _FAST_START.match
    tail_match = _FAST_TAIL.match
    connections = _connection_cache
    for path in ordered_files(paths):
        stats.files += 1
        try:
            handle = _open_text(path)
        except OSError as problem:
            raise InputError(f"cannot read {path}: {problem.strerror or problem}") from None
        lines = size = requests = others = bad = cut = 0
        try:
            with handle:
                try:
                    for line in handle:
                        lines += 1
                        size += len(line)
                        head = start_match(line)
                        if head is not None:
                            tail_at = line.rfind(_CONNECTION)
                            tail = tail_match(line, tail_at) if tail_at > head.end() else None
                            if tail is not None:
                                g = tail.groups()
                                ends = connections.get(g[0]) or _endpoints(g[0])
                                if ends is not None:
                                    h = head.groups()
                                    requests += 1
                                    name, version = g[12], g[13]
                                    client_id = h[5]
                                    if client_id is not None and "\\" in client_id:
                                        client_id = _unescaped(client_id)
                                    principal = g[10] if "\\" not in g[10] else _unescaped(g[10])
                                    yield LogEntry(
                                        _seconds(h[0]) * 1_000_000_000 + int(h[1]) * 1_000_000, ends[0], ends[1],
                                        g[0], int(h[2]), int(h[3]), int(h[4]), client_id,
                                        (float(g[1]), float(g[2]), float(g[3]), float(g[4]), float(g[5]),
                                         float(g[6]), float(g[7])), g[9], principal, g[11],
                                        None if name is None else f"{_unescaped(name)}/{_unescaped(version)}")
                                    continue
                        entry = parse_line(line)
                        if entry is False:
                            others += 1
                        elif entry is None:
                            bad += 1
                            if not line.endswith("\n"):
                                cut += 1
                        else:
                            requests += 1
                            yield entry  # type: ignore[misc]
                except (OSError, EOFError, _zlib_error()):  # gzip.BadGzipFile is an OSError
                    lines += 1
                    bad += 1
                    cut += 1
        finally:
            stats.lines += lines
            stats.bytes += size
            stats.request_lines += requests
            stats.other_lines += others
            stats.bad_lines += bad
            stats.cut_lines += cut
