"""A TlsConnection under test: ciphertext in through its ciphertext sinks
(the calls reassembly makes), its plaintext recorded (tests.support.recording).

    conn = CollectedTls(keylog)
    conn.ciphertext[direction].data(offset, record, stamp)  # (or gap / truncated)
    plain = conn.plaintext(direction)  # the plaintext calls that piece completed
    rest = conn.finish()               # [(direction, Call)]
    conn.stats, conn.tls               # the TlsConnection's counts, the connection
"""

from __future__ import annotations

from typing import Any

from kdissect.conn.tls import TlsConnection
from tests.support.recording import Call, RecordingSink


class CollectedTls:
    def __init__(self, keylog: Any, client_direction: int = 0) -> None:
        self.heard: list[tuple[int, Call]] = []
        # the plaintext's sinks (TlsConnection drives `plaintext.sinks`)
        self.sinks = (RecordingSink(lambda call: self.heard.append((0, call))),
                      RecordingSink(lambda call: self.heard.append((1, call))))
        self.tls = TlsConnection(keylog, self, client_direction)
        self.ciphertext = self.tls.ciphertext_sinks()

    @property
    def stats(self) -> Any:
        return self.tls.stats

    def _take(self) -> list[tuple[int, Call]]:
        taken = self.heard[:]
        self.heard.clear()
        return taken

    def plaintext(self, direction: int) -> list[Call]:
        """The plaintext calls heard since the last look, all of `direction`
        (a piece of ciphertext completes its own direction's plaintext only)."""
        taken = self._take()
        assert all(d == direction for d, _ in taken)
        return [c for _, c in taken]

    def finish(self) -> list[tuple[int, Call]]:
        self.tls.finish()
        return self._take()
