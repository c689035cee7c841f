"""The JSONL line's broker-log columns written natively (kdissect/shared/
_native_text.c, built by tools/build_native.py) against the generated
line's Python code: the same line, byte for byte, for the joined rows of
the bundled broker-log runs and for rows given odd values (zeros of either
sign, NaN and infinities, float subclasses, ints, strs needing escapes or
not ASCII, None in any column); where the Python code raises (the writer
then falls back to the json module), the native path must leave the row
to it, so the same error is raised."""

from __future__ import annotations

import json
import math

import pytest

from kdissect.model.exchange import BROKER_LOG_COLUMNS
from kdissect.shared import output
from tests.support.paths import REPO

if output._columns_text is None:
    pytest.skip("the native column text is not built here (tools/build_native.py): the Python code runs",
                allow_module_level=True)

RUNS = REPO / "captures" / "brokerlog"


class OddFloat(float):
    pass


def line_functions(monkeypatch: pytest.MonkeyPatch) -> tuple:
    native = output._exchange_line_function("us")
    with monkeypatch.context() as patch:
        patch.setattr(output, "_columns_text", None)
        python = output._exchange_line_function("us")
    return native, python


def outcome(function, exchange) -> str:  # type: ignore[no-untyped-def]
    try:
        return function(exchange)
    except (TypeError, ValueError) as problem:
        return f"raised {type(problem).__name__}"


def joined_exchanges() -> list:
    from kdissect.conn.pipeline import Analysis

    found = []
    for run in ("plain_quota", "sasl_ssl_trace"):
        manifest = json.loads((RUNS / run / "manifest.json").read_text())
        keys = RUNS / run / "keys"
        found += [ex for ex in Analysis([RUNS / run / "capture.pcap"], [manifest["port"]],
                                        tls_keylogs=[keys] if keys.exists() else [], broker_logs=[RUNS / run])]
    return found


def test_joined_rows_are_written_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    native, python = line_functions(monkeypatch)
    exchanges = joined_exchanges()
    joined = [ex for ex in exchanges if ex.broker_log == "joined"]
    assert len(joined) > 50
    for ex in exchanges:
        assert native(ex) == python(ex)
    row = json.loads(native(joined[0]))  # (the json module reads back the columns' values)
    assert [row[name] for name in BROKER_LOG_COLUMNS] == [getattr(joined[0], name) for name in BROKER_LOG_COLUMNS]


ODD_FLOATS = [0.0, -0.0, 1e-320, 5e-324, 1e22, 1e16, 123456789.125, -3.5, 0.1 + 0.2, math.nan, math.inf, -math.inf,
              OddFloat(1.5), 7, True, "1.0", None]
ODD_TEXTS = ["User:ANONYMOUS", "", 'a"b', "a\\b", "tab\there", "\x7f", "é", "\udcff", "SASL_SSL", 5, 1.5, None]


def test_odd_values_are_written_the_same_or_left_to_the_python_code(monkeypatch: pytest.MonkeyPatch) -> None:
    native, python = line_functions(monkeypatch)
    (ex,) = [ex for ex in joined_exchanges() if ex.broker_log == "joined"][:1]
    floats = [name for name in BROKER_LOG_COLUMNS if name.endswith("_ms")]
    texts = [name for name in BROKER_LOG_COLUMNS if not name.endswith("_ms")]
    checked = 0
    for i, value in enumerate(ODD_FLOATS):
        for name in floats:
            setattr(ex, name, value)
            assert outcome(native, ex) == outcome(python, ex)
            checked += 1
        setattr(ex, floats[i % len(floats)], 0.25)
    for name in floats:
        setattr(ex, name, 1.25)
    for value in ODD_TEXTS:
        for name in texts:
            setattr(ex, name, value)
            assert outcome(native, ex) == outcome(python, ex)
            checked += 1
    assert checked > 100
    for name in BROKER_LOG_COLUMNS:  # every column null: the constant text
        setattr(ex, name, None)
    assert native(ex) == python(ex)


def test_the_texts_are_float_repr_and_json_strings() -> None:
    spec = ((',"f":', True), (',"s":', False))
    for value in (0.134, 13.58, 1e22, 2.5e-7, 123456.789, 0.1 + 0.2):
        assert output._columns_text(spec, value, "x") == f',"f":{value!r},"s":"x"'
        assert output._columns_text(spec, value, "x") == f',"f":{value!r},"s":"x"'  # (remembered: the same)
    assert output._columns_text(spec, None, None) == ',"f":null,"s":null'
    assert output._columns_text(spec, math.nan, "x") is None
    assert output._columns_text(spec, 1.0, 'q"') is None
