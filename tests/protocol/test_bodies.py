"""Typed body classes (kdissect.protocol.bodies) against what the codec decodes.

Every per-version class derives from the typed class of its message (and
each nested struct from the typed class of its spec struct), every field of
every version is annotated there, and the decoded values (random messages of
every version, every frame of the lab captures) have the annotated types.
"""

from __future__ import annotations

import functools
import random
import types
import typing
from pathlib import Path

import pytest

from kdissect import DecodeError, decode_request, decode_response, encode_request, encode_response
from kdissect.protocol import bodies
from kdissect.protocol.codec import body_class, embedded_codec
from kdissect.protocol.model import ConsumerProtocolData, Struct
from kdissect.protocol.schema import api_keys, api_versions, defined_versions, embedded_versions
from tests.support.pipeline import ports_of
from tests.support.protocol import random_struct
from tests.support.skim import capture_frames
from tests.support.paths import REPO

CAPTURES = sorted((REPO / "captures").glob("*.pcap"))
CASES = [(key, version, direction) for key in api_keys() for direction in ("request", "response")
         for version in defined_versions(key, direction)]


def _typed(api_key: int, direction: str) -> type:
    return getattr(bodies, api_versions(api_key).name + direction.title())


def _matches(value: object, hint: object) -> bool:
    """Whether value fits a type hint made of classes, `X | Y`, `list[X]` and None."""
    if isinstance(hint, types.UnionType):
        return any(_matches(value, option) for option in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if typing.get_origin(hint) is list:
        (element,) = typing.get_args(hint)
        return isinstance(value, list) and all(_matches(item, element) for item in value)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)  # type: ignore[arg-type]


@functools.cache
def _hints(typed: type) -> dict[str, object]:
    """A class's evaluated annotations (the same for every object checked
    against it; evaluating them is most of the cost of checking)."""
    return typing.get_type_hints(typed)


def _check(obj: Struct, typed: type, where: str, problems: list[str]) -> None:
    assert isinstance(obj, typed), where
    hints = _hints(typed)
    for name in obj._fields:
        if name not in hints:
            problems.append(f"{where}.{name}: not annotated on {typed.__qualname__}")
            continue
        value = getattr(obj, name)
        if not _matches(value, hints[name]):
            problems.append(f"{where}.{name}: {type(value).__name__} is not {hints[name]}")
        nested = obj._nested.get(name)
        if nested is not None:
            for item in (value if isinstance(value, list) else [value]):
                if isinstance(item, Struct):
                    _check(item, nested.__mro__[1], f"{where}.{name}", problems)
        if isinstance(value, ConsumerProtocolData):
            _check(value.data, getattr(bodies, type(value.data).__name__), f"{where}.{name}", problems)


def test_every_message_direction_has_a_typed_class() -> None:
    names = {api_versions(key).name + direction.title() for key, _version, direction in CASES}
    assert names <= set(bodies.__all__)
    assert {"ConsumerProtocolSubscription", "ConsumerProtocolAssignment"} <= set(bodies.__all__)
    assert len(names) > 180


@pytest.mark.parametrize("key", api_keys())
def test_version_classes_derive_from_the_typed_classes(key: int) -> None:
    problems: list[str] = []
    for _key, version, direction in (c for c in CASES if c[0] == key):
        cls = body_class(key, version, direction)
        typed = _typed(key, direction)
        assert issubclass(cls, typed) and cls.__mro__[1] is typed
        for seed in range(3):
            rng = random.Random(f"typed/{key}/{version}/{direction}/{seed}")
            body = random_struct(rng, cls)
            if direction == "request":
                decoded = decode_request(encode_request(key, version, 1, "c", body)).body
            else:
                decoded = decode_response(encode_response(key, version, 1, body), key, version).body
            _check(decoded, typed, f"{typed.__name__} v{version}", problems)
    assert not problems, problems[:10]


def test_consumer_protocol_classes() -> None:
    problems: list[str] = []
    for name in ("ConsumerProtocolSubscription", "ConsumerProtocolAssignment"):
        lo, hi = embedded_versions(name)
        for version in range(lo, hi + 1):
            cls = embedded_codec(name, version).cls
            data = random_struct(random.Random(f"{name}/{version}"), cls)
            _check(data, getattr(bodies, name), f"{name} v{version}", problems)
    assert not problems, problems


def test_lab_frames_decode_to_the_annotated_types() -> None:
    """Real frames, including JoinGroup / SyncGroup carrying the consumer protocol."""
    problems: list[str] = []
    decoded = embedded = 0
    for capture in CAPTURES:
        for direction, frame, api_key, api_version in capture_frames(capture, ports_of(capture)):
            try:
                if direction == "request":
                    message = decode_request(frame)
                    api_key = message.api_key
                else:
                    message = decode_response(frame, api_key, api_version)
            except DecodeError:
                continue
            _check(message.body, _typed(api_key, direction), f"{capture.name} {message.name} {direction}", problems)
            decoded += 1
            embedded += any(isinstance(getattr(item, attr, None), ConsumerProtocolData)
                            for item in [message.body, *(getattr(message.body, "protocols", None) or ()),
                                         *(getattr(message.body, "assignments", None) or ())]
                            for attr in ("metadata", "assignment"))
    assert not problems, problems[:10]
    assert decoded > 1000 and embedded > 0


def test_typed_classes_load_on_demand() -> None:
    import subprocess
    import sys

    code = ("import sys; from kdissect.protocol.bodies import FetchResponse; "
            "print(sorted(m.rsplit('.', 1)[1] for m in sys.modules if m.startswith('kdissect.protocol._generated.bodies_0')))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=REPO)
    assert run.stdout.split() == ["['bodies_001']"]
    assert "ProduceRequest" in dir(bodies)
    with pytest.raises(AttributeError):
        bodies.NoSuchRequest  # noqa: B018
