"""TLS key logs: the NSS key log format.

One secret per line, `LABEL <client random, 64 hex digits> <secret in hex>`,
as written by OpenSSL/BoringSSL (SSLKEYLOGFILE), Python's
`SSLContext.keylog_filename`, Go's `KeyLogWriter`, Node's `--tls-keylog`,
NSS and the Java key-log agents. Labels used here:

    CLIENT_RANDOM                    TLS 1.2 master secret (48 bytes)
    CLIENT_EARLY_TRAFFIC_SECRET      TLS 1.3 0-RTT
    CLIENT_HANDSHAKE_TRAFFIC_SECRET  TLS 1.3
    SERVER_HANDSHAKE_TRAFFIC_SECRET
    CLIENT_TRAFFIC_SECRET_0
    SERVER_TRAFFIC_SECRET_0

Other labels of the same shape (EXPORTER_SECRET, EARLY_EXPORTER_SECRET, the
`RSA` pre-master lines, ...) are accepted and not used. The older
`RSA Session-ID:<hex> Master-Key:<hex>` lines give TLS 1.2 master secrets by
session id. `#` starts a comment line.

A file with no valid line but other content is not a key log: InputError,
one line naming the file and the first bad line's number, never its text.
Lines that are cut or malformed inside an otherwise valid key log (a client
killed while writing) are skipped and counted in `bad_lines`.

Secrets are kept only inside `KeyLog`; its repr shows counts.
"""

from __future__ import annotations

import os
import re
from typing import Iterable, Mapping

from kdissect.failures import InputError

CLIENT_RANDOM = "CLIENT_RANDOM"
CLIENT_EARLY_TRAFFIC_SECRET = "CLIENT_EARLY_TRAFFIC_SECRET"
CLIENT_HANDSHAKE_TRAFFIC_SECRET = "CLIENT_HANDSHAKE_TRAFFIC_SECRET"
SERVER_HANDSHAKE_TRAFFIC_SECRET = "SERVER_HANDSHAKE_TRAFFIC_SECRET"
CLIENT_TRAFFIC_SECRET_0 = "CLIENT_TRAFFIC_SECRET_0"
SERVER_TRAFFIC_SECRET_0 = "SERVER_TRAFFIC_SECRET_0"

# A pcapng Decryption Secrets Block's secrets type for a TLS key log ("TLSK").
DSB_TLS_KEY_LOG = 0x544C534B

_ENTRY = re.compile(r"([A-Z][A-Z0-9_]*) +([0-9A-Fa-f]{64}) +([0-9A-Fa-f]{2,256})")
_SESSION_ENTRY = re.compile(r"RSA +Session-ID:([0-9A-Fa-f]{2,64}) +Master-Key:([0-9A-Fa-f]{96})")
# secret lengths a label must have to be usable (others of the shape are kept as they come)
_MASTER_LENGTH = 48
_TLS13_LENGTHS = (32, 48)
_TLS13_LABELS = frozenset({CLIENT_EARLY_TRAFFIC_SECRET, CLIENT_HANDSHAKE_TRAFFIC_SECRET,
                           SERVER_HANDSHAKE_TRAFFIC_SECRET, CLIENT_TRAFFIC_SECRET_0, SERVER_TRAFFIC_SECRET_0})


class KeyLog:
    """An immutable set of TLS secrets, looked up by (label, client random)."""

    __slots__ = ("_secrets", "_sessions", "bad_lines", "sources")

    def __init__(self, secrets: Mapping[tuple[str, bytes], bytes] | None = None,
                 sessions: Mapping[bytes, bytes] | None = None, bad_lines: int = 0,
                 sources: tuple[str, ...] = ()) -> None:
        self._secrets: dict[tuple[str, bytes], bytes] = dict(secrets or {})
        self._sessions: dict[bytes, bytes] = dict(sessions or {})
        self.bad_lines = bad_lines  # malformed lines skipped
        self.sources = sources  # where the secrets came from (file names)

    def secret(self, label: str, client_random: bytes) -> bytes | None:
        return self._secrets.get((label, client_random))

    def master_secret(self, client_random: bytes, session_id: bytes = b"") -> bytes | None:
        """The TLS 1.2 master secret: by client random, else by session id."""
        found = self._secrets.get((CLIENT_RANDOM, client_random))
        if found is None and session_id:
            found = self._sessions.get(session_id)
        return found

    def merged(self, *others: KeyLog) -> KeyLog:
        """A key log holding this one's secrets and the others' (the first
        source of a (label, client random) wins)."""
        secrets = dict(self._secrets)
        sessions = dict(self._sessions)
        bad = self.bad_lines
        sources = self.sources
        for other in others:
            for key, value in other._secrets.items():
                secrets.setdefault(key, value)
            for session, value in other._sessions.items():
                sessions.setdefault(session, value)
            bad += other.bad_lines
            sources += other.sources
        return KeyLog(secrets, sessions, bad, sources)

    def __len__(self) -> int:
        return len(self._secrets) + len(self._sessions)

    def client_randoms(self) -> int:
        return len({random for _, random in self._secrets})

    def __repr__(self) -> str:
        return (f"KeyLog({len(self)} secrets for {self.client_randoms()} client randoms"
                f"{f', {self.bad_lines} bad lines' if self.bad_lines else ''})")

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KeyLog):
            return NotImplemented
        return self._secrets == other._secrets and self._sessions == other._sessions

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self):  # picklable (the Spark job ships it to executors)
        return (KeyLog, (self._secrets, self._sessions, self.bad_lines, self.sources))


EMPTY_KEYLOG = KeyLog()


def parse_keylog_text(text: str, source: str = "key log") -> KeyLog:
    """Parse key log text; InputError if it has content but no valid line."""
    secrets: dict[tuple[str, bytes], bytes] = {}
    sessions: dict[bytes, bytes] = {}
    bad = 0
    first_bad = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _ENTRY.fullmatch(line)
        if match is not None:
            label, random_hex, secret_hex = match.groups()
            if len(secret_hex) % 2 == 0 and _usable_length(label, len(secret_hex) // 2):
                secrets.setdefault((label, bytes.fromhex(random_hex)), bytes.fromhex(secret_hex))
                continue
        else:
            session = _SESSION_ENTRY.fullmatch(line)
            if session is not None and len(session.group(1)) % 2 == 0:
                sessions.setdefault(bytes.fromhex(session.group(1)), bytes.fromhex(session.group(2)))
                continue
        bad += 1
        first_bad = first_bad or number
    if bad and not secrets and not sessions:
        raise InputError(f"{_one_line(source)}: not a TLS key log (line {first_bad} is not "
                         "'LABEL <64 hex digits client random> <hex secret>')")
    return KeyLog(secrets, sessions, bad, (source,))


def _usable_length(label: str, length: int) -> bool:
    if label == CLIENT_RANDOM:
        return length == _MASTER_LENGTH
    if label in _TLS13_LABELS:
        return length in _TLS13_LENGTHS
    return True


def _one_line(text: str) -> str:
    return text.replace("\n", " ").replace("\r", " ")


def parse_keylog_bytes(data: bytes, source: str = "key log") -> KeyLog:
    """Parse key log bytes (ASCII text; trailing NUL padding is ignored)."""
    data = data.rstrip(b"\0")
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise InputError(f"{_one_line(source)}: not a TLS key log (not text)") from None
    return parse_keylog_text(text, source)


def parse_decryption_secrets(data: bytes, secrets_type: int = DSB_TLS_KEY_LOG,
                             source: str = "pcapng decryption secrets block") -> KeyLog:
    """The secrets of a pcapng Decryption Secrets Block (block type 0x0000000A):
    `data` is the block's Secrets Data (its padding may be included). A
    secrets type other than TLS key log ("TLSK") gives an empty KeyLog."""
    if secrets_type != DSB_TLS_KEY_LOG:
        return EMPTY_KEYLOG
    return parse_keylog_bytes(data, source)


def read_keylog_file(path: str | os.PathLike) -> KeyLog:
    """Read one key log file; InputError (one line) if unreadable or not a key log."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise InputError(f"{_one_line(name)}: cannot read TLS key log: {exc.strerror or exc}") from None
    return parse_keylog_bytes(data, name)


def read_keylog_files(paths: Iterable[str | os.PathLike]) -> KeyLog:
    """Read and merge several key log files (the repeatable --tls-keylog)."""
    logs = [read_keylog_file(path) for path in paths]
    if not logs:
        return EMPTY_KEYLOG
    return logs[0].merged(*logs[1:])
