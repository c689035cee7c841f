"""`LogEntry`: a request-log line's JSON decoded by msgspec (the Python path of
kdissect.conn.brokerlog.parse; imported only when a line needs it, so that a
run whose lines the native reader takes never imports msgspec).

msgspec fills `LogEntry`'s typed fields (the header, the times, the identity)
and skips every other member: the bodies are scanned to find their end,
never turned into objects nor kept, so what they hold (SASL tokens, SCRAM
proofs, record data) cannot reach an output.
"""

from __future__ import annotations

import msgspec

class _Header(msgspec.Struct, gc=False):
    requestApiKey: int
    requestApiVersion: int
    correlationId: int
    clientId: str | None = None


class _Software(msgspec.Struct, gc=False):
    softwareName: str | None = None
    softwareVersion: str | None = None


# the reader's own fields: names no JSON line of Kafka's has (whatever a
# line holds under them is overwritten before the entry leaves the reader)
def _own(name: str, default: object) -> object:
    return msgspec.field(name="~kdissect~" + name, default=default)


class LogEntry(msgspec.Struct, gc=False):
    """One completed request as the broker logged it (header, timing,
    identity). Decoded straight from the line's JSON by msgspec into these
    fields only: every other member (the request and response bodies) is
    skipped by the decoder, never turned into an object."""

    header: _Header = msgspec.field(name="requestHeader")
    connection: str  # the broker's connection id
    total_ms: float | None = msgspec.field(name="totalTimeMs", default=None)
    request_queue_ms: float | None = msgspec.field(name="requestQueueTimeMs", default=None)
    local_ms: float | None = msgspec.field(name="localTimeMs", default=None)
    remote_ms: float | None = msgspec.field(name="remoteTimeMs", default=None)
    throttle_ms: float | None = msgspec.field(name="throttleTimeMs", default=None)
    response_queue_ms: float | None = msgspec.field(name="responseQueueTimeMs", default=None)
    send_ms: float | None = msgspec.field(name="sendTimeMs", default=None)
    security_protocol: str | None = msgspec.field(name="securityProtocol", default=None)
    principal: str | None = None
    listener: str | None = None
    information: _Software | None = msgspec.field(name="clientInformation", default=None)
    ts: int = _own("ts", 0)  # type: ignore[assignment]  # ns since the epoch, the line's time (the completion)
    client: str = _own("client", "")  # type: ignore[assignment]  # ip:port of the client, as kdissect writes endpoints
    broker: str = _own("broker", "")  # type: ignore[assignment]
    key: tuple = _own("key", ())  # type: ignore[assignment]  # (client, correlation id, api key): the join's identity
    matched: bool = _own("matched", False)  # type: ignore[assignment]

    @property
    def api_key(self) -> int:
        return self.header.requestApiKey

    @property
    def api_version(self) -> int:
        return self.header.requestApiVersion

    @property
    def correlation_id(self) -> int:
        return self.header.correlationId

    @property
    def client_id(self) -> str | None:
        return self.header.clientId

    @property
    def software(self) -> str | None:
        """clientInformation as "name/version" (None when it names neither)."""
        information = self.information
        if information is None:
            return None
        name, version = information.softwareName, information.softwareVersion
        return f"{name}/{version}" if name or version else None

    def times(self) -> tuple:
        return (self.total_ms, self.request_queue_ms, self.local_ms, self.remote_ms, self.throttle_ms,
                self.response_queue_ms, self.send_ms)


_decode_entry = msgspec.json.Decoder(LogEntry).decode
# what msgspec raises for a line it cannot take: not JSON or not these types
# (a ValidationError is a DecodeError), or bodies nested deeper than it recurses
_REFUSED = (msgspec.DecodeError, RecursionError)
