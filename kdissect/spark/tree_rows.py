"""Rows a task writes to one Parquet file of OUTDIR's tree, in bounded memory.

Rows are kept as the tuples `add` receives (a tuple appended costs less
than a value appended to each column) and written, turned into columns, as
a row group every FLUSH_ROWS rows;
the file is written under a temporary name of the tree (`Tree.output`) and
appears whole at `close`, or not at all after `abandon`. Used by the task
side files of kdissect.spark.arrivals and kdissect.spark.forensics.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pyarrow as pa

from kdissect.shared.arrow_rows import rows_batch
from kdissect.shared.outdir_tree import Tree

FLUSH_ROWS = 65536


class ParquetRows:
    """Rows of `schema` (values in column order) to `directory`/`name`."""

    def __init__(self, directory: Tree, name: str, schema: pa.Schema) -> None:
        self.directory = directory
        self.name = name
        self.schema = schema
        self.rows: list[tuple] = []
        self.writer: Any = None
        self.output: Any = None  # the Tree.output context while writing

    def add(self, *values: Any) -> None:
        rows = self.rows
        rows.append(values)
        if len(rows) >= FLUSH_ROWS:
            self.flush()

    def flush(self) -> None:
        """Write the pending rows (`rows`) as a row group."""
        import pyarrow.parquet as pq

        if self.writer is None:
            self.output = self.directory.output(self.name)
            self.writer = pq.ParquetWriter(self.output.__enter__(), self.schema)
        self.writer.write_batch(rows_batch(self.rows, self.schema))
        self.rows = []

    def close(self) -> bool:
        """Write what is left and put the file in place; False when no row came (no file)."""
        if not (self.rows or self.writer is not None):
            return False
        self.flush()
        self.writer.close()
        self.writer = None
        self.output.__exit__(None, None, None)
        return True

    def abandon(self) -> None:
        """Drop the file being written (a failed task): its temporary is removed."""
        if self.writer is not None:
            with contextlib.suppress(Exception):
                self.writer.close()
            self.writer = None
            with contextlib.suppress(RuntimeError, OSError):
                self.output.__exit__(RuntimeError, RuntimeError("task abandoned"), None)
