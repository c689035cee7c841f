"""Kafka frame headers as Scapy layers, the base classes of the generated body
and struct classes, and TCP stream reassembly.

How versions work. A body class (`MetadataRequest`) carries the union of its
fields over all versions, each wrapped in a `VersionedField` whose condition
asks the packet's current version. The version comes from the header below
the body (`KafkaRequest.api_version`, or the `api_version` a response was
paired with); nested structs find it through their `parent` chain. A body
without a header uses the newest version. So one class serves every version,
`show()` lists exactly the fields of that version, and building writes the
layout of the header's version (compact strings, tagged fields, ...).

Responses do not carry their api key and version on the wire. `KafkaResponse`
has them as fields that are not encoded: TCP reassembly fills them from the
request with the same correlation id on the same connection. The pairing is
also remembered by a digest of the exact response frame (bounded), so that
`show2()` and re-dissection of the same bytes still decode the body. Identical
response bytes can answer different APIs (a Heartbeat and an EndTxn response
with the same correlation id may be byte for byte the same): re-dissection
then uses the most recent pairing; `dissect_response(frame, api_key,
api_version)` pairs explicitly.
"""

from __future__ import annotations

import hashlib
import struct
import threading
from collections import OrderedDict
from functools import lru_cache
from typing import Any

from scapy.config import conf
from scapy.fields import ConditionalField, Field, SignedIntField, SignedShortField, StrLenField
from scapy.layers.inet import TCP
from scapy.packet import Packet, Raw, bind_layers, split_layers

from kdissect.model.exchange import Exchange
from kdissect.conn.framing import Frame
from kdissect.conn.pairing import ConnectionInfo, Pairer
from kdissect.conn.pairing_stats import PairingStats
from kdissect.protocol.apis import ApiKey, api_name
from kdissect.protocol.errors import error_name
from kdissect.protocol.headers import request_layout
from kdissect.protocol.objects import message_codec
from kdissect.protocol.primitives import DecodeError
from kdissect.protocol.schema import (
    UNSUPPORTED_VERSION,
    FieldSchema,
    api_versions,
    embedded_schema,
    embedded_versions,
    get_schema,
    header_versions,
    resolve_version,
)
from kdissect.scapy.fields import (
    ApiKeyField,
    KafkaDecodeError,
    KafkaHeaderTagsField,
    KafkaNullableStringField,
    redacted,
)

__all__ = [
    "KafkaRequest", "KafkaResponse", "KafkaSaslToken", "KafkaTrailingBytes", "KafkaStruct", "KafkaBody", "KafkaEmbeddedBody", "VersionedField",
    "NameFieldAttribute", "bind_kafka", "unbind_kafka", "dissect_response", "remember_response", "body_version",
]

MAX_FRAME = 1 << 30  # larger size prefixes are not Kafka framing
_INT32 = struct.Struct(">i")


# ------------------------------------------------------------ version tables

@lru_cache(maxsize=None)
def newest_version(api_key: int, direction: str) -> int | None:
    info = api_versions(api_key)
    span = info.request if direction == "request" else info.response
    return None if span is None else span[1]


@lru_cache(maxsize=4096)
def body_version(api_key: int | None, api_version: int | None, direction: str) -> int | None:
    """Version whose layout decodes this (api key, version, direction), or None."""
    if api_key is None:
        return None
    try:
        if api_version is None:
            return newest_version(api_key, direction)
        return resolve_version(api_key, api_version, direction)[0]
    except (KeyError, ValueError, TypeError):
        return None


@lru_cache(maxsize=4096)
def struct_fields(api_key: int, version: int, direction: str) -> dict[str | None, dict[str, FieldSchema]]:
    """{struct name (None for the message itself): {attr: FieldSchema}} of one version."""
    return _tables(get_schema(api_key, version, direction).fields)


@lru_cache(maxsize=256)
def embedded_struct_fields(name: str, version: int) -> dict[str | None, dict[str, FieldSchema]]:
    """Like struct_fields, for an embedded consumer-protocol structure."""
    return _tables(embedded_schema(name, version).fields)


def _tables(fields: tuple[FieldSchema, ...]) -> dict[str | None, dict[str, FieldSchema]]:
    out: dict[str | None, dict[str, FieldSchema]] = {}

    def walk(owner: str | None, fields: tuple[FieldSchema, ...]) -> None:
        out[owner] = {f.attr: f for f in fields}
        for f in fields:
            if f.is_struct and f.struct_name not in out:
                walk(f.struct_name, f.fields)  # type: ignore[arg-type]

    walk(None, fields)
    return out


@lru_cache(maxsize=4096)
def _flexible(api_key: int, version: int, direction: str) -> bool:
    return get_schema(api_key, version, direction).flexible


# --------------------------------------------------------------- base classes

class VersionedField(ConditionalField):
    """A field present only in some versions of its message.

    Unlike a plain ConditionalField, a present field whose value is None
    (a null string or array) keeps None after dissection instead of falling
    back to the default: `isconditional` is off for Scapy's dissect loop.
    """

    isconditional = False

    def __init__(self, fld: Field, name: str) -> None:
        ConditionalField.__init__(self, fld, lambda pkt, _n=name: pkt.kafka_field(_n) is not None)


_SHOWING = threading.local()


class NameFieldAttribute:
    """Lets a Kafka field called `name` be read and set as `pkt.name`.

    Scapy keeps the layer's display name in the `name` slot, but Kafka
    names topics, groups and resources `Name`. On classes with such a field
    this descriptor replaces the slot: `pkt.name` is the field value, while
    Scapy's own use of `self.name` (the layer title in show()) and the class
    attribute still give the layer name.
    """

    def __get__(self, obj: Any, owner: type) -> Any:
        if obj is None or getattr(_SHOWING, "depth", 0):  # type: ignore[arg-type]
            return owner._name or owner.__name__  # type: ignore[attr-defined]
        return obj.getfieldval("name")

    def __set__(self, obj: Any, value: Any) -> None:
        try:
            Packet.fields.__get__(obj)  # type: ignore[attr-defined]
        except AttributeError:
            return  # Packet.__init__ storing the layer name: derived from the class
        obj.setfieldval("name", value)


class KafkaStruct(Packet):
    """Base of every generated Kafka body and nested struct class."""

    kafka_api_key: int = -1
    kafka_direction: str = "request"
    kafka_struct: str | None = None  # spec struct name; None for a message body
    kafka_embedded: str | None = None  # consumer-protocol structure these fields belong to
    match_subclass = False

    # --- version context
    def _kafka_root_version(self) -> int | None:
        node: Packet | None = self
        while node is not None and not isinstance(node, KafkaBody):
            node = node.parent
        return node.kafka_body_version() if node is not None else None

    def _kafka_newest(self) -> int | None:
        if self.kafka_embedded is not None:
            return embedded_versions(self.kafka_embedded)[1]
        return newest_version(self.kafka_api_key, self.kafka_direction)

    def kafka_version(self) -> int | None:
        """Version of the enclosing message this packet is laid out by."""
        version = self._kafka_root_version()
        return version if version is not None else self._kafka_newest()

    def kafka_context(self) -> tuple[int, str, int | None]:
        """(api key, direction, body version) this packet is laid out by."""
        return self.kafka_api_key, self.kafka_direction, self.kafka_version()

    def kafka_fields_now(self) -> dict[str, FieldSchema]:
        version = self.kafka_version()
        if version is None:
            return {}
        try:
            if self.kafka_embedded is not None:
                tables = embedded_struct_fields(self.kafka_embedded, version)
            else:
                tables = struct_fields(self.kafka_api_key, version, self.kafka_direction)
        except KeyError:
            return {}
        return tables.get(self.kafka_struct, {})

    def kafka_field(self, name: str) -> FieldSchema | None:
        return self.kafka_fields_now().get(name)

    def kafka_flexible(self) -> bool:
        version = self.kafka_version()
        if version is None:
            return False
        try:
            if self.kafka_embedded is not None:
                return embedded_schema(self.kafka_embedded, version).flexible
            return _flexible(self.kafka_api_key, version, self.kafka_direction)
        except KeyError:
            return False

    def kafka_tagged_fields(self) -> list[tuple[Any, FieldSchema]]:
        now = self.kafka_fields_now()
        out = []
        for f in self.fields_desc:
            fs = now.get(f.name)
            if fs is not None and fs.tagged:
                out.append((f.fld if isinstance(f, ConditionalField) else f, fs))
        return out

    @staticmethod
    def kafka_tag_default(fs: FieldSchema) -> Any:
        """Value for which a tagged field is left out (as the core codec does)."""
        if fs.is_array:
            return None if fs.default is None else []
        if fs.is_struct:
            return None
        return fs.default

    # --- Scapy hooks
    def _show_or_dump(self, *args: Any, **kwargs: Any) -> Any:
        _SHOWING.depth = getattr(_SHOWING, "depth", 0) + 1
        try:
            return super()._show_or_dump(*args, **kwargs)
        finally:
            _SHOWING.depth -= 1

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        return b"", s  # what follows belongs to the enclosing struct

    def copy(self) -> "KafkaStruct":
        clone = super().copy()
        if "_kafka_tag_order" in self.__dict__:
            clone.__dict__["_kafka_tag_order"] = self.__dict__["_kafka_tag_order"]
        # nested structs find their version through `parent`: point the
        # copies at the copy, not at the original
        for f in self.packetfields:
            value = clone.fields.get(f.name)
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, Packet):
                    item.parent = clone
        return clone

    def to_dict(self) -> dict[str, Any]:
        """Field values of the current version as plain Python (nested dicts)."""
        out: dict[str, Any] = {}
        for f in self.fields_desc:
            if isinstance(f, ConditionalField) and not f._evalcond(self):
                continue
            value = self.getfieldval(f.name)
            if isinstance(value, list):
                value = [v.to_dict() if isinstance(v, KafkaStruct) else v for v in value]
            elif isinstance(value, KafkaStruct):
                value = value.to_dict()
            out[f.name] = value
        return out


class KafkaBody(KafkaStruct):
    """Base of the message body classes (`MetadataRequest`, `ProduceResponse`, ...)."""

    def kafka_body_version(self) -> int | None:
        header = self.underlayer
        if isinstance(header, (KafkaRequest, KafkaResponse)):
            return header.kafka_body_version()
        return None

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        # bytes after the last field (inside the frame) become a
        # KafkaTrailingBytes layer: the core notes them as trailing bytes and
        # decodes the body all the same (brokers accept them). Not Padding:
        # TCPSession reads Padding as the start of the next frame.
        return s, b""

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        return KafkaTrailingBytes

    def mysummary(self) -> str:
        text = f"Kafka {self.__class__.__name__} v{self.kafka_version()}"
        header = self.underlayer
        if isinstance(header, (KafkaRequest, KafkaResponse)):
            text += f" corr={header.correlation_id}"
        if self.kafka_direction == "response" and self.kafka_field("error_code") is not None:
            code = self.getfieldval("error_code")
            if code:
                text += f" {error_name(code)}"
        return text


class _EmbeddedVersionField(SignedShortField):
    """Leading int16 version of a consumer-protocol structure; None builds the newest."""

    def i2m(self, pkt: Packet | None, x: Any) -> int:
        if x is None and pkt is not None:
            x = embedded_versions(pkt.kafka_embedded)[1]
        return 0 if x is None else x


class KafkaEmbeddedBody(KafkaBody):
    """Base of the consumer-protocol classes (`ConsumerProtocolSubscription`,
    `ConsumerProtocolAssignment`): the bytes JoinGroup, SyncGroup and
    DescribeGroups carry for consumer groups, an int16 version then fields."""

    def kafka_body_version(self) -> int | None:
        version = self.getfieldval("version")
        lo, hi = embedded_versions(self.kafka_embedded)  # type: ignore[arg-type]
        if version is None:
            return hi
        # newer versions than the spec knows append fields: read the known prefix
        return version if version < lo else min(version, hi)

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        version = self.getfieldval("version")
        if version is not None and version > embedded_versions(self.kafka_embedded)[1]:  # type: ignore[arg-type]
            return s, b""  # fields of a newer version: left as a Raw payload
        return super().extract_padding(s)

    def mysummary(self) -> str:
        return f"{self.__class__.__name__} v{self.getfieldval('version')}"


# --------------------------------------------------------------- the headers

class _ApiVersionField(SignedShortField):
    """api_version; None builds the newest version the body class knows."""

    def i2m(self, pkt: Packet | None, x: Any) -> int:
        if x is None and pkt is not None:
            x = pkt.kafka_api_version()
        return 0 if x is None else x


class _ApiKeyField(ApiKeyField):
    def i2m(self, pkt: Packet | None, x: Any) -> int:
        if x is None and pkt is not None:
            x = pkt.kafka_api_key()
        return -1 if x is None else x


class _KafkaHeader(Packet):
    match_subclass = True

    def kafka_api_key(self) -> int | None:
        key = self.getfieldval("api_key")
        if key is None and isinstance(self.payload, KafkaBody):
            key = self.payload.kafka_api_key
        return key

    def kafka_api_version(self) -> int | None:
        version = self.getfieldval("api_version")
        if version is None:
            key = self.kafka_api_key()
            if key is not None:
                try:
                    version = newest_version(key, self.direction_name)
                except KeyError:
                    version = None
        return version

    def kafka_body_version(self) -> int | None:
        return body_version(self.kafka_api_key(), self.kafka_api_version(), self.direction_name)

    direction_name = "request"

    def kafka_header_version(self) -> int:
        raise NotImplementedError

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        size = self.getfieldval("length")
        consumed = self.__dict__.get("_kafka_header_bytes")
        if size is None or consumed is None:
            return s, b""
        body = max(0, 4 + size - consumed)
        return s[:body], s[body:]

    def do_dissect(self, s: bytes) -> bytes:
        rest = super().do_dissect(s)
        consumed = len(s) - len(rest)
        size = self.getfieldval("length")
        if size is not None and consumed > 4 + size:
            raise KafkaDecodeError(f"a {size}-byte frame is too short for its {consumed - 4}-byte header")
        self.__dict__["_kafka_header_bytes"] = consumed
        return rest

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        if self.kafka_body_version() is None:
            return Raw
        return super().guess_payload_class(payload)

    def do_dissect_payload(self, s: bytes) -> None:
        if not s:
            # Scapy adds no layer for zero bytes, but some bodies are empty
            # (ApiVersions v0 request): add the body when its version has no field
            cls = self.guess_payload_class(s)
            if isinstance(cls, type) and issubclass(cls, KafkaBody):
                body = cls(_internal=1, _underlayer=self)
                if not body.kafka_fields_now() and not body.kafka_flexible():
                    self.add_payload(body)
                    return
        super().do_dissect_payload(s)

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        if self.getfieldval("length") is None:
            pkt = _INT32.pack(len(pkt) - 4 + len(pay)) + pkt[4:]
        return pkt + pay


class KafkaRequest(_KafkaHeader):
    """A Kafka request frame: size prefix and request header v0/v1/v2."""

    name = "KafkaRequest"
    direction_name = "request"
    fields_desc = [
        SignedIntField("length", None),
        _ApiKeyField("api_key", None),
        _ApiVersionField("api_version", None),
        SignedIntField("correlation_id", 0),
        ConditionalField(KafkaNullableStringField("client_id", None),
                         lambda pkt: pkt.kafka_header_version() >= 1),
        ConditionalField(KafkaHeaderTagsField("tagged_fields"),
                         lambda pkt: pkt.kafka_header_version() >= 2),
    ]

    def kafka_header_version(self) -> int:
        key, version = self.kafka_api_key(), self.kafka_api_version()
        try:
            return request_layout(key, version)[0]
        except (KeyError, TypeError, ValueError):
            return 1  # unknown api or version: assume a client id follows

    def expects_response(self) -> bool:
        if self.kafka_api_key() == ApiKey.PRODUCE and isinstance(self.payload, KafkaBody):
            return self.payload.getfieldval("acks") != 0
        return True

    def mysummary(self) -> str:
        key = self.kafka_api_key()
        return (f"Kafka {api_name(key) if key is not None else '?'} v{self.kafka_api_version()} request "
                f"corr={self.correlation_id}")

    def hashret(self) -> bytes:
        return _INT32.pack(self.correlation_id or 0)

    @classmethod
    def tcp_reassemble(cls, data: bytes, metadata: dict, session: dict) -> Packet | None:
        return _reassemble(cls, data, metadata, session)


class _MetaField(Field[Any, Any]):
    """A value that is not on the wire (a response's api key / version)."""

    def __init__(self, name: str, default: Any) -> None:
        Field.__init__(self, name, default, fmt="!h")

    def addfield(self, pkt: Packet, s: bytes, val: Any) -> bytes:
        return s

    def getfield(self, pkt: Packet, s: bytes) -> tuple[bytes, Any]:
        binding = pkt.__dict__.get("_kafka_binding")
        value = None if binding is None else binding[0 if self.name == "api_key" else 1]
        return s, value

    def i2len(self, pkt: Packet, x: Any) -> int:
        return 0


class _MetaApiKeyField(_MetaField):
    i2repr = ApiKeyField.i2repr


class KafkaResponse(_KafkaHeader):
    """A Kafka response frame: size prefix and response header v0/v1.

    `api_key` and `api_version` are not on the wire: they come from the paired
    request (TCP reassembly, `dissect_response`) or are set when building."""

    name = "KafkaResponse"
    direction_name = "response"
    fields_desc = [
        SignedIntField("length", None),
        SignedIntField("correlation_id", 0),
        _MetaApiKeyField("api_key", None),
        _MetaField("api_version", None),
        ConditionalField(KafkaHeaderTagsField("tagged_fields"),
                         lambda pkt: pkt.kafka_header_version() >= 1),
    ]

    def kafka_body_version(self) -> int | None:
        forced = self.__dict__.get("_kafka_forced_body_version")
        if forced is not None:
            return forced
        return super().kafka_body_version()

    def kafka_api_version(self) -> int | None:
        # no newest-version guess for responses: unknown means undecodable
        version = self.getfieldval("api_version")
        if version is None and isinstance(self.payload, KafkaBody):
            version = newest_version(self.payload.kafka_api_key, "response")
        return version

    def kafka_header_version(self) -> int:
        key, version = self.kafka_api_key(), self.kafka_body_version()
        if key is None or version is None:
            return 0
        return header_versions(key, version, _flexible(key, version, "response"))[1]

    def do_dissect(self, s: bytes) -> bytes:
        self.__dict__["_kafka_binding"] = _recall_response(s)
        self.__dict__.pop("_kafka_forced_body_version", None)
        return super().do_dissect(s)

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        key, version = self.kafka_api_key(), self.kafka_api_version()
        if key == ApiKey.API_VERSIONS and version and len(payload) >= 2 and \
                struct.unpack_from(">h", payload)[0] == UNSUPPORTED_VERSION:
            # brokers answer an ApiVersions version they do not support with a v0 body
            try:
                _body, stop = message_codec(ApiKey.API_VERSIONS, 0, "response").decode(payload, 0, len(payload))
                if stop == len(payload):
                    self.__dict__["_kafka_forced_body_version"] = 0
            except DecodeError:
                pass
        return super().guess_payload_class(payload)

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        frame = super().post_build(pkt, pay)
        key, version = self.kafka_api_key(), self.kafka_api_version()
        if key is not None and version is not None:
            remember_response(frame, key, version)
        return frame

    def mysummary(self) -> str:
        key = self.kafka_api_key()
        name = api_name(key) if key is not None else "?"
        text = f"Kafka {name} v{self.kafka_api_version()} response corr={self.correlation_id}"
        body = self.payload
        if isinstance(body, KafkaBody) and body.kafka_field("error_code") is not None:
            code = body.getfieldval("error_code")
            if code:
                text += f" {error_name(code)}"
        return text

    def hashret(self) -> bytes:
        return _INT32.pack(self.correlation_id or 0)

    def answers(self, other: Packet) -> int:
        return int(isinstance(other, KafkaRequest) and other.correlation_id == self.correlation_id)

    def copy(self) -> "KafkaResponse":
        clone = super().copy()
        for name in ("_kafka_binding", "_kafka_forced_body_version", "_kafka_header_bytes"):
            if name in self.__dict__:
                clone.__dict__[name] = self.__dict__[name]
        return clone

    @classmethod
    def tcp_reassemble(cls, data: bytes, metadata: dict, session: dict) -> Packet | None:
        return _reassemble(cls, data, metadata, session)


# ------------------------------------------------ response pairing memory

_MEMO_SIZE = 1 << 16
_PAIRED: "OrderedDict[bytes, tuple[int, int]]" = OrderedDict()


def _digest(frame: bytes) -> bytes:
    return hashlib.blake2b(frame, digest_size=16).digest()


def remember_response(frame: bytes, api_key: int, api_version: int) -> None:
    """Record that this exact response frame (size prefix included) answers
    a request of (api_key, api_version); bounded, oldest forgotten first."""
    key = _digest(bytes(frame))
    _PAIRED[key] = (api_key, api_version)
    _PAIRED.move_to_end(key)
    while len(_PAIRED) > _MEMO_SIZE:
        _PAIRED.popitem(last=False)


def _recall_response(s: bytes) -> tuple[int, int] | None:
    if len(s) < 8:
        return None
    (size,) = _INT32.unpack_from(s, 0)
    if size < 4 or len(s) < 4 + size:
        return None
    return _PAIRED.get(_digest(bytes(s[:4 + size])))


def dissect_response(frame: bytes, api_key: int, api_version: int) -> KafkaResponse:
    """Dissect a response frame (with its size prefix) paired with a request
    of the given api key and version."""
    remember_response(frame, api_key, api_version)
    return KafkaResponse(frame)


# --------------------------------------------------------- TCP reassembly

def _pairing(session: dict) -> tuple[Pairer, list[Exchange], list[int]]:
    """The flow's core Pairer (the one every face uses), the exchanges it
    emitted for the frame being cut, and each direction's stream offset."""
    state = session.get("kafka_pairing")
    if state is None:
        emitted: list[Exchange] = []
        pairer = Pairer(PairingStats(), ConnectionInfo((), 0, "", "", (0, 0)), emitted.append, keep_messages=False)
        state = session["kafka_pairing"] = (pairer, emitted, [0, 0])
    return state


def _reassemble(cls: type[_KafkaHeader], data: bytes, metadata: dict, session: dict) -> Packet | None:
    """Cut one whole frame off the stream for Scapy's TCPSession.

    Bytes after the frame are left as Padding: TCPSession then calls again
    for the next frame (several frames in one segment). Too few bytes: None,
    and TCPSession waits for more segments (one frame over many segments).
    Each frame goes through the core's Pairer, which says whether it is a
    raw SASL token and which request a response answers.
    """
    if len(data) < 4:
        return None
    (size,) = _INT32.unpack_from(data, 0)
    if size < 0 or size > MAX_FRAME:
        return conf.raw_layer(data)  # not Kafka framing: hand the bytes over undecoded
    if len(data) < 4 + size:
        metadata["tcp_min_len"] = 4 + size
        return None
    frame_bytes = bytes(data[:4 + size])
    pairer, emitted, offsets = _pairing(session)
    direction = 0 if cls is KafkaRequest else 1
    # capture times are not needed here: with none (0) nothing is released by time
    frame = Frame(direction, offsets[direction], size, frame_bytes[4:], True, 0, 0, -1)
    offsets[direction] += 4 + size
    raw_before = pairer.stats.raw_sasl_frames
    emitted.clear()
    if direction == 0:
        pairer.on_request(frame)
    else:
        pairer.on_response(frame)
    if pairer.stats.raw_sasl_frames != raw_before:
        return _cut(KafkaSaslToken, data, size)
    if direction == 1:
        for ex in emitted:
            if ex.response_offset == frame.offset and ex.api_key is not None and ex.api_version is not None:
                remember_response(frame_bytes, ex.api_key, ex.api_version)
        return _cut(KafkaResponse, data, size)
    return _cut(KafkaRequest, data, size)


def _cut(cls: type[Packet], data: bytes, size: int) -> Packet:
    """Dissect the frame at the front of data as cls; what follows becomes
    Padding. A frame whose header does not decode is returned as Raw (with
    the rest still as Padding), so one bad frame does not lose the stream."""
    frame, rest = data[:4 + size], data[4 + size:]
    try:
        packet = cls(frame)
    except Exception:  # noqa: BLE001 - capture content must not stop the session
        packet = conf.raw_layer(frame)
    if rest:
        packet.add_payload(conf.padding_layer(rest))
    return packet


class KafkaTrailingBytes(Raw):
    """Bytes after the last field of a message body, inside its frame."""

    name = "KafkaTrailingBytes"


class _SecretToken(StrLenField):
    def i2repr(self, pkt: Packet | None, x: Any) -> str:
        return redacted(x) or StrLenField.i2repr(self, pkt, x)


class KafkaSaslToken(Packet):
    """A raw SASL token: size-prefixed, no Kafka header (after SaslHandshake v0)."""

    name = "KafkaSaslToken"
    fields_desc = [
        SignedIntField("length", None),
        _SecretToken("token", b"", length_from=lambda pkt: max(0, pkt.length or 0)),
    ]

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        if self.length is None:
            pkt = _INT32.pack(len(pkt) - 4) + pkt[4:]
        return pkt + pay

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        return b"", s

    @classmethod
    def tcp_reassemble(cls, data: bytes, metadata: dict, session: dict) -> Packet | None:
        return None  # only produced by the Kafka layers' reassembly


# ------------------------------------------------------------ port binding

_BOUND_PORTS: set[int] = set()


def bind_kafka(port: int) -> None:
    """Dissect TCP traffic to/from `port` as Kafka (requests to the port,
    responses from it). 9092 is bound when kdissect.scapy is imported."""
    if port in _BOUND_PORTS:
        return
    bind_layers(TCP, KafkaRequest, dport=port)
    bind_layers(TCP, KafkaResponse, sport=port)
    _BOUND_PORTS.add(port)


def unbind_kafka(port: int) -> None:
    if port not in _BOUND_PORTS:
        return
    split_layers(TCP, KafkaRequest, dport=port)
    split_layers(TCP, KafkaResponse, sport=port)
    _BOUND_PORTS.discard(port)
