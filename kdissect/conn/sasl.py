"""Raw SASL tokens on one Kafka connection.

After a successful SaslHandshake v0 the connection carries raw SASL tokens
(size-prefixed, no Kafka header) on both sides until the client speaks
Kafka again. `SaslTracker` tells, frame by frame, whether a frame is such a
token; the pairing counts them and decodes the rest.
"""

from __future__ import annotations

from struct import Struct
from typing import Container, Iterable

from kdissect.conn.framing import Frame
from kdissect.protocol.headers import looks_like_request

_INT32 = Struct(">i")
# the correlation ids after the handshake's that a broker's first Kafka
# answer after authenticating can carry
RAW_CID_WINDOW = 64


class SaslTracker:
    __slots__ = ("client_raw", "server_raw", "handshake_cid", "raw_since")

    def __init__(self) -> None:
        self.client_raw = False  # the client side is sending raw SASL tokens
        self.server_raw = False
        self.handshake_cid: int | None = None  # correlation id of a pending SaslHandshake v0
        self.raw_since = 0  # correlation id of the SaslHandshake after which raw tokens flow

    def client_token(self, frame: Frame) -> bool:
        """Whether a client frame is a raw token (checked before it is decoded)."""
        if self.client_raw:
            if frame.complete and looks_like_request(frame.data[:64], frame.size):
                self.client_raw = False  # authentication over: Kafka again
                return False
            return True
        if self.handshake_cid is not None and not looks_like_request(frame.data[:64], frame.size):
            # the client's first raw token, shown before the SaslHandshake v0
            # response it was sent after (reordered in the capture)
            self.client_raw = True
            return True
        return False

    def server_token(self, frame: Frame, pending: Container[int]) -> bool:
        """Whether a broker frame is a raw token; `pending`: the correlation
        ids of the requests waiting for an answer."""
        if not self.server_raw:
            return False
        data = frame.data
        cid = _INT32.unpack_from(data, 0)[0] if frame.complete and len(data) >= 4 else None
        # Kafka again: the answer to a request the client sent after
        # authenticating, or one of the next correlation ids, when the
        # capture shows the answer before its request (raw tokens are
        # text or GSS-API tokens, never such a small number)
        if cid is not None and ((not self.client_raw and cid in pending) or self._after_handshake(cid)):
            self.server_raw = False
            return False
        return True

    def handshake_sent(self, cid: int) -> None:
        """A SaslHandshake v0 request: raw tokens follow if it succeeds."""
        self.handshake_cid = cid

    def answered(self, cid: int, succeeded: bool) -> bool:
        """A response to `cid`: whether it is the SaslHandshake v0's success,
        after which raw tokens flow on both sides."""
        if cid != self.handshake_cid:
            return False
        self.handshake_cid = None
        if not succeeded:
            return False
        self.client_raw = self.server_raw = True
        self.raw_since = cid
        return True

    def held_tokens(self, held: Iterable[tuple[int, Frame]]) -> list[int]:
        """Of the broker's frames held for their request that follow the
        handshake's response (in stream order), the correlation ids read
        from those that are its raw tokens: all up to the first that is
        Kafka again (the capture showed the handshake's request late)."""
        tokens = []
        for cid, _frame in held:
            if self._after_handshake(cid):
                self.server_raw = False  # the answer to a request after authenticating
                break
            tokens.append(cid)
        return tokens

    def _after_handshake(self, cid: int) -> bool:
        return self.raw_since < cid <= self.raw_since + RAW_CID_WINDOW
