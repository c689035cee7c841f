"""The shipped connections' hand-off, through OUTDIR/_work instead of Spark's shuffle.

A read task ships the segments of the 4-tuples it cannot dissect itself
(kdissect.spark.inrange) as runs (segments.RUN_SCHEMA). Spark's shuffle moved
them Python -> Arrow -> JVM rows -> shuffle files -> sort -> Arrow -> Python:
on the record-heavy benchmark archive with every 4-tuple shipped the JVM's
executor threads spent 3.7 s of CPU on that, more than half of what
dissecting the same bytes in place took (6.5 s). Here the runs go to Arrow files of the read task
under `_work/runs/`, and a dissecting task reads back only its bucket's
runs, merged in order:

- **Write (RunSpool).** A split's runs are held up to SPOOL_BYTES, then
  sorted by (bucket, 4-tuple, order_ts, capture_index, frame_number) and
  written as one Arrow file of batches of one bucket each, at most
  BATCH_BYTES of payload a batch. A 4-tuple's bucket is a CRC-32 of its
  canonical key modulo the bucket count, the same in every process. The
  file's batches per bucket (the index) go back to the driver with the
  split's accounting row; the driver hands each dissecting task the pieces
  of its own bucket.
- **Read (bucket_runs).** A dissecting task opens each piece of its bucket
  and merges them (`heapq.merge`): every piece is sorted by 4-tuple and
  then by its runs' first segments in feed order, so the merge gives each
  4-tuple's runs consecutively and in the order Spark's sort gave them.
  The task holds one batch per piece (each spool file is an external
  sort's sorted run), never its whole bucket: a connection of many GB goes
  through as it did through Spark's sort, which spilled to disk. A file is
  open only while a batch is read from it.

Files are named by split and spool number, written under a temporary name
and renamed (kdissect.shared.outdir_tree), so a retried read task writes the
same files again; the driver removes `_work/` at the end.
"""

from __future__ import annotations

import heapq
import zlib
from operator import itemgetter
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from kdissect.shared.atomic import cannot_write
from kdissect.shared.outdir_tree import Tree
from kdissect.spark.segments import KEY_COLUMNS, ORDER_COLUMNS, RUN_SCHEMA

RUNS_DIR = "runs"  # under _work
SPOOL_BYTES = 64 << 20  # runs a split holds before writing a sorted file
BATCH_BYTES = 1 << 20  # payload per written batch: what a dissecting task holds per piece
# a piece of a bucket: (file name under RUNS_DIR, first batch, batches)
Piece = tuple[str, int, int]
SHIPPED_KEY = "shipped_runs"  # a split's accounting row: its pieces by bucket

_SORT_COLUMNS = [*KEY_COLUMNS, *ORDER_COLUMNS]
_RUN_NAMES = RUN_SCHEMA.names
_MERGE_KEY = itemgetter(*range(len(_SORT_COLUMNS)))  # a row's 4-tuple and order: never its payload


def bucket_of(addr_a: str, port_a: int, addr_b: str, port_b: int, buckets: int) -> int:
    """The dissecting task of a canonical 4-tuple (stable across processes,
    unlike `hash` of a str)."""
    return zlib.crc32(f"{addr_a}|{port_a}|{addr_b}|{port_b}".encode()) % buckets


class RunSpool:
    """One split's shipped runs, written sorted by bucket to `_work/runs/`."""

    def __init__(self, work_dir: Tree, split_id: int, buckets: int) -> None:
        self.tree = work_dir.sub(RUNS_DIR)
        self.split_id = split_id
        self.buckets = buckets
        self.held: list[pa.RecordBatch] = []
        self.held_bytes = 0
        self.files = 0
        self.index: dict[int, list[Piece]] = {}

    def add(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        self.held.append(batch)
        self.held_bytes += batch.nbytes
        if self.held_bytes >= SPOOL_BYTES:
            self._write()

    def close(self) -> dict[int, list[Piece]]:
        """Write what is held; the pieces written, by bucket."""
        self._write()
        return self.index

    def _write(self) -> None:
        if not self.held:
            return
        table = pa.Table.from_batches(self.held, RUN_SCHEMA)
        self.held, self.held_bytes = [], 0
        addr_a, port_a, addr_b, port_b = (table.column(name).to_pylist() for name in KEY_COLUMNS)
        buckets = [bucket_of(*key, self.buckets) for key in zip(addr_a, port_a, addr_b, port_b)]
        table = table.append_column("bucket", pa.array(buckets, pa.int32()))
        table = table.sort_by([("bucket", "ascending"), *((name, "ascending") for name in _SORT_COLUMNS)])
        ordered = table.column("bucket").to_pylist()
        sizes = pc.binary_length(table.column("segments")).to_pylist()
        rows = table.drop_columns(["bucket"]).combine_chunks().to_batches()[0]  # (held batches have rows)
        name = f"split-{self.split_id:05d}-{self.files:03d}.arrow"
        self.files += 1
        try:
            with self.tree.output(name) as stream, pa.ipc.new_file(stream, RUN_SCHEMA) as writer:
                written = 0
                for bucket, start, end in _bucket_batches(ordered, sizes):
                    writer.write_batch(rows.slice(start, end - start))
                    pieces = self.index.setdefault(bucket, [])
                    if pieces and pieces[-1][0] == name:
                        pieces[-1] = (name, pieces[-1][1], pieces[-1][2] + 1)
                    else:
                        pieces.append((name, written, 1))
                    written += 1
        except OSError as problem:
            raise cannot_write(self.tree.uri_of(name), problem) from None


def _bucket_batches(buckets: list[int], sizes: list[int]) -> Iterator[tuple[int, int, int]]:
    """(bucket, start, end) row ranges of a table sorted by bucket: one
    bucket each, at most BATCH_BYTES of runs unless one run is larger."""
    start, held = 0, 0
    for row, (bucket, size) in enumerate(zip(buckets, sizes)):
        if row > start and (bucket != buckets[start] or held + size > BATCH_BYTES):
            yield buckets[start], start, row
            start, held = row, 0
        held += size
    if start < len(buckets):
        yield buckets[start], start, len(buckets)


def merge_indexes(indexes: list[dict[Any, list]]) -> dict[int, list[Piece]]:
    """The splits' pieces by bucket (JSON turned the buckets into strings)."""
    merged: dict[int, list[Piece]] = {}
    for index in indexes:
        for bucket, pieces in index.items():
            merged.setdefault(int(bucket), []).extend(tuple(piece) for piece in pieces)
    return merged


def launch_order(pieces_by_bucket: dict[int, list[Piece]]) -> list[tuple[int, list[Piece]]]:
    """(bucket, pieces) pairs in the order their dissecting tasks are
    launched: the most batches first (a batch holds up to BATCH_BYTES of
    runs, so batches measure a bucket's bytes), ties by bucket. The slots
    take tasks as they come free, so the stage ends on the smallest buckets,
    not on a large one launched last while the other slots wait (record-heavy
    archive, two cores: four buckets of 0.88, 0.65, 0.64 and 0.05 s in
    bucket order left one slot alone for 0.82 s)."""
    return sorted(pieces_by_bucket.items(), key=lambda item: (-sum(piece[2] for piece in item[1]), item[0]))


def bucket_runs(work_dir: Tree, pieces: list[Piece]) -> Iterator[tuple]:
    """A bucket's runs as RUN_SCHEMA tuples, each 4-tuple's consecutive and in
    the order of their first segments (order_ts, capture_index, frame_number)."""
    tree = work_dir.sub(RUNS_DIR)
    return heapq.merge(*(_piece_rows(tree, piece) for piece in pieces), key=_MERGE_KEY)


def _piece_rows(tree: Tree, piece: Piece) -> Iterator[tuple]:
    # the file is opened for each batch, not held open while the merge waits
    # on the other pieces: a bucket of thousands of splits would otherwise
    # hold a descriptor (or a store connection) for each
    name, first, count = piece
    for index in range(first, first + count):
        with tree.open_input(name) as source:
            batch = pa.ipc.open_file(source).get_batch(index)
        yield from zip(*(batch.column(column).to_pylist() for column in _RUN_NAMES))
