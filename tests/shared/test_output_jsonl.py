"""The JSONL fast path writes exactly what the json module writes for the row."""

from __future__ import annotations

import io
import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from kdissect.model.exchange import BROKER_LOG_COLUMNS, COLUMN_TYPES, COMPUTED_COLUMNS, Exchange
from kdissect.shared.output import JsonlWriter
from tests.support.jsonl import reference_line
from kdissect.conn.pipeline import Analysis


def _reference(exchange: Exchange) -> str:
    return reference_line(exchange)


def _fast(exchange: Exchange) -> str:
    out = io.StringIO()
    JsonlWriter(out).write_exchange(exchange)
    return out.getvalue()


_VALUES = {
    "string": st.none() | st.text(),
    "int64": st.none() | st.integers(-(2**63), 2**63 - 1),
    "int32": st.none() | st.integers(-(2**31), 2**31 - 1),
    "int16": st.none() | st.integers(-(2**15), 2**15 - 1),
    "timestamp": st.none() | st.integers(-(2**62), 2**62),
    "float64": st.none() | st.floats(allow_nan=True, allow_infinity=True),
    "list<int16>": st.lists(st.integers(-(2**15), 2**15 - 1), max_size=3),
    "list<string>": st.lists(st.text(), max_size=3),
}
# stored columns, and the stored times the computed ones come from
_SETTABLE = [(name, kind) for name, kind in COLUMN_TYPES if name not in COMPUTED_COLUMNS] + [
    ("request_first_ts", "timestamp"), ("response_first_ts", "timestamp"), ("wait_ns", "timestamp"),
    ("rtt_ns", "timestamp")]


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries({name: _VALUES[kind] for name, kind in _SETTABLE}))
def test_any_field_values(values: dict) -> None:
    if values["status"] is None:
        values["status"] = "ok"
    exchange = Exchange(**values)
    assert _fast(exchange) == _reference(exchange)


def test_the_broker_log_columns_null_or_one_of_them_set() -> None:
    """The broker-log columns are written as one constant when all are
    null: each one set alone (to a value, and to a value it cannot take)
    takes the per-column path instead."""
    assert _fast(Exchange(stream=1)) == _reference(Exchange(stream=1))
    samples = {"string": ["joined", "é\u2028\"x"], "float64": [0.25, 3.0, float("nan")]}
    for name in BROKER_LOG_COLUMNS:
        kind = dict(COLUMN_TYPES)[name]
        for value in [*samples[kind], 7]:
            exchange = Exchange(stream=1, **{name: value})
            assert _fast(exchange) == _reference(exchange), (name, value)


def test_unexpected_types_fall_back_to_the_json_module() -> None:
    exchange = Exchange(stream=3, client_id=b"bytes".decode(), problems=["a", None], records=2.5)  # type: ignore[list-item]
    assert _fast(exchange) == _reference(exchange)
    exchange = Exchange(request_ts=1.0, response_ts=float("inf"))  # type: ignore[arg-type]
    assert '"latency_ms":Infinity' in _fast(exchange) == json.dumps(exchange.to_row(), separators=(",", ":")) + "\n"


def test_every_exchange_of_the_captures(captures_dir: Path) -> None:
    for capture in sorted(captures_dir.glob("*.pcap")):
        for exchange in Analysis([capture]):
            assert _fast(exchange) == _reference(exchange), capture.name


def test_timestamps_around_the_edges_of_the_digit_cut() -> None:
    """Times are cut from their decimal digits when they are a second or more
    after the epoch; the seconds_text reference holds on both sides of that."""
    from kdissect.model.times import seconds_text

    edges = [0, 1, 999, 999_999_999, 1_000_000_000, 1_000_000_001, 1_999_999_999, 10**15 + 7, 1_795_432_637_048_593_123,
             10**18, 2**62, -1, -1_000_000_000]
    for unit, places in (("us", 6), ("ns", 9), ("ms", 3)):
        for ts in edges:
            out = io.StringIO()
            JsonlWriter(out, ts_unit=unit).write_exchange(Exchange(request_ts=ts))
            row = out.getvalue()
            assert f'"request_ts":{seconds_text(ts, places)},' in row, (unit, ts, row)


def test_broker_log_times_of_every_kind() -> None:
    """The broker log's float columns go through a memo of their text: zeros
    of both signs, repeats, non-finite values, ints, bools, float subclasses
    and strings are still written as the json module writes them (or make
    the line take its path)."""
    from kdissect.model.exchange import BROKER_LOG_COLUMNS

    class Subclass(float):
        pass

    nan = float("nan")
    values = [0.0, -0.0, 0.0, 0.159, 0.159, 1e-7, 1e22, 123456.789, nan, nan, float("inf"), -float("inf"), 5, 0,
              True, Subclass(0.5), Subclass(-0.0), Subclass("nan"), "0.5", None]
    floats = [name for name, kind in COLUMN_TYPES if name in BROKER_LOG_COLUMNS and kind == "float64"]
    assert len(floats) == 8
    for value in values:
        for name in floats:
            exchange = Exchange(broker_log="joined", principal="User:x", **{name: value})
            assert _fast(exchange) == _reference(exchange), (name, value)


def test_broker_log_identity_text_kept_only_while_the_values_match() -> None:
    """The principal, security protocol and listener are written from the
    text kept for the last row while the values are equal: rows in turn
    with equal copies, changed values, nulls, a str subclass, hostile text
    and a zero of each sign are still written as the json module does."""

    class Subclass(str):
        pass

    samples = [("User:alice", "PLAINTEXT", "PLAINTEXT"), ("User:alice", "PLAINTEXT", "PLAINTEXT"),
               ("".join(["User:", "alice"]), "PLAIN" + "TEXT", "PLAINTEXT"), ("User:bob", "SSL", "SSL"),
               (None, "SSL", "SSL"), (None, None, None), ("User:bob", "SSL", "SSL"),
               (Subclass("User:bob"), "SSL", "SSL"), ("User:bob", "SSL", "SSL"),
               ("User:\"x\"\\\u2028\udcff\x00", "SASL_SSL", "é"), ("User:bob", "SSL", "SSL")]
    for principal, protocol, listener in samples:
        for zero in (0.0, -0.0):
            exchange = Exchange(broker_log="joined", principal=principal, security_protocol=protocol,
                                listener=listener, broker_total_ms=0.25, broker_remote_ms=zero,
                                network_ms=-zero)
            assert _fast(exchange) == _reference(exchange), (principal, protocol, listener, zero)
