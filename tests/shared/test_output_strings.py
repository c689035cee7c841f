"""JSONL lines with remembered string texts (output._esc_memo / _one_str_memo)
still equal what the json module writes, also once the memo is full and for
values of the wrong type (which must fall back to the json module, never crash)."""

from __future__ import annotations

import io
import json

from kdissect.shared import output
from kdissect.model.exchange import Exchange
from kdissect.shared.output import JsonlWriter
from tests.support.jsonl import reference_line


def _reference(exchange: Exchange) -> str:
    return reference_line(exchange)


def _lines(exchanges: list[Exchange]) -> str:
    out = io.StringIO()
    JsonlWriter(out).write_exchanges(exchanges)
    return out.getvalue()


class _Text(str):
    pass


def test_many_distinct_strings_beyond_the_memo() -> None:
    exchanges = [Exchange(capture=f"c{i % 7}.pcap", client=f"10.0.{i // 250}.{i % 250}:{40000 + i}",
                          client_id=f"id-\u00e9\u4e2d-{i}\"\\\n", codecs=[f"codec{i % 5000}"],
                          problems=[f"p{i}"] if i % 3 else [f"p{i}", "q"], status="ok")
                 for i in range(9000)]
    expected = "".join(_reference(ex) for ex in exchanges)
    assert _lines(exchanges) == expected
    assert len(output._esc_memo) <= 4096 and len(output._one_str_memo) <= 4096
    # a second pass reads the remembered texts
    assert _lines(exchanges) == expected


def test_wrong_types_fall_back_to_the_json_module() -> None:
    odd = [
        Exchange(capture=5),  # type: ignore[arg-type]
        Exchange(client_id=None, api_name=_Text("Produce")),
        Exchange(codecs=[7]),  # type: ignore[list-item]
        Exchange(codecs=[None]),  # type: ignore[list-item]
        Exchange(codecs=[["none"]]),  # type: ignore[list-item]
        Exchange(codecs=("gzip",)),  # type: ignore[arg-type]
        Exchange(codecs=["none", "gzip"]),
        Exchange(problems=[_Text("x")], status=_Text("ok")),
        Exchange(client=b"10.0.0.1:1".decode(), broker="\ud800"),  # a lone surrogate
    ]
    for exchange in odd:
        try:
            expected = _reference(exchange)
        except (TypeError, ValueError):
            continue
        assert _lines([exchange]) == expected, exchange
    # a str subclass is written but not remembered as a str key
    assert all(type(key) is str for key in output._esc_memo)
