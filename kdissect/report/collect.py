"""One pass over exchange rows for what the report shows beyond `kdissect
stats --json`: time series (traffic and latency per API, errors per API and
code, throttling per client), errors per API, problems per code, the run's
time span, and capped lists of the slowest and the failed exchanges.

`Collector.add_row(row)` takes one exchange-table row (times as int ns), so
the same code serves both faces: the capture path feeds it
`Exchange.to_row()` rows (`RowBatcher`), the Spark path the written
`exchanges/` dataset batch by batch (`add_batch` turns an Arrow batch into
rows), so both give the same buckets and percentiles. Plain Python: the capture path never imports pyarrow, which costs
about 48 MB of memory at start (issue 23, item 7). Memory is bounded by the time
buckets and the caps: each bucket's latencies are kept in a
`QuantileSketch` (exact percentiles up to its EXACT_LIMIT values, within 1%
past it, as `Summary` does).

Time buckets: the width is the smallest of `BUCKET_LADDER` that covers the
time span seen so far in at most `MAX_BUCKETS` buckets; when the span grows,
buckets are merged into wider ones (each ladder width is a multiple of the
one before, so a bucket always falls into one wider bucket).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from operator import attrgetter
from typing import Any


from kdissect.model.exchange import NO_RESPONSE, OK
from kdissect.forensics.sketch import EXACT_LIMIT, QuantileSketch
from kdissect.shared.output import lossless_row

# seconds; each a multiple of the one before
BUCKET_LADDER = (1, 5, 10, 30, 60, 300, 600, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400,
                 7 * 86400, 28 * 86400, 364 * 86400)
MAX_BUCKETS = 240
LIST_LIMIT = 50  # rows in the slowest / failed lists
TOP_APIS = 8  # APIs with a latency line; the others' traffic is summed into OTHER_APIS
TOP_ERROR_SERIES = 12  # (API, error) rows of the error heatmap; the rest summed into OTHER_ERRORS
TOP_THROTTLED_CLIENTS = 10  # client ids with a throttle line; the rest summed into OTHER_CLIENTS
NO_API = "unknown"  # as the Spark tables label a missing API name
NO_CLIENT_ID = "(none)"  # as `kdissect stats` labels a null client id
OTHER_APIS = "(other APIs)"
OTHER_ERRORS = "(other errors)"
OTHER_CLIENTS = "(other clients)"

# columns the collector reads (a subset of the exchange table)
COLUMNS = ["capture", "stream", "client", "broker", "correlation_id", "api_key", "api_name", "api_version",
           "client_id", "request_ts", "response_ts", "request_frame", "response_frame", "latency_ms",
           "service_ms", "wait_reason", "wait_ms", "request_bytes", "response_bytes", "throttle_time_ms", "error_code", "error_codes", "status",
           "problems", "problem_codes", "records", "record_bytes"]


_column_values = attrgetter(*COLUMNS)


def _has_errors(row: dict[str, Any]) -> bool:
    """A non-zero top-level error or any error code (as the Spark timeseries counts them)."""
    return bool(row["error_code"]) or bool(row["error_codes"])


def failed(row: dict[str, Any]) -> bool:
    """An exchange that failed: a status other than ok, or an error code."""
    return (row["status"] or "") != OK or _has_errors(row)


def _slow_order(row: dict[str, Any]) -> tuple:
    """The slowest list's order: service time descending, then time, stream, correlation id (nulls last)."""
    return (-row["service_ms"], *_nulls_last(row["_ts"]), *_nulls_last(row["stream"]),
            *_nulls_last(row["correlation_id"]))


def _failed_order(row: dict[str, Any]) -> tuple:
    return (*_nulls_last(row["_ts"]), *_nulls_last(row["stream"]), *_nulls_last(row["correlation_id"]),
            *_nulls_last(row["status"]))


def _nulls_last(value: Any) -> tuple[bool, Any]:
    return (True, 0) if value is None else (False, value)


def _bucket_of(seconds: int, width: int) -> int:
    return seconds // width * width


class _Timed:
    """Dicts keyed by (bucket start, ...) that merge when the width grows."""

    def __init__(self, min_width: int) -> None:
        self.width = min_width
        self.low: int | None = None  # seconds
        self.high: int | None = None
        self.tables: list[dict[tuple, Any]] = []
        self.merge: list[Any] = []

    def table(self, merge: Any) -> dict[tuple, Any]:
        made: dict[tuple, Any] = {}
        self.tables.append(made)
        self.merge.append(merge)
        return made

    def see(self, low: int, high: int) -> None:
        """Widen the buckets if the span [low, high] (seconds) needs it."""
        self.low = low if self.low is None else min(self.low, low)
        self.high = high if self.high is None else max(self.high, high)
        width = self.width
        for candidate in BUCKET_LADDER:
            if candidate < width:
                continue
            width = candidate
            if self.high // width - self.low // width < MAX_BUCKETS:
                break
        if width != self.width:
            self.width = width
            for index, table in enumerate(self.tables):
                items = list(table.items())
                table.clear()
                for key, value in items:
                    new_key = (_bucket_of(key[0], width), *key[1:])
                    if new_key in table:
                        table[new_key] = self.merge[index](table[new_key], value)
                    else:
                        table[new_key] = value


def _add_counts(a: list, b: list) -> list:
    return [x + y for x, y in zip(a, b)]


def _merge_series(a: list, b: list) -> list:
    exchanges, errors, size, values = a
    if values is not None:
        values.merge(b[3])
    return [exchanges + b[0], errors + b[1], size + b[2], values]


def _merge_throttle(a: list, b: list) -> list:
    return [a[0] + b[0], a[1] + b[1], a[2] + b[2], max(a[3], b[3])]


class Collector:
    """See the module's docstring. `min_width`: the narrowest bucket in
    seconds; `latency_values`: sketch latencies per bucket for their
    percentiles (both faces do: captures and a Spark OUTDIR's exchanges)."""

    def __init__(self, min_width: int = 1, latency_values: bool = True, limit: int = LIST_LIMIT) -> None:
        self.limit = limit
        self.latency_values = latency_values
        self.time = _Timed(min_width)
        # (bucket, api) -> [exchanges, with errors, bytes, latencies (QuantileSketch) or None]
        self.series = self.time.table(_merge_series)
        # (bucket, api, error code) -> exchanges carrying the code
        self.error_series = self.time.table(lambda a, b: a + b)
        # (bucket, client id) -> [responses with a throttle field, throttled, total ms, max ms]
        self.throttle_series = self.time.table(_merge_throttle)
        self.errors_by_api: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])  # top level, anywhere
        self.problems: Counter[str] = Counter()  # exchanges carrying each problem code
        self.statuses: Counter[str] = Counter()
        self.no_response: Counter[str] = Counter()  # labelled as Summary labels them
        self.exchanges = 0
        self.answered = 0
        self.serviced = 0  # answered exchanges with a service time (not all of it a wait the protocol asked for)
        self.failed = 0
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        self._slowest: list[dict[str, Any]] = []  # at most 2 x limit candidates, cut to `limit` when full
        self._failed: list[dict[str, Any]] = []

    # -- feeding ---------------------------------------------------------------

    def add_batch(self, table: Any) -> None:
        """The Spark path: an Arrow table or record batch of exchange rows (any timestamp unit)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if table.num_rows == 0:
            return
        columns = {}
        for name in COLUMNS:
            column = table.column(name)
            if name in ("request_ts", "response_ts"):
                if pa.types.is_timestamp(column.type):
                    column = pc.cast(column, pa.timestamp("ns", tz="UTC"))
                column = pc.cast(column, pa.int64())
            columns[name] = column.to_pylist()
        for values in zip(*columns.values()):
            self.add_columns(dict(zip(COLUMNS, values)))

    def add_row(self, row: dict[str, Any]) -> None:
        """One exchange row (its COLUMNS at least; request_ts and response_ts as int ns)."""
        self.add_columns({name: row.get(name) for name in COLUMNS})

    def add_columns(self, row: dict[str, Any]) -> None:
        """One exchange row of exactly COLUMNS, a dict of its own: the
        collector may keep it (the slowest and failed lists)."""
        request_ns, response_ns = row["request_ts"], row["response_ts"]
        ts_ns = request_ns if request_ns is not None else response_ns
        row["_ts"] = ts_ns
        self.exchanges += 1
        for value in (request_ns, response_ns):
            if value is not None:
                if self.first_ns is None or value < self.first_ns:
                    self.first_ns = value
                if self.last_ns is None or value > self.last_ns:
                    self.last_ns = value
        status = row["status"]
        self.statuses[status] += 1
        if status == NO_RESPONSE:
            api = row["api_name"] or NO_API
            version = row["api_version"]
            self.no_response[f"{api} v{version}" if version is not None else api] += 1
        if ts_ns is not None:
            seconds = ts_ns // 1_000_000_000
            time = self.time
            if time.low is None or not time.low <= seconds <= time.high:  # type: ignore[operator]
                time.see(seconds, seconds)
            bucket = _bucket_of(seconds, time.width)
            self._series(row, bucket)
            self._errors(row, bucket)
            self._throttle(row, bucket)
        codes = row["problem_codes"]
        if codes:
            for code in set(codes):
                if code is not None:
                    self.problems[code] += 1
        self._keep_lists(row)

    def _series(self, row: dict[str, Any], bucket: int) -> None:
        key = (bucket, row["api_name"] or NO_API)
        entry = self.series.get(key)
        if entry is None:
            entry = self.series[key] = [0, 0, 0, QuantileSketch() if self.latency_values else None]
        entry[0] += 1
        entry[1] += 1 if _has_errors(row) else 0
        entry[2] += (row["request_bytes"] or 0) + (row["response_bytes"] or 0)
        latency = row["latency_ms"]
        if latency is not None and row["api_key"] is not None:
            self.answered += 1
            if entry[3] is not None:
                entry[3].add(latency)

    def _errors(self, row: dict[str, Any], bucket: int) -> None:
        api = row["api_name"] or NO_API
        top = row["error_code"]
        if top:
            self.errors_by_api[(api, top)][0] += 1
        # error_codes are distinct per exchange: each is an exchange carrying the code
        for code in row["error_codes"] or ():
            if code:
                self.errors_by_api[(api, code)][1] += 1
                key = (bucket, api, code)
                self.error_series[key] = self.error_series.get(key, 0) + 1

    def _throttle(self, row: dict[str, Any], bucket: int) -> None:
        wait = row["throttle_time_ms"]
        if wait is None:
            return
        wait = int(wait)
        key = (bucket, row["client_id"] if row["client_id"] is not None else NO_CLIENT_ID)
        old = self.throttle_series.get(key)
        value = [1, 1 if wait > 0 else 0, wait, wait]
        self.throttle_series[key] = value if old is None else _merge_throttle(old, value)

    def _keep_lists(self, row: dict[str, Any]) -> None:
        # slowest: by service time, the waits the protocol asked for set apart
        if row["service_ms"] is not None:
            self.serviced += 1
            self._keep(self._slowest, row, _slow_order)
        if failed(row):
            self.failed += 1
            self._keep(self._failed, row, _failed_order)

    def _keep(self, kept: list[dict[str, Any]], row: dict[str, Any], order: Any) -> None:
        kept.append(row)
        if len(kept) >= 2 * self.limit:
            kept.sort(key=order)
            del kept[self.limit:]

    def _list(self, kept: list[dict[str, Any]], order: Any) -> list[dict[str, Any]]:
        kept.sort(key=order)
        del kept[self.limit:]
        return _list_rows(kept)

    # -- results ---------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The report's entries (plain JSON values)."""
        from kdissect.protocol.errors import error_name

        width = self.time.width
        # traffic and latency per bucket and API: the busiest APIs apart, the rest summed
        traffic = {key: (v[0], v[1], v[2]) for key, v in self.series.items()}
        latency = {}
        for key, v in self.series.items():
            sketch = v[3]
            latency[key] = ({"p50": sketch.percentiles(50)[0], "p99": sketch.percentiles(99)[0], "max": sketch.max}
                            if sketch is not None and sketch.count else {})
        basis = ("percentiles of the bucket's answered exchanges (exact up to "
                 f"{EXACT_LIMIT} exchanges, within 1% past it)")
        per_api: Counter[str] = Counter()
        for (_bucket, api), (count, _e, _b) in traffic.items():
            per_api[api] += count
        shown = [api for api, _ in sorted(per_api.items(), key=lambda item: (-item[1], item[0]))[:TOP_APIS]]
        rows: dict[tuple[int, str], dict[str, Any]] = {}
        for (bucket, api), (count, errors, size) in sorted(traffic.items()):
            label = api if api in shown else OTHER_APIS
            row = rows.setdefault((bucket, label), {"time": _iso(bucket), "api": label, "exchanges": 0,
                                                    "errors": 0, "bytes": 0})
            row["exchanges"] += count
            row["errors"] += errors
            row["bytes"] += size
            if label != OTHER_APIS:
                row.update({k: _number(v) for k, v in latency[(bucket, api)].items()})

        # errors per (API, error) over time: the biggest series apart, the rest summed
        per_pair: Counter[tuple[str, int]] = Counter()
        for (_bucket, api, code), count in self.error_series.items():
            per_pair[(api, code)] += count
        pairs = [p for p, _ in sorted(per_pair.items(), key=lambda item: (-item[1], item[0]))[:TOP_ERROR_SERIES]]
        error_rows: dict[tuple[int, str], dict[str, Any]] = {}
        for (bucket, api, code), count in sorted(self.error_series.items()):
            label = f"{api}: {error_name(code)}" if (api, code) in pairs else OTHER_ERRORS
            row = error_rows.setdefault((bucket, label), {"time": _iso(bucket), "series": label, "count": 0})
            row["count"] += count

        per_client: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # total ms, responses
        for (_bucket, client), value in self.throttle_series.items():
            per_client[client][0] += value[2]
            per_client[client][1] += value[0]
        clients = [c for c, (total, responses) in sorted(per_client.items(),
                                                         key=lambda item: (-item[1][0], -item[1][1], item[0]))
                   ][:TOP_THROTTLED_CLIENTS]
        throttle_rows: dict[tuple[int, str], dict[str, Any]] = {}
        for (bucket, client), (responses, throttled, total, most) in sorted(self.throttle_series.items()):
            label = client if client in clients else OTHER_CLIENTS
            row = throttle_rows.setdefault((bucket, label), {"time": _iso(bucket), "client_id": label, "responses": 0,
                                                             "throttled": 0, "total_ms": 0, "max_ms": 0})
            row["responses"] += responses
            row["throttled"] += throttled
            row["total_ms"] += total
            row["max_ms"] = max(row["max_ms"], most)

        from kdissect.conn.normal_flow import is_normal_flow

        errors_by_api = [
            {"api": api, "error_code": code, "error": error_name(code), "top_level": top, "anywhere": anywhere,
             "normal_flow": is_normal_flow(code)}
            for (api, code), (top, anywhere) in sorted(self.errors_by_api.items(),
                                                       key=lambda item: (-item[1][1], -item[1][0], item[0]))]
        span = None
        if self.first_ns is not None and self.last_ns is not None:
            span = {"first": _iso_ns(self.first_ns), "last": _iso_ns(self.last_ns),
                    "seconds": (self.last_ns - self.first_ns) / 1e9}
        return {
            "exchanges": self.exchanges,
            "answered": self.answered,
            "span": span,
            "bucket_seconds": width,
            "timeline": {"rows": list(rows.values()), "apis": len(per_api), "apis_shown": shown,
                         "latency_basis": basis},
            "error_timeline": {"rows": list(error_rows.values()), "series": len(per_pair),
                               "series_shown": [f"{a}: {error_name(c)}" for a, c in pairs]},
            "throttle_timeline": {"rows": list(throttle_rows.values()), "clients": len(per_client),
                                  "clients_shown": clients},
            "errors_by_api": errors_by_api,
            "problems": [{"code": code, "exchanges": count} for code, count in
                         sorted(self.problems.items(), key=lambda item: (-item[1], item[0]))],
            "statuses": dict(self.statuses),
            "no_response": dict(self.no_response.most_common()),
            "slowest": {"limit": self.limit, "total": self.serviced, "rows": self._list(self._slowest, _slow_order)},
            "failed": {"limit": self.limit, "total": self.failed, "rows": self._list(self._failed, _failed_order)},
        }


def _number(value: Any) -> Any:
    return None if isinstance(value, float) and math.isnan(value) else value


def _iso(seconds: int) -> str:
    """UTC time of a bucket start, as Vega-Lite parses it."""
    import datetime as dt

    try:
        return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return str(seconds)


def _iso_ns(ns: int) -> str:
    import datetime as dt

    seconds, rest = divmod(ns, 1_000_000_000)
    try:
        stamp = dt.datetime.fromtimestamp(seconds, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return f"{ns / 1e9:.9f} s since the epoch"
    return f"{stamp}.{rest:09d}Z"


def _list_rows(kept: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The kept exchanges as plain rows: times as UTC text, error names."""
    from kdissect.protocol.errors import error_name

    rows = []
    for kept_row in kept:
        row = dict(kept_row)
        ts = row.pop("_ts")
        del row["request_ts"], row["response_ts"]
        row["time"] = _iso_ns(ts) if ts is not None else None
        codes = sorted(set(row.get("error_codes") or ()) | ({row["error_code"]} if row.get("error_code") else set()))
        row["errors"] = [error_name(c) for c in codes]
        for name in ("latency_ms", "service_ms", "wait_ms"):
            row[name] = _number(row.get(name))
        rows.append(row)
    return rows


class RowBatcher:
    """Exchanges -> the collector's rows (times as int ns), as every table stores them."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector

    def add(self, exchange: Any) -> None:
        # the collector's columns only (an exchange's attributes are its row's
        # columns: Exchange.to_row), captured strings as every table stores
        # them (as the Spark tables do)
        self.collector.add_columns(lossless_row(dict(zip(COLUMNS, _column_values(exchange)))))

    def flush(self) -> None:
        """Nothing is held (kept for callers that flush at the end)."""
