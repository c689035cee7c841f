"""Is a TCP connection Kafka, and which side is the client?

Two ways, in this order:

* ports: a connection with an endpoint on a Kafka port (9092 unless told
  otherwise) is Kafka; the side talking *to* that port is the client;
* shape: on other ports (when detection is on), the first bytes each side
  sends are checked; a side whose first bytes are a plausible Kafka request
  header (`protocol.looks_like_request`) is the client. A connection where
  neither side starts like a request is not Kafka.
"""

from __future__ import annotations

from struct import Struct
from typing import Iterable

from kdissect import protocol
from kdissect.framing import HUNT_MAX_SIZE, HUNT_PREFIX

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
