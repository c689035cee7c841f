"""Handshake messages: the few fields decryption needs, the message
reassembler (messages may span records, records may hold several), and
detection of a TLS connection by the shape of its first client bytes."""

from __future__ import annotations

import builtins

from typing import NamedTuple

CLIENT_HELLO = 1
SERVER_HELLO = 2
NEW_SESSION_TICKET = 4
END_OF_EARLY_DATA = 5
FINISHED = 20
KEY_UPDATE = 24
HELLO_REQUEST = 0

EXT_ENCRYPT_THEN_MAC = 22
EXT_PRE_SHARED_KEY = 41
EXT_EARLY_DATA = 42
EXT_SUPPORTED_VERSIONS = 43

# ServerHello.random of a HelloRetryRequest (RFC 8446 section 4.1.3): SHA-256("HelloRetryRequest")
HELLO_RETRY_RANDOM = bytes.fromhex("cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c")

# Handshake messages kept whole to be parsed; others are skipped as they pass.
_PARSED = frozenset({CLIENT_HELLO, SERVER_HELLO, KEY_UPDATE})
_MAX_PARSED = 1 << 16  # a longer hello is skipped (and so not used)


class ClientHello(NamedTuple):
    random: bytes
    session_id: bytes
    extensions: frozenset[int]


class ServerHello(NamedTuple):
    random: bytes
    session_id: bytes
    cipher_suite: int
    version: int  # the negotiated version: supported_versions if present, else legacy_version
    extensions: frozenset[int]

    @property
    def is_hello_retry(self) -> bool:
        return self.random == HELLO_RETRY_RANDOM


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise ValueError("short")
        out = self.data[self.pos:end]
        self.pos = end
        return out

    def int(self, n: int) -> int:
        return int.from_bytes(self.take(n), "big")

    def vector(self, length_bytes: builtins.int) -> bytes:
        return self.take(self.int(length_bytes))


def _extensions(reader: _Reader) -> dict[int, bytes]:
    found: dict[int, bytes] = {}
    if reader.pos == len(reader.data):
        return found  # no extensions block at all
    block = _Reader(reader.vector(2))
    while block.pos < len(block.data):
        kind = block.int(2)
        found[kind] = block.vector(2)
    return found


def parse_client_hello(body: bytes) -> ClientHello | None:
    try:
        r = _Reader(body)
        r.take(2)
        random = r.take(32)
        session_id = r.vector(1)
        r.vector(2)  # cipher suites
        r.vector(1)  # compression methods
        extensions = _extensions(r)
    except ValueError:
        return None
    return ClientHello(random, session_id, frozenset(extensions))


def parse_server_hello(body: bytes) -> ServerHello | None:
    try:
        r = _Reader(body)
        version = r.int(2)
        random = r.take(32)
        session_id = r.vector(1)
        suite = r.int(2)
        r.take(1)  # compression method
        extensions = _extensions(r)
    except ValueError:
        return None
    chosen = extensions.get(EXT_SUPPORTED_VERSIONS)
    if chosen is not None and len(chosen) == 2:
        version = int.from_bytes(chosen, "big")
    return ServerHello(random, session_id, suite, version, frozenset(extensions))


class HandshakeReader:
    """One direction's handshake byte stream -> (msg_type, body) messages.
    Bodies are kept only for the types decryption reads (hellos, KeyUpdate);
    other messages come out with an empty body once they are complete."""

    __slots__ = ("_header", "_type", "_left", "_body", "_keep")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget a partial message (after lost bytes)."""
        self._header = b""
        self._type = -1
        self._left = 0
        self._body: list[bytes] = []
        self._keep = False

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        out: list[tuple[int, bytes]] = []
        pos, n = 0, len(data)
        while pos < n or (self._type >= 0 and self._left == 0):
            if self._type < 0:
                need = 4 - len(self._header)
                self._header += data[pos:pos + need]
                pos += min(need, n - pos)
                if len(self._header) < 4:
                    break
                self._type = self._header[0]
                self._left = int.from_bytes(self._header[1:4], "big")
                self._keep = self._type in _PARSED and self._left <= _MAX_PARSED
                self._body = []
                self._header = b""
            take = min(self._left, n - pos)
            if take and self._keep:
                self._body.append(data[pos:pos + take])
            pos += take
            self._left -= take
            if self._left == 0:
                out.append((self._type, b"".join(self._body) if self._keep else b""))
                self._type = -1
                self._body = []
        return out


def client_hello_verdict(data: bytes) -> bool | None:
    """Whether a connection's first client bytes are a TLS ClientHello record:
    True or False, or None while fewer than 11 bytes leave it open."""
    checks = (
        lambda b: b == 0x16,  # handshake record
        lambda b: b == 0x03,  # record version 3.x
        lambda b: b <= 0x04,
        lambda b: True,  # record length, checked below
        lambda b: True,
        lambda b: b == CLIENT_HELLO,
        lambda b: b == 0x00,  # handshake length < 64 KiB
        lambda b: True,
        lambda b: True,
        lambda b: b == 0x03,  # client_version 3.x
        lambda b: b <= 0x04,
    )
    for check, byte in zip(checks, data):
        if not check(byte):
            return False
    if len(data) < len(checks):
        if len(data) >= 5 and not _sane_hello_record_length(data):
            return False
        return None
    if not _sane_hello_record_length(data):
        return False
    return int.from_bytes(data[6:9], "big") >= 38  # version + random + session id length + ...


def _sane_hello_record_length(data: bytes) -> bool:
    return 4 + 38 <= int.from_bytes(data[3:5], "big") <= (1 << 14)


def looks_like_client_hello(data: bytes) -> bool:
    """True if `data` starts with a TLS ClientHello record (11 bytes suffice)."""
    return client_hello_verdict(data) is True
