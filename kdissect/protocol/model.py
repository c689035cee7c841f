"""Decoded message objects: structs, headers, requests and responses.

Plain data: nothing here decodes or encodes (the codec does both, see
`codec.py`), so the model imports no other part of the protocol package but
the api names.

Every decoded struct is an instance of a class built by the codec for one
(message, version, struct), derived from the typed class of its message
(``kdissect.protocol.bodies``). Fields are slots named by the snake_case spec
names and are readable as attributes (``body.topics``) or mapping keys
(``body["topics"]``). Flexible structs also carry ``unknown_tagged_fields``
(``[(tag, raw bytes), ...]``) and remember the order their tags arrived in so
that re-encoding is byte-identical.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

from kdissect.protocol.apis import ApiKey, api_name

# plain ints for the per-frame checks: reading an enum member costs ~0.3 µs in Python 3.11
_PRODUCE = int(ApiKey.PRODUCE)
_SASL_HANDSHAKE = int(ApiKey.SASL_HANDSHAKE)


class Struct:
    """Base of generated field containers (see module docstring)."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()  # attribute names, wire order (tagged last)
    _secrets: frozenset[str] = frozenset()  # attributes holding credentials
    _defaults: tuple[tuple[str, Any], ...] = ()  # (attr, default factory or value)
    _schema: Any = None  # tuple of FieldSchema
    _message: str = ""  # e.g. "MetadataResponse v12"
    _nested: dict = {}  # attr -> struct class of struct-typed fields
    _origin: Any = ((), ())  # (codec origin, field path) to find the class again
    unknown_tagged_fields: Any = ()
    _tag_order: Any = None

    if TYPE_CHECKING:  # the fields are the generated classes' own: any name, read as Any
        def __getattr__(self, name: str) -> Any: ...

        def __setattr__(self, name: str, value: Any) -> None: ...

    def __init__(self, **values: Any) -> None:
        """Build from field values; missing fields take the spec defaults."""
        for attr, default in self._defaults:
            if attr in values:
                value = values.pop(attr)
            else:
                value = default() if callable(default) else default
            object.__setattr__(self, attr, value)
        if "unknown_tagged_fields" in values:
            self.unknown_tagged_fields = list(values.pop("unknown_tagged_fields"))
        if values:
            raise TypeError(f"{type(self).__name__} has no field(s) {', '.join(sorted(values))}")

    # mapping access
    def __getitem__(self, key: str) -> Any:
        if key in self._fields:
            return getattr(self, key)
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return key in self._fields

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def keys(self) -> tuple[str, ...]:
        return self._fields

    def items(self) -> list[tuple[str, Any]]:
        return [(name, getattr(self, name)) for name in self._fields]

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default) if key in self._fields else default

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Struct) or other._fields != self._fields:
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in self._fields) and list(
            self.unknown_tagged_fields or ()
        ) == list(other.unknown_tagged_fields or ())

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__name__}({inner})"


class ConsumerProtocolData:
    """A bytes field decoded as the embedded consumer group protocol.

    ``kind`` is "subscription" or "assignment"; ``version`` the int16 that
    prefixes the bytes; ``data`` the decoded struct; ``raw`` the original
    bytes (re-encoding writes them back unchanged). Built from values (raw
    None), the codec encodes ``data`` (`consumer.encode_embedded`).
    """

    __slots__ = ("kind", "version", "data", "raw")

    def __init__(self, kind: str, version: int, data: Struct, raw: bytes | None = None) -> None:
        self.kind = kind
        self.version = version
        self.data = data
        self.raw = raw

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConsumerProtocolData):
            return NotImplemented
        return (self.kind, self.version, self.data) == (other.kind, other.version, other.data)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ConsumerProtocolData({self.kind!r}, v{self.version}, {self.data!r})"


class RequestHeader:
    __slots__ = ("api_key", "api_version", "correlation_id", "client_id", "tagged_fields", "header_version")

    def __init__(self, api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                 tagged_fields: list[tuple[int, bytes]] | None = None, header_version: int = 1) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.tagged_fields = tagged_fields if tagged_fields is not None else []
        self.header_version = header_version

    def __repr__(self) -> str:
        return (f"RequestHeader(api_key={self.api_key}, api_version={self.api_version}, "
                f"correlation_id={self.correlation_id}, client_id={self.client_id!r})")


class ResponseHeader:
    __slots__ = ("correlation_id", "tagged_fields", "header_version")

    def __init__(self, correlation_id: int, tagged_fields: list[tuple[int, bytes]] | None = None,
                 header_version: int = 0) -> None:
        self.correlation_id = correlation_id
        self.tagged_fields = tagged_fields if tagged_fields is not None else []
        self.header_version = header_version

    def __repr__(self) -> str:
        return f"ResponseHeader(correlation_id={self.correlation_id})"


class Request:
    """A decoded request: ``header``, ``body`` and derived facts."""

    __slots__ = ("header", "body", "body_version", "assumed_version")

    def __init__(self, header: RequestHeader, body: Struct, body_version: int | None = None,
                 assumed_version: str | None = None) -> None:
        self.header = header
        self.body = body
        # version whose layout decoded the body (differs when assumed)
        self.body_version = header.api_version if body_version is None else body_version
        self.assumed_version = assumed_version

    @property
    def api_key(self) -> int:
        return self.header.api_key

    @property
    def api_version(self) -> int:
        return self.header.api_version

    @property
    def correlation_id(self) -> int:
        return self.header.correlation_id

    @property
    def name(self) -> str:
        return api_name(self.header.api_key)

    @property
    def expects_response(self) -> bool:
        """False only for Produce with acks=0 (the broker sends nothing back)."""
        if self.header.api_key == _PRODUCE:
            return getattr(self.body, "acks", -1) != 0
        return True

    @property
    def starts_raw_sasl(self) -> bool:
        """True for SaslHandshake v0: after its response the connection carries
        raw SASL tokens with only a 4-byte size, no Kafka header."""
        return self.header.api_key == _SASL_HANDSHAKE and self.header.api_version == 0

    def __repr__(self) -> str:
        return f"Request({self.name} v{self.api_version}, {self.header!r}, {self.body!r})"


class Response:
    """A decoded response: ``header``, ``body`` and how it was decoded."""

    __slots__ = ("api_key", "api_version", "header", "body", "body_version", "assumed_version")

    def __init__(self, api_key: int, api_version: int, header: ResponseHeader, body: Struct,
                 body_version: int | None = None, assumed_version: str | None = None) -> None:
        self.api_key = api_key
        self.api_version = api_version  # the version the request asked for
        self.header = header
        self.body = body
        self.body_version = api_version if body_version is None else body_version
        self.assumed_version = assumed_version  # problem text, or None

    @property
    def correlation_id(self) -> int:
        return self.header.correlation_id

    @property
    def name(self) -> str:
        return api_name(self.api_key)

    def __repr__(self) -> str:
        return f"Response({self.name} v{self.api_version}, {self.header!r}, {self.body!r})"
