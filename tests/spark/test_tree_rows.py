"""The one writer of the tasks' row files (kdissect.spark.tree_rows): Parquet
and Arrow IPC, bounded batches, a whole file or none, and a full disk as the
one-line error. No Spark: the rows are read back with pyarrow's own readers."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kdissect.shared.atomic import OutputError
from kdissect.shared.outdir_tree import as_tree
from kdissect.spark.tree_rows import TreeRows

SCHEMA = pa.schema([("name", pa.string()), ("count", pa.int64()), ("codes", pa.list_(pa.int16()))])
ROWS = [(f"topic-{index}", index * 3, [index % 7, -1]) for index in range(10)] + [(None, None, None)]


def _read(path, ipc: bool) -> list[tuple]:
    if ipc:
        with pa.memory_map(str(path)) as source:
            table = pa.ipc.open_file(source).read_all()
    else:
        table = pq.read_table(path)
    return [tuple(row.values()) for row in table.to_pylist()]


@pytest.mark.parametrize("ipc", [False, True])
def test_rows_come_back_in_order_across_batches(tmp_path, ipc):
    rows = TreeRows(as_tree(str(tmp_path)), "part", SCHEMA, ipc=ipc, flush_rows=4)
    for row in ROWS:
        rows.add(row)
        assert len(rows.rows) < 4  # never more than a batch held
    assert rows.close() is True
    assert rows.written == len(ROWS)
    assert _read(tmp_path / "part", ipc) == ROWS
    assert os.listdir(tmp_path) == ["part"]  # no temporary left


@pytest.mark.parametrize("ipc", [False, True])
def test_no_rows_no_file_and_an_abandoned_file_is_gone(tmp_path, ipc):
    assert TreeRows(as_tree(str(tmp_path)), "empty", SCHEMA, ipc=ipc).close() is False
    abandoned = TreeRows(as_tree(str(tmp_path)), "abandoned", SCHEMA, ipc=ipc, flush_rows=2)
    for row in ROWS:
        abandoned.add(row)  # batches written to its temporary
    abandoned.abandon()
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
@pytest.mark.parametrize("ipc", [False, True])
def test_a_full_disk_is_the_one_line_error_and_leaves_nothing(full_disk, ipc):
    rows = TreeRows(as_tree(str(full_disk)), "side.parquet", SCHEMA, ipc=ipc, flush_rows=16)
    with pytest.raises(OutputError) as raised:
        for index in range(100_000):  # random text does not compress: 64 KiB fill in a few batches
            rows.add((os.urandom(512).hex(), index, []))
        rows.close()
    assert str(raised.value) == f"cannot write {full_disk}/side.parquet: No space left on device"
    assert os.listdir(full_disk) == []  # the temporary was removed
