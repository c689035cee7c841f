"""kdissect against tshark, PDU for PDU, on every capture in captures/.

For each capture tshark (an independent dissector) lists the Kafka PDUs it
sees; every one must be in kdissect's exchange table with the same packet,
endpoints, correlation id, size, api key/version and time, paired the same
way, with the same error codes and throttle time wherever tshark decoded the
body. Where tshark cannot decode a version, kdissect must still decode it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kdissect.conn.pipeline import analyze
from tests.support.tshark import compare_with_tshark
from tests.support.paths import REPO

CAPTURES = REPO / "captures"


def capture_files() -> list[Path]:
    found = []
    for pattern in ("*.pcap", "*.pcapng", "*.pcap.gz", "*.pcapng.gz"):
        found += CAPTURES.glob(pattern)
    return sorted(set(found))


def ports_of(capture: Path) -> tuple[int, ...]:
    """The broker port(s) from the capture's manifest (9092 if it names none)."""
    name = capture.name
    for suffix in (".gz", ".pcapng", ".pcap"):
        name = name.removesuffix(suffix)
    manifest = capture.with_name(name + ".manifest.json")
    if manifest.exists():
        data = json.loads(manifest.read_text())
        port = data.get("port") or data.get("ports")
        if isinstance(port, int):
            return (port,)
        if isinstance(port, list) and port:
            return tuple(int(p) for p in port)
    return (9092,)


def test_there_are_captures():
    assert capture_files(), "captures/ holds no capture files"


@pytest.mark.parametrize("capture", capture_files(), ids=lambda p: p.name)
def test_matches_tshark(capture: Path, tshark: str):
    ports = ports_of(capture)
    exchanges_iter, accounting = analyze([capture], ports)
    exchanges = list(exchanges_iter)
    counts = compare_with_tshark(tshark, capture, ports, exchanges, accounting.raw_sasl_frames)
    assert counts["requests"] > 0, f"tshark found no Kafka requests in {capture.name}"
    # a clean capture: nothing lost (malformed frames were checked against tshark above)
    assert accounting.gap_bytes == 0 and accounting.skipped_bytes == 0
    assert accounting.truncated_frames == 0


@pytest.mark.parametrize("capture", [c for c in capture_files() if ports_of(c) != (9092,)], ids=lambda p: p.name)
def test_detection_finds_kafka_on_other_ports(capture: Path):
    """Without --port, the shape of the first requests identifies Kafka."""
    named, _ = analyze([capture], ports_of(capture))
    detected, accounting = analyze([capture])
    key = lambda ex: (ex.client, ex.broker, ex.correlation_id, ex.api_key, ex.status,  # noqa: E731
                      ex.request_ts, ex.response_ts, tuple(ex.error_codes))
    named, detected = sorted(map(key, named), key=str), sorted(map(key, detected), key=str)
    assert detected == named and named
