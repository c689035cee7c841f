"""Every API, direction and version: random bodies encoded by the core codec
are dissected by the Scapy layers into the same values, and the same values
built as Scapy packets from scratch give the core's bytes.

The core codec and the Scapy fields are separate implementations over the
same protocol tables; this covers the versions no capture contains.
"""

from __future__ import annotations

import random
import struct

from scapy.fields import ConditionalField
from scapy.packet import Raw

import kdissect
from kdissect.protocol.codec import body_class
from kdissect.protocol.model import Struct
from kdissect.protocol.schema import api_keys, defined_versions, get_schema
from kdissect.scapy import GENERATED, KafkaBody, KafkaRequest, KafkaResponse, dissect_response
from kdissect.scapy.fields import KafkaStructArrayField, KafkaStructField
from tests.support.protocol import random_struct
from tests.support.scapy import core_plain, scapy_plain

SAMPLES = 2


def to_scapy(value: Struct, cls: type) -> KafkaBody:
    """Build a Scapy packet of `cls` from a core struct, field by field."""
    fields = {(f.fld if isinstance(f, ConditionalField) else f).name: (f.fld if isinstance(f, ConditionalField) else f)
              for f in cls.fields_desc}
    values = {}
    for name in value._fields:
        item = getattr(value, name)
        field = fields[name]
        if item is not None and isinstance(field, KafkaStructArrayField):
            item = [to_scapy(element, field.cls) for element in item]
        elif item is not None and isinstance(field, KafkaStructField):
            item = to_scapy(item, field.cls)
        values[name] = item
    if value.unknown_tagged_fields:
        values["unknown_tagged_fields"] = list(value.unknown_tagged_fields)
    return cls(**values)


def _cases():
    rng = random.Random(20261122)
    for api_key in api_keys():
        for direction in ("request", "response"):
            for version in defined_versions(api_key, direction):
                for _ in range(SAMPLES):
                    yield rng, api_key, direction, version


def test_every_version_both_ways():
    failures = []
    checked = 0
    for rng, api_key, direction, version in _cases():
        schema = get_schema(api_key, version, direction)
        body = random_struct(rng, body_class(api_key, version, direction))
        correlation_id = rng.randint(-(2 ** 31), 2 ** 31 - 1)
        scapy_cls = GENERATED[schema.name]
        where = f"{schema.name} v{version}"
        try:
            if direction == "request":
                client_id = rng.choice([None, "", "client-1"])
                frame = kdissect.encode_request(api_key, version, correlation_id, client_id, body)
                core = kdissect.decode_request(frame)
                dissected = KafkaRequest(struct.pack(">i", len(frame)) + frame)
                built = KafkaRequest(api_version=version, correlation_id=correlation_id,
                                     client_id=client_id) / to_scapy(body, scapy_cls)
            else:
                frame = kdissect.encode_response(api_key, version, correlation_id, body)
                core = kdissect.decode_response(frame, api_key, version)
                dissected = dissect_response(struct.pack(">i", len(frame)) + frame, api_key, version)
                built = KafkaResponse(correlation_id=correlation_id, api_version=version) / \
                    to_scapy(body, scapy_cls)
            if core.body._message.split()[1] != f"v{version}":
                continue  # e.g. an ApiVersions error response laid out as v0
            if Raw in dissected or not isinstance(dissected.payload, scapy_cls):
                failures.append(f"{where}: not dissected")
            elif scapy_plain(dissected.payload) != core_plain(core.body):
                failures.append(f"{where}: values differ")
            elif bytes(built) != struct.pack(">i", len(frame)) + frame:
                failures.append(f"{where}: built bytes differ")
            checked += 1
        except Exception as problem:  # report every failing version, not just the first
            failures.append(f"{where}: {type(problem).__name__}: {problem}")
    assert not failures, f"{len(failures)} failures, e.g. {failures[:10]}"
    assert checked > 1000


def test_consumer_protocol_every_version_both_ways():
    from kdissect.protocol.codec import embedded_codec
    from kdissect.protocol.consumer import encode_embedded, parse_embedded
    from kdissect.protocol.model import ConsumerProtocolData
    from kdissect.protocol.schema import embedded_versions

    rng = random.Random(7)
    checked = 0
    for name, kind in (("ConsumerProtocolSubscription", "subscription"),
                       ("ConsumerProtocolAssignment", "assignment")):
        lo, hi = embedded_versions(name)
        for version in range(lo, hi + 1):
            for _ in range(5):
                data = random_struct(rng, embedded_codec(name, version).cls)
                raw = encode_embedded(ConsumerProtocolData(kind, version, data))
                core = parse_embedded(name, raw)
                packet = GENERATED[name](raw)
                plain = scapy_plain(packet)
                assert plain.pop("version") == version
                assert plain == core_plain(core.data)
                built = to_scapy(data, GENERATED[name])
                built.version = version
                assert bytes(built) == raw
                checked += 1
    assert checked == 5 * 8
