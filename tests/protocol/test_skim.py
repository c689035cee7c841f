"""Skim decoders (kdissect.protocol.skim) against the full decoder.

The oracle is the full decode: its header values, `summary.response_figures`
and `records.access.record_sets` of the decoded body. The skim must give the
same values for every frame the full decoder accepts and reject (None) every
frame it rejects: on seeded random messages of every (api key, version,
direction), on every frame of the lab captures, and on mutations of those.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from kdissect import encode_request, encode_response
from kdissect.protocol.codec import body_class
from kdissect.protocol.schema import api_keys, defined_versions
from kdissect.protocol.skim import frame_skim, skim_request, skim_response
from kdissect.protocol.skim_code import ahead_layouts, ahead_of_time_module, skim_source
from tests.support.pipeline import ports_of
from tests.support.protocol import frame_fixtures, random_struct
from tests.support.skim import (
    capture_frames,
    full_request_values,
    full_response_values,
    skim_values,
)
from tests.support.paths import REPO

CAPTURES = sorted((REPO / "captures").glob("*.pcap"))
CASES = [(key, version, direction) for key in api_keys() for direction in ("request", "response")
         for version in defined_versions(key, direction)]
SEEDS_PER_VERSION = 6
MUTATIONS_PER_MESSAGE = 4


def _both(direction: str, frame: bytes, api_key: int | None, api_version: int | None) -> tuple:
    """(full-decoder values, skim values) of one frame; None where rejected."""
    if direction == "request":
        return full_request_values(frame), skim_values(skim_request(frame))
    return (full_response_values(frame, api_key, api_version),
            skim_values(skim_response(frame, api_key, api_version)))


def _mutate(rng: random.Random, frame: bytes) -> bytes:
    """Flipped bytes, truncations, appended bytes, inflated length/count fields."""
    data = bytearray(frame)
    action = rng.randrange(7)
    if action == 0:
        del data[rng.randrange(len(data) + 1):]
    elif action == 1 and data:
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif action == 2:
        data += bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
    elif action == 3 and data:  # one field a little larger (a length, a count, a varint)
        pos = rng.randrange(len(data))
        data[pos] = (data[pos] + rng.randint(1, 3)) & 0xFF
    elif action == 4 and len(data) > 12:  # an int32 length/count claims ~2 GB
        pos = rng.randrange(8, len(data) - 3)
        data[pos:pos + 4] = struct.pack(">i", 0x7FFFFFF0)
    elif action == 5 and len(data) > 10:  # an int16 length inflated
        pos = rng.randrange(8, len(data) - 1)
        (value,) = struct.unpack_from(">h", data, pos)
        data[pos:pos + 2] = struct.pack(">h", min(value + rng.randint(1, 40), 0x7FFF))
    elif data:  # a varint made longer / non-minimal
        pos = rng.randrange(len(data))
        data[pos:pos + 1] = bytes((data[pos] | 0x80, 0x00))
    return bytes(data)


@pytest.fixture(scope="module")
def lab_frames() -> list[tuple[str, bytes, int | None, int | None]]:
    frames = []
    for capture in CAPTURES:
        frames += capture_frames(capture, ports_of(capture))
    return frames


def test_lab_captures_are_all_here() -> None:
    from tools.lab.workloads import WORKLOADS

    assert len(CAPTURES) == len([wl for wl in WORKLOADS if not wl.directory])


@pytest.mark.parametrize("key", api_keys())
def test_random_messages_skim_like_full_decode(key: int) -> None:
    """Every version the generator knows, both directions, valid and mutated."""
    accepted = rejected = 0
    for _key, version, direction in (c for c in CASES if c[0] == key):
        cls = body_class(key, version, direction)
        for seed in range(SEEDS_PER_VERSION):
            rng = random.Random(f"skim/{key}/{version}/{direction}/{seed}")
            body = random_struct(rng, cls)
            if direction == "request":
                frame = encode_request(key, version, rng.randint(-5, 2**31 - 1), rng.choice([None, "", "cl-é"]), body)
            else:
                frame = encode_response(key, version, rng.randint(-5, 2**31 - 1), body)
            full, skim = _both(direction, frame, key, version)
            assert full is not None, (version, direction)
            assert skim == full, (version, direction, seed)
            for _ in range(MUTATIONS_PER_MESSAGE):
                mutated = _mutate(rng, frame)
                full, skim = _both(direction, mutated, key, version)
                assert skim == full, (version, direction, seed, mutated.hex())
                accepted += full is not None
                rejected += full is None
    assert rejected > 0


def test_every_lab_frame_skims_like_full_decode(lab_frames) -> None:
    kinds = set()
    for direction, frame, api_key, api_version in lab_frames:
        full, skim = _both(direction, frame, api_key, api_version)
        assert skim == full, (direction, api_key, api_version, frame[:64].hex())
        if full is not None:
            kinds.add((full[0], direction) if direction == "request" else (api_key, direction))
    assert len(lab_frames) > 1000
    # the row-relevant kinds are covered: Produce/Fetch both ways, and more
    assert {(0, "request"), (0, "response"), (1, "request"), (1, "response")} <= kinds
    assert len(kinds) > 30


def test_lab_record_sets_and_error_codes_are_seen(lab_frames) -> None:
    """The oracle comparison above is not vacuous: record sets and error codes occur."""
    sets = codes = 0
    for direction, frame, api_key, api_version in lab_frames:
        if direction == "request":
            values = skim_values(skim_request(frame))
            sets += bool(values and values[-1])
        else:
            values = skim_values(skim_response(frame, api_key, api_version))
            if values:
                sets += bool(values[-1])
                codes += bool(values[2])
    assert sets > 50 and codes > 3


def test_mutated_real_frames_accept_iff_full_decoder_accepts(lab_frames) -> None:
    rng = random.Random(20261122)
    fixtures = [(e["direction"], bytes.fromhex(e["hex"]), e["api_key"], e["api_version"]) for e in frame_fixtures()]
    frames = lab_frames + fixtures
    outcomes = [0, 0]
    for _ in range(4000):
        direction, frame, api_key, api_version = rng.choice(frames)
        mutated = _mutate(rng, frame)
        full, skim = _both(direction, mutated, api_key, api_version)
        assert (skim is None) == (full is None), (direction, api_key, api_version, mutated.hex())
        assert skim == full
        outcomes[full is None] += 1
    assert min(outcomes) > 500  # both outcomes well represented


def test_odd_inputs_are_rejected_without_raising() -> None:
    for frame in (b"", b"\x00", b"\x00\x03\x00", bytearray(b"\x00\x12\x00\x00\x00\x00\x00\x01"), None, 42):
        assert skim_request(frame) is None
        assert skim_response(frame, 3, 12) is None
    assert skim_response(b"\x00\x00\x00\x01\x00\x00", 9999, 0) is None  # unknown api
    assert skim_response(b"\x00\x00\x00\x01\x00\x00", 3, 999) is None  # unknown version


def test_apiversions_unsupported_version_answer_laid_out_as_v0() -> None:
    """A broker answers a too-new ApiVersions request with a v0 body (error 35)."""
    frame = struct.pack(">ihi", 7, 35, 1) + struct.pack(">hhh", 18, 0, 3)
    full, skim = _both("response", frame, 18, 3)
    assert full is not None and skim == full
    assert skim[1] == 35 and skim[2] == [35] and "laid out as v0" in skim[3]


def test_produce_acks0_and_sasl_handshake_flags() -> None:
    produce = encode_request(0, 3, 5, "c", {"acks": 0, "timeout_ms": 1, "topic_data": []})
    assert skim_request(produce)[4] is False
    produce = encode_request(0, 3, 5, "c", {"acks": -1, "timeout_ms": 1, "topic_data": []})
    assert skim_request(produce)[4] is True
    sasl = encode_request(17, 0, 9, "c", {"mechanism": "PLAIN"})
    assert skim_request(sasl)[4:6] == (True, True)
    sasl = encode_request(17, 1, 9, "c", {"mechanism": "PLAIN"})
    assert skim_request(sasl)[4:6] == (True, False)


def test_generated_source_builds_no_objects() -> None:
    """The skim of the hot messages reads no field it does not need into objects."""
    source = skim_source(0, 10, "request") + skim_source(1, 12, "response")
    assert "_new(" not in source and "uuid" not in source.replace("_v_topic_id", "")


def _apiversions_v3_with_tags(entries: list[tuple[int, bytes]]) -> bytes:
    """An ApiVersions v3 response (header v0) whose top-level tag section holds `entries`."""
    body = struct.pack(">h", 0) + b"\x01" + struct.pack(">i", 0)  # no error, no api keys, throttle 0
    tags = bytes((len(entries),)) + b"".join(bytes((tag, len(value))) + value for tag, value in entries)
    return struct.pack(">i", 7) + body + tags


@pytest.mark.parametrize("entries, accepted", [
    ([(1, struct.pack(">q", 5))], True),  # FinalizedFeaturesEpoch
    ([(1, struct.pack(">q", 5)), (1, struct.pack(">q", 6))], False),  # a known tag repeated
    ([(30, b"x"), (30, b"yz")], True),  # unknown tags may repeat
    ([(1, struct.pack(">q", 5) + b"\x00")], False),  # value shorter than its declared size
    ([(1, struct.pack(">i", 5))], False),  # value longer than its declared size
    ([(3, b"\x02")], False),  # ZkMigrationReady: a bool byte that is not 0 or 1
    ([(3, b"\x01")], True),
])
def test_tagged_field_rules(entries: list[tuple[int, bytes]], accepted: bool) -> None:
    frame = _apiversions_v3_with_tags(entries)
    full, skim = _both("response", frame, 18, 3)
    assert (full is not None) == accepted
    assert skim == full


def _fetch_v16_with_tags(entries: list[tuple[int, bytes]]) -> bytes:
    """A Fetch v16 response (written ahead of time) whose top-level tag
    section holds `entries` (tag 0: NodeEndpoints, an array)."""
    frame = encode_response(1, 16, 7, {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": []})
    assert frame.endswith(b"\x00")  # the empty top-level tag section
    tags = bytes((len(entries),))
    for tag, value in entries:
        size = len(value)  # an unsigned varint of one or two bytes
        tags += bytes((tag,)) + (bytes((size,)) if size < 128 else bytes((size & 0x7F | 0x80, size >> 7))) + value
    return frame[:-1] + tags


_ENDPOINT = struct.pack(">i", 3) + b"\x02h" + struct.pack(">i", 9092) + b"\x00" + b"\x00"  # id, host, port, rack, tags


@pytest.mark.parametrize("entries, accepted", [
    ([(0, b"\x01")], True),  # NodeEndpoints: no endpoint
    ([(0, b"\x02" + _ENDPOINT)], True),
    ([(0, b"\x01"), (0, b"\x01")], False),  # a known tag repeated
    ([(0, b"\x01\x00")], False),  # value shorter than its declared size
    ([(0, b"\x02" + _ENDPOINT[:-1])], False),  # value longer than its declared size
    ([(9, b"x"), (9, b"yz")], True),  # unknown tags may repeat
    ([(0, b"\x01"), (9, b"x" * 200)], True),  # a size past 127: a two-byte varint
])
def test_tag_rules_of_the_skims_written_ahead(entries: list[tuple[int, bytes]], accepted: bool) -> None:
    """The compiled tag-section reader of _generated.skims follows primitives.read_tag_section."""
    frame = _fetch_v16_with_tags(entries)
    full, skim = _both("response", frame, 1, 16)
    assert (full is not None) == accepted
    assert skim == full


_CACHE_PROBE = """
import builtins, sys
compiled = []
original = builtins.compile
def counting(source, filename, *args, **kwargs):
    compiled.append(str(filename))
    return original(source, filename, *args, **kwargs)
builtins.compile = counting
from kdissect import encode_request
from kdissect.protocol.skim import skim_request
frame = encode_request(18, 3, 1, "c", {"client_software_name": "x", "client_software_version": "1"})
assert skim_request(frame) is not None
print(sum(name.startswith("<kdissect skim") for name in compiled))
"""


def test_skim_code_is_kept_in_the_codec_cache(tmp_path: Path) -> None:
    """A layout not written ahead of time is compiled once, then loaded from the cache."""
    import marshal
    import os
    import subprocess
    import sys

    env = dict(os.environ, KDISSECT_CACHE_DIR=str(tmp_path))
    repo = REPO
    runs = [subprocess.run([sys.executable, "-c", _CACHE_PROBE], cwd=repo, env=env, capture_output=True,
                           text=True, check=True).stdout.split() for _ in range(2)]
    assert runs == [["1"], ["0"]]  # compiled once, then loaded
    names = [marshal.loads(p.read_bytes()).co_filename for p in tmp_path.rglob("*.marshal")]
    assert "<kdissect skim ApiVersionsRequest v3 header v2>" in names


def test_versions_decoded_with_an_assumed_layout() -> None:
    """ApiVersions requests newer than the spec (decoded as the newest) and
    responses to them: the skim follows the same assumed layout."""
    newest = max(defined_versions(18, "request"))
    frame = encode_request(18, newest, 3, "c", {"client_software_name": "x", "client_software_version": "1"})
    for version in range(newest + 1, newest + 6):
        probe = frame[:2] + struct.pack(">h", version) + frame[4:]
        full, skim = _both("request", probe, None, None)
        assert skim == full
        assert (full is not None) == (version <= newest + 4)
    response = encode_response(18, max(defined_versions(18, "response")), 3, {"error_code": 0})
    for version in range(newest + 1, newest + 6):
        full, skim = _both("response", response, 18, version)
        assert skim == full
        assert (full is not None) == (version <= newest + 4)
        if full is not None:
            assert "newer than the spec" in skim[3]


def test_skims_written_ahead_of_time_are_current() -> None:
    """kdissect/protocol/_generated/skims.py is what tools/gen_skims.py writes now."""
    committed = (REPO / "kdissect" / "protocol" / "_generated" / "skims.py").read_text()
    assert committed == ahead_of_time_module(), "rerun tools/gen_skims.py"


def test_hot_layouts_run_the_code_written_ahead() -> None:
    """Every layout of AHEAD_APIS runs from _generated.skims (compiled when the
    native build is in use), none is generated at run time."""
    from kdissect.protocol._generated import skims

    for api_key, version, direction, header_version in ahead_layouts():
        table = skims.REQUEST_SKIMS if direction == "request" else skims.RESPONSE_SKIMS
        assert frame_skim(api_key, version, direction, header_version) is table[(api_key, version, header_version)]
    assert {key for key, _v, _d, _h in ahead_layouts()} == {0, 1, 78}
