"""Plain data types for decoded record data (message sets and record batches).

Both generations are presented the same way: a list of `Batch`es, each holding
`Record`s. For message sets (magic 0/1) one top-level message is one batch: an
uncompressed message is a batch of one record, a compressed wrapper message is
a batch of its inner messages. Problems are collected as text on the batch;
decoding never raises for any input bytes.
"""

from __future__ import annotations

from kdissect.model.packet import SlotRecord

CODEC_NAMES: dict[int, str] = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

CREATE_TIME = "create_time"
LOG_APPEND_TIME = "log_append_time"

# Control record types (key of a control record, KIP-98).
CONTROL_TYPES: dict[int, str] = {0: "abort", 1: "commit"}


def codec_name(codec_id: int) -> str:
    return CODEC_NAMES.get(codec_id, f"unknown_{codec_id}")


class Record(SlotRecord):
    __slots__ = ("offset", "timestamp", "key", "value", "headers", "attributes", "control", "crc_ok",
                 "coordinator_epoch")

    def __init__(self, offset: int, timestamp: int | None, key: bytes | None, value: bytes | None,
                 headers: list[tuple[str | bytes, bytes | None]] | None = None, attributes: int = 0,
                 control: str | None = None, crc_ok: bool | None = None, coordinator_epoch: int | None = None) -> None:
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.headers = [] if headers is None else headers
        self.attributes = attributes
        self.control = control  # "commit" / "abort" / "control_<n>" for control records
        self.crc_ok = crc_ok  # own CRC of an inner message (magic 0/1); None for magic 2
        self.coordinator_epoch = coordinator_epoch  # control records only


class Batch(SlotRecord):
    """One record batch (magic 2) or one top-level message (magic 0/1)."""

    __slots__ = ("position", "base_offset", "length", "magic", "crc", "crc_ok", "attributes", "codec", "timestamp_type",
                 "transactional", "control", "partition_leader_epoch", "last_offset_delta", "base_timestamp",
                 "max_timestamp", "producer_id", "producer_epoch", "base_sequence", "record_count", "records",
                 "problems", "notes", "partial", "over_limit", "uncompressed_bytes")

    def __init__(self, position: int, base_offset: int, length: int, magic: int, crc: int | None = None,
                 crc_ok: bool | None = None, attributes: int = 0, codec: str = "none",
                 timestamp_type: str | None = None, transactional: bool = False, control: bool = False,
                 partition_leader_epoch: int | None = None, last_offset_delta: int | None = None,
                 base_timestamp: int | None = None, max_timestamp: int | None = None, producer_id: int | None = None,
                 producer_epoch: int | None = None, base_sequence: int | None = None, record_count: int | None = None,
                 records: list[Record] | None = None, problems: list[str] | None = None, notes: list[str] | None = None,
                 partial: bool = False, over_limit: bool = False, uncompressed_bytes: int | None = None) -> None:
        self.position = position  # byte position of the batch within the records field
        self.base_offset = base_offset
        self.length = length  # batch_length (magic 2) / message_size (magic 0/1)
        self.magic = magic
        self.crc = crc
        self.crc_ok = crc_ok
        self.attributes = attributes
        self.codec = codec
        self.timestamp_type = timestamp_type
        self.transactional = transactional
        self.control = control
        self.partition_leader_epoch = partition_leader_epoch
        self.last_offset_delta = last_offset_delta
        self.base_timestamp = base_timestamp
        self.max_timestamp = max_timestamp
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.record_count = record_count  # as declared in the header (magic 2)
        self.records = [] if records is None else records
        self.problems = [] if problems is None else problems
        self.notes = [] if notes is None else notes  # harmless observations (e.g. legacy lz4 framing)
        self.partial = partial  # cut off at the end of the data (normal in Fetch responses)
        self.over_limit = over_limit  # decompression stopped at the configured cap
        self.uncompressed_bytes = uncompressed_bytes  # size of the (decompressed) records section

    @property
    def ok(self) -> bool:
        return not self.problems

    def __iter__(self):
        return iter(self.records)


class DecodedRecords(SlotRecord):
    """Result of `decode_records`: the batches in wire order.

    Iterating yields batches. `records()` yields every record of every batch.
    A cut-off batch at the end is included with `partial=True` and no records.
    """

    __slots__ = ("batches", "problems")

    def __init__(self, batches: list[Batch] | None = None, problems: list[str] | None = None) -> None:
        self.batches = [] if batches is None else batches
        self.problems = [] if problems is None else problems  # problems not tied to one batch

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
