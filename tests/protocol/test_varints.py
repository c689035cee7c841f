"""kdissect reads varints with one reader (protocol.primitives.read_uvarint),
strict for message fields, lenient for record fields as Kafka's record
readers are. Vectors from the protobuf/Kafka encoding rules (LEB128, zigzag),
written out by hand."""

from __future__ import annotations

import pytest

from kdissect.protocol.primitives import read_uvarint
from kdissect.records.wire import Malformed, Truncated, read_varint


@pytest.mark.parametrize("raw, value", [
    (b"\x00", 0), (b"\x01", -1), (b"\x02", 1), (b"\x03", -2),
    (b"\xd8\x04", 300),  # zigzag(300) = 600 = 0b100_1011000
    (b"\xfe\xff\xff\xff\x0f", 2**31 - 1), (b"\xff\xff\xff\xff\x0f", -(2**31)),
    (b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", -(2**63)),
])
def test_record_varints(raw: bytes, value: int) -> None:
    assert read_varint(raw + b"\x7f", 0) == (value, len(raw))


def test_record_varints_allow_non_minimal_encodings_but_not_more_than_ten_bytes() -> None:
    assert read_varint(b"\x82\x00", 0) == (1, 2)  # Kafka's ByteUtils reads these too
    with pytest.raises(Malformed, match="longer than 10 bytes"):
        read_varint(b"\x80" * 10 + b"\x00", 0)
    with pytest.raises(Truncated):
        read_varint(b"\x80\x80", 0)


def test_message_varints_are_strict() -> None:
    with pytest.raises(ValueError, match="non-minimal"):
        read_uvarint(b"\x82\x00", 0)
    assert read_uvarint(b"\x82\x00", 0, 5, False) == (2, 2)
    with pytest.raises(ValueError, match="too long"):
        read_uvarint(b"\x80\x80\x80\x80\x80\x01", 0)
    with pytest.raises(IndexError):
        read_uvarint(b"\x80", 0)
