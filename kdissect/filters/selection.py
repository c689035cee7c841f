"""Which exchanges a run keeps: the display filter (`-Y`), the time window
(`--from`/`--to`) and the client and broker selections, one object for
every verb.

`Selection.from_options(options, capture_start_ns)` reads the options every
command that reads captures takes (kdissect.shared.options.CaptureInputs);
`selection.matches(exchange)` and `selection.matches_row(row)` decide with
the same evaluator (kdissect.filters.display_filter), so the CLI, the exported table
and Spark keep the same rows. Every table a verb computes is computed over
the kept exchanges only: the filtered stats are the stats of the filtered rows.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Iterator

from kdissect.filters.display_filter import DisplayFilter, FilterError, time_ns

__all__ = ["Ranked", "Selection", "parse_time", "Selected", "describe_selection"]

_RELATIVE = re.compile(r"^\+\s*(\d+(?:\.\d*)?|\.\d+)\s*(ns|us|ms|s|m|min|h)?$")
_UNIT_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000, "m": 60_000_000_000,
            "min": 60_000_000_000, "h": 3_600_000_000_000}


def parse_time(text: str, capture_start_ns: int | None) -> int:
    """Epoch ns of `text`: an ISO 8601 time (UTC unless it names a zone) or
    `+N[unit]` after the capture's first packet (unit s by default; ms, us,
    ns, m/min, h)."""
    relative = _RELATIVE.match(text.strip())
    if relative:
        if capture_start_ns is None:
            raise FilterError(f"{text!r}: the captures hold no packets to count from")
        unit = _UNIT_NS[relative.group(2) or "s"]
        return capture_start_ns + round(float(relative.group(1)) * unit)
    try:
        return time_ns(text.strip())
    except FilterError:
        raise FilterError(f"{text!r} is not a time: give an ISO 8601 UTC time "
                          "(2026-11-26T07:30:00Z) or a time after the capture's start (+10s, +250ms)") from None


def _first_time(ex: Any) -> int | None:
    return ex.request_ts if ex.request_ts is not None else ex.response_ts


def _endpoint_matches(wanted: str, endpoint: str | None) -> bool:
    """`wanted` names the endpoint `ip:port` exactly or its host alone."""
    if endpoint is None:
        return False
    if wanted == endpoint:
        return True
    host = endpoint.rsplit(":", 1)[0]
    return wanted == host or f"[{wanted}]" == host


class Selection:
    """The rows a run keeps (everything when nothing is selected)."""

    def __init__(self, display_filter: DisplayFilter | None = None, start_ns: int | None = None,
                 end_ns: int | None = None, clients: Iterable[str] = (), brokers: Iterable[str] = (),
                 topics: Iterable[str] = (), groups: Iterable[str] = ()) -> None:
        self.display_filter = display_filter
        # topics and groups are read from the decoded messages (kdissect.filters.mentions)
        self.topics = frozenset(topics)
        self.groups = frozenset(groups)
        self.topic_names: Any = None  # a TopicNames fed every exchange (`learn`), for topics named by id
        self.start_ns = start_ns
        self.end_ns = end_ns
        self.clients = tuple(clients)
        self.brokers = tuple(brokers)
        if start_ns is not None and end_ns is not None and end_ns <= start_ns:
            raise FilterError("--to must be later than --from")

    @classmethod
    def from_options(cls, options: Any, capture_start_ns: int | None) -> Selection:
        text = getattr(options, "display_filter", None)
        since = getattr(options, "time_from", None)
        until = getattr(options, "time_to", None)
        return cls(DisplayFilter(text) if text else None,
                   parse_time(since, capture_start_ns) if since else None,
                   parse_time(until, capture_start_ns) if until else None,
                   getattr(options, "clients", ()), getattr(options, "brokers", ()),
                   getattr(options, "topics", ()), getattr(options, "groups", ()))

    def task_values(self, topic_names: dict[str, str] | None = None) -> tuple:
        """What a Spark task needs to rebuild this selection (`from_task_values`):
        plain values, picklable; `topic_names`: the capture set's topic id ->
        name pairs, learned before the tasks run (a task sees some connections
        only, not the Metadata that names the ids of the others)."""
        text = self.display_filter.text if self.display_filter is not None else None
        return (text, self.start_ns, self.end_ns, self.clients, self.brokers, tuple(sorted(self.groups)),
                tuple(sorted(self.topics)), dict(topic_names or {}))

    @classmethod
    def from_task_values(cls, values: tuple) -> Selection:
        text, start_ns, end_ns, clients, brokers, groups, topics, topic_names = values
        made = cls(DisplayFilter(text) if text else None, start_ns, end_ns, clients, brokers, topics, groups)
        if topics:
            from kdissect.protocol.topics import TopicNames

            made.topic_names = TopicNames()
            for topic_id, name in topic_names.items():
                made.topic_names.add(topic_id, name)
        return made

    @property
    def active(self) -> bool:
        return bool(self.display_filter or self.start_ns is not None or self.end_ns is not None
                    or self.clients or self.brokers or self.topics or self.groups)

    def describe(self) -> list[dict[str, str]]:
        """What this selection keeps, item by item (`describe_selection`)."""
        return describe_selection(self.display_filter.text if self.display_filter else None, self.start_ns,
                                  self.end_ns, self.clients, self.brokers, sorted(self.topics), sorted(self.groups))

    @property
    def reads_messages(self) -> bool:
        """Whether deciding needs the decoded messages (topic or group selection)."""
        return bool(self.topics or self.groups)

    def learn(self, ex: Any) -> None:
        """Learn topic names from every exchange, kept or not (call before `matches`)."""
        if self.topics:
            if self.topic_names is None:
                from kdissect.protocol.topics import TopicNames

                self.topic_names = TopicNames()
            self.topic_names.learn_exchange(ex)

    def _mentioned(self, ex: Any) -> bool:
        from kdissect.filters.mentions import mentions

        if self.topics and self.topic_names is None:
            self.learn(ex)
        topics, groups = mentions(ex, self.topic_names)
        return (not self.topics or bool(topics & self.topics)) and (not self.groups or bool(groups & self.groups))

    def _common(self, when: int | None, client_id: str | None, client: str | None, broker: str | None) -> bool:
        if self.start_ns is not None and (when is None or when < self.start_ns):
            return False
        if self.end_ns is not None and (when is None or when >= self.end_ns):
            return False
        if self.clients and not any(w == client_id or _endpoint_matches(w, client) for w in self.clients):
            return False
        if self.brokers and not any(_endpoint_matches(w, broker) for w in self.brokers):
            return False
        return True

    def matches(self, ex: Any) -> bool:
        """Whether the run keeps this Exchange."""
        if not self._common(_first_time(ex), ex.client_id, ex.client, ex.broker):
            return False
        if (self.topics or self.groups) and not self._mentioned(ex):
            return False
        return self.display_filter is None or self.display_filter.matches(ex)

    def matches_row(self, row: Any) -> bool:
        """Whether the run keeps this exported row (a dict; times as ns or datetimes)."""
        from kdissect.filters.display_filter import _row_value

        request_ts = _row_value(row, "request_ts")
        when = request_ts if request_ts is not None else _row_value(row, "response_ts")
        if not self._common(when, row["client_id"], row["client"], row["broker"]):
            return False
        return self.display_filter is None or self.display_filter.matches_row(row)


class Selected:
    """An Analysis seen through a Selection: iterating yields the kept
    exchanges; `shown` and `hidden` count them; everything else (accounting,
    capture_set, summary_lines ...) is the whole analysis's, so the accounting
    still balances over every exchange of the capture."""

    def __init__(self, analysis: Any, selection: Selection) -> None:
        self._analysis = analysis
        self.selection = selection
        self.shown = 0
        self.hidden = 0
        # called with each exchange the selection does not keep, for what is
        # context rather than rows (topic names learned from Metadata ...)
        self.on_hidden: list[Callable[[Any], Any]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._analysis, name)

    def __iter__(self) -> Iterator[Any]:
        matches = self.selection.matches
        learn = self.selection.learn
        for ex in self._analysis:
            learn(ex)
            if matches(ex):
                self.shown += 1
                yield ex
            else:
                self.hidden += 1
                for hear in self.on_hidden:
                    hear(ex)

    def summary_lines(self) -> list[str]:
        lines = list(self._analysis.summary_lines())
        lines.append(f"selection: {self.shown} of {self.shown + self.hidden} exchanges kept")
        return lines

    def applied(self) -> list[dict[str, str]]:
        """What was applied to the analysis (`describe_selection`'s items)."""
        return self.selection.describe()


def _utc_text(ns: int) -> str:
    import datetime as dt

    seconds, rest = divmod(ns, 1_000_000_000)
    return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{rest:09d}Z"


def describe_selection(display_filter: str | None = None, start_ns: int | None = None, end_ns: int | None = None,
                       clients: Iterable[str] = (), brokers: Iterable[str] = (), topics: Iterable[str] = (),
                       groups: Iterable[str] = (), sort: str | None = None, top: int | None = None
                       ) -> list[dict[str, str]]:
    """What a selection keeps, one item per option given, in the command
    line's words: {"option": "-Y", "what": "display filter", "value":
    "service_ms > 50"}; times as UTC. Values are given text (a filter may
    quote captured strings): a face shows them through its escaping."""
    items: list[dict[str, str]] = []

    def add(option: str, what: str, value: str) -> None:
        items.append({"option": option, "what": what, "value": value})

    if display_filter:
        add("-Y", "display filter", display_filter)
    if start_ns is not None:
        add("--from", "exchanges from", _utc_text(start_ns))
    if end_ns is not None:
        add("--to", "exchanges before", _utc_text(end_ns))
    for option, what, values in (("--client", "clients", clients), ("--broker", "brokers", brokers),
                                 ("--topic", "topics", topics), ("--group", "groups", groups)):
        named = list(values)
        if named:
            add(option, what, ", ".join(named))
    if sort is not None:
        add("--sort", "largest first by", sort)
    if top is not None:
        add("--top", "only the first", f"{top} exchanges" + (f" by largest {sort}" if sort else " in request order"))
    return items


def check_sort_column(column: str) -> str:
    """`column` if rows can be sorted by it (a column of the export that is
    not a list); FilterError with a suggestion otherwise."""
    from kdissect.filters.display_filter import suggestion
    from kdissect.model.exchange import COLUMN_NAMES, LIST_COLUMNS

    if column not in COLUMN_NAMES:
        raise FilterError(f"--sort: unknown column {column!r}{suggestion(column, COLUMN_NAMES)}")
    if column in LIST_COLUMNS:
        raise FilterError(f"--sort: {column} holds lists; sort by a column of single values")
    return column


def ordered(exchanges: Iterable[Any], sort: str | None, top: int | None) -> Iterator[Any]:
    """The exchanges largest `sort` value first (nulls last, request order
    among equals), or in request order without `sort`; the first `top` only.
    Sorting holds every kept exchange in memory."""
    from itertools import islice

    if sort is not None:
        column = check_sort_column(sort)
        kept = list(exchanges)
        valued = [ex for ex in kept if getattr(ex, column) is not None]
        valued.sort(key=lambda ex: getattr(ex, column), reverse=True)  # (stable: request order among equals)
        exchanges = valued + [ex for ex in kept if getattr(ex, column) is None]
    return iter(exchanges) if top is None else islice(exchanges, top)


class Ranked:
    """An analysis (or a `Selected` one) cut to its first `top` exchanges by
    `sort` (largest first, nulls last, request order among equals; without
    `sort`, in request order), as `ordered` lists them. Every exchange is
    still read, so the accounting is the whole capture's; only the kept ones
    are held (at most `top`), and they are yielded in request order, so the
    tables computed from them see time as it ran. `shown`/`hidden` count them."""

    def __init__(self, analysis: Any, sort: str | None, top: int | None) -> None:
        self._analysis = analysis
        self.sort = None if sort is None else check_sort_column(sort)
        self.top = top
        self.shown = 0
        self.hidden = 0
        # called with each exchange not kept (as Selected's: context such as topic names);
        # one list with a Selected inside, so a hook sees what either drops
        inner = analysis.on_hidden if isinstance(analysis, Selected) else None
        self.on_hidden: list[Callable[[Any], Any]] = inner if inner is not None else []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._analysis, name)

    def _drop(self, ex: Any) -> None:
        for hear in self.on_hidden:
            hear(ex)

    def __iter__(self) -> Iterator[Any]:
        import heapq

        limit = self.top
        valued: list[tuple[Any, int, Any]] = []  # a min-heap of (value, -index, exchange): the `top` largest
        unvalued: list[tuple[int, Any]] = []  # the first exchanges without a value (after every valued one)
        read = 0
        for index, ex in enumerate(self._analysis):
            read += 1
            value = getattr(ex, self.sort) if self.sort is not None else None
            if value is None:
                if limit is None or len(unvalued) < limit:
                    unvalued.append((index, ex))
                else:
                    self._drop(ex)
            elif limit is None or len(valued) < limit:
                heapq.heappush(valued, (value, -index, ex))
            elif (value, -index) > valued[0][:2]:
                self._drop(heapq.heapreplace(valued, (value, -index, ex))[2])
            else:
                self._drop(ex)
        # the ranking: largest value first, the earlier exchange first among equals
        chosen = sorted(valued, key=lambda item: (item[0], item[1]), reverse=True)
        kept = [(-minus_index, ex) for _value, minus_index, ex in chosen] + unvalued
        if limit is not None:
            for _index, ex in kept[limit:]:
                self._drop(ex)
            kept = kept[:limit]
        kept.sort(key=lambda item: item[0])
        self.shown, self.hidden = len(kept), read - len(kept)
        for _index, ex in kept:
            yield ex

    def summary_lines(self) -> list[str]:
        lines = list(self._analysis.summary_lines())
        lines.append(f"--top/--sort: {self.shown} of {self.shown + self.hidden} exchanges kept")
        return lines

    def applied(self) -> list[dict[str, str]]:
        inner = self._analysis.applied() if hasattr(type(self._analysis), "applied") else []
        return inner + describe_selection(sort=self.sort, top=self.top)
