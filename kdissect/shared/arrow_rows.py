"""Rows held as tuples of values turned into one Arrow record batch.

Every writer of Arrow or Parquet rows (the command line's Parquet output,
the Spark tasks' work files and side files) holds its rows as tuples in the
schema's column order and converts them here, a column at a time: `zip`
turns the rows into columns and each column is converted at its field's
type. That is about half of what `RecordBatch.from_pylist` costs on dict
rows (it looks every value up by name first), measured on exchange rows.
"""

from __future__ import annotations

from typing import Any, Sequence

import pyarrow as pa


def rows_batch(rows: Sequence[tuple], schema: pa.Schema, lossless: bool = False,
               keep: frozenset[str] = frozenset(), timestamps: frozenset[str] = frozenset(),
               divisor: int = 1) -> pa.RecordBatch:
    """A batch of `schema` from rows of values in its column order.

    `lossless`: the captured strings of the text columns (strings, lists),
    except the columns named in `keep`, stored by the rule every output
    stores them by (`output.lossless_row`'s, a column at a time).
    `timestamps`, `divisor`: the columns whose int nanoseconds (as rows hold
    times) are floor-divided by `divisor`, to the schema's timestamp unit."""
    if rows and set(map(len, rows)) != {len(schema)}:  # (zip would cut every column to the shortest row)
        raise ValueError(f"rows of {len(schema)} values expected")
    columns: list[Any] = list(zip(*rows)) or [()] * len(schema)
    if lossless:
        from kdissect.shared.output import lossless_column

        for index, field in enumerate(schema):
            if field.name not in keep and _may_hold_text(field.type):
                columns[index] = lossless_column(columns[index])
    if divisor != 1:
        for index, field in enumerate(schema):
            if field.name in timestamps:
                columns[index] = [None if value is None else value // divisor for value in columns[index]]
    return pa.RecordBatch.from_arrays([pa.array(column, type=field.type) for column, field in zip(columns, schema)],
                                      schema=schema)


def _may_hold_text(kind: pa.DataType) -> bool:
    """Every type but numbers, booleans and times (a string there fails the conversion either way)."""
    types = pa.types
    return not (types.is_integer(kind) or types.is_floating(kind) or types.is_boolean(kind)
                or types.is_temporal(kind) or types.is_decimal(kind))
