"""Is a TCP connection Kafka, and which side is the client?

Two ways, in this order:

* ports: a connection with an endpoint on a Kafka port (9092 unless told
  otherwise) is Kafka; the side talking *to* that port is the client;
* shape: on other ports (when detection is on), the first bytes each side
  sends are checked; a side whose first bytes are a plausible Kafka request
  header (`protocol.looks_like_request`) is the client. A connection where
  neither side starts like a request is not Kafka.

A connection's first bytes can also be TLS (`starts_like_tls`). After a loss
or a mid-stream start, framing hunts for a frame boundary; the rules of what
is a plausible request or response there (`hunted_request`,
`confirm_request`, `sure_request`, `plausible_response`) are here too; the response rules that
need the connection's pairing state stay with it (pipeline.py).
"""

from __future__ import annotations

from struct import Struct
from typing import Iterable

from kdissect import protocol
from kdissect.conn.decoding import decode_tolerant
from kdissect.conn.framing import HUNT_HOLD, HUNT_MAX_SIZE, HUNT_PREFIX
from kdissect.protocol.codec import decode_request
from kdissect.protocol.headers import client_id_is_text
from kdissect.protocol.skim import skim_request

_INT32 = Struct(">i")

DEFAULT_PORTS: tuple[int, ...] = (9092,)

# smallest request: api key, api version, correlation id
MIN_REQUEST_SIZE = 8


def client_direction_by_port(
    initiator: tuple[str, int], responder: tuple[str, int], ports: Iterable[int] | frozenset[int]
) -> int | None:
    """0 if the initiator is the client, 1 if the responder is, None if no Kafka port.

    When both ends use a Kafka port the initiator is taken as the client.
    """
    if responder[1] in ports:
        return 0
    if initiator[1] in ports:
        return 1
    return None


def starts_like_request(data: bytes) -> bool:
    """Whether a direction's first captured bytes begin with a Kafka request."""
    if len(data) < 4 + MIN_REQUEST_SIZE:
        return False
    size = _INT32.unpack_from(data, 0)[0]
    if not MIN_REQUEST_SIZE <= size <= HUNT_MAX_SIZE:
        return False
    return bool(protocol.looks_like_request(bytes(data[4 : 4 + HUNT_PREFIX]), size))


def starts_like_tls(data: bytes) -> bool:
    """A TLS handshake record header (content type 22, version 3.x). As a Kafka
    size field these bytes would announce a frame of over 360 MB."""
    return len(data) >= 3 and data[0] == 0x16 and data[1] == 0x03 and data[2] <= 0x04


def hunted_request(prefix: bytes, size: int) -> bool:
    """A request header could start here. Unlike the first bytes of a
    connection, a client id with control bytes is allowed: a hostile client's
    requests must not escape resynchronisation. Such a candidate is never
    taken on sight (`sure_request`): its whole frame must decode."""
    return protocol.looks_like_request(prefix, size, text_client_id=False)


def confirm_request(body: bytes, at_packet_end: bool) -> bool:
    """A request found by hunting decodes (a resynchronisation never invents one).
    Bytes after a complete body are tolerated only after a printable client id:
    one with control bytes is weaker evidence, so its frame must decode exactly."""
    if skim_request(body) is not None:
        return True
    if client_id_is_text(body[:HUNT_PREFIX]):
        return decode_tolerant(decode_request, body)[0] is not None
    try:
        decode_request(body)
    except Exception:  # DecodeError, or a decoder bug: never stop the run
        return False
    return True


def sure_request(prefix: bytes, size: int, at_packet_start: bool) -> bool:
    """A request header found by hunting is taken without waiting for its end."""
    # a plausible request header where a packet starts is one (clients start
    # a packet with a request); so is one too large to hold until it ends.
    # Only with a printable client id: otherwise the frame must decode.
    return (at_packet_start or size > HUNT_HOLD) and protocol.looks_like_request(prefix, size)


def plausible_response(prefix: bytes, size: int) -> bool:
    """A response header could start here (its correlation id is not negative)."""
    return len(prefix) >= 4 and _INT32.unpack_from(prefix, 0)[0] >= 0
