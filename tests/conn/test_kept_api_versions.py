"""ApiVersions requests kept as frames (kdissect.conn.kept_api_versions)
name the same client software as fully decoded ones: the name and version
the client tally reads (KIP-511, v3+), in every ApiVersions version, on
every bundled capture and on damaged frames (the full decoder is the
oracle); and the forensic tables made from them equal those made from
decoded requests."""

from __future__ import annotations

import random

import pytest

from kdissect.conn.kept_api_versions import ApiVersionsRequestFrame
from kdissect.conn.pipeline import Analysis
from kdissect.forensics import FORENSIC_APIS
from kdissect.protocol.codec import decode_request, encode_request
from kdissect.protocol.skim import skim_request
from tests.conn.test_kept_frames_tables import forensic_tables
from tests.support.paths import REPO
from tests.support.pipeline import ports_of
from tests.support.skim import capture_frames, damaged_copies

CAPTURES = sorted((REPO / "captures").glob("*.pcap"))
API_VERSIONS = 18


def _decoded_software(frame: bytes) -> tuple:
    """What the client tally reads of a decoded request (kdissect.forensics.clients), from v3 on."""
    request = decode_request(frame)
    if request.header.api_version < 3:
        return None, None
    body = request.body
    return getattr(body, "client_software_name", None), getattr(body, "client_software_version", None)


def _check(frame: bytes) -> bool:
    """The frame reads as the decoder reads it wherever the skim accepts it (what pairing keeps)."""
    if skim_request(frame) is None:
        return False
    assert ApiVersionsRequestFrame(frame).software() == _decoded_software(frame)
    return True


def test_capture_frames_read_as_decoded() -> None:
    rng = random.Random(29)
    read = named = 0
    versions = set()
    for capture in CAPTURES:
        for direction, data, _key, _version in capture_frames(capture, ports_of(capture)):
            if direction == "request" and len(data) >= 4 and int.from_bytes(data[:2], "big") == API_VERSIONS:
                versions.add(int.from_bytes(data[2:4], "big"))
                if _check(data):
                    read += 1
                    named += ApiVersionsRequestFrame(data).software()[0] is not None
                for copy in damaged_copies(rng, data):
                    _check(copy)
    assert read > 100 and named > 50
    assert len(versions) >= 3  # without the software (v0-2) and with (v3+)


@pytest.mark.parametrize("version", range(5))
def test_every_version_reads_as_decoded(version: int) -> None:
    """Built requests of each version, with and without a client id, with
    empty and non-ASCII software names."""
    for name, software_version in (("apache-kafka-java", "4.4.0"), ("", ""), ("librdkafka-\u00e9", "2.5\u00ff")):
        body = {"client_software_name": name, "client_software_version": software_version} if version >= 3 else {}
        for client_id in ("producer-\u00e9", None):
            frame = encode_request(API_VERSIONS, version, 7, client_id, body)
            assert _check(frame)
            assert ApiVersionsRequestFrame(frame).software() == ((name, software_version) if version >= 3
                                                                 else (None, None))


@pytest.mark.parametrize("stem", ["forensics_kafka", "java_clients_4_4_kafka", "go_clients_kafka", "old_v0_10_1",
                                  "sasl_kafka", "consume_group_kafka"])
def test_tables_equal_either_way(stem: str) -> None:
    capture = REPO / "captures" / f"{stem}.pcap"
    decoded, _ = forensic_tables(str(capture), ports_of(capture), True, (ApiVersionsRequestFrame,))
    framed, kept = forensic_tables(str(capture), ports_of(capture), False, (ApiVersionsRequestFrame,))
    assert framed == decoded
    assert kept > 0


def test_pairing_keeps_skimmed_requests_as_frames() -> None:
    capture = REPO / "captures" / "java_clients_4_4_kafka.pcap"
    framed = 0
    for ex in Analysis([str(capture)], ports_of(capture), keep_messages=False, keep_apis=FORENSIC_APIS):
        if ex.api_key == API_VERSIONS and ex.request is not None:
            assert type(ex.request) is ApiVersionsRequestFrame and skim_request(ex.request.frame) is not None
            assert ex.response is None  # (the answer is read by no table)
            framed += 1
    assert framed > 0
