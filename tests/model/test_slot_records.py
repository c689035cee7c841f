"""The hand-written records (kdissect.model.packet.SlotRecord) behave as the
dataclasses they replaced: each __init__ takes exactly the fields in
__slots__ order (repr, ==, hashing, pickling and the counters' sums all
walk __slots__), mutable defaults are fresh per instance, and frozen
records refuse changes, hash by their fields and survive pickle and copy."""

from __future__ import annotations

import copy
import importlib
import inspect
import pickle
from pathlib import Path

import pytest

from kdissect.model.packet import FrozenSlotRecord, SlotRecord, TableRecord, fields_of, fresh

# the modules that define records (the export path's and the ones before them)
MODULES = ("kdissect.model.packet", "kdissect.model.accounting", "kdissect.wire.capture", "kdissect.conn.framing", "kdissect.wire.reassembly",
           "kdissect.conn.pairing", "kdissect.shared.output", "kdissect.records.model", "kdissect.records.codecs",
           "kdissect.protocol.schema", "kdissect.protocol.summary")


def _records() -> list[type]:
    for name in MODULES:
        importlib.import_module(name)
    found, todo = [], [SlotRecord]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls.__module__.startswith("kdissect.") and "__init__" in vars(cls):
            found.append(cls)
    return sorted(found, key=lambda c: (c.__module__, c.__qualname__))


RECORDS = _records()
# records whose __init__ derives their fields from other arguments
DERIVED = {"PairedFrame"}


def test_records_are_found():
    names = {f"{c.__module__}.{c.__qualname__}" for c in RECORDS}
    assert {"kdissect.model.accounting.Accounting", "kdissect.protocol.schema.FieldSchema",
            "kdissect.wire.capture.FileRange", "kdissect.records.model.Batch"} <= names


@pytest.mark.parametrize("cls", [c for c in RECORDS if c.__qualname__ not in DERIVED],
                         ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_init_takes_the_slots_in_order(cls):
    if issubclass(cls, TableRecord):  # generated from its field table
        assert list(inspect.signature(cls.__init__).parameters)[1:] == list(fields_of(cls))
    else:
        assert _init_parameters(cls) == list(fields_of(cls))


def test_table_records_are_declared_once():
    """Accounting and Exchange declare each field once, in the class body;
    the generated __init__ takes them in that order, by position or keyword,
    with their defaults, and a fresh(factory=list) field is a new list each time."""
    from kdissect.model.accounting import Accounting
    from kdissect.model.exchange import Exchange

    assert issubclass(Accounting, TableRecord) and issubclass(Exchange, TableRecord)
    assert Accounting.__slots__ == tuple(Accounting.__annotations__)
    assert Exchange.__slots__ == tuple(Exchange.__annotations__)
    assert Accounting(1, 2).non_tcp_packets == 2 and Accounting(ok=4).ok == 4
    one, two = Exchange(), Exchange(api_key=3, problems=["x"])
    assert one.status == "ok" and one.expects_response is True and two.api_key == 3 and two.problems == ["x"]
    assert one.problems == [] and one.problems is not Exchange().problems
    assert one != Exchange() and one == one and len({one, Exchange()}) == 2  # identity, as before
    with pytest.raises(TypeError):
        Exchange(nope=1)


def test_table_record_rules():
    class Point(TableRecord):
        x: int
        y: int = 2
        tags: list[str] = fresh(factory=list)

    assert Point.__slots__ == ("x", "y", "tags")
    assert Point(1) == Point(1, 2, []) and Point(1).tags is not Point(1).tags
    with pytest.raises(TypeError):
        Point()
    with pytest.raises(TypeError):
        class Wrong(TableRecord):
            x: int = 0
            y: int
    with pytest.raises(TypeError):
        fresh(factory=set)


def _init_parameters(cls: type) -> list[str]:
    """The names __init__ takes after self, from the class's source (a
    compiled build's __init__ shows no signature: kdissect/native.py)."""
    import ast

    import kdissect

    source = Path(kdissect.__file__).parent.parent / (cls.__module__.replace(".", "/") + ".py")
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.ClassDef) and node.name == cls.__qualname__:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    return [arg.arg for arg in item.args.args[1:] + item.args.kwonlyargs]
    raise AssertionError(f"no __init__ of {cls.__qualname__} in {source}")


def test_mutable_defaults_are_fresh_per_instance():
    from kdissect.wire.capture import ReadStats, Section, Walk
    from kdissect.protocol.schema import MessageSchema
    from kdissect.records.codecs import Inflated
    from kdissect.records.model import Batch, DecodedRecords, Record
    from kdissect.wire.reassembly import ReassemblyStats

    made = [
        (lambda: Record(0, None, None, None), ("headers",)),
        (lambda: Batch(0, 0, 0, 2), ("records", "problems", "notes")),
        (lambda: DecodedRecords(), ("batches", "problems")),
        (lambda: Inflated(b""), ("problems", "notes")),
        (lambda: ReadStats(), ("problems",)),
        (lambda: Section(), ("interfaces",)),
        (lambda: Walk(), ("events", "ticks")),
        (lambda: ReassemblyStats(), ("closed",)),
        (lambda: MessageSchema(0, "ProduceRequest", 0, "request", False, (), "x"), ("extra",)),
    ]
    for make, names in made:
        first, second = make(), make()
        for name in names:
            assert getattr(first, name) == type(getattr(first, name))()  # empty
            assert getattr(first, name) is not getattr(second, name), name


def test_mutable_records_compare_by_fields_and_are_unhashable():
    from kdissect.model.accounting import Accounting

    assert Accounting(packets=3) == Accounting(3)
    assert Accounting(packets=3) != Accounting(packets=4)
    assert repr(Accounting(ok=1)).startswith("Accounting(packets=0, ")
    with pytest.raises(TypeError):
        hash(Accounting())
    counts = Accounting(packets=3, unknown_apis=2).to_dict()
    assert list(counts) == list(Accounting.__slots__) and counts["packets"] == 3 and counts["unknown_apis"] == 2
    assert Accounting.from_dict(counts) == Accounting(packets=3, unknown_apis=2)


def test_frozen_records_refuse_changes_and_hash_by_fields():
    from kdissect.wire.capture import CaptureFile, FileRange, PcapHeader
    from kdissect.protocol.summary import ResponseSummary

    header = PcapHeader("<", 1_000_000, 65535, 1)
    assert header.version == (2, 4) and header.record_header_size == 16
    with pytest.raises(AttributeError):
        header.snaplen = 1
    with pytest.raises(AttributeError):
        del header.snaplen
    assert header.snaplen == 65535
    assert repr(ResponseSummary(None, 0, (3,))) == "ResponseSummary(throttle_time_ms=None, error_code=0, error_codes=(3,))"
    ranges = {FileRange("a.pcap", 0, "pcap", 24, 100), FileRange("a.pcap", 0, "pcap", 24, 100)}
    assert len(ranges) == 1
    assert FileRange("a.pcap", 0, "pcap", 24, 100) != FileRange("a.pcap", 0, "pcap", 24, 101)
    for record in (header, CaptureFile(Path("a.pcap"), "pcap", None, 1_000_000), ranges.pop(),
                   ResponseSummary(1, None, ())):
        assert pickle.loads(pickle.dumps(record)) == record
        assert copy.copy(record) == record and copy.deepcopy(record) == record
        assert hash(copy.deepcopy(record)) == hash(record)


def test_frozen_records_are_only_frozen_ones():
    frozen = {c.__qualname__ for c in RECORDS if issubclass(c, FrozenSlotRecord)}
    assert frozen == {"FieldSchema", "MessageSchema", "ResponseSummary", "PcapHeader", "CaptureFile", "FileRange",
                      "Location", "S3Settings", "GcsSettings", "AzureSettings", "StoreSettings"}


def test_records_of_the_compiled_modules_compare_and_show_their_fields():
    """Equality and repr walk the fields (fields_of), also for the classes
    of the modules kdissect compiles (kdissect/native.py), which keep no
    __slots__: a record with one field changed is another record."""
    from kdissect.conn.framing import Frame, FramingStats
    from kdissect.wire.reassembly import ReassemblyStats

    frame = Frame(0, 10, 4, b"abcd", True, 5, 0, 7)
    assert frame == Frame(0, 10, 4, b"abcd", True, 5, 0, 7)
    assert frame != Frame(0, 10, 4, b"abce", True, 5, 0, 7)
    assert repr(frame).startswith("Frame(direction=0, offset=10, size=4, data=b'abcd',")
    assert ReassemblyStats(segments=2, gaps=1) != ReassemblyStats(segments=2, gaps=2)
    assert FramingStats(frames=2) != FramingStats(frames=3)
    total = ReassemblyStats(segments=2, gap_bytes=5, closed={"fin": 1})
    total.add(ReassemblyStats(segments=3, gap_bytes=1, closed={"fin": 2, "rst": 1}))
    assert (total.segments, total.gap_bytes, total.closed) == (5, 6, {"fin": 3, "rst": 1})
    from kdissect.wire.capture import ReadStats

    read = ReadStats(packets=4, problems=["a"])
    read.add(ReadStats(packets=1, non_tcp=2, problems=["b"]))
    assert (read.packets, read.non_tcp, read.problems) == (5, 2, ["a", "b"])
