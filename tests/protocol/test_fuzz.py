"""Fuzz: mutated and truncated real frames either decode (and then re-encode
to the same bytes) or raise DecodeError; nothing else, and no big allocation."""

from __future__ import annotations

import random
import struct
import time
import tracemalloc

import pytest

from kdissect import DecodeError, decode_request, decode_response
from kdissect.protocol.codec import encode_message
from kdissect.protocol.headers import looks_like_request, peek_request_header
from tests.support.protocol import frame_fixtures

FRAMES = frame_fixtures()
MUTATIONS_PER_FRAME = 60


def _mutate(rng: random.Random, frame: bytes) -> bytes:
    data = bytearray(frame)
    action = rng.randrange(6)
    if action == 0 and data:  # truncate
        return bytes(data[: rng.randrange(len(data))])
    if action == 1 and data:  # flip bytes
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif action == 2 and len(data) > 12:  # a length-like field claims ~2 GB
        pos = rng.randrange(8, len(data) - 4)
        data[pos:pos + 4] = struct.pack(">i", 0x7FFFFFF0)
    elif action == 3:  # insert garbage
        pos = rng.randrange(len(data) + 1)
        data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    elif action == 4 and len(data) > 1:  # delete a run
        pos = rng.randrange(len(data))
        del data[pos:pos + rng.randint(1, 8)]
    else:  # varint-ish bytes
        pos = rng.randrange(len(data) + 1)
        data[pos:pos] = b"\xff\xff\xff\xff\x7f"
    return bytes(data)


def _try(entry: dict, frame: bytes) -> None:
    try:
        if entry["direction"] == "request":
            message = decode_request(frame)
        else:
            message = decode_response(frame, entry["api_key"], entry["api_version"])
    except DecodeError as problem:
        assert isinstance(problem.offset, int) and 0 <= problem.offset <= len(frame)
        assert isinstance(problem.path, str)
        str(problem)
        return
    assert encode_message(message) == frame  # accepted -> byte-identical


def test_mutations_decode_or_raise_decode_error() -> None:
    rng = random.Random(20261122)
    started = time.monotonic()
    tracemalloc.start()
    try:
        for entry in FRAMES:
            frame = bytes.fromhex(entry["hex"])
            for _ in range(MUTATIONS_PER_FRAME):
                mutated = _mutate(rng, frame)
                _try(entry, mutated)
                peek_request_header(mutated)
                looks_like_request(mutated[:32], len(mutated))
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32 * 2**20
    assert time.monotonic() - started < 120


def test_every_truncation_of_every_frame() -> None:
    for entry in FRAMES:
        frame = bytes.fromhex(entry["hex"])
        for cut in range(len(frame)):
            if entry["direction"] == "request":
                with pytest.raises(DecodeError):
                    decode_request(frame[:cut])
            else:
                with pytest.raises(DecodeError):
                    decode_response(frame[:cut], entry["api_key"], entry["api_version"])


def test_huge_length_does_not_allocate() -> None:
    # Produce v3 request whose records field claims 0x7fffffff bytes.
    head = struct.pack(">hhih", 0, 3, 1, 1) + b"c"
    body = struct.pack(">hhi", -1, 1, 1000) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
    body += struct.pack(">i", 1) + struct.pack(">i", 0) + struct.pack(">i", 0x7FFFFFFF) + b"\x00" * 16
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError) as info:
            decode_request(head + body)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2**20
    assert info.value.path == "topic_data[0].partition_data[0].records"
    # an array count claiming 2**31-1 elements
    frame = struct.pack(">hhih", 3, 1, 1, -1) + struct.pack(">i", 0x7FFFFFFF)
    with pytest.raises(DecodeError) as info:
        decode_request(frame)
    assert info.value.path == "topics"


@pytest.mark.parametrize("junk", [b"", b"\x00", b"\xff" * 3, b"\x00\x03\x00\x0c", bytes(range(256))])
def test_junk_never_escapes(junk: bytes) -> None:
    for call in (lambda: decode_request(junk), lambda: decode_response(junk, 3, 12),
                 lambda: decode_response(junk, 1, 16), lambda: decode_response(junk, 18, 3)):
        try:
            call()
        except DecodeError:
            pass
    assert peek_request_header(junk) in (None, peek_request_header(junk))
    decode_error_types = set()
    try:
        decode_request(memoryview(b"\x00\x03\x00\x01"))
    except DecodeError as problem:
        decode_error_types.add(type(problem))
    assert decode_error_types == {DecodeError}


def test_mutations_of_every_message_version() -> None:
    """Every generated decoder: random valid messages, then mutated."""
    from kdissect.protocol.codec import body_class, encode_request, encode_response
    from kdissect.protocol.schema import api_keys, defined_versions
    from tests.support.protocol import random_struct

    rng = random.Random(7)
    for key in api_keys():
        for direction in ("request", "response"):
            for version in defined_versions(key, direction):
                body = random_struct(rng, body_class(key, version, direction))
                if direction == "request":
                    frame = encode_request(key, version, 1, "fuzz", body)
                else:
                    frame = encode_response(key, version, 1, body)
                entry = {"direction": direction, "api_key": key, "api_version": version}
                for _ in range(6):
                    _try(entry, _mutate(rng, frame))
