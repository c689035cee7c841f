"""Plain data types for decoded record data (message sets and record batches).

Both generations are presented the same way: a list of `Batch`es, each holding
`Record`s. For message sets (magic 0/1) one top-level message is one batch: an
uncompressed message is a batch of one record, a compressed wrapper message is
a batch of its inner messages. Problems are collected as text on the batch;
decoding never raises for any input bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

CODEC_NAMES: dict[int, str] = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

CREATE_TIME = "create_time"
LOG_APPEND_TIME = "log_append_time"

# Control record types (key of a control record, KIP-98).
CONTROL_TYPES: dict[int, str] = {0: "abort", 1: "commit"}


def codec_name(codec_id: int) -> str:
    return CODEC_NAMES.get(codec_id, f"unknown_{codec_id}")


@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int | None
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str | bytes, bytes | None]] = field(default_factory=list)
    attributes: int = 0
    control: str | None = None  # "commit" / "abort" / "control_<n>" for control records
    crc_ok: bool | None = None  # own CRC of an inner message (magic 0/1); None for magic 2
    coordinator_epoch: int | None = None  # control records only


@dataclass(slots=True)
class Batch:
    """One record batch (magic 2) or one top-level message (magic 0/1)."""

    position: int  # byte position of the batch within the records field
    base_offset: int
    length: int  # batch_length (magic 2) / message_size (magic 0/1)
    magic: int
    crc: int | None = None
    crc_ok: bool | None = None
    attributes: int = 0
    codec: str = "none"
    timestamp_type: str | None = None
    transactional: bool = False
    control: bool = False
    partition_leader_epoch: int | None = None
    last_offset_delta: int | None = None
    base_timestamp: int | None = None
    max_timestamp: int | None = None
    producer_id: int | None = None
    producer_epoch: int | None = None
    base_sequence: int | None = None
    record_count: int | None = None  # as declared in the header (magic 2)
    records: list[Record] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # harmless observations (e.g. legacy lz4 framing)
    partial: bool = False  # cut off at the end of the data (normal in Fetch responses)
    over_limit: bool = False  # decompression stopped at the configured cap
    uncompressed_bytes: int | None = None  # size of the (decompressed) records section

    @property
    def ok(self) -> bool:
        return not self.problems

    def __iter__(self):
        return iter(self.records)


@dataclass(slots=True)
class DecodedRecords:
    """Result of `decode_records`: the batches in wire order.

    Iterating yields batches. `records()` yields every record of every batch.
    A cut-off batch at the end is included with `partial=True` and no records.
    """

    batches: list[Batch] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # problems not tied to one batch

    def __iter__(self):
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, index: int) -> Batch:
        return self.batches[index]

    def records(self):
        for batch in self.batches:
            yield from batch.records

    @property
    def partial(self) -> bool:
        return bool(self.batches) and self.batches[-1].partial

    def all_problems(self) -> list[str]:
        found = list(self.problems)
        for batch in self.batches:
            found.extend(f"batch at offset {batch.base_offset}: {p}" for p in batch.problems)
        return found
