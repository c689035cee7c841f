"""The JSONL line function keeps the text of each run of repeating columns
(output._LINE_RUNS: the api and client id) and writes it again while the
values match. Every line must still be what
the json module writes for the row (tests/support/jsonl.reference_line),
whatever changed since the row before: one value, an equal string that is
another object, a str or int subclass, None, a list column that filled."""

from __future__ import annotations

import io
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from kdissect.model.exchange import Exchange
from kdissect.shared.output import JsonlWriter
from tests.support.jsonl import reference_line


class _Text(str):
    """A str subclass whose == says yes to everything (a run must not trust it)."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = str.__hash__


class _Number(int):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = int.__hash__


def _base(**changes: object) -> Exchange:
    values: dict = dict(capture="a.pcap", stream=7, client="10.0.0.1:5000", broker="10.0.0.2:9092",
                        correlation_id=1, api_key=0, api_name="Produce", api_version=9, client_id="producer-1",
                        request_ts=1_700_000_000_123_456_789, response_ts=1_700_000_000_223_456_789,
                        throttle_time_ms=0, error_code=0, status="ok")
    values.update(changes)
    return Exchange(**values)


# each row differs from the one before in the columns of a run
_ROWS = [
    _base(),
    _base(),  # the same values (the same objects): the kept texts
    _base(client_id="".join(["producer", "-1"])),  # an equal client id, another object
    _base(client_id="producer-2"),
    _base(client_id=None),
    _base(client_id=_Text("producer-2")),  # a subclass claiming equality
    _base(client_id=_Text("producer-2")),
    _base(client_id="producer-2"),
    _base(stream=8),
    _base(stream=100_000),
    _base(stream=int("100000")),  # equal, another object
    _base(stream=_Number(7)),
    _base(stream=7),
    _base(capture="b.pcap"),
    _base(capture="\udcff.pcap"),  # not UTF-8: written as \\xff
    _base(capture="\udcff.pcap"),
    _base(api_key=1, api_name="Fetch", api_version=12),
    _base(api_key=1, api_name="Fetch", api_version=13),
    _base(error_codes=[3]),  # a list column fills
    _base(error_codes=[]),
    _base(problems=["no response"], problem_codes=["no-response"], status="no_response"),
    _base(problems=[], problem_codes=[]),
    _base(error_code=None, throttle_time_ms=None),
    _base(error_code=0, throttle_time_ms=0),
    _base(error_code=2.0),  # a float where an int belongs: the json module's row
    _base(error_code=0),
    _base(status=_Text("ok")),
    _base(status="ok"),
    _base(broker=None, client=None),
    _base(),
]


def _written(exchanges: list[Exchange], batched: bool) -> list[str]:
    out = io.StringIO()
    writer = JsonlWriter(out)
    if batched:
        writer.write_exchanges(exchanges)
    else:
        for exchange in exchanges:
            writer.write_exchange(exchange)
    return out.getvalue().splitlines(keepends=True)


def _expected(exchange: Exchange) -> str:
    try:
        return reference_line(exchange)
    except (TypeError, ValueError):  # not a row the reference spells: json's own
        return json.dumps(exchange.to_row(), separators=(",", ":")) + "\n"


def test_each_line_is_the_json_modules_whatever_the_row_before() -> None:
    for batched in (False, True):
        lines = _written(_ROWS, batched)
        assert len(lines) == len(_ROWS)
        for exchange, line in zip(_ROWS, lines):
            assert line == _expected(exchange), exchange.to_row()


def test_subclass_values_are_written_by_their_value() -> None:
    # the run kept "producer-2"; a subclass that claims equality to anything
    # must not pick up another row's text
    rows = [_base(client_id="producer-2"), _base(client_id=_Text("other")), _base(capture=_Text("x.pcap"))]
    lines = _written(rows, batched=False)
    assert json.loads(lines[1])["client_id"] == "other"
    assert json.loads(lines[2])["capture"] == "x.pcap"
    rows = [_base(stream=7), _base(stream=_Number(99))]
    assert json.loads(_written(rows, batched=False)[1])["stream"] == 99


_VALUES = {
    "capture": st.sampled_from(["a.pcap", "b.pcap", None]),
    "stream": st.sampled_from([1, 2, 300, None]),
    "client_id": st.sampled_from(["x", "y", "", None, "\\", "\udc80"]),
    "api_key": st.sampled_from([0, 1, None]),
    "error_code": st.sampled_from([0, 1, None]),
    "error_codes": st.sampled_from([[], [1], [0, 2]]),
    "problems": st.sampled_from([[], ["p"]]),
    "status": st.sampled_from(["ok", "malformed"]),
}


@settings(max_examples=150, deadline=None)
@given(st.lists(st.fixed_dictionaries({}, optional=_VALUES), min_size=1, max_size=30))
def test_random_sequences_of_rows(changes: list[dict]) -> None:
    rows = [_base(**change) for change in changes]
    for batched in (False, True):
        assert _written(rows, batched) == [_expected(row) for row in rows]
