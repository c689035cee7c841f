"""Batched JSONL writing (`write_exchanges`) writes exactly what one
`write_exchange` per exchange writes, in order, also around rows that fall
back to the json module and when the exchanges stop with an error."""

from __future__ import annotations

import io
import json

import pytest

from kdissect.exchange import Exchange
from kdissect.output import JsonlWriter, open_writer


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
