"""A body decoded with an assumed version is never `ok` as if exact.

The frames are real: the ApiVersions v5 exchanges kafka-clients 4.4.0 sent to
Apache Kafka 4.4.0 (captures/java_clients_4_4_kafka.pcap), relabelled as v6 (a
version newer than the tables know, as the next client release may send).
Relabelled unchanged, the v5 layout fits exactly: `ok`, with the assumption
named. With bytes appended (a field v5 lacks, as a v5 request decoded as v4
left 5 bytes over before the tables knew v5), the exchange is `inexact`,
named by its own problem code and counted in the accounting, whether pairing
skims the frames or decodes them fully.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from kdissect.model.exchange import INEXACT, OK
from kdissect.conn.pipeline import Dissector
from tests.support.pipeline import Conversation, sized
from tests.support.skim import capture_frames
from tests.support.paths import REPO

CAPTURE = REPO / "captures" / "java_clients_4_4_kafka.pcap"
API_VERSIONS = 18


def _api_versions_v5_pair() -> tuple[bytes, bytes]:
    """The first ApiVersions v5 request with a cluster id, and its response."""
    waiting: dict[bytes, bytes] = {}
    for direction, data, api_key, api_version in capture_frames(CAPTURE, (9092,)):
        if direction == "request":
            waiting[data[4:8]] = data
        elif api_key == API_VERSIONS and api_version == 5 and data[:4] in waiting:
            request = waiting[data[:4]]
            if len(request) > 40:  # carries a cluster id (the null ones are 22 bytes shorter)
                return request, data
    raise AssertionError("no ApiVersions v5 exchange with a cluster id in the capture")


def _relabelled(request: bytes, version: int) -> bytes:
    return request[:2] + struct.pack(">h", version) + request[4:]


def _run(request: bytes, response: bytes, keep: bool):
    conversation = Conversation().handshake()
    conversation.send(sized(request))
    conversation.reply(sized(response))
    conversation.close()
    dissector = Dissector((9092,), True, ["inexact.pcap"], keep_messages=keep)
    exchanges = []
    for segment in conversation.segments:
        exchanges += dissector.feed(segment)
    exchanges += dissector.finish()
    assert len(exchanges) == 1
    return exchanges[0], dissector.accounting


@pytest.mark.parametrize("keep", [False, True], ids=["skimmed", "full"])
def test_exact_fit_at_an_assumed_version_is_ok_and_named(keep: bool) -> None:
    request, response = _api_versions_v5_pair()
    ex, accounting = _run(_relabelled(request, 6), response, keep)
    assert ex.status == OK and ex.api_version == 6
    assert ex.problem_codes == ["assumed-version", "assumed-version"]  # request and response halves
    assert ex.problems[0].startswith("request: ApiVersions request v6 is newer than the spec; decoded as v5")
    assert accounting.inexact == accounting.inexact_frames == 0 and accounting.ok == 1
    assert accounting.balance() == []


@pytest.mark.parametrize("keep", [False, True], ids=["skimmed", "full"])
def test_bytes_left_over_at_an_assumed_version_make_the_exchange_inexact(keep: bool) -> None:
    request, response = _api_versions_v5_pair()
    ex, accounting = _run(_relabelled(request, 6) + b"\x00\x00\x00\x07\x00", response + b"\x01\x02", keep)
    assert ex.status == INEXACT
    assert ex.problem_codes.count("assumed-version-leftover") == 2
    assert "request: 5 bytes left over after the body decoded with an assumed version" in ex.problems
    assert "response: 2 bytes left over after the body decoded with an assumed version" in ex.problems
    assert "trailing-bytes" not in ex.problem_codes
    assert accounting.inexact == 1 and accounting.ok == 0 and accounting.inexact_frames == 2
    assert accounting.balance() == []
    assert any("1 inexact" in line for line in accounting.summary_lines())


def test_bytes_after_a_body_at_a_known_version_stay_trailing_bytes() -> None:
    request, response = _api_versions_v5_pair()
    ex, accounting = _run(request + b"\x00", response, keep=False)
    assert ex.status == OK and ex.problem_codes == ["trailing-bytes"]
    assert accounting.inexact == accounting.inexact_frames == 0
