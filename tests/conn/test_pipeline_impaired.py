"""The pipeline on impaired variants of the real captures (seeded generator).

Each test derives a messy capture from a clean one with `tests.support.impair` and
checks kdissect's table for the messy file against its table for the clean
file: file-format and link-layer changes and reordered or duplicated packets
change nothing; lost packets lose only the exchanges that touch the lost bytes
(decided from the packets' own TCP sequence numbers) and are reported as gaps;
a capture started late finds every exchange that lies wholly after the cut;
a 96-byte snaplen still gives api key, correlation id and timing of requests.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.support import impair
from tests.support.pipeline import (
    content,
    content_untimed,
    identity,
    packet_bytes,
    ports_of,
    reference_captures,
    run,
    touched,
)

CAPTURES = reference_captures()
SEEDS = (1, 2, 3)

# Impairments kdissect does not yet survive on real Apache Kafka captures:
# (capture, test, seed) -> what goes wrong. Marked as expected failures.
# (the gaps found on ipv6_kafka, sasl_kafka, forensics_kafka and hostile_strings_kafka
# -- a client id with control bytes passed over when hunting -- are fixed and now tested)
KNOWN_GAPS: dict[tuple[str, str, int], str] = {}


def _known_gap(request, path: Path, test: str, seed: int) -> None:
    reason = KNOWN_GAPS.get((path.name, test, seed))
    if reason:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))


def test_there_are_reference_captures():
    assert CAPTURES, "no clean captures in captures/ to impair"


@pytest.fixture(scope="module", params=CAPTURES, ids=lambda p: p.name)
def clean(request):
    path: Path = request.param
    ports = ports_of(path)
    exchanges, accounting = run([path], ports)
    return path, ports, impair.load_pcap(path), exchanges, accounting


def _counter(exchanges, key):
    return Counter(key(ex) for ex in exchanges)


@pytest.mark.parametrize("variant", ["vlan", "pcapng", "nanosecond", "gzip", "pcapng-gzip", "sll2", "big-endian"])
def test_format_changes_change_nothing(clean, variant, tmp_path):
    path, ports, trace, exchanges, _ = clean
    target = tmp_path / f"variant-{variant}"
    if variant == "vlan":
        target = impair.write_pcap(impair.with_vlan(trace, (100, 200)), target.with_suffix(".pcap"))
    elif variant == "pcapng":
        target = impair.write_pcapng(trace, target.with_suffix(".pcapng"), tsresol=9)
    elif variant == "nanosecond":
        target = impair.write_pcap(trace, target.with_suffix(".pcap"), nanosecond=True)
    elif variant == "gzip":
        target = impair.write_pcap(trace, target.with_suffix(".pcap.gz"), compress=True)
    elif variant == "pcapng-gzip":
        target = impair.write_pcapng(trace, target.with_suffix(".pcapng.gz"), compress=True)
    elif variant == "sll2":
        target = impair.write_pcap(impair.relink(trace, "sll2"), target.with_suffix(".pcap"))
    else:
        target = impair.write_pcap(trace, target.with_suffix(".pcap"), big_endian=True)
    got, accounting = run([target], ports)
    assert _counter(got, content) == _counter(exchanges, content)
    # same packets, same numbering
    assert sorted((e.request_frame or 0, e.response_frame or 0) for e in got) == \
        sorted((e.request_frame or 0, e.response_frame or 0) for e in exchanges)


@pytest.mark.parametrize("seed", SEEDS)
def test_reordered_and_duplicated_segments(clean, seed, tmp_path, request):
    path, ports, trace, exchanges, _ = clean
    _known_gap(request, path, "reordered", seed)
    messy = impair.duplicate(impair.reorder(trace, seed=seed), seed=seed)
    target = impair.write_pcap(messy, tmp_path / "messy.pcap")
    got, accounting = run([target], ports)
    # a reordered segment can delay when a frame became complete, so compare
    # what the exchanges say, not when
    assert _counter(got, content_untimed) == _counter(exchanges, content_untimed)
    assert accounting.gap_bytes == 0


@pytest.mark.parametrize("seed", SEEDS)
def test_duplicates_keep_timing(clean, seed, tmp_path):
    path, ports, trace, exchanges, _ = clean
    target = impair.write_pcap(impair.duplicate(trace, seed=seed), tmp_path / "dup.pcap")
    got, _ = run([target], ports)
    assert _counter(got, content) == _counter(exchanges, content)


@pytest.mark.parametrize("seed", SEEDS)
def test_lost_segments_lose_only_touched_exchanges(clean, seed, tmp_path, request):
    path, ports, trace, exchanges, _ = clean
    _known_gap(request, path, "lost", seed)
    payload = impair.payload_indices(trace)
    count = max(1, min(4, len(payload) // 20))
    messy, dropped = impair.drop_random(trace, seed=seed, count=count)
    target = impair.write_pcap(messy, tmp_path / "lossy.pcap")
    got, accounting = run([target], ports)

    lost = [p for p in packet_bytes(trace) if p.index in set(dropped)]
    intact = [ex for ex in exchanges if not touched(ex, lost)]
    got_ok = _counter((ex for ex in got if ex.status == "ok"), content)
    got_all = _counter(got, content_untimed)
    for ex in intact:
        if ex.status == "ok":
            # untouched exchanges are unchanged (a gap elsewhere may add a problem note only)
            assert got_all[content_untimed(ex)] > 0, f"lost untouched exchange {identity(ex)}"
    # no invented exchanges: every ok row of the lossy capture is a clean row,
    # or one whose lost bytes changed it (e.g. an acks=0 request whose
    # unexpected response was lost is still ok, without the response)
    clean_rows = _counter(exchanges, content)
    hit = {identity(ex) for ex in exchanges if touched(ex, lost)}
    for row, n in got_ok.items():
        assert clean_rows[row] >= n or row[:5] in hit, f"exchange not in the clean capture: {row}"
    assert accounting.gaps > 0 or accounting.gap_bytes > 0 or accounting.truncated_frames > 0
    assert accounting.gap_bytes <= sum(p.length for p in lost)


@pytest.mark.parametrize("fraction", (0.2, 0.45, 0.7))
def test_capture_cut_mid_stream(clean, fraction, tmp_path):
    path, ports, trace, exchanges, _ = clean
    cut = int(len(trace.packets) * fraction)
    target = impair.write_pcap(impair.cut_head(trace, cut), tmp_path / "late.pcap")
    got, accounting = run([target], ports)

    before = [p for p in packet_bytes(trace) if p.index < cut]
    after_cut = [ex for ex in exchanges if not touched(ex, before) and ex.request_frame is not None
                 and ex.request_frame > cut]
    got_rows = _counter(got, content_untimed)
    missing = [identity(ex) for ex in after_cut if got_rows[content_untimed(ex)] == 0]
    assert not missing, f"{len(missing)} complete exchanges after the cut not found: {missing[:5]}"


def test_snaplen_96_keeps_request_headers_and_timing(clean, tmp_path):
    path, ports, trace, exchanges, _ = clean
    # size, api key, version and correlation id are 12 bytes (a response needs
    # 8): 96 bytes leave room for them behind Ethernet/IPv4/TCP-with-timestamps
    # headers; IPv6 headers are 20 bytes longer, so such captures get the
    # equivalent snaplen
    packets = packet_bytes(trace)
    snaplen = max(96, max(p.header_len for p in packets) + 12)
    target = impair.write_pcap(impair.with_snaplen(trace, snaplen), tmp_path / "short.pcap")
    got, accounting = run([target], ports)
    assert accounting.snaplen_bytes > 0
    # requests whose frame starts a packet have their header in the captured bytes
    starts = {(p.src, p.dst, p.start) for p in packets if snaplen - p.header_len >= 12}
    response_starts = {(p.src, p.dst, p.start) for p in packets if snaplen - p.header_len >= 8}
    expected = [ex for ex in exchanges if ex.request_offset is not None
                and (ex.client, ex.broker, ex.request_offset) in starts]
    assert expected
    by_key = {(ex.client, ex.broker, ex.correlation_id, ex.request_frame): ex for ex in got}
    for ex in expected:
        short = by_key.get((ex.client, ex.broker, ex.correlation_id, ex.request_frame))
        assert short is not None, f"request {identity(ex)} lost under snaplen {snaplen}"
        assert (short.api_key, short.api_version) == (ex.api_key, ex.api_version)
        assert short.request_ts == ex.request_ts
        if ex.response_ts is not None and ex.response_offset is not None \
                and (ex.broker, ex.client, ex.response_offset) in response_starts:
            assert short.response_ts == ex.response_ts
            assert short.latency_ms == ex.latency_ms


def test_rotated_files_are_one_capture(clean, tmp_path):
    path, ports, trace, exchanges, _ = clean
    per_file = max(10, len(trace.packets) // 4)
    parts = impair.split(trace, per_file)
    files = [impair.write_pcap(part, tmp_path / f"rot-{i}.pcap") for i, part in enumerate(parts)]
    got, accounting = run(list(reversed(files)), ports)  # order comes from the packets' times
    assert _counter(got, content) == _counter(exchanges, content)
    assert accounting.gap_bytes == 0
    # frame numbers restart in every file; `capture` names the file holding the request
    for ex in got:
        if ex.request_frame is not None:
            index = int(ex.capture.removeprefix("rot-").removesuffix(".pcap"))
            original = index * per_file + ex.request_frame
            assert any(e.request_frame == original and identity(e) == identity(ex) for e in exchanges)
