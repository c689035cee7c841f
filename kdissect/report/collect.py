"""One pass over exchange rows for what the report shows beyond `kdissect
stats --json`: time series (traffic and latency per API, errors per API and
code, throttling per client), errors per API, problems per code, the run's
time span, and capped lists of the slowest and the failed exchanges.

`Collector.add_batch(table)` takes exchange-table columns as Arrow (any
timestamp unit), so the same code serves both faces: the capture path feeds it
batches of `Exchange.to_row()` rows (`RowBatcher`), the Spark path the
written `exchanges/` dataset batch by batch, so both give the same buckets
and percentiles. Memory is bounded by the time buckets and the caps: each
bucket's latencies are kept in a `QuantileSketch` (exact percentiles up to its EXACT_LIMIT values, within 1%
past it, as `Summary` does).

Time buckets: the width is the smallest of `BUCKET_LADDER` that covers the
time span seen so far in at most `MAX_BUCKETS` buckets; when the span grows,
buckets are merged into wider ones (each ladder width is a multiple of the
one before, so a bucket always falls into one wider bucket).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

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
_NS = pa.timestamp("ns", tz="UTC")


def _ns(column: Any) -> Any:
    """A timestamp column (any unit) or int ns as int64 nanoseconds."""
    if pa.types.is_timestamp(column.type):
        return pc.cast(pc.cast(column, _NS), pa.int64())
    return pc.cast(column, pa.int64())


def _errors_mask(table: pa.Table) -> Any:
    """Exchanges with a non-zero top-level error or any error code (as the Spark timeseries counts them)."""
    return pc.or_(pc.not_equal(pc.fill_null(table["error_code"], 0), 0),
                  pc.greater(pc.fill_null(pc.list_value_length(table["error_codes"]), 0), 0))


def failed_mask(table: pa.Table) -> Any:
    """Exchanges that failed: a status other than ok, or an error code."""
    return pc.or_(pc.not_equal(pc.fill_null(table["status"], ""), OK), _errors_mask(table))


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
        self._slowest: pa.Table | None = None
        self._failed: pa.Table | None = None

    # -- feeding ---------------------------------------------------------------

    def add_batch(self, table: pa.Table | pa.RecordBatch) -> None:
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        if table.num_rows == 0:
            return
        table = table.select(COLUMNS)
        request_ns, response_ns = _ns(table["request_ts"]), _ns(table["response_ts"])
        ts_ns = pc.coalesce(request_ns, response_ns)
        table = table.append_column("_ts", ts_ns)
        self.exchanges += table.num_rows
        self._span(request_ns, response_ns)
        self._statuses(table)
        timed = table.filter(pc.is_valid(ts_ns))
        if timed.num_rows:
            import numpy as np

            seconds = np.floor_divide(timed["_ts"].to_numpy(), 1_000_000_000)
            self.time.see(int(seconds.min()), int(seconds.max()))
            width = self.time.width
            timed = timed.append_column("_bucket", pa.array(np.floor_divide(seconds, width) * width, pa.int64()))
            self._series(timed)
            self._errors(timed)
            self._throttle(timed)
        self._problems(table)
        self._keep_lists(table)

    def _span(self, request_ns: Any, response_ns: Any) -> None:
        for column in (request_ns, response_ns):
            low, high = pc.min(column).as_py(), pc.max(column).as_py()
            if low is not None:
                self.first_ns = low if self.first_ns is None else min(self.first_ns, low)
                self.last_ns = high if self.last_ns is None else max(self.last_ns, high)

    def _statuses(self, table: pa.Table) -> None:
        for item in pc.value_counts(table["status"]).to_pylist():
            self.statuses[item["values"]] += item["counts"]
        unanswered = table.filter(pc.equal(table["status"], NO_RESPONSE))
        if unanswered.num_rows:
            grouped = unanswered.group_by(["api_name", "api_version"], use_threads=False).aggregate([([], "count_all")])
            for row in grouped.to_pylist():
                api = row["api_name"] or NO_API
                label = f"{api} v{row['api_version']}" if row["api_version"] is not None else api
                self.no_response[label] += row["count_all"]

    def _series(self, timed: pa.Table) -> None:
        errors = _errors_mask(timed).cast(pa.int64())
        size = pc.add(pc.fill_null(timed["request_bytes"], 0), pc.fill_null(timed["response_bytes"], 0))
        answered = pc.and_(pc.is_valid(timed["latency_ms"]), pc.is_valid(timed["api_key"]))
        self.answered += pc.sum(answered.cast(pa.int64())).as_py() or 0
        frame = pa.table({
            "bucket": timed["_bucket"], "api": pc.fill_null(timed["api_name"], NO_API), "errors": errors,
            "bytes": size, "latency": pc.if_else(answered, timed["latency_ms"], pa.scalar(None, pa.float64())),
        })
        aggregations = [([], "count_all"), ("errors", "sum"), ("bytes", "sum")]
        if self.latency_values:
            aggregations.append(("latency", "list"))
        grouped = frame.group_by(["bucket", "api"], use_threads=False).aggregate(aggregations)
        lists = grouped["latency_list"].to_pylist() if self.latency_values else [None] * grouped.num_rows
        for bucket, api, count, n_errors, n_bytes, values in zip(
                grouped["bucket"].to_pylist(), grouped["api"].to_pylist(), grouped["count_all"].to_pylist(),
                grouped["errors_sum"].to_pylist(), grouped["bytes_sum"].to_pylist(), lists):
            key = (bucket, api)
            entry = self.series.get(key)
            if entry is None:
                entry = self.series[key] = [0, 0, 0, QuantileSketch() if self.latency_values else None]
            entry[0] += count
            entry[1] += n_errors or 0
            entry[2] += n_bytes or 0
            if values is not None:
                for value in values:
                    if value is not None:
                        entry[3].add(value)

    def _errors(self, timed: pa.Table) -> None:
        api = pc.fill_null(timed["api_name"], NO_API)
        top = pc.fill_null(timed["error_code"], 0)
        with_top = pc.not_equal(top, 0)
        if pc.any(with_top).as_py():
            grouped = pa.table({"api": api, "code": top}).filter(with_top).group_by(
                ["api", "code"], use_threads=False).aggregate([([], "count_all")])
            for row in grouped.to_pylist():
                self.errors_by_api[(row["api"], row["code"])][0] += row["count_all"]
        codes = timed["error_codes"].combine_chunks() if isinstance(timed["error_codes"], pa.ChunkedArray) \
            else timed["error_codes"]
        flat = pc.list_flatten(codes)
        if len(flat) == 0:
            return
        parents = pc.list_parent_indices(codes)
        located = pa.table({"bucket": pc.take(timed["_bucket"], parents), "api": pc.take(api, parents),
                            "code": pc.cast(flat, pa.int64())}).filter(pc.not_equal(flat, 0))
        # error_codes are distinct per exchange: a row is an exchange carrying the code
        grouped = located.group_by(["bucket", "api", "code"], use_threads=False).aggregate([([], "count_all")])
        for row in grouped.to_pylist():
            self.errors_by_api[(row["api"], row["code"])][1] += row["count_all"]
            key = (row["bucket"], row["api"], row["code"])
            self.error_series[key] = self.error_series.get(key, 0) + row["count_all"]

    def _throttle(self, timed: pa.Table) -> None:
        has_field = pc.is_valid(timed["throttle_time_ms"])
        if not pc.any(has_field).as_py():
            return
        rows = timed.filter(has_field)
        waits = pc.cast(rows["throttle_time_ms"], pa.int64())
        frame = pa.table({"bucket": rows["_bucket"], "client": pc.fill_null(rows["client_id"], NO_CLIENT_ID),
                          "throttled": pc.cast(pc.greater(waits, 0), pa.int64()), "ms": waits})
        grouped = frame.group_by(["bucket", "client"], use_threads=False).aggregate(
            [([], "count_all"), ("throttled", "sum"), ("ms", "sum"), ("ms", "max")])
        for row in grouped.to_pylist():
            key = (row["bucket"], row["client"])
            value = [row["count_all"], row["throttled_sum"], row["ms_sum"], row["ms_max"]]
            old = self.throttle_series.get(key)
            self.throttle_series[key] = value if old is None else _merge_throttle(old, value)

    def _problems(self, table: pa.Table) -> None:
        codes = table["problem_codes"].combine_chunks() if isinstance(table["problem_codes"], pa.ChunkedArray) \
            else table["problem_codes"]
        flat = pc.list_flatten(codes)
        if len(flat) == 0:
            return
        pairs = pa.table({"row": pc.list_parent_indices(codes), "code": flat})
        distinct = pairs.group_by(["row", "code"], use_threads=False).aggregate([])
        for item in pc.value_counts(distinct["code"]).to_pylist():
            self.problems[item["values"]] += item["counts"]

    def _keep_lists(self, table: pa.Table) -> None:
        limit = self.limit
        # slowest: by service time, the waits the protocol asked for set apart
        answered = table.filter(pc.is_valid(table["service_ms"]))
        if answered.num_rows:
            self.serviced += answered.num_rows
            if self._slowest is not None:
                answered = pa.concat_tables([self._slowest, answered])
            self._slowest = answered.sort_by(
                [("service_ms", "descending"), ("_ts", "ascending"), ("stream", "ascending"),
                 ("correlation_id", "ascending")]).slice(0, limit)
        failed = table.filter(failed_mask(table))
        if failed.num_rows:
            self.failed += failed.num_rows
            if self._failed is not None:
                failed = pa.concat_tables([self._failed, failed])
            self._failed = failed.sort_by(
                [("_ts", "ascending"), ("stream", "ascending"), ("correlation_id", "ascending"),
                 ("status", "ascending")]).slice(0, limit)

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
            "slowest": {"limit": self.limit, "total": self.serviced, "rows": _list_rows(self._slowest)},
            "failed": {"limit": self.limit, "total": self.failed, "rows": _list_rows(self._failed)},
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


def _list_rows(table: pa.Table | None) -> list[dict[str, Any]]:
    """The kept exchanges as plain rows: times as UTC text, error names."""
    if table is None:
        return []
    from kdissect.protocol.errors import error_name

    rows = []
    for row in table.to_pylist():
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
    """Exchanges -> Arrow tables of their rows (times as int ns), `size` at a time."""

    def __init__(self, collector: Collector, size: int = 8192) -> None:
        from kdissect.model.exchange import arrow_schema

        self.collector = collector
        self.size = size
        self.schema = arrow_schema("ns")
        self.rows: list[dict[str, Any]] = []

    def add(self, exchange: Any) -> None:
        # captured strings as every table stores them (as the Spark tables do)
        self.rows.append(lossless_row(exchange.to_row()))
        if len(self.rows) >= self.size:
            self.flush()

    def flush(self) -> None:
        if self.rows:
            from kdissect.shared.output import safe_row

            try:
                table = pa.Table.from_pylist(self.rows, schema=self.schema)
            except (UnicodeEncodeError, pa.ArrowException):
                table = pa.Table.from_pylist([safe_row(r) for r in self.rows], schema=self.schema)
            self.rows = []
            self.collector.add_batch(table)

