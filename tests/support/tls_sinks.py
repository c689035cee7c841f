"""A TlsConnection under test: ciphertext pieces in (reassembly Chunks or
objects like them), its plaintext collected as Chunks.

    conn = CollectedTls(keylog)
    plain = conn.push(direction, chunk)  # the plaintext chunks this piece completed
    rest = conn.finish()                 # [(direction, chunk)]
    conn.stats, conn.tls                 # the TlsConnection's counts, the connection
"""

from __future__ import annotations

from typing import Any

from kdissect.conn.tls import TlsConnection
from kdissect.wire.reassembly import Chunk


class _Collector:
    """A DirectionSink that keeps what it hears as (direction, Chunk)."""

    def __init__(self, direction: int, heard: list[tuple[int, Chunk]]) -> None:
        self.direction = direction
        self.heard = heard

    def _keep(self, kind: str, offset: int, length: int, data: bytes, stamp: Any) -> None:
        self.heard.append((self.direction, Chunk(kind, offset, length, data, stamp.ts, stamp.capture_index,
                                                 stamp.frame_number)))

    def data(self, offset: int, payload: bytes, stamp: Any) -> None:
        self._keep("data", offset, len(payload), payload, stamp)

    def gap(self, offset: int, length: int, stamp: Any) -> None:
        self._keep("gap", offset, length, b"", stamp)

    def truncated(self, offset: int, length: int, prefix: bytes, stamp: Any) -> None:
        self._keep("truncated", offset, length, prefix, stamp)


class CollectedTls:
    def __init__(self, keylog: Any, client_direction: int = 0) -> None:
        self.heard: list[tuple[int, Chunk]] = []
        self.sinks = (_Collector(0, self.heard), _Collector(1, self.heard))  # the plaintext's
        self.tls = TlsConnection(keylog, self, client_direction)
        self.ciphertext = self.tls.ciphertext_sinks()

    @property
    def stats(self) -> Any:
        return self.tls.stats

    def _take(self) -> list[tuple[int, Chunk]]:
        taken = self.heard[:]
        self.heard.clear()
        return taken

    def push(self, direction: int, chunk: Any) -> list[Chunk]:
        """One ciphertext piece (kind, offset, length, data and a stamp's
        fields); the plaintext chunks of `direction` it completed."""
        sink = self.ciphertext[direction]
        if chunk.kind == "data":
            sink.data(chunk.offset, chunk.data, chunk)
        elif chunk.kind == "gap":
            sink.gap(chunk.offset, chunk.length, chunk)
        else:
            sink.truncated(chunk.offset, chunk.length, chunk.data, chunk)
        taken = self._take()
        assert all(d == direction for d, _ in taken)  # a piece completes its own direction's plaintext only
        return [c for _, c in taken]

    def finish(self) -> list[tuple[int, Chunk]]:
        self.tls.finish()
        return self._take()
