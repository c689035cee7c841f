"""The command line's Parquet writer holds rows as values and converts them a
column at a time (kdissect.shared.arrow_rows). On real captures, hostile
strings among them, what it writes must be what the row-by-row rule gives:
each row dict stored by `lossless_row` (its byte-text columns kept as they
are), its int-nanosecond times floor-divided to the unit, and the rows
converted by name with `Table.from_pylist`."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kdissect.commands.records import _open_record_writer, _written
from kdissect.conn.pipeline import Analysis
from kdissect.records.table import RecordTally, exchange_record_rows
from kdissect.shared.output import EXCHANGES, ParquetWriter, lossless_row
from tests.conftest import CAPTURES

CAPTURES_USED = ("hostile_strings_kafka.pcap", "java_transactions_kafka.pcap", "large_records_kafka.pcap")
DIVISORS = {"s": 10**9, "ms": 10**6, "us": 1000, "ns": 1}


def _by_name(rows: list[dict], schema: pa.Schema, keep: frozenset[str], times: frozenset[str],
             ts_unit: str) -> pa.Table:
    stored = []
    for row in rows:
        row = dict(lossless_row(row, keep))
        for name in times:
            if row[name] is not None:
                row[name] //= DIVISORS[ts_unit]
        stored.append(row)
    return pa.Table.from_pylist(stored, schema=schema)


@pytest.mark.parametrize("ts_unit", ["us", "ns", "s"])
def test_exchange_rows_as_the_row_by_row_rule_stores_them(tmp_path: Path, ts_unit: str) -> None:
    escaped = 0
    for name in CAPTURES_USED:
        exchanges = list(Analysis([str(CAPTURES / name)], (9092,), True, False))
        assert len(exchanges) > 20
        path = tmp_path / f"{name}.parquet"
        # a small batch size: several row groups, the last one partial
        writer = ParquetWriter(str(path), batch_rows=7, table=EXCHANGES, ts_unit=ts_unit)
        for exchange in exchanges:
            writer.write_exchange(exchange)
        writer.close()
        rows = [exchange.to_row() for exchange in exchanges]
        escaped += sum(lossless_row(row) is not row for row in rows)
        expected = _by_name(rows, EXCHANGES.arrow_schema(ts_unit), frozenset(), EXCHANGES.timestamp_columns, ts_unit)
        written = pq.read_table(path)
        # (Parquet has no seconds unit: pyarrow stores those times as milliseconds)
        assert written.equals(expected.cast(written.schema))
        assert written.schema.field("request_ts").type.unit == ("ms" if ts_unit == "s" else ts_unit)
    assert escaped > 5  # (the hostile capture's strings did need the rule)


def test_record_rows_keep_their_byte_text_columns(tmp_path: Path) -> None:
    """The records table: its key and value columns are lossless already
    (UTF-8 text or base64) and are written as they are; times in ms."""
    path = tmp_path / "records.parquet"
    written = 0
    rows: list[dict] = []
    with _open_record_writer(str(path)) as writer:
        for name in CAPTURES_USED:
            analysis = Analysis([str(CAPTURES / name)], (9092,), True, True)
            for row in exchange_record_rows(analysis, frozenset(), 64 << 20, RecordTally(), None):
                row = _written(row)
                rows.append(dict(row))
                writer.write(row)
                written += 1
    assert written > 50
    table = writer._writer  # (the ParquetWriter behind the atomic file)
    expected = _by_name(rows, table._schema, table._keep, table._timestamps, "ms")
    assert pq.read_table(path).equals(expected)
