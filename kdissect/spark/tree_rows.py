"""Rows a task writes to one file of OUTDIR's tree, in bounded memory.

Rows are kept as the tuples `add` receives (a tuple appended costs less
than a value appended to each column) and written, turned into columns
(`rows_batch`), every `flush_rows` rows: as a Parquet row group, or as a
batch of an Arrow IPC file (the exchange work files, which the finishing
reads back whole). The file is written under a temporary name of the tree
(`Tree.output`) and appears whole at `close`, or not at all after
`abandon`. A write that fails (a full disk) abandons the file and is the
task's one-line OutputError naming it. Used by the task side files of
kdissect.spark.arrivals and kdissect.spark.forensics, and the exchange and
partition error work files of kdissect.spark.part_files.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pyarrow as pa

from kdissect.shared.arrow_rows import rows_batch
from kdissect.shared.atomic import cannot_write
from kdissect.shared.outdir_tree import Tree

FLUSH_ROWS = 65536


class TreeRows:
    """Rows of `schema` (each a tuple of values in column order) to
    `directory`/`name`: Parquet, or an Arrow IPC file with `ipc`.
    `lossless`: the rows' captured strings are not yet stored by the
    lossless rule (kdissect.shared.arrow_rows)."""

    def __init__(self, directory: Tree, name: str, schema: pa.Schema, *, ipc: bool = False,
                 lossless: bool = False, flush_rows: int = FLUSH_ROWS) -> None:
        self.directory = directory
        self.name = name
        self.schema = schema
        self.ipc = ipc
        self.lossless = lossless
        self.flush_rows = flush_rows
        self.rows: list[tuple] = []
        self.written = 0  # rows written so far
        self._writer: Any = None
        self._output: Any = None  # the Tree.output context while writing

    def add(self, values: tuple) -> None:
        rows = self.rows
        rows.append(values)
        if len(rows) >= self.flush_rows:
            self.flush()

    def flush(self) -> None:
        """Write the pending rows (`rows`)."""
        if not self.rows:
            return
        try:
            if self._writer is None:
                self._output = self.directory.output(self.name)
                stream = self._output.__enter__()
                if self.ipc:
                    self._writer = pa.ipc.new_file(stream, self.schema)
                else:
                    import pyarrow.parquet as pq

                    self._writer = pq.ParquetWriter(stream, self.schema)
            self._writer.write_batch(rows_batch(self.rows, self.schema, self.lossless))
        except OSError as problem:
            self.abandon()
            raise cannot_write(self.directory.uri_of(self.name), problem) from None
        self.written += len(self.rows)
        self.rows = []

    def close(self) -> bool:
        """Write what is left and put the file in place; False when no row
        came (no file is written)."""
        self.flush()
        if self._writer is None:
            return False
        try:
            self._writer.close()
        except OSError as problem:
            self.abandon()
            raise cannot_write(self.directory.uri_of(self.name), problem) from None
        self._writer = None
        output, self._output = self._output, None
        try:
            output.__exit__(None, None, None)  # a re-run task replaces its earlier file
        except OSError as problem:
            raise cannot_write(self.directory.uri_of(self.name), problem) from None
        return True

    def abandon(self) -> None:
        """Drop the file being written (a failed task): its temporary is removed."""
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
            self._writer = None
        if self._output is not None:
            output, self._output = self._output, None
            with contextlib.suppress(RuntimeError, OSError):
                output.__exit__(RuntimeError, RuntimeError("task abandoned"), None)


def read_ipc_files(directory: Tree, schema: pa.Schema) -> pa.Table:
    """Every Arrow IPC file (`.arrow`) the tasks left under `directory`, as one
    table of `schema` (empty when there is none); the files are read on
    several threads: from a store, each is a request of its own."""
    import pyarrow.dataset as ds

    names = directory.files(suffix=".arrow")
    if not names:
        return schema.empty_table()
    return ds.dataset([directory.path(name) for name in names], schema=schema, filesystem=directory.fs,
                      format="arrow").to_table()
