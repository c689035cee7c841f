"""Display filters over the exchange table, in the spirit of tshark's `-Y`.

    api_name == "Produce" and service_ms > 50
    error_codes contains "NOT_COORDINATOR" or status in {no_response, truncated}
    not (wait_reason is null) and client_id != "admin"

One small recursive-descent grammar, compiled once to a predicate; nothing is
ever `eval`-ed. Columns are the export's (`kdissect.model.exchange.COLUMN_NAMES`);
the same compiled filter evaluates an `Exchange` (the CLI) and a row dict (a
row of the exported table, a Spark row), so every face selects the same rows.

Semantics, chosen to read as tshark's do:
- a comparison with a null value is false (`not` of it is true);
  `COLUMN is null` / `is not null` test for it (an empty list is null);
- list columns (error_codes, problems, problem_codes, codecs) match when any
  element does; `contains` on them tests membership, on strings a substring;
- `api_name`/`api_key` and `error_code`/`error_codes` take names as well as
  numbers (`api_key == "Fetch"`, `error_code == "NOT_COORDINATOR"`);
  an unknown name is an error with a suggestion, as is an unknown column;
- times (request_ts, response_ts) compare with an ISO 8601 UTC time in
  quotes or with epoch seconds.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, Callable

from kdissect.model.exchange import COLUMN_TYPES, LIST_COLUMNS, TIMESTAMP_COLUMNS
from kdissect.failures import InputError

__all__ = ["DisplayFilter", "FilterError", "parse_filter", "suggestion"]

_KINDS = dict(COLUMN_TYPES)
_TEXT_COLUMNS = frozenset(name for name, kind in COLUMN_TYPES if kind in ("string", "list<string>"))
_OPERATORS = ("==", "!=", "<=", ">=", "<", ">")
_TOKEN = re.compile(r"""
    \s*(?:
      (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    | (?P<op>==|!=|<=|>=|<|>|&&|\|\||!|\(|\)|\{|\}|,)
    | (?P<number>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w.:]))
    | (?P<word>[A-Za-z_][\w.:\-\[\]]*|[\d\[][\w.:\-\[\]]*)
    )""", re.VERBOSE)

Getter = Callable[[str], Any]
Predicate = Callable[[Getter], bool]


class FilterError(InputError):
    """A filter that cannot be parsed or names what does not exist (exit 2)."""


def suggestion(word: str, choices: Any) -> str:
    """" (did you mean X?)" for the closest of `choices`, or ""."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    if not close:
        lowered = {str(c).lower(): c for c in choices}
        close = [lowered[word.lower()]] if word.lower() in lowered else []
    return f" (did you mean {close[0]}?)" if close else ""


def _tokens(text: str) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    position = 0
    text = text.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise FilterError(f"filter: cannot read {text[position:].strip()[:20]!r} "
                              f"at character {position + 1}")
        kind = match.lastgroup or ""
        found.append((kind, match.group(kind)))
        position = match.end()
    return found


def _unquote(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text[1:-1])


# -- names for numbers -----------------------------------------------------------


def _api_keys() -> dict[str, int]:
    from kdissect.protocol._generated.index import APIS

    return {entry[0]: key for key, entry in APIS.items()}


def _error_codes() -> dict[str, int]:
    from kdissect.protocol._generated.errors import ERRORS

    return {entry[0]: code for code, entry in ERRORS.items()}


def api_key_for(name: str) -> int:
    """The api key Kafka calls `name` (any case); FilterError with a suggestion if none."""
    keys = _api_keys()
    for known, key in keys.items():
        if known.lower() == name.lower():
            return key
    raise FilterError(f"unknown API {name!r}{suggestion(name, keys)}")


def _error_code_for(name: str) -> int:
    codes = _error_codes()
    if name.upper() in codes:
        return codes[name.upper()]
    raise FilterError(f"unknown error code name {name!r}{suggestion(name.upper(), codes)}")


def _api_name_for(name: str) -> str:
    return next(known for known in _api_keys() if known == name or known.lower() == name.lower()) \
        if any(k.lower() == name.lower() for k in _api_keys()) else name


# -- values ------------------------------------------------------------------------


def time_ns(text: str) -> int:
    """Epoch nanoseconds of an ISO 8601 time (UTC unless it names its zone)."""
    import datetime as dt

    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError:
        raise FilterError(f"{text!r} is not a time: write it as ISO 8601, e.g. 2026-11-26T07:30:00Z") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    delta = when - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000


def _literal(column: str, kind: str, token: tuple[str, str]) -> Any:
    """The value a literal stands for when compared with `column`."""
    sort, text = token
    if sort == "op":
        raise FilterError(f"filter: expected a value after {column}, found {text!r}")
    base = kind[5:-1] if kind.startswith("list<") else kind
    if sort == "string":
        text = _unquote(text)
    if column in TIMESTAMP_COLUMNS:
        if sort == "number":
            return round(float(text) * 1_000_000_000)
        return time_ns(text)
    if base == "string":
        if sort == "number":
            text = text  # a bare number where text is expected: compare as text
        return _api_name_for(text) if column == "api_name" else text
    # numeric columns
    if sort == "number":
        return float(text) if base == "float64" else _whole(text)
    if column == "api_key":
        return api_key_for(text)
    if column in ("error_code", "error_codes"):
        return _error_code_for(text)
    raise FilterError(f"filter: {column} holds numbers, not {text!r}")


def _whole(text: str) -> float | int:
    value = float(text)
    return int(value) if value.is_integer() else value


def _check_api_name(value: Any) -> None:
    if isinstance(value, str) and value not in _api_keys():
        api_key_for(value)  # raises, with a suggestion


# -- the grammar ----------------------------------------------------------------------
#   expr    := and ( ("or" | "||") and )*
#   and     := unary ( ("and" | "&&") unary )*
#   unary   := ("not" | "!") unary | "(" expr ")" | test
#   test    := COLUMN op VALUE | COLUMN "contains" VALUE | COLUMN ["not"] "in" "{" VALUE ([,] VALUE)* "}"
#            | COLUMN "is" ["not"] "null" | COLUMN            (present: not null, not empty)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.position = 0
        self.columns: set[str] = set()

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        token = self.peek()
        if token is None:
            raise FilterError(f"filter: {self.text!r} ends too early")
        self.position += 1
        return token

    def word_is(self, *words: str) -> bool:
        token = self.peek()
        return token is not None and token[1].lower() in words and token[0] in ("word", "op")

    def parse(self) -> Predicate:
        if not self.tokens:
            raise FilterError("filter: empty expression")
        predicate = self.expr()
        if self.peek() is not None:
            raise FilterError(f"filter: unexpected {self.peek()[1]!r}")  # type: ignore[index]
        return predicate

    def expr(self) -> Predicate:
        parts = [self.conjunction()]
        while self.word_is("or", "||"):
            self.take()
            parts.append(self.conjunction())
        return parts[0] if len(parts) == 1 else (lambda get: any(p(get) for p in parts))

    def conjunction(self) -> Predicate:
        parts = [self.unary()]
        while self.word_is("and", "&&"):
            self.take()
            parts.append(self.unary())
        return parts[0] if len(parts) == 1 else (lambda get: all(p(get) for p in parts))

    def unary(self) -> Predicate:
        if self.word_is("not", "!"):
            self.take()
            inner = self.unary()
            return lambda get: not inner(get)
        if self.word_is("("):
            self.take()
            inner = self.expr()
            if not self.word_is(")"):
                raise FilterError(f"filter: missing ')' in {self.text!r}")
            self.take()
            return inner
        return self.test()

    def column(self) -> str:
        sort, name = self.take()
        if sort != "word":
            raise FilterError(f"filter: expected a column name, found {name!r}")
        if name not in _KINDS:
            raise FilterError(f"filter: unknown column {name!r}{suggestion(name, _KINDS)}; "
                              "the columns are the export's (see README)")
        self.columns.add(name)
        return name

    def test(self) -> Predicate:
        column = self.column()
        kind = _KINDS[column]
        many = column in LIST_COLUMNS
        token = self.peek()
        if token is None or self.word_is("and", "or", "&&", "||", ")"):
            return _present(column)
        if self.word_is("is"):
            self.take()
            negate = self.word_is("not")
            if negate:
                self.take()
            if not self.word_is("null"):
                raise FilterError("filter: expected 'null' after 'is'")
            self.take()
            absent = _absent(column)
            return (lambda get: not absent(get)) if negate else absent
        negate_in = False
        if self.word_is("not"):
            self.take()
            negate_in = True
            if not self.word_is("in"):
                raise FilterError("filter: expected 'in' after 'not' (write 'not COLUMN ...' to negate a test)")
        if self.word_is("in"):
            self.take()
            if not self.word_is("{"):
                raise FilterError("filter: expected '{' after 'in'")
            self.take()
            values = []
            while not self.word_is("}"):
                if self.word_is(","):
                    self.take()
                    continue
                values.append(self.value(column, kind))
            self.take()
            member = _compare(column, many, "in", frozenset(values))
            return (lambda get: not member(get)) if negate_in else member
        if self.word_is("contains"):
            self.take()
            value = self.value(column, kind)
            if column not in LIST_COLUMNS and column not in _TEXT_COLUMNS:
                raise FilterError(f"filter: 'contains' needs a text or list column; {column} holds numbers")
            if column not in LIST_COLUMNS and not isinstance(value, str):
                value = str(value)
            return _compare(column, many, "contains", value)
        sort, op = self.take()
        if op not in _OPERATORS:
            raise FilterError(f"filter: expected a comparison after {column}, found {op!r}"
                              f"{suggestion(op, ('contains', 'in', 'is'))}")
        if self.word_is("null"):
            self.take()
            if op not in ("==", "!="):
                raise FilterError("filter: only == and != compare with null")
            absent = _absent(column)
            return absent if op == "==" else (lambda get: not absent(get))
        value = self.value(column, kind)
        if op not in ("==", "!=") and isinstance(value, str):
            raise FilterError(f"filter: {op} compares numbers and times; {column} holds text")
        return _compare(column, many, op, value)

    def value(self, column: str, kind: str) -> Any:
        value = _literal(column, kind, self.take())
        if column == "api_name":
            _check_api_name(value)
        return value


def _absent(column: str) -> Predicate:
    return lambda get: get(column) in (None, [], ())


def _present(column: str) -> Predicate:
    absent = _absent(column)
    return lambda get: not absent(get) and get(column) != 0 and get(column) != ""


def _test(op: str, value: Any) -> Callable[[Any], bool]:
    if op == "==":
        return lambda x: x == value
    if op == "!=":
        return lambda x: x != value
    if op == "<":
        return lambda x: x < value
    if op == "<=":
        return lambda x: x <= value
    if op == ">":
        return lambda x: x > value
    if op == ">=":
        return lambda x: x >= value
    if op == "in":
        return lambda x: x in value
    if op == "contains":
        return lambda x: value in x if isinstance(x, str) else x == value
    raise AssertionError(op)


def _compare(column: str, many: bool, op: str, value: Any) -> Predicate:
    check = _test(op, value)
    if many:
        if op == "!=":  # no element equals the value
            equal = _test("==", value)
            return lambda get: bool(get(column)) and not any(equal(x) for x in get(column))

        def any_element(get: Getter) -> bool:
            items = get(column)
            return bool(items) and any(x is not None and check(x) for x in items)

        return any_element

    def one(get: Getter) -> bool:
        x = get(column)
        if x is None:
            return False
        try:
            return check(x)
        except TypeError:  # e.g. a value of another type in a hand-made row
            return False

    return one


class DisplayFilter:
    """A parsed filter: `matches(exchange)` for Exchange objects (and anything
    with the columns as attributes), `matches_row(row)` for row dicts."""

    def __init__(self, text: str) -> None:
        parser = _Parser(text)
        self.text = text
        self._predicate = parser.parse()
        self.columns = frozenset(parser.columns)  # the columns it reads

    def matches(self, exchange: Any) -> bool:
        return self._predicate(lambda name: getattr(exchange, name))

    def matches_row(self, row: Any) -> bool:
        """A row dict as exported (times as epoch ns, or datetimes from Arrow/Spark)."""
        return self._predicate(lambda name: _row_value(row, name))

    def __repr__(self) -> str:
        return f"DisplayFilter({self.text!r})"


def _row_value(row: Any, name: str) -> Any:
    value = row[name]
    if name in TIMESTAMP_COLUMNS and value is not None and not isinstance(value, int):
        value = _datetime_ns(value)
    return value


def _datetime_ns(value: Any) -> int:
    import datetime as dt

    if isinstance(value, float):
        return round(value * 1_000_000_000)
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000 \
        + getattr(value, "nanosecond", 0)


def parse_filter(text: str) -> DisplayFilter:
    """The compiled filter; FilterError (one line, exit 2 in the CLI) if it does not parse."""
    return DisplayFilter(text)
