"""Batched JSONL writing (`write_exchanges`) writes exactly what one
`write_exchange` per exchange writes, in order, also around rows that fall
back to the json module and when the exchanges stop with an error."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kdissect.model.exchange import Exchange
from kdissect.shared.output import JsonlWriter, open_writer


def _mixed(n: int) -> list[Exchange]:
    out = []
    for i in range(n):
        if i % 97 == 5:
            out.append(Exchange(stream=i, records=2.5))  # a float where an int belongs: json module
        elif i % 131 == 7:
            out.append(Exchange(stream=i, request_ts=1, response_ts=float("nan")))  # type: ignore[arg-type]
        elif i % 53 == 3:
            out.append(Exchange(stream=i, client_id="\udcff"))  # lone surrogate: made valid text
        else:
            out.append(Exchange(stream=i, correlation_id=i, client_id=f"c{i % 7}", request_ts=i * 333_333_333,
                                response_ts=i * 333_333_333 + 1_000_000, problems=["x"] if i % 11 == 0 else []))
    return out


def _one_by_one(exchanges: list[Exchange]) -> str:
    out = io.StringIO()
    writer = JsonlWriter(out)
    for exchange in exchanges:
        writer.write_exchange(exchange)
    return out.getvalue()


@pytest.mark.parametrize("n", [0, 1, 255, 256, 257, 1000])
def test_batches_equal_single_writes(n: int) -> None:
    exchanges = _mixed(n)
    out = io.StringIO()
    JsonlWriter(out).write_exchanges(iter(exchanges))
    assert out.getvalue() == _one_by_one(exchanges)
    lines = out.getvalue().splitlines()
    assert len(lines) == n
    assert [json.loads(line)["stream"] for line in lines] == list(range(n))


def test_rows_before_a_failure_are_written() -> None:
    exchanges = _mixed(700)

    def failing():
        yield from exchanges[:600]
        raise RuntimeError("capture went away")

    out = io.StringIO()
    with pytest.raises(RuntimeError):
        JsonlWriter(out).write_exchanges(failing())
    assert out.getvalue() == _one_by_one(exchanges[:600])


def test_rows_before_a_row_that_cannot_be_written_are_written() -> None:
    # not an exchange at all: the line function and the json path both fail
    # on it; what came before it (in its batch too) is written, then it raises
    exchanges = _mixed(300)
    rows = [*exchanges[:280], object(), *exchanges[280:]]
    out = io.StringIO()
    with pytest.raises(AttributeError):
        JsonlWriter(out).write_exchanges(rows)
    assert out.getvalue() == _one_by_one(exchanges[:280])


def test_other_writers_take_exchanges_one_by_one(tmp_path) -> None:
    exchanges = _mixed(300)
    for suffix in (".csv", ".jsonl"):
        batched, single = tmp_path / f"b{suffix}", tmp_path / f"s{suffix}"
        writer = open_writer(str(batched))
        writer.write_exchanges(exchanges)
        writer.close()
        writer = open_writer(str(single))
        for exchange in exchanges:
            writer.write_exchange(exchange)
        writer.close()
        assert batched.read_bytes() == single.read_bytes()


# -- the line function's inline columns -------------------------------------------

_TIMES = st.none() | st.integers(-(2**62), 2**62) | st.integers(1_600_000_000 * 10**9, 1_800_000_000 * 10**9)
_SMALL = st.none() | st.integers(-(10**9), 10**9) | st.sampled_from([0, 1000, 19_000, -1])


@settings(max_examples=400, deadline=None)
@given(st.fixed_dictionaries({
    "request_ts": _TIMES, "response_ts": _TIMES, "request_first_ts": _TIMES, "response_first_ts": _TIMES,
    "wait_ns": _SMALL | st.floats(allow_nan=True, allow_infinity=True), "rtt_ns": _SMALL,
    "capture_side": st.sampled_from([None, "client", "broker", "unknown"]),
}), st.sampled_from(["us", "ns"]))
def test_computed_columns_and_times_written_inline_equal_the_properties(values: dict, unit: str) -> None:
    """The line function computes the duration columns and writes the
    timestamps itself (output._COMPUTED_CODE, durations remembered by value);
    the result is what the json module writes for `to_row()`, whose values
    come from Exchange's properties."""
    from tests.support.jsonl import reference_line

    exchange = Exchange(**values)
    out = io.StringIO()
    JsonlWriter(out, ts_unit=unit).write_exchange(exchange)
    try:
        expected = reference_line(exchange, 6 if unit == "us" else 9)
    except ValueError:  # NaN/Infinity: the json module's own spelling
        expected = json.dumps(exchange.to_row(), separators=(",", ":")) + "\n"
    assert out.getvalue() == expected
    out = io.StringIO()  # again: now from the remembered texts
    JsonlWriter(out, ts_unit=unit).write_exchange(exchange)
    assert out.getvalue() == expected
