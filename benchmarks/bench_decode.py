#!/usr/bin/env python3
"""Decode throughput of the protocol core on real frames.

    python3 benchmarks/bench_decode.py [--seconds 1.0]

Uses the frames recorded from kafka-python / confluent-kafka talking to a
Tansu broker (tests/fixtures/frames/*.jsonl): Produce requests and
responses, Fetch requests and responses, Metadata requests and responses.
Prints frames and MB per CPU-second (process time, so other load on a shared
machine distorts the figures less) per kind (decode only: header + body; records stay
raw bytes, as in the pipeline). Also times summarize_response on the
responses. Not a test: figures depend on the machine.

Skim rows time `kdissect.protocol.skim` on the same frames (same validation,
only the exchange-row values), and "row values" rows compare what pairing
does per frame without kept messages: full decode + response_figures /
record_figures, against skim + set_figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kdissect import decode_request, decode_response  # noqa: E402
from kdissect.protocol.skim import skim_request, skim_response  # noqa: E402
from kdissect.protocol.summary import response_figures, summarize_response  # noqa: E402
from kdissect.records.access import record_figures, set_figures  # noqa: E402

KINDS = {0: "Produce", 1: "Fetch", 3: "Metadata"}


def load_frames() -> dict[tuple[str, str], list[tuple[bytes, int, int]]]:
    groups: dict[tuple[str, str], list[tuple[bytes, int, int]]] = {}
    for path in sorted((REPO / "tests" / "fixtures" / "frames").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            if entry["api_key"] in KINDS:
                key = (KINDS[entry["api_key"]], entry["direction"])
                groups.setdefault(key, []).append((bytes.fromhex(entry["hex"]), entry["api_key"], entry["api_version"]))
    return groups


def bench(frames: list[tuple[bytes, int, int]], direction: str, seconds: float) -> tuple[float, float]:
    # warm up (compiles the decoders once)
    for frame, key, version in frames:
        decode_request(frame) if direction == "request" else decode_response(frame, key, version)
    count = 0
    size = 0
    started = time.process_time()
    deadline = started + seconds
    while time.process_time() < deadline:
        if direction == "request":
            for frame, _key, _version in frames:
                decode_request(frame)
                size += len(frame)
        else:
            for frame, key, version in frames:
                decode_response(frame, key, version)
                size += len(frame)
        count += len(frames)
    elapsed = time.process_time() - started
    return count / elapsed, size / elapsed / 1e6


def _full_row_values(frames: list[tuple[bytes, int, int]], direction: str) -> None:
    if direction == "request":
        for frame, key, version in frames:
            request = decode_request(frame)
            if key == 0:
                record_figures(key, version, request.body)
    else:
        for frame, key, version in frames:
            body = decode_response(frame, key, version).body
            response_figures(key, version, body)
            if key in (1, 78):
                record_figures(key, version, body)


def _skim_row_values(frames: list[tuple[bytes, int, int]], direction: str) -> None:
    if direction == "request":
        for frame, key, _version in frames:
            values = skim_request(frame)
            if key == 0:
                set_figures(values[6])
    else:
        for frame, key, version in frames:
            values = skim_response(frame, key, version)
            if key in (1, 78):
                set_figures(values[4])


def _full_only(frames: list[tuple[bytes, int, int]], direction: str) -> None:
    if direction == "request":
        for frame, _key, _version in frames:
            decode_request(frame)
    else:
        for frame, key, version in frames:
            decode_response(frame, key, version)


def _skim_only(frames: list[tuple[bytes, int, int]], direction: str) -> None:
    if direction == "request":
        for frame, _key, _version in frames:
            skim_request(frame)
    else:
        for frame, key, version in frames:
            skim_response(frame, key, version)


def frames_per_second(run, frames: list[tuple[bytes, int, int]], direction: str, seconds: float) -> float:
    """Frames per CPU-second of run(frames, direction), after one warm-up pass."""
    run(frames, direction)
    count = 0
    started = time.process_time()
    while time.process_time() - started < seconds:
        run(frames, direction)
        count += len(frames)
    return count / (time.process_time() - started)


def bench_summary(frames: list[tuple[bytes, int, int]], seconds: float) -> float:
    bodies = [(decode_response(f, k, v).body, k, v) for f, k, v in frames]
    count = 0
    started = time.process_time()
    while time.process_time() - started < seconds:
        for body, key, version in bodies:
            summarize_response(key, version, body)
        count += len(bodies)
    return count / (time.process_time() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description="protocol decode throughput on real frames")
    parser.add_argument("--seconds", type=float, default=1.0, help="time per measurement")
    args = parser.parse_args()
    groups = load_frames()
    print(f"{'frames':<22} {'n':>3} {'avg bytes':>9} {'frames/s':>10} {'MB/s':>7}")
    for (name, direction), frames in sorted(groups.items()):
        rate, mbps = bench(frames, direction, args.seconds)
        avg = sum(len(f) for f, _k, _v in frames) / len(frames)
        print(f"{name + ' ' + direction:<22} {len(frames):>3} {avg:>9.0f} {rate:>10,.0f} {mbps:>7.1f}")
    print(f"\n{'skim (same checks)':<22} {'n':>3} {'full/s':>10} {'skim/s':>10} {'x':>5}")
    for (name, direction), frames in sorted(groups.items()):
        full = frames_per_second(_full_only, frames, direction, args.seconds / 2)
        skim = frames_per_second(_skim_only, frames, direction, args.seconds / 2)
        print(f"{name + ' ' + direction:<22} {len(frames):>3} {full:>10,.0f} {skim:>10,.0f} {skim / full:>5.1f}")
    print(f"\n{'row values':<22} {'n':>3} {'full/s':>10} {'skim/s':>10} {'x':>5}")
    for (name, direction), frames in sorted(groups.items()):
        full = frames_per_second(_full_row_values, frames, direction, args.seconds / 2)
        skim = frames_per_second(_skim_row_values, frames, direction, args.seconds / 2)
        print(f"{name + ' ' + direction:<22} {len(frames):>3} {full:>10,.0f} {skim:>10,.0f} {skim / full:>5.1f}")
    print()
    for (name, direction), frames in sorted(groups.items()):
        if direction == "response":
            print(f"summarize_response {name:<10} {bench_summary(frames, args.seconds / 2):>12,.0f} /s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
