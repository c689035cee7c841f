"""Helpers for the skim-decoder tests: gather real frames from captures, and
the row values derived from the full decoder (the oracle the skim must equal)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kdissect.conn import pairing, pipeline
from kdissect.conn.pipeline import analyze
from kdissect.protocol import DecodeError, decode_request, decode_response
from kdissect.protocol.summary import response_figures
from kdissect.records.access import record_figures, record_sets

INT32 = __import__("struct").Struct(">i")


def capture_frames(path: Path, ports: tuple[int, ...]) -> list[tuple[str, bytes, int | None, int | None]]:
    """Every complete frame the pipeline hands to pairing, in order:
    ("request", data, None, None) or ("response", data, api_key, api_version)
    (the key/version of the waiting request; None when there is none).

    They are gathered by wrapping the Pairer's methods, which compiled code
    calls past any patch: with a compiled pairing or pipeline loaded, a
    child process with the plain Python modules gathers them."""
    if _compiled(pairing) or _compiled(pipeline):
        return _frames_from_plain_child(path, ports)
    return _frames_here(path, ports)


def _compiled(module: Any) -> bool:
    return not str(getattr(module, "__file__", "")).endswith(".py")


def _frames_from_plain_child(path: Path, ports: tuple[int, ...]) -> list[tuple[str, bytes, int | None, int | None]]:
    import os
    import pickle
    import subprocess
    import sys

    code = ("import pickle, sys\n"
            "from tests.support.skim import _frames_here\n"
            f"sys.stdout.buffer.write(pickle.dumps(_frames_here({str(path)!r}, {tuple(ports)!r})))\n")
    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, KDISSECT_PURE_PYTHON="1")
    done = subprocess.run([sys.executable, "-c", code], cwd=repo, env=env, capture_output=True, check=True)
    frames: list[tuple[str, bytes, int | None, int | None]] = pickle.loads(done.stdout)
    return frames


def _frames_here(path: Path | str, ports: tuple[int, ...]) -> list[tuple[str, bytes, int | None, int | None]]:
    assert not _compiled(pairing) and not _compiled(pipeline), "patches of compiled code do not take"
    frames: list[tuple[str, bytes, int | None, int | None]] = []
    on_request = pairing.Pairer.on_request
    on_response = pairing.Pairer.on_response

    def record_request(self: Any, frame: Any) -> None:
        if frame.complete and not self.sasl.client_raw:
            frames.append(("request", bytes(frame.data), None, None))
        on_request(self, frame)

    def record_response(self: Any, frame: Any) -> None:
        data = bytes(frame.data)
        if frame.complete and not self.sasl.server_raw and len(data) >= 4:
            cid = INT32.unpack_from(data, 0)[0]
            waiting = self.waiting_for(cid)
            if waiting is not None and waiting.api_key is not None:
                frames.append(("response", data, waiting.api_key, waiting.api_version))
        on_response(self, frame)

    pairing.Pairer.on_request = record_request  # type: ignore[method-assign]
    pairing.Pairer.on_response = record_response  # type: ignore[method-assign]
    try:
        list(analyze([str(path)], ports, keep_messages=True)[0])
    finally:
        pairing.Pairer.on_request = on_request  # type: ignore[method-assign]
        pairing.Pairer.on_response = on_response  # type: ignore[method-assign]
    return frames


def full_request_values(frame: bytes) -> tuple | None:
    """What a row takes from a request, computed from the full decode (None: rejected)."""
    try:
        request = decode_request(frame)
    except DecodeError:
        return None
    h = request.header
    sets = [(t, p, bytes(raw)) for t, p, raw in record_sets(h.api_key, h.api_version, request.body, "request")]
    return (h.api_key, h.api_version, h.correlation_id, h.client_id, request.expects_response,
            request.starts_raw_sasl, sets)


def full_response_values(frame: bytes, api_key: int, api_version: int) -> tuple | None:
    try:
        response = decode_response(frame, api_key, api_version)
    except DecodeError:
        return None
    throttle, error_code, codes = response_figures(api_key, api_version, response.body)
    sets = [(t, p, bytes(raw)) for t, p, raw in record_sets(api_key, api_version, response.body, "response")]
    return throttle, error_code, codes, response.assumed_version, sets


def skim_values(result: tuple | None) -> tuple | None:
    """A skim result with the record sets as plain bytes (comparable)."""
    if result is None:
        return None
    *head, sets = result
    return (*head, [(t, p, bytes(raw)) for t, p, raw in sets])


__all__ = [
    "capture_frames",
    "full_request_values",
    "full_response_values",
    "record_figures",
    "skim_values",
]


def damaged_copies(rng: Any, frame: bytes) -> list[bytes]:
    """Copies of a frame with one bit flipped (in the header's first 16
    bytes, then anywhere), cut short, and one byte longer: what a kept
    frame's reader must read as the decoder does, or refuse."""
    copies = []
    for limit in (min(len(frame), 16), len(frame)):
        flipped = bytearray(frame)
        flipped[rng.randrange(limit)] ^= 1 << rng.randrange(8)
        copies.append(bytes(flipped))
    return copies + [frame[:rng.randrange(4, len(frame))], frame + b"\x00"]


def decoded_topic_pairs(frame: bytes, api_key: int, version: int) -> list:
    """(topic id text, name) pairs of a response as the full decoder and the
    topic-name pass find them (the oracle of the kept frames' `topic_pairs`)."""
    from kdissect.protocol.topics import _pairs

    found: list = []
    _pairs(decode_response(frame, api_key, version).body, found)
    return found


def topic_pairs_read_as_decoded(frame: bytes, api_key: int, version: int, frame_class: Any) -> bool:
    """Whether pairing would keep the response as a `frame_class` frame (the
    skim accepted it and found no error code); if so, asserts its
    `topic_pairs()` equal the full decoder's."""
    from kdissect.protocol.skim import skim_response

    figures = skim_response(frame, api_key, version)
    if figures is None or figures[2]:
        return False
    assert frame_class(frame, version).topic_pairs() == decoded_topic_pairs(frame, api_key, version)
    return True


def response_frames_read_as_decoded(captures: Any, api_key: int, frame_class: Any, damage: Any,
                                    seed: int = 29) -> tuple[int, int, set[int]]:
    """Every `api_key` response of `captures` (and `damage(rng, frame)`'s
    copies of each) checked by `topic_pairs_read_as_decoded`; returns how
    many real frames were kept as frames, how many of those carry pairs,
    and the versions seen."""
    import random

    from tests.support.pipeline import ports_of

    rng = random.Random(seed)
    read = with_pairs = 0
    versions: set[int] = set()
    for capture in captures:
        for direction, data, key, version in capture_frames(capture, ports_of(capture)):
            if direction != "response" or key != api_key or version is None:
                continue
            versions.add(version)
            if topic_pairs_read_as_decoded(data, api_key, version, frame_class):
                read += 1
                with_pairs += bool(decoded_topic_pairs(data, api_key, version))
            for copy in damage(rng, data):
                topic_pairs_read_as_decoded(copy, api_key, version, frame_class)
    return read, with_pairs, versions
