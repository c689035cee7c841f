"""GENERATED AT IMPORT TIME from the kdissect.protocol tables -- do not add
hand-written classes here.

`generate()` builds, for every API and direction, one body Packet class
named after the spec message (`MetadataRequest`, `ProduceResponse`) and one
Packet class per nested struct (`MetadataRequestTopic`), whose fields are the
snake_case spec fields of all versions in wire order, each present only in
the versions that define it (see kdissect.scapy.layers). The bodies are bound
under the headers by api key.

The consumer-protocol structures carried in JoinGroup / SyncGroup /
DescribeGroups bytes fields are generated the same way
(`ConsumerProtocolSubscription(member.metadata)`), with their leading int16
version as a field.

Spec struct names are not unique across APIs (`PartitionData` appears in a
dozen messages). A struct name used by one message only is the class name;
a shared one is prefixed with the message name
(`FetchRequestFetchTopic`, `ShareFetchRequestFetchTopic`). Every struct class
is also reachable from its message class (`FetchRequest.FetchTopic`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from scapy.packet import bind_layers

from kdissect.protocol._generated.embedded import EMBEDDED
from kdissect.protocol.schema import (
    FieldSchema,
    api_keys,
    api_versions,
    defined_versions,
    embedded_schema,
    embedded_versions,
    get_schema,
)
from kdissect.scapy.fields import (
    KafkaStructArrayField,
    KafkaStructField,
    KafkaScalarArrayField,
    KafkaSecretBytesField,
    KafkaTagSectionField,
    scalar_field_class,
)
from kdissect.scapy.layers import (
    KafkaBody,
    KafkaEmbeddedBody,
    KafkaRequest,
    KafkaResponse,
    KafkaStruct,
    NameFieldAttribute,
    VersionedField,
    _EmbeddedVersionField,
)

DIRECTIONS = ("request", "response")


class _Union:
    """Fields of one struct (or body) over all versions, in wire order."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self.newest: dict[str, FieldSchema] = {}
        self.flexible_somewhere = False

    def add(self, fields: tuple[FieldSchema, ...], flexible: bool) -> None:
        self.flexible_somewhere |= flexible
        names = [f.attr for f in fields]
        for index, f in enumerate(fields):
            self.newest[f.attr] = f  # versions are added oldest first
            if f.attr in self.order:
                continue
            # insert after the nearest earlier field of this version already placed
            position = 0
            for earlier in reversed(names[:index]):
                if earlier in self.order:
                    position = self.order.index(earlier) + 1
                    break
            self.order.insert(position, f.attr)

    def check(self, fields: tuple[FieldSchema, ...], where: str) -> None:
        names = [f.attr for f in fields]
        placed = [name for name in self.order if name in names]
        if placed != names:
            raise RuntimeError(f"{where}: field order {names} does not fit the union {self.order}")


def _collect(schemas: list) -> tuple[_Union, dict[str, _Union]]:
    """Union of the fields of a message (and of each nested struct) over `schemas`."""
    body = _Union()
    structs: dict[str, _Union] = defaultdict(_Union)

    def walk(union: _Union, fields: tuple[FieldSchema, ...], flexible: bool, check: bool, where: str) -> None:
        if check:
            union.check(fields, where)
        else:
            union.add(fields, flexible)
        for f in fields:
            if f.is_struct:
                walk(structs[f.struct_name], f.fields, flexible, check,  # type: ignore[index, arg-type]
                     f"{where}.{f.struct_name}")

    for schema in schemas:
        walk(body, schema.fields, schema.flexible, False, schema.name)
    for schema in schemas:
        walk(body, schema.fields, schema.flexible, True, f"{schema.name} v{schema.version}")
    return body, dict(structs)


def _scapy_default(f: FieldSchema) -> Any:
    if f.is_array:
        return None if f.default is None else []
    if f.is_struct:
        return None
    return f.default


def _field(f: FieldSchema, classes: dict[str, type]) -> Any:
    default = _scapy_default(f)
    if f.is_struct:
        cls = classes[f.struct_name]  # type: ignore[index]
        inner: Any = KafkaStructArrayField(f.attr, default, cls) if f.is_array else \
            KafkaStructField(f.attr, default, cls)
    elif f.is_array:
        inner = KafkaScalarArrayField(f.attr, default, f.element)
    elif f.secret and f.element == "bytes":
        inner = KafkaSecretBytesField(f.attr, default)
    else:
        inner = scalar_field_class(f.element)(f.attr, default)
    return VersionedField(inner, f.attr)


def _fields_desc(union: _Union, classes: dict[str, type]) -> list:
    desc = [_field(union.newest[name], classes) for name in union.order]
    if union.flexible_somewhere:
        desc.append(VersionedTagSection())
    return desc


class VersionedTagSection(VersionedField):
    """The struct's tagged-field section, present in flexible versions."""

    def __init__(self) -> None:
        VersionedField.__init__(self, KafkaTagSectionField("unknown_tagged_fields"), "")
        self.cond = lambda pkt: pkt.kafka_flexible()


def _dependency_order(structs: dict[str, _Union]) -> list[str]:
    """Struct names, nested ones first (classes must exist before their users)."""
    done: list[str] = []

    def visit(name: str) -> None:
        if name in done:
            return
        for f in structs[name].newest.values():
            if f.is_struct:
                visit(f.struct_name)  # type: ignore[arg-type]
        done.append(name)

    for name in structs:
        visit(name)
    return done


def _expose_name_field(cls: type) -> None:
    if any(f.name == "name" for f in cls.fields_desc):  # type: ignore[attr-defined]
        type.__setattr__(cls, "name", NameFieldAttribute())


def generate() -> dict[str, type]:
    """Build all body and struct classes; returns {python name: class}."""
    plan: dict[Any, tuple[_Union, dict[str, _Union]]] = {}  # (api key, direction) or an embedded name
    users: dict[str, set[Any]] = defaultdict(set)
    for api_key in api_keys():
        for direction in DIRECTIONS:
            if not defined_versions(api_key, direction):
                continue
            body, structs = _collect([get_schema(api_key, v, direction)
                                      for v in defined_versions(api_key, direction)])
            plan[(api_key, direction)] = (body, structs)
            for name in structs:
                users[name].add((api_key, direction))
    for embedded in EMBEDDED:
        lo, hi = embedded_versions(embedded)
        body, structs = _collect([embedded_schema(embedded, v) for v in range(lo, hi + 1)])
        plan[embedded] = (body, structs)
        for name in structs:
            users[name].add(embedded)

    namespace: dict[str, type] = {}
    for owner, (body, structs) in plan.items():
        if isinstance(owner, str):  # a consumer-protocol structure
            message, api_key, direction, embedded = owner, -1, "data", owner
        else:
            api_key, direction = owner
            message = api_versions(api_key).name + ("Request" if direction == "request" else "Response")
            embedded = None  # type: ignore[assignment]
        classes: dict[str, type] = {}
        for struct_name in _dependency_order(structs):
            shared = len(users[struct_name]) > 1 or struct_name == message
            py_name = message + struct_name if shared else struct_name
            cls = type(py_name, (KafkaStruct,), {
                "_name": py_name,  # not "name": Scapy would take it as the default of a "name" field
                "kafka_api_key": api_key,
                "kafka_direction": direction,
                "kafka_struct": struct_name,
                "kafka_embedded": embedded,
                "fields_desc": _fields_desc(structs[struct_name], classes),
                "__module__": __name__,
                "__doc__": f"{message} struct {struct_name} (generated from the protocol tables).",
            })
            _expose_name_field(cls)
            classes[struct_name] = cls
            namespace[py_name] = cls
        attrs: dict[str, Any] = {
            "_name": message,
            "kafka_api_key": api_key,
            "kafka_direction": direction,
            "kafka_struct": None,
            "kafka_embedded": embedded,
            "fields_desc": _fields_desc(body, classes),
            "__module__": __name__,
            "__doc__": f"Kafka {message} body, all versions (generated from the protocol tables).",
        }
        if embedded is not None:
            attrs["fields_desc"] = [_EmbeddedVersionField("version", None)] + attrs["fields_desc"]
            attrs["__doc__"] = f"Consumer protocol {message}, all versions (generated from the protocol tables)."
        cls = type(message, (KafkaEmbeddedBody if embedded is not None else KafkaBody,), attrs)
        _expose_name_field(cls)
        for struct_name, struct_cls in classes.items():
            if not hasattr(cls, struct_name):
                type.__setattr__(cls, struct_name, struct_cls)
        namespace[message] = cls
        if embedded is None:
            header = KafkaRequest if direction == "request" else KafkaResponse
            bind_layers(header, cls, api_key=api_key)
    return namespace
