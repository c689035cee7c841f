"""Cross-check the generated layouts against an independent implementation:
kafka-python's hand-written protocol classes (kafka.protocol.old). Random
values are encoded with kafka-python, decoded here, and the leaf values are
compared in wire order; then our re-encoding must give the same bytes."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import random
import struct
import uuid

import pytest

from kdissect.protocol.codec import message_codec
from kdissect.protocol.model import Struct
from kdissect.protocol.schema import defined_versions

import kafka.protocol.old as old  # noqa: E402  (kafka-python is a dev dependency: no skip)
from kafka.protocol.old import types as kt  # noqa: E402
from kafka.protocol.old.struct import Struct as KStruct  # noqa: E402


def _classes() -> list[tuple[int, int, str, type]]:
    found = {}
    for info in pkgutil.iter_modules(old.__path__, "kafka.protocol.old."):
        module = importlib.import_module(info.name)
        for _name, cls in inspect.getmembers(module, inspect.isclass):
            if not issubclass(cls, KStruct) or not hasattr(cls, "API_KEY") or not hasattr(cls, "API_VERSION"):
                continue
            if not isinstance(getattr(cls, "API_KEY", None), int) or not isinstance(cls.API_VERSION, int):
                continue
            direction = "request" if "Request" in cls.__name__ else "response" if "Response" in cls.__name__ else None
            if direction is None or cls.API_VERSION not in defined_versions(cls.API_KEY, direction):
                continue
            found[(cls.API_KEY, cls.API_VERSION, direction)] = cls
    return [(k, v, d, cls) for (k, v, d), cls in sorted(found.items())]


CLASSES = _classes()

# Where kafka-python's hand-written schema disagrees with Kafka's own spec
# (checked by hand against ../shared/kafka-spec): strict xfail, so a fix on
# their side shows up.
KAFKA_PYTHON_BUGS = {
    (29, 2, "request"): "DescribeAcls v2 is flexible (flexibleVersions 2+); kafka-python reuses the v1 layout",
    (29, 2, "response"): "DescribeAcls v2 is flexible (flexibleVersions 2+); kafka-python reuses the v1 layout",
    (35, 0, "request"): "DescribeLogDirs Partitions is []int32; kafka-python declares a single Int32",
}


def _params() -> list:
    params = []
    for key, version, direction, cls in CLASSES:
        reason = KAFKA_PYTHON_BUGS.get((key, version, direction))
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        params.append(pytest.param(key, version, direction, cls, marks=marks, id=f"{key}v{version}-{direction}"))
    return params

_INTS = {kt.Int8: 8, kt.Int16: 16, kt.Int32: 32, kt.Int64: 64}


def _random(rng: random.Random, field, leaves: list):
    """A random value for a kafka-python field type; appends expected leaves."""
    if field in _INTS or type(field) in _INTS:
        bits = _INTS.get(field) or _INTS[type(field)]
        value = rng.choice([0, -1, 1, rng.randint(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)])
        leaves.append(value)
        return value
    if field is kt.Boolean or isinstance(field, kt.Boolean):
        value = rng.random() < 0.5
        leaves.append(value)
        return value
    if field is kt.Float64:
        value = rng.uniform(-1e9, 1e9)
        leaves.append(value)
        return value
    if field is kt.UUID:
        value = uuid.UUID(int=rng.getrandbits(128))
        leaves.append(value)
        return value
    if field is kt.BitField:
        bits = {rng.randrange(31) for _ in range(3)}
        leaves.append(struct.unpack(">i", struct.pack(">I", kt.BitField.to_32_bit_field(bits)))[0])
        return bits
    if isinstance(field, (kt.String, kt.CompactString)):
        value = "".join(rng.choice("abé-9") for _ in range(rng.randint(0, 8)))
        leaves.append(value)
        return value
    if field in (kt.Bytes, kt.CompactBytes) or isinstance(field, (kt.Bytes, kt.CompactBytes)):
        value = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 8)))
        leaves.append(value)
        return value
    if field is kt.TaggedFields:
        return {}
    if isinstance(field, kt.Array):  # includes CompactArray
        count = rng.randint(0, 2)
        leaves.append(("array", count))
        return [_random(rng, field.array_of, leaves) for _ in range(count)]
    if isinstance(field, kt.Schema):
        return tuple(_random(rng, f, leaves) for f in field.fields)
    raise TypeError(f"unhandled kafka-python type {field!r}")


def _ours(obj, leaves: list) -> None:
    """Leaves of a decoded struct in wire order (tagged fields excluded)."""
    for f in obj._schema:
        if f.tagged:
            continue
        value = getattr(obj, f.attr)
        if f.is_array:
            leaves.append(("array", len(value or ())))
            for item in value or ():
                _ours(item, leaves) if isinstance(item, Struct) else leaves.append(item)
        elif isinstance(value, Struct):
            _ours(value, leaves)
        else:
            leaves.append(value)


def test_kafka_python_classes_cover_many_versions() -> None:
    assert len(CLASSES) > 100
    assert {k for k, _v, _d, _c in CLASSES} >= {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 18}


@pytest.mark.parametrize("api_key, version, direction, cls", _params())
def test_layout_matches_kafka_python(api_key: int, version: int, direction: str, cls: type) -> None:
    codec = message_codec(api_key, version, direction)
    for seed in range(4):
        rng = random.Random(f"{api_key}/{version}/{direction}/{seed}")
        expected: list = []
        values = [_random(rng, field, expected) for field in cls.SCHEMA.fields]
        raw = cls(*values).encode()
        body, pos = codec.decode(raw, 0, len(raw))
        assert pos == len(raw)
        got: list = []
        _ours(body, got)
        assert got == expected
        out = bytearray()
        codec.encode_into(body, out)
        assert bytes(out) == raw
