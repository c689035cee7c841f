"""The unit that flows from the capture reader into reassembly.

One `TcpSegment` is one captured TCP packet, reduced to what stream
reassembly needs. Times are integers: nanoseconds since the Unix epoch,
exact to the capture's own resolution (microseconds for classic pcap). The capture reader produces them; the single-process
pipeline and the Spark job both feed them, in capture order, to the same
per-connection code. Keep this type flat and free of protocol logic so it
maps one-to-one onto an Arrow/Spark row.
"""

from __future__ import annotations

from typing import Any, dataclass_transform

# TCP flag bits, as in the TCP header's flags byte.
FIN = 0x01
SYN = 0x02
RST = 0x04
PSH = 0x08
ACK = 0x10


_FIELDS: dict[type, tuple[str, ...]] = {}


def fields_of(cls: type) -> tuple[str, ...]:
    """A SlotRecord class's fields, in order: its __slots__; for a class
    compiled by mypyc (kdissect/native.py), which holds its fields natively
    and keeps no __slots__, the fields mypyc lists in __mypyc_attrs__."""
    names = _FIELDS.get(cls)
    if names is None:
        slots = cls.__dict__.get("__slots__")
        if slots is None:
            slots = [name for name in cls.__dict__.get("__mypyc_attrs__", ()) if not name.startswith("__")]
        names = _FIELDS[cls] = tuple(slots)
    return names


class SlotRecord:
    """Base of small records with __slots__ and a hand-written __init__:
    repr and equality by fields, as a dataclass has them, without the cost
    of generating a dataclass at every start (these sit on the export path)."""

    __slots__ = ()

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in fields_of(type(self)))
        return f"{type(self).__name__}({fields})"

    def __eq__(self, other: Any) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        names = fields_of(type(self))
        return tuple(getattr(self, n) for n in names) == tuple(getattr(other, n) for n in names)

    __hash__ = None  # type: ignore[assignment]  # mutable, like a dataclass with eq

    def to_dict(self) -> dict[str, Any]:
        """The fields by name (the values themselves, not copies)."""
        return {name: getattr(self, name) for name in fields_of(type(self))}


class FrozenSlotRecord(SlotRecord):
    """A SlotRecord that cannot change after __init__, hashable by its
    fields, as a frozen dataclass. __init__ takes the fields in __slots__
    order and stores them with `_set_fields` (plain assignment raises)."""

    __slots__ = ()

    def _set_fields(self, *values: Any) -> None:
        for name, value in zip(fields_of(type(self)), values, strict=True):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot assign to field {name!r} of frozen {type(self).__name__}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r} of frozen {type(self).__name__}")

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(getattr(self, name) for name in fields_of(type(self))))

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:  # pickle and copy through __init__
        return type(self), tuple(getattr(self, name) for name in fields_of(type(self)))


class _Fresh:
    """A field default made new for each instance (`fresh(factory=list)`)."""

    __slots__ = ("factory",)

    def __init__(self, factory: type) -> None:
        self.factory = factory


def fresh(*, factory: type) -> Any:
    """The default of a table field that holds a new `factory()` per
    instance, as a dataclass's default_factory (list and dict only: the
    generated __init__ writes them as literals, `[]` or `{}`). Called with
    the keyword, which is how type checkers see a default (PEP 681)."""
    if factory not in _LITERALS:
        raise TypeError(f"fresh() takes list or dict, not {factory!r}")
    return _Fresh(factory)


_LITERALS: dict[type, str] = {list: "[]", dict: "{}"}


@dataclass_transform(field_specifiers=(fresh,))
class _FieldTable(type):
    """The metaclass of TableRecord: turns the class body's annotated
    fields (`name: type = default`, in order) into __slots__ and a
    generated __init__ that assigns them, before the class is made.

    The __init__ is generated as source and compiled once per class, at
    import: it is the plain `self.x = x` code a hand-written one would be
    (same construction cost), and cheaper at start-up than a dataclass.
    A `fresh(factory=list)` field's parameter defaults to None and takes a new []."""

    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> _FieldTable:
        fields = [field for field in namespace.get("__annotations__", {})
                  if not str(namespace["__annotations__"][field]).startswith("ClassVar")]
        if fields:
            defaults = {field: namespace.pop(field) for field in fields if field in namespace}
            namespace["__slots__"] = tuple(fields)
            namespace["__init__"] = _generated_init(name, fields, defaults)
        return super().__new__(mcs, name, bases, namespace)


def _generated_init(name: str, fields: list[str], defaults: dict[str, Any]) -> Any:
    params, lines, values = [], [], {}
    defaulted = False
    for field in fields:
        default = defaults.get(field, _NO_DEFAULT)
        if isinstance(default, _Fresh):
            params.append(f"{field}=None")
            defaulted = True
            lines.append(f"    self.{field} = {_LITERALS[default.factory]} if {field} is None else {field}")
            continue
        if default is _NO_DEFAULT:
            if defaulted:
                raise TypeError(f"{name}: field {field!r} without a default after one with a default")
            params.append(field)
            lines.append(f"    self.{field} = {field}")
            continue
        defaulted = True
        if default is None or isinstance(default, (bool, int, float, str)):
            params.append(f"{field}={default!r}")
        else:
            values[f"_default_{field}"] = default
            params.append(f"{field}=_default_{field}")
        lines.append(f"    self.{field} = {field}")
    source = f"def __init__(self, {', '.join(params)}):\n" + "\n".join(lines) + "\n"
    scope: dict[str, Any] = {}
    exec(compile(source, f"<generated __init__ of {name}>", "exec"), values, scope)
    init = scope["__init__"]
    init.__qualname__ = f"{name}.__init__"
    return init


_NO_DEFAULT = object()


class TableRecord(SlotRecord, metaclass=_FieldTable):
    """A SlotRecord declared once, as a table of fields in its class body
    (`name: type = default  # what it holds`): the metaclass writes its
    __slots__ and __init__ (parameters in field order, keywords or
    positions). For the records with many fields (Accounting, Exchange);
    not for the compiled modules' classes (mypyc takes no Python metaclass:
    docs/architecture.md)."""

    __slots__ = ()


class TcpSegment(SlotRecord):
    __slots__ = ("capture_index", "frame_number", "ts", "src", "sport", "dst", "dport", "seq", "ack", "flags",
                 "payload", "payload_len", "order_ts")

    def __init__(self, capture_index: int, frame_number: int, ts: int, src: str, sport: int, dst: str,
                 dport: int, seq: int, ack: int, flags: int, payload: bytes, payload_len: int,
                 order_ts: int | None = None) -> None:
        self.capture_index = capture_index  # position of the file within the capture set
        self.frame_number = frame_number  # 1-based packet number within its file, as tshark counts
        self.ts = ts  # int: nanoseconds since the Unix epoch, exact to the capture's resolution
        self.src = src  # source IP address, text form ("10.0.0.1", "::1")
        self.sport = sport
        self.dst = dst
        self.dport = dport
        self.seq = seq  # TCP sequence number (32-bit, as on the wire)
        self.ack = ack
        self.flags = flags  # TCP flags byte (FIN/SYN/RST/PSH/ACK bits above)
        self.payload = payload  # TCP payload bytes that were captured
        self.payload_len = payload_len  # TCP payload length on the wire; > len(payload) when snaplen cut it
        # ns; where the packet sits in the capture set's feed order: its own
        # time, or the latest time before it in its file when its file's clock
        # went backwards (see kdissect/wire/captureset.py)
        self.order_ts = ts if order_ts is None else order_ts

    @property
    def truncated(self) -> bool:
        return self.payload_len > len(self.payload)
