"""Writers for kdissect's tables: JSONL, CSV, Parquet. The exchange table (from
`exchange.COLUMN_TYPES`) is the default; the records table passes its own `Table`.

`open_writer(path)` picks the format from the file extension ("-" or None means
JSONL on stdout). Each writer takes rows (dicts from `Exchange.to_row`) one at
a time, so exports stream in bounded memory. A file is written atomically
(kdissect.shared.atomic): use the writer in a `with` block, or call `close()` on
success and `abandon()` on failure. Captured strings are written by one
rule in every format (`lossless_row`: bytes that were not UTF-8 as \\xNN,
backslashes doubled); CSV also quotes CR and defuses formula cells
(`csv_cell`). README: Reading untrusted captures.
"""

from __future__ import annotations

import io
import re
from math import copysign
import sys
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Sequence

from kdissect.shared.atomic import AtomicFile, cannot_write
from kdissect.model.exchange import (
    BROKER_LOG_COLUMNS,
    COLUMN_NAMES,
    COLUMN_TYPES,
    LIST_COLUMNS,
    TIMESTAMP_COLUMNS,
    arrow_schema,
    row_values,
)
from kdissect.model.times import digits, seconds_text
from kdissect.failures import InputError
from kdissect.model.packet import SlotRecord
from kdissect.protocol.codecache import compile_cached
from kdissect.text_escape import lossless_text

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv", ".parquet": "parquet"}


def format_for(path: str | None) -> str:
    if path is None or path == "-":
        return "jsonl"
    suffix = Path(path).suffix.lower()
    if path == "/dev/null":
        return "jsonl"
    try:
        return FORMATS[suffix]
    except KeyError:
        raise InputError(
            f"cannot tell the output format of {path!r}: use .jsonl, .csv or .parquet"
        ) from None


def _unencodable(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _row_encoder() -> Callable[[dict[str, Any]], str]:
    """A row dict -> its compact ASCII JSON text (the json module's encoder).

    ASCII output (non-ASCII as \\u escapes) is the C encoder's fastest path;
    building that encoder once (rather than per row, as JSONEncoder.encode
    does) saves a quarter of the cost."""
    import json

    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - not CPython
        return json.JSONEncoder(separators=(",", ":")).encode
    chunks = make(None, _unencodable, json.encoder.encode_basestring_ascii, None, ":", ",",
                  False, False, True)
    return lambda row: "".join(chunks(row, 0))


def _lossless_list(values: list[Any]) -> list[Any]:
    return [lossless_text(v) if v.__class__ is str else _lossless_list(v) if isinstance(v, list) else v
            for v in values]


def _all_plain(values: Iterable[Any]) -> bool:
    """Whether every string among `values` (and in their lists) is ASCII
    without a backslash, so the lossless rule changes nothing: one probe
    over them all, as most rows and columns need nothing (a nested list,
    "\x80", takes the slow path)."""
    probe = "".join([v for v in values if v.__class__ is str])
    if not probe.isascii() or "\\" in probe:
        return False
    items = "".join([x if x.__class__ is str else "\x80" if x.__class__ is list else ""
                     for v in values if v.__class__ is list for x in v])
    return items.isascii() and "\\" not in items


def lossless_row(row: dict[str, Any], keep: frozenset[str] = frozenset()) -> dict[str, Any]:
    """`row` with `kdissect.text_escape.lossless_text` applied to its strings
    (in lists too), except in the columns `keep`: the one rule every output
    (JSONL, CSV, Parquet) writes captured text by. The same dict when
    nothing changes."""
    if _all_plain(row.values()):
        return row
    changed: dict[str, Any] | None = None
    for name, value in row.items():
        if name in keep:
            continue
        if value.__class__ is str:
            if value.isascii() and "\\" not in value:
                continue
            new: Any = lossless_text(value)
        elif isinstance(value, list) and value:
            new = _lossless_list(value)
        else:
            continue
        if new != value:
            if changed is None:
                changed = dict(row)
            changed[name] = new
    return row if changed is None else changed


def lossless_column(values: Sequence[Any]) -> Sequence[Any]:
    """One column's values by `lossless_row`'s rule (what it does to each
    value of a row, done to each value of a column), for a writer holding
    rows as values in column order: one probe per column instead of one per
    row. The same sequence when nothing changes."""
    if _all_plain(values):
        return values
    return [(v if v.isascii() and "\\" not in v else lossless_text(v)) if v.__class__ is str
            else _lossless_list(v) if isinstance(v, list) and v else v
            for v in values]


safe_row = lossless_row  # the name kdissect.report uses


def _json_ints(values: list[int]) -> str:
    return "[" + ",".join(map(_int_repr, values)) + "]" if values else "[]"


def _json_strs(values: list[str]) -> str:
    if not values:
        return "[]"
    if len(values) > 4:
        return "[" + ",".join(map(_esc_text, values)) + "]"
    # a few strings (a row's problems and their codes): the same lists repeat
    # row after row, and a lookup is cheaper than encoding them again
    key = tuple(values)
    text = _strs_memo.get(key)
    if text is None:
        text = "[" + ",".join(map(_esc_text, values)) + "]"  # raises for non-strings, before anything is kept
        if len(_strs_memo) < 4096:
            _strs_memo[key] = text
    return text


_strs_memo: dict[tuple[str, ...], str] = {}


_float_repr = float.__repr__
_int_repr = int.__repr__
try:  # the broker-log columns' JSON text written natively (tools/build_native.py, kdissect/native.py)
    from kdissect.shared._native_text import columns_text as _columns_text
except ImportError:
    _columns_text = None
try:  # the json module's own C string encoder, without importing json (a few ms at start)
    from _json import encode_basestring_ascii as _esc
except ImportError:  # pragma: no cover - not CPython
    from json.encoder import encode_basestring_ascii as _esc


class _Memo(dict):
    """str -> its JSON text (`make(str)`), remembered for the first 4096
    strings: the same few (capture names, endpoints, api names, client ids,
    statuses, codecs) fill most rows, and a dict lookup is cheaper than the
    encoder's call. A non-string key raises as `make` does (TypeError)."""

    __slots__ = ("make",)

    def __init__(self, make: Callable[[str], str]) -> None:
        super().__init__()
        self.make = make

    def __missing__(self, key: str) -> str:
        if key.__class__ is not str:
            return self.make(key)  # raises for non-strings; str subclasses not kept
        text = self.make(key)
        if len(self) < 4096:
            self[key] = text
        return text


def _esc_text(text: str) -> str:
    """The JSON of a captured string, as written (`lossless_text`)."""
    if not isinstance(text, str):
        return _esc(text)  # raises for non-strings
    return _esc(lossless_text(text))


_esc_memo = _Memo(_esc_text)  # JSON of a str
_one_str_memo = _Memo(lambda text: "[" + _esc_text(text) + "]")  # JSON of a list of that one str

# per column type: the expression for value `v` (never null-checked here)
# (an empty list, the common case, is written inline: the same "[]" the
# helpers write for any false value)
# An exact int is formatted by the f-string itself (str of an int is its
# repr, without a call); anything else goes through int.__repr__, which
# raises for non-ints as before.
_INT = "{v} if {v}.__class__ is int else _int_repr({v})"
_JSON_OF_KIND = {"string": "_esc_memo[{v}]", "int64": _INT, "int32": _INT, "timestamp": "_seconds({v})",
                 "int16": _INT, "float64": "(_float_text[{v}] if {v}.__class__ is float and {v} else _float_repr({v}))",
                 "list<int16>": '(_json_ints({v}) if {v} else "[]")',
                 "list<string>": '((_one_str_memo[{v}[0]] if {v}.__class__ is list and len({v}) == 1 '
                                 'else _json_strs({v})) if {v} else "[]")'}


# The computed columns (Exchange's properties), written out over the row's
# locals for the line function: a property call per column per row costs
# more than the rest of the line. Each block leaves in `c` the duration in
# nanoseconds (None for null); the column is c / 1_000_000 in milliseconds,
# as the property computes it. The properties stay the reference
# (tests/shared/test_output_jsonl.py compares).
_COMPUTED_CODE = {
    "latency_ms": ["c = None if request_ts is None or response_ts is None else response_ts - request_ts"],
    "ttfb_ms": ["c = None if request_ts is None or response_first_ts is None else response_first_ts - request_ts"],
    "response_transfer_ms": ["c = None if response_first_ts is None or response_ts is None else "
                             "response_ts - response_first_ts"],
    "request_transfer_ms": ["c = None if request_first_ts is None or request_ts is None else "
                            "request_ts - request_first_ts"],
    "wait_ms": ["c = wait_ns"],
    "socket_wait_ms": ["c = socket_wait_ns"],
    "service_ms": ["if request_ts is None or response_ts is None:",
                   "    c = None",
                   "elif wait_ns is None:",
                   "    c = None if wait_reason == 'long_poll_unknown' else response_ts - request_ts",
                   "else:",
                   "    c = response_ts - request_ts - wait_ns",
                   "    if not c > 0:",
                   "        c = None"],
    "rtt_ms": ["c = rtt_ns"],
    "broker_ms": ["if request_ts is None or response_first_ts is None:",
                  "    c = None",
                  "elif capture_side == 'broker':",
                  "    c = response_first_ts - request_ts",
                  "elif capture_side == 'client' and rtt_ns is not None:",
                  "    c = max(0, response_first_ts - request_ts - rtt_ns)",
                  "else:",
                  "    c = None"],
}
# stored fields the computed columns read besides columns
_COMPUTED_INPUTS = ("request_first_ts", "response_first_ts", "wait_ns", "rtt_ns", "socket_wait_ns")


class _MillisecondsText(dict):
    """int nanoseconds -> the JSON text of ns / 1_000_000 (float's repr),
    remembered for the first 65536 values: durations repeat (zero transfer
    times, a connection's round trip, common latencies), and a lookup is
    cheaper than a float's shortest repr."""

    __slots__ = ()

    def __missing__(self, ns: int) -> str:
        text = _float_repr(ns / 1000000)
        if len(self) < 65536:
            self[ns] = text
        return text


_ms_text = _MillisecondsText()


class _FloatText(dict):
    """float -> its repr, remembered for the first 65536 values: the broker
    log's times are microseconds in ms and repeat. (Zero is never looked up:
    0.0 and -0.0 are equal keys with different texts.)"""

    __slots__ = ()

    def __missing__(self, value: float) -> str:
        text = _float_repr(value)
        if len(self) < 65536:
            self[value] = text
        return text


_float_text = _FloatText()


class _BrokerFloatText(dict):
    """A non-zero float -> its JSON text, remembered for the first 65536
    values (the broker log's times repeat); NaN and infinities raise
    ValueError (never kept), as the json module's path is taken for them."""

    __slots__ = ()

    def __missing__(self, value: float) -> str:
        if value - value:
            raise ValueError("not finite")
        text = _float_repr(value)
        if len(self) < 65536:
            self[value] = text
        return text


_broker_float = _BrokerFloatText()


def _checked_float(value: Any) -> str:
    """The JSON text of a float subclass; raises for anything else or a non-finite value."""
    if value - value:
        raise ValueError("not finite")
    return _float_repr(value)


# Runs of columns that repeat row after row: the line function keeps the
# text of each run for the values it last wrote, and writes it again while
# every value is the same object (a str also an equal exact str: a client
# id is decoded anew for each request; a list column only while empty). A
# run's text is kept only from exact strs, so a hit writes what the run's
# code would. One text per run, not a table: a capture's rows come mostly
# a connection at a time. Only the api and client id are a run: they
# repeat on the rows of many connections too, where the connection's
# endpoints and the "no error" columns (a cut request's problems) do not,
# and giving a run up on every row cost those shapes 1-3% (A/B, 2026-11-26).
# The broker log's principal, security protocol and listener are a run too:
# only joined rows reach that code (null rows take one constant), and they
# repeat on every row of a connection (new objects each, equal: -650
# instructions a row against three memo lookups, callgrind, 2026-11-26).
_LINE_RUNS = (("api_key", "api_name", "api_version", "client_id"), ("principal", "security_protocol", "listener"))
_RUN_TESTS = {"string": ("({v} is {k} or {v}.__class__ is str and {v} == {k})", "({v}.__class__ is str or {v} is None)"),
              "int": ("{v} is {k}", ""),  # (an int's text is its value's: the same object, the same text)
              "list": ("({v} is not None and not {v})", "({v} is not None and not {v})")}
# the tests' order: the quickest to fail first (a list that is not empty, a
# connection's stream number: where rows of many connections or problems
# interleave, a run's text is given up after one test)
_RUN_ORDER = {"list": 0, "int": 1, "string": 2}


def _run_block(n: int, run: list[tuple[str, str]], lines: list[str], parts: list[str]) -> list[str]:
    """The code of run `n` (its columns' code `lines` and f-string `parts`):
    sets g{n} to the run's text, from the one kept when the values match."""
    tests: list[tuple[int, str, str]] = []  # (rank, hit test, keep test)
    keys: list[str] = []
    for name, kind in run:
        family = "list" if kind.startswith("list<") else "int" if kind.startswith("int") else kind
        hit, keep = _RUN_TESTS[family]
        tests.append((_RUN_ORDER[family], hit.format(v=name, k=f"h[{len(keys)}]"), keep.format(v=name)))
        if family != "list":
            keys.append(name)
    tests.sort(key=lambda test: test[0])  # (stable: the table's order within a family)
    keeps = [keep for _, _, keep in tests if keep]
    return [f"    h = _run{n}",
            f"    if {' and '.join(hit for _, hit, _ in tests)}:",
            f"        g{n} = h[{len(keys)}]",
            "    else:",
            *("    " + line for line in lines),
            f"        g{n} = f'{','.join(parts)}'",
            f"        if {' and '.join(keeps) or 'True'}:",
            f"            _run{n} = ({''.join(key + ', ' for key in keys)}g{n})"]


def _exchange_line_function(ts_unit: str) -> Callable[[Any], str]:
    """exchange -> its JSONL line, without building the row dict: one f-string
    written from COLUMN_TYPES. The output is byte for byte what the json
    module writes for `exchange.to_row()` (ASCII, compact separators) with
    timestamps written as exact epoch seconds at `ts_unit`'s resolution; a
    value of an unexpected type raises (TypeError/ValueError) and the caller
    falls back to the json module. Bools are not told apart from ints: no
    column holds one."""
    lines = ["def exchange_line(ex):", f"    global {', '.join(f'_run{n}' for n in range(len(_LINE_RUNS)))}"]
    stored = [name for name, _ in COLUMN_TYPES if name not in _COMPUTED_CODE]
    for name in (*stored, *_COMPUTED_INPUTS):
        lines.append(f"    {name} = ex.{name}")
    parts: list[str] = []
    head_lines: list[str] = []
    head_parts: list[str] = []
    places = digits(ts_unit)
    # the broker-log columns, last in the table, are all null unless a log
    # joined the row: their code is written apart, under a test that gives
    # their null text at once (as one constant)
    head = len(COLUMN_TYPES) - len(BROKER_LOG_COLUMNS)
    assert tuple(name for name, _ in COLUMN_TYPES[head:]) == BROKER_LOG_COLUMNS
    run_of = {name: n for n, run in enumerate(_LINE_RUNS) for name in run}
    run: list[tuple[str, str]] = []  # the run being written, its columns
    outer_lines: list[str] = []  # (while a run is written: the code and parts around it)
    outer_parts: list[str] = []
    for i, (name, kind) in enumerate(COLUMN_TYPES):
        if run and run_of.get(name) != run_of[run[0][0]]:  # a run ends: its code in place of its columns'
            n = run_of[run[0][0]]
            assert tuple(column for column, _ in run) == _LINE_RUNS[n]
            run_lines, run_parts, lines, parts = lines, parts, outer_lines, outer_parts
            lines.extend(_run_block(n, run, run_lines, run_parts))
            parts.append(f"{{g{n}}}")
            run = []
        if name in run_of and not run:  # a run starts
            outer_lines, outer_parts, lines, parts = lines, parts, [], []
        if name in run_of:
            run.append((name, kind))
        if i == head:
            head_lines, head_parts, lines, parts = lines, parts, [], []
        if name in _COMPUTED_CODE:
            # an int of ns -> its remembered text; anything else (floats in odd
            # rows) as the property computes it, checked finite
            lines.extend("    " + line for line in _COMPUTED_CODE[name])
            lines.append("    if c is None:")
            lines.append(f"        v{i} = None")
            lines.append("    elif c.__class__ is int:")
            lines.append(f"        v{i} = _ms_text[c]")
            lines.append("    else:")
            lines.append("        c = c / 1000000")
            lines.append("        if c - c:")
            lines.append("            raise ValueError('not finite')")
            lines.append(f"        v{i} = _float_repr(c)")
            key = _esc(name).replace("{", "{{").replace("}", "}}")
            parts.append(f'{key}:{{"null" if v{i} is None else v{i}}}')
            continue
        if kind == "float64" and name in BROKER_LOG_COLUMNS:
            # the broker log's times: the text already, for the line's f-string
            # (a zero, 2 of the 8 in a usual line, from its sign, never the memo:
            # 0.0 and -0.0 are one key; copysign costs half a repr)
            lines.append(f"    if {name}.__class__ is float:")
            lines.append(f"        v{i} = _broker_float[{name}] if {name} else "
                         f"'0.0' if _copysign(1.0, {name}) > 0.0 else '-0.0'")
            lines.append(f"    elif {name} is None:")
            lines.append(f"        v{i} = 'null'")
            lines.append("    else:")
            lines.append(f"        v{i} = _checked_float({name})")
            key = _esc(name).replace("{", "{{").replace("}", "}}")
            parts.append(f'{key}:{{v{i}}}')
            continue
        lines.append(f"    v{i} = {name}")
        if kind == "float64":
            # nan - nan and inf - inf are nan (true); json writes NaN/Infinity, not repr's nan/inf
            lines.append(f"    if v{i} is not None and v{i} - v{i}:")
            lines.append("        raise ValueError('not finite')")
        if kind == "timestamp" and places:
            # a time a second or more after the epoch, cut from its digits
            # (the seconds, then the first `places` of the nine fraction
            # digits: truncated as seconds_text does); anything else by
            # seconds_text (or raises)
            v = f"v{i}"
            fraction = "[-9:]" if places == 9 else f"[-9:{places - 9}]"
            lines.append(f"    if {v} is not None:")
            lines.append(f"        if {v}.__class__ is int and {v} >= 1000000000:")
            lines.append(f"            s = str({v})")
            lines.append(f"            {v} = f'{{s[:-9]}}.{{s{fraction}}}'")
            lines.append("        else:")
            lines.append(f"            {v} = _seconds({v})")
            text = f"v{i}"
        else:
            text = _JSON_OF_KIND[kind].format(v=f"v{i}")
        key = _esc(name).replace("{", "{{").replace("}", "}}")  # as json.dumps writes a str
        parts.append(f'{key}:{{"null" if v{i} is None else {text}}}')
    if run:  # a run that ends the table
        n = run_of[run[0][0]]
        assert tuple(column for column, _ in run) == _LINE_RUNS[n]
        run_lines, run_parts, lines, parts = lines, parts, outer_lines, outer_parts
        lines.extend(_run_block(n, run, run_lines, run_parts))
        parts.append(f"{{g{n}}}")
    tail_lines, tail_parts, lines, parts = lines, parts, head_lines, head_parts
    # (an f-string of more than 30 pieces is built as a list and joined:
    # pieces of 14 columns each are built on the stack)
    chunks = [",".join(parts[at : at + 14]) for at in range(0, len(parts), 14)]
    for n, chunk in enumerate(chunks):
        lines.append(f"    p{n} = f'{chunk}'")
    head_text = "{{" + ",".join(f"{{p{n}}}" for n in range(len(chunks)))
    # each branch returns the whole line (the broker columns' text not made
    # a string of its own first)
    null_tail = "".join("," + _esc(name) + ":null" for name in BROKER_LOG_COLUMNS)
    lines.append(f"    if {' and '.join(name + ' is None' for name in BROKER_LOG_COLUMNS)}:")
    lines.append(f"        return f'{head_text}{null_tail}}}}}\\n'")
    # a joined row's columns, when their values are the plain cases, by the
    # native writer (the same text: tests/shared/test_output_native.py);
    # else (None) by the code below
    broker_kinds = tuple(kind for _, kind in COLUMN_TYPES[head:])
    native_text = _columns_text is not None and set(broker_kinds) <= {"float64", "string"}
    if native_text:
        lines.append(f"    t = _columns_text(_broker_spec, {', '.join(BROKER_LOG_COLUMNS)})")
        lines.append("    if t is not None:")
        lines.append(f"        return f'{head_text}{{t}}}}}}\\n'")
    lines.extend(tail_lines)
    lines.append(f"    return f'{head_text}," + ",".join(tail_parts) + "}}\\n'")

    def seconds(value: Any) -> str:
        if value.__class__ is not int:
            raise TypeError("a timestamp is an int of nanoseconds")
        return seconds_text(value, places)

    namespace: dict[str, Any] = {"_esc": _esc, "_esc_memo": _esc_memo, "_one_str_memo": _one_str_memo,
                                 "_int_repr": _int_repr, "_float_repr": _float_repr, "_seconds": seconds,
                                 "_json_ints": _json_ints, "_json_strs": _json_strs, "int": int, "max": max,
                                 "_ms_text": _ms_text, "_float_text": _float_text,
                                 "_broker_float": _broker_float, "_checked_float": _checked_float,
                                 "_copysign": copysign, "_columns_text": _columns_text,
                                 "_broker_spec": tuple((f",{_esc(name)}:", kind == "float64")
                                                       for name, kind in COLUMN_TYPES[head:])}
    for n, names in enumerate(_LINE_RUNS):  # kept texts no value matches at first
        namespace[f"_run{n}"] = (*(object() for name in names if name not in LIST_COLUMNS), "")
    # (compiled once per source: kept in the codec cache, kdissect.protocol.codecache)
    exec(compile_cached("\n".join(lines), "<kdissect exchange_line>"), namespace)  # noqa: S102
    return namespace["exchange_line"]


_LINE_FUNCTIONS: dict[str, Callable[[Any], str]] = {}


def exchange_line_for(ts_unit: str) -> Callable[[Any], str]:
    """The JSONL line function for timestamps at `ts_unit` ("us", "ns", ...)."""
    function = _LINE_FUNCTIONS.get(ts_unit)
    if function is None:
        function = _LINE_FUNCTIONS[ts_unit] = _exchange_line_function(ts_unit)
    return function


class Table(SlotRecord):
    """What a writer needs to know about a table."""

    __slots__ = ("names", "list_columns", "arrow_schema", "timestamp_columns", "byte_text_columns")

    def __init__(self, names: Sequence[str], list_columns: frozenset[str], arrow_schema: Callable[..., Any],
                 timestamp_columns: frozenset[str] = frozenset(),
                 byte_text_columns: frozenset[str] = frozenset()) -> None:
        self.names = names  # column order
        self.list_columns = list_columns  # written as JSON text in CSV
        # builds the pyarrow schema (given the timestamp unit when the table
        # has timestamps): pyarrow stays off the JSONL path
        self.arrow_schema = arrow_schema
        # int nanoseconds in rows; exact seconds in text, the run's unit in Parquet
        self.timestamp_columns = timestamp_columns
        # record bytes as UTF-8 text or "base64:..." (lossless already):
        # written as they are, not through lossless_text
        self.byte_text_columns = byte_text_columns


EXCHANGES = Table(COLUMN_NAMES, frozenset(LIST_COLUMNS), arrow_schema, TIMESTAMP_COLUMNS)


class JsonlWriter:
    def __init__(self, stream: IO[str], table: Table = EXCHANGES, ts_unit: str = "us") -> None:
        self._stream = stream
        self._encoder: Callable[[Any], str] | None = None  # for write(); made on first use
        self._timestamps = table.timestamp_columns
        self._keep = table.byte_text_columns
        self._places = digits(ts_unit)
        self._line = exchange_line_for(ts_unit)

    def _encode(self, row: dict[str, Any]) -> str:
        encode = self._encoder
        if encode is None:
            encode = self._encoder = _row_encoder()
        if not self._timestamps:
            return encode(row)
        parts = []
        for name, value in row.items():
            if name in self._timestamps and value.__class__ is int:
                text = seconds_text(value, self._places)
            else:
                text = encode(value)
            parts.append(f"{_esc(name)}:{text}")
        return "{" + ",".join(parts) + "}"

    def write(self, row: dict[str, Any]) -> None:
        self._stream.write(self._encode(lossless_row(row, self._keep)) + "\n")

    def write_exchange(self, exchange: Any) -> None:
        """Same as `write(exchange.to_row())`, faster."""
        try:
            line = self._line(exchange)
        except (TypeError, ValueError):
            self.write(exchange.to_row())
            return
        self._stream.write(line)

    def write_exchanges(self, exchanges: Iterable[Any]) -> None:
        """`write_exchange` for each, the lines written to the stream in
        batches (one write per few hundred rows)."""
        write = self._stream.write
        line_of = self._line
        batch: list[str] = []
        append = batch.append
        try:
            for exchange in exchanges:
                try:
                    append(line_of(exchange))
                except (TypeError, ValueError):
                    write("".join(batch))
                    batch.clear()
                    self.write(exchange.to_row())
                    continue
                if len(batch) >= 256:
                    write("".join(batch))
                    batch.clear()
        finally:
            if batch:  # also what came before a failure in `exchanges`
                write("".join(batch))

    def close(self) -> None:
        self._stream.flush()


# CSV cells a spreadsheet would run as a formula (OWASP: = + - @, a tab or
# CR first) get a leading apostrophe; so do cells that start with one, so
# that reading back is one rule: a text cell starting with "'" lost one.
# Cells that read as a plain number (a negative one too) are left alone.
_FORMULA_LEADS = frozenset("=+-@\t\r'")
_FORMULA_AFTER_NUL = re.compile("\x00[=+\\-@\t\r']")
_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?\Z")


def csv_cell(text: str) -> str:
    """A text cell as the CSV writer writes it (the formula rule above)."""
    if text and text[0] in _FORMULA_LEADS and not _PLAIN_NUMBER.match(text):
        return "'" + text
    return text


class CsvWriter:
    """Nulls are empty cells; list columns are JSON text; timestamps exact
    epoch seconds; strings by `lossless_row`, formula-like text by
    `csv_cell`; a cell with a CR, LF, comma or quote is quoted."""

    def __init__(self, stream: IO[str], table: Table = EXCHANGES, ts_unit: str = "us") -> None:
        import csv
        import json

        self._dumps = json.dumps
        self._stream = stream
        self._writer = csv.writer(stream, lineterminator="\n")
        # the csv module quotes a cell for the characters of its line
        # terminator only: a bare CR in a cell would go out unquoted with
        # "\n", so rows holding one are written with "\r\n" (quoting CR and
        # LF) and their terminator swapped
        self._cr_buffer = io.StringIO()
        self._cr_writer = csv.writer(self._cr_buffer, lineterminator="\r\n")
        self._writer.writerow(table.names)
        self._keep = table.byte_text_columns
        self._list_positions = [i for i, name in enumerate(table.names) if name in table.list_columns]
        self._ts_positions = [i for i, name in enumerate(table.names) if name in table.timestamp_columns]
        self._places = digits(ts_unit)

    def _cells(self, row: dict[str, Any]) -> list[Any]:
        values = list(row.values())
        for i in self._list_positions:
            if values[i] is not None:
                values[i] = self._dumps(values[i], ensure_ascii=False, separators=(",", ":"))
        for i in self._ts_positions:
            if values[i].__class__ is int:
                values[i] = seconds_text(values[i], self._places)
        return values

    def write(self, row: dict[str, Any]) -> None:
        values = self._cells(row)
        # one probe over the row's text cells, each after a NUL: ASCII
        # without a backslash needs no lossless_row; a cell that starts like
        # a formula shows as NUL + lead (a NUL inside a cell is only a false
        # alarm, which costs the loop below)
        probe = "\x00" + "\x00".join([v for v in values if v.__class__ is str])
        if not (probe.isascii() and "\\" not in probe):
            stored = lossless_row(row, self._keep)
            if stored is not row:
                values = self._cells(stored)
                probe = "\x00" + "\x00".join([v for v in values if v.__class__ is str])
        if _FORMULA_AFTER_NUL.search(probe):
            for i, value in enumerate(values):
                if value.__class__ is str and value and value[0] in _FORMULA_LEADS:
                    values[i] = csv_cell(value)
        if "\r" not in probe:
            self._writer.writerow(values)
            return
        buffer = self._cr_buffer
        self._cr_writer.writerow(values)
        self._stream.write(buffer.getvalue()[:-2] + "\n")
        buffer.seek(0)
        buffer.truncate()

    def close(self) -> None:
        self._stream.flush()


class ParquetWriter:
    """Holds rows as values in the table's column order and writes row groups
    of `batch_rows` (kdissect.shared.arrow_rows, the lossless rule and the
    timestamps' unit applied a column at a time); timestamps in `ts_unit`."""

    def __init__(self, path: str, batch_rows: int = 65536, table: Table = EXCHANGES, ts_unit: str = "us",
                 name: str | None = None) -> None:
        import pyarrow.parquet as pq

        self._timestamps = table.timestamp_columns
        self._keep = table.byte_text_columns
        self._names = table.names
        self._schema = table.arrow_schema(ts_unit) if self._timestamps else table.arrow_schema()
        self._divisor = {"s": 10**9, "ms": 10**6, "us": 1000, "ns": 1}[ts_unit]
        self._name = name or path  # the output's name in messages (`path` may be its temporary file)
        try:
            self._writer = pq.ParquetWriter(path, self._schema)
        except OSError as problem:
            raise cannot_write(self._name, problem) from None
        self._rows: list[tuple] = []
        self._batch_rows = batch_rows

    def write(self, row: dict[str, Any]) -> None:
        """A row by column name (a column it lacks is null), strings as captured."""
        self._add(tuple(map(row.get, self._names)))

    def write_exchange(self, exchange: Any) -> None:
        """Same as `write(exchange.to_row())` (the exchanges table), faster: the
        row's values are the exchange's attributes of the columns' names."""
        self._add(row_values(exchange))

    def _add(self, values: tuple) -> None:
        rows = self._rows
        rows.append(values)
        if len(rows) >= self._batch_rows:
            self._flush()

    def _flush(self) -> None:
        from kdissect.shared.arrow_rows import rows_batch

        if self._rows:
            batch = rows_batch(self._rows, self._schema, lossless=True, keep=self._keep,
                               timestamps=self._timestamps, divisor=self._divisor)
            try:
                self._writer.write_batch(batch)
            except OSError as problem:  # pyarrow's own file: a full disk, an I/O error
                raise cannot_write(self._name, problem) from None
            self._rows = []

    def close(self) -> None:
        self._flush()
        try:
            self._writer.close()
        except OSError as problem:
            raise cannot_write(self._name, problem) from None


class _Owned:
    """A writer plus the file it writes (an AtomicFile and its stream):
    `close()` finishes the file and puts it in place, `abandon()` drops it
    (the earlier file at that path stays). As a context manager: close on
    success, abandon on any error."""

    def __init__(self, writer: Any, handle: IO[str] | None, output: AtomicFile | None = None) -> None:
        self._writer = writer
        self._handle = handle
        self._output = output
        self.write = writer.write
        write_exchange = getattr(writer, "write_exchange", None)
        if write_exchange is None:
            def write_exchange(exchange: Any) -> None:
                writer.write(exchange.to_row())
        # write_exchange(exchange) == write(exchange.to_row())
        self.write_exchange = write_exchange
        write_exchanges = getattr(writer, "write_exchanges", None)
        if write_exchanges is None:
            def write_exchanges(exchanges: Iterable[Any]) -> None:
                for exchange in exchanges:
                    write_exchange(exchange)
        self.write_exchanges = write_exchanges

    def close(self) -> None:
        try:
            self._writer.close()
        except BaseException:
            self.abandon()
            raise
        if self._output is not None:
            self._output.commit(self._handle)
        elif self._handle is not None:
            self._handle.close()

    def abandon(self) -> None:
        if self._output is not None:
            self._output.abandon()
        elif self._handle is not None:
            self._handle.close()

    def __enter__(self) -> _Owned:
        return self

    def __exit__(self, kind: Any, value: Any, trace: Any) -> None:
        if kind is None:
            self.close()
        else:
            self.abandon()


def open_writer(path: str | None, stdout: IO[str] | None = None, table: Table = EXCHANGES,
                ts_unit: str = "us") -> _Owned:
    """A writer with `write(row)`, `close()` and `abandon()` for `path`
    (None/"-" = stdout JSONL); timestamps are written at `ts_unit`'s
    resolution. A file is written under a temporary name and renamed over
    `path` by `close()` (kdissect.shared.atomic); best used as a context manager."""
    kind = format_for(path)
    if path is None or path == "-":
        return _Owned(JsonlWriter(stdout or sys.stdout, table, ts_unit), None)
    output = AtomicFile(path)
    try:
        if kind == "parquet":
            return _Owned(ParquetWriter(output.temporary, table=table, ts_unit=ts_unit, name=path), None, output)
        handle = output.open_text(newline="" if kind == "csv" else None, buffering=io.DEFAULT_BUFFER_SIZE * 16)
        writer = CsvWriter(handle, table, ts_unit) if kind == "csv" else JsonlWriter(handle, table, ts_unit)
    except BaseException:
        output.abandon()
        raise
    return _Owned(writer, handle, output)
