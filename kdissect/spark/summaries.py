"""The summary tables (latency, waits, errors, throttle, timeseries), in two steps.

1. `contributions`: each task partition, while it writes its exchange part
   (part_files.py), groups its own exchanges with pyarrow and hands back one
   row per table and group: counts and sums, and the group's values where a
   percentile is wanted: as they are up to `EXACT_LIMIT` values, else as a
   `QuantileSketch`'s buckets (JSON in `sketch`).
2. `merged_rows`: the driver sorts the contributions by group (a row per
   group and finishing task: small) and merges each group's rows: sums of
   the counts, and the group's values and sketches merged into one
   `QuantileSketch`, the one `kdissect stats` makes in one pass over the
   same values (merging equals one pass): exact percentiles up to
   EXACT_LIMIT values (linear interpolation between closest ranks, numpy's
   default method), within 1% past it. One row (a dict) per table row;
   `write_tables` writes each table as one sorted Parquet file: the tables
   have a row per API, client, broker or minute, so they are small.

This replaced four Spark SQL aggregations over the written exchange table,
which cost ~10 s of CPU for 622k exchanges on one core (a dozen small stages
and their planning) against well under a second here. A group's values are
held by one task while it is merged only up to EXACT_LIMIT per contribution.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.compute as pc

from kdissect.forensics.sketch import EXACT_LIMIT, QuantileSketch

NO_CLIENT_ID = "(none)"  # as `kdissect stats` labels a null client id
NO_BROKER = "?"
NO_API = "unknown"
WRITTEN = "_written"  # the rows each task wrote, summed like a table (not written out)

CONTRIBUTION_SCHEMA = pa.schema([
    ("table", pa.string()),
    ("dimension", pa.string()),
    ("api_name", pa.string()),
    ("api_version", pa.int16()),
    ("client_id", pa.string()),
    ("broker", pa.string()),
    ("minute", pa.int64()),  # seconds since the epoch
    ("error_code", pa.int16()),
    ("count", pa.int64()),
    ("anywhere", pa.int64()),
    ("bytes", pa.int64()),
    ("errors", pa.int64()),
    ("waited", pa.int64()),  # exchanges whose latency includes a wait the protocol asked for
    ("muted", pa.int64()),  # requests sent while the broker muted the connection
    ("values", pa.list_(pa.float64())),
    ("sketch", pa.string()),  # QuantileSketch.state() as JSON, in place of more than EXACT_LIMIT values
    ("exact_sum", pa.string()),  # beside a sketch: its values' exact sum, "numerator:exponent" (see _exact_sum)
])
GROUP_COLUMNS = ["table", "dimension", "api_name", "api_version", "client_id", "broker", "minute", "error_code"]

TABLE_SCHEMAS = {
    "latency": pa.schema([
        ("dimension", pa.string()), ("api_name", pa.string()), ("api_version", pa.int16()),
        ("client_id", pa.string()), ("broker", pa.string()), ("count", pa.int64()),
        ("p50", pa.float64()), ("p90", pa.float64()), ("p99", pa.float64()),
        ("max", pa.float64()), ("mean", pa.float64()), ("waits", pa.int64()),
        ("service_count", pa.int64()), ("service_p50", pa.float64()), ("service_p90", pa.float64()),
        ("service_p99", pa.float64()), ("service_max", pa.float64()),
    ]),
    "waits": pa.schema([
        ("reason", pa.string()), ("api_name", pa.string()), ("count", pa.int64()),
        ("median_ms", pa.float64()), ("max_ms", pa.float64()),
    ]),
    "errors": pa.schema([
        ("api_name", pa.string()), ("error_code", pa.int16()), ("error_name", pa.string()),
        ("top_level", pa.int64()), ("anywhere", pa.int64()),
        ("normal_flow", pa.bool_()),  # a code the protocol uses in its normal flow (kdissect.conn.normal_flow)
    ]),
    # exchanges per client id and error code anywhere in the response (as `kdissect stats`)
    "errors_by_client": pa.schema([
        ("client_id", pa.string()), ("error_code", pa.int16()), ("error_name", pa.string()),
        ("normal_flow", pa.bool_()), ("exchanges", pa.int64()),
    ]),
    "throttle": pa.schema([
        ("client_id", pa.string()), ("broker", pa.string()), ("responses", pa.int64()), ("throttled", pa.int64()),
        ("p50_ms", pa.float64()), ("p90_ms", pa.float64()), ("p99_ms", pa.float64()),
        ("max_ms", pa.int32()), ("total_ms", pa.int64()), ("sent_while_muted", pa.int64()),
    ]),
    "timeseries": pa.schema([
        ("minute", pa.timestamp("us")), ("api_name", pa.string()), ("exchanges", pa.int64()),
        ("bytes", pa.int64()), ("errors", pa.int64()), ("p99_latency_ms", pa.float64()),
    ]),
}
_LATENCY_DIMENSIONS = {"api": ("api_name", "api_version"), "client_id": ("client_id",), "broker": ("broker",)}


def _rows(length: int, **columns: Any) -> pa.Table:
    """A CONTRIBUTION_SCHEMA table: given columns (arrays, or one value for
    every row), nulls elsewhere."""
    arrays = []
    for field in CONTRIBUTION_SCHEMA:
        value = columns.get(field.name)
        if value is None:
            arrays.append(pa.nulls(length, field.type))
        elif isinstance(value, (pa.Array, pa.ChunkedArray)):
            arrays.append(value.cast(field.type))
        else:
            arrays.append(pa.array([value] * length, field.type))
    return pa.Table.from_arrays(arrays, schema=CONTRIBUTION_SCHEMA)


def _grouped(table: pa.Table, keys: list[str], aggregations: list) -> pa.Table:
    return table.group_by(keys, use_threads=False).aggregate(aggregations)


# the exchange columns the summary tables read: a task keeps only these for
# `contributions` (every filter below copies the columns it is given)
SUMMARY_COLUMNS = ("api_key", "api_name", "api_version", "client_id", "broker", "request_ts", "response_ts",
                   "latency_ms", "service_ms", "wait_reason", "wait_ms", "throttle_time_ms", "error_code",
                   "error_codes", "problem_codes", "request_bytes", "response_bytes")


def contributions(exchanges: pa.Table, written: dict[str, int]) -> pa.Table:
    """CONTRIBUTION_SCHEMA rows of one task partition's exchanges (exchange
    table columns, at least SUMMARY_COLUMNS), plus the rows it wrote per table (`written`)."""
    exchanges = exchanges.select(list(SUMMARY_COLUMNS))
    parts = [_rows(len(written), table=WRITTEN, dimension=pa.array(list(written)),
                   count=pa.array(list(written.values()), pa.int64()))]

    # latency: answered exchanges, three groupings; wire latency, and the
    # service time (as the "service" table, joined to latency's rows when merged)
    answered = exchanges.filter(pc.and_(pc.is_valid(exchanges["latency_ms"]), pc.is_valid(exchanges["api_key"])))
    latency = pa.table({
        "api_name": answered["api_name"], "api_version": answered["api_version"],
        "client_id": pc.fill_null(answered["client_id"], NO_CLIENT_ID),
        "broker": pc.fill_null(answered["broker"], NO_BROKER), "latency_ms": answered["latency_ms"],
        "service_ms": answered["service_ms"], "waited": pc.is_valid(answered["wait_reason"]).cast(pa.int64()),
    })
    for dimension, keys in _LATENCY_DIMENSIONS.items():
        grouped = _grouped(latency, list(keys), [("latency_ms", "list"), ("service_ms", "list"), ("waited", "sum")])
        parts.append(_rows(grouped.num_rows, table="latency", dimension=dimension, waited=grouped["waited_sum"],
                           values=grouped["latency_ms_list"], **{key: grouped[key] for key in keys}))
        parts.append(_rows(grouped.num_rows, table="service", dimension=dimension,
                           values=grouped["service_ms_list"], **{key: grouped[key] for key in keys}))

    # waits the protocol asked for: by reason and API
    waiting = answered.filter(pc.is_valid(answered["wait_reason"]))
    # (counted apart from their times: a long poll of unknown length has none)
    waits = pa.table({"dimension": waiting["wait_reason"], "api_name": pc.fill_null(waiting["api_name"], NO_API),
                      "wait_ms": waiting["wait_ms"], "one": pa.array([1] * waiting.num_rows, pa.int64())})
    grouped = _grouped(waits, ["dimension", "api_name"], [("wait_ms", "list"), ("one", "sum")])
    parts.append(_rows(grouped.num_rows, table="waits", dimension=grouped["dimension"], api_name=grouped["api_name"],
                       count=grouped["one_sum"], values=grouped["wait_ms_list"]))

    # throttle: responses carrying a throttle time; values of the throttled
    # ones; requests sent while the broker had muted the connection
    # (an exchange counts once however often its problem codes name it; many
    # exchanges carry some problem code, so the lists are searched by pyarrow)
    codes = exchanges["problem_codes"].combine_chunks()
    named = pc.equal(pc.list_flatten(codes), "sent-while-muted")
    muted_rows = exchanges.take(pc.unique(pc.filter(pc.list_parent_indices(codes), named)))
    if muted_rows.num_rows:
        muted = _grouped(pa.table({"client_id": pc.fill_null(muted_rows["client_id"], NO_CLIENT_ID),
                                   "broker": pc.fill_null(muted_rows["broker"], NO_BROKER)}),
                         ["client_id", "broker"], [([], "count_all")])
        muted = muted.sort_by([("client_id", "ascending"), ("broker", "ascending")])
        parts.append(_rows(muted.num_rows, table="throttle", client_id=muted["client_id"], broker=muted["broker"],
                           count=0, muted=muted["count_all"]))
    with_throttle = exchanges.filter(pc.is_valid(exchanges["throttle_time_ms"]))
    waits = with_throttle["throttle_time_ms"]
    throttle = pa.table({
        "client_id": pc.fill_null(with_throttle["client_id"], NO_CLIENT_ID),
        "broker": pc.fill_null(with_throttle["broker"], NO_BROKER),
        "throttled": pc.if_else(pc.greater(waits, 0), waits.cast(pa.float64()), pa.scalar(None, pa.float64())),
    })
    grouped = _grouped(throttle, ["client_id", "broker"], [([], "count_all"), ("throttled", "list")])
    parts.append(_rows(grouped.num_rows, table="throttle", client_id=grouped["client_id"], broker=grouped["broker"],
                       count=grouped["count_all"], values=grouped["throttled_list"]))

    # timeseries: per minute of the request (else the response) and API
    ts = pc.coalesce(exchanges["request_ts"], exchanges["response_ts"])
    timed = exchanges.filter(pc.is_valid(ts))
    ts = pc.drop_null(ts)
    has_error = pc.or_(pc.not_equal(pc.fill_null(timed["error_code"], 0), 0),
                       pc.greater(pc.fill_null(pc.list_value_length(timed["error_codes"]), 0), 0))
    series = pa.table({
        # ns -> the minute's first second (integer division; times before 1970 are not expected)
        "minute": pc.multiply(pc.divide(ts, 60_000_000_000), 60),
        "api_name": pc.fill_null(timed["api_name"], NO_API),
        "bytes": pc.add(pc.fill_null(timed["request_bytes"], 0), pc.fill_null(timed["response_bytes"], 0)),
        "errors": has_error.cast(pa.int64()),
        "latency_ms": timed["latency_ms"],
    })
    grouped = _grouped(series, ["minute", "api_name"],
                       [([], "count_all"), ("bytes", "sum"), ("errors", "sum"), ("latency_ms", "list")])
    parts.append(_rows(grouped.num_rows, table="timeseries", minute=grouped["minute"], api_name=grouped["api_name"],
                       count=grouped["count_all"], bytes=grouped["bytes_sum"], errors=grouped["errors_sum"],
                       values=grouped["latency_ms_list"]))

    # errors: top-level error codes, and codes anywhere in the response (few rows)
    erring = exchanges.filter(pc.or_(pc.not_equal(pc.fill_null(exchanges["error_code"], 0), 0),
                                     pc.greater(pc.fill_null(pc.list_value_length(exchanges["error_codes"]), 0), 0)))
    top_level: Counter[tuple[str, int]] = Counter()
    anywhere: Counter[tuple[str, int]] = Counter()
    by_client: Counter[tuple[str, int]] = Counter()
    for api_name, code, codes, client_id in zip(*(erring[name].to_pylist()
                                                  for name in ("api_name", "error_code", "error_codes", "client_id"))):
        api_name = NO_API if api_name is None else api_name
        if code:
            top_level[(api_name, code)] += 1
        for distinct in set(codes or ()) - {0}:
            anywhere[(api_name, distinct)] += 1
        for distinct in (set(codes or ()) | {code or 0}) - {0}:
            by_client[(NO_CLIENT_ID if client_id is None else client_id, distinct)] += 1
    client_keys = sorted(by_client)
    parts.append(_rows(len(client_keys), table="errors_by_client",
                       client_id=pa.array([k[0] for k in client_keys], pa.string()),
                       error_code=pa.array([k[1] for k in client_keys], pa.int16()),
                       count=pa.array([by_client[k] for k in client_keys], pa.int64())))
    error_keys = sorted(set(top_level) | set(anywhere))
    parts.append(_rows(len(error_keys), table="errors", api_name=pa.array([k[0] for k in error_keys], pa.string()),
                       error_code=pa.array([k[1] for k in error_keys], pa.int16()),
                       count=pa.array([top_level[k] for k in error_keys], pa.int64()),
                       anywhere=pa.array([anywhere[k] for k in error_keys], pa.int64())))
    return _sketched(pa.concat_tables(parts))


def _sketched(table: pa.Table) -> pa.Table:
    """`table` with every values list longer than EXACT_LIMIT replaced by its
    sketch, so a contribution's size does not grow with its exchanges."""
    import numpy as np

    lengths = pc.fill_null(pc.list_value_length(table["values"]), 0).to_numpy(zero_copy_only=False)
    large = [int(i) for i in (lengths > EXACT_LIMIT).nonzero()[0]]
    if not large:
        return table
    lists = table["values"].combine_chunks()
    sketches: list[str | None] = [None] * table.num_rows
    sums: list[str | None] = [None] * table.num_rows
    for i in large:
        values = pc.drop_null(lists[i].values).to_numpy(zero_copy_only=False)
        sketch = _sketch_of(values)
        sketches[i] = json.dumps(sketch.state())
        if np.isfinite(values).all():
            numerator, exponent = _exact_sum(values)
            sums[i] = f"{numerator}:{exponent}"
    replaced = pa.array(lengths > EXACT_LIMIT)
    table = table.set_column(table.schema.get_field_index("values"), "values",
                             pc.if_else(replaced, pa.scalar(None, lists.type), lists))
    table = table.set_column(table.schema.get_field_index("exact_sum"), "exact_sum", pa.array(sums, pa.string()))
    return table.set_column(table.schema.get_field_index("sketch"), "sketch", pa.array(sketches, pa.string()))


def _exact_sum(values: Any) -> tuple[int, int]:
    """The exact sum of a float64 numpy array of finite values, as (numerator,
    exponent): numerator x 2^exponent. A group's mean is its exact sum rounded
    once, over the values of every contribution (kept or sketched), divided by
    its count, so it does not depend on how the exchanges were spread over
    tasks; a sketch's own total is a float sum in one task's order.

    Each value is an integer mantissa (53 bits) times a power of two; the
    mantissas are summed exactly per exponent (in two 26/27-bit halves, so
    int64 sums cannot overflow) and the per-exponent sums shifted together as
    Python integers."""
    import numpy as np

    if not len(values):
        return 0, 0
    fractions, exponents = np.frexp(values)
    mantissas = (fractions * float(1 << 53)).astype(np.int64)  # exact: |fraction| < 1
    exponents = exponents.astype(np.int64) - 53
    order = np.argsort(exponents, kind="stable")
    exponents, mantissas = exponents[order], mantissas[order]
    starts = np.flatnonzero(np.concatenate(([True], exponents[1:] != exponents[:-1])))
    high = np.add.reduceat(mantissas >> 26, starts).tolist()
    low = np.add.reduceat(mantissas & ((1 << 26) - 1), starts).tolist()
    base = int(exponents[0])
    total = 0
    for start, upper, lower in zip(starts.tolist(), high, low):
        total += ((upper << 26) + lower) << (int(exponents[start]) - base)
    return total, base


def _sketch_of(values: Any) -> QuantileSketch:
    """`QuantileSketch.of(values.tolist())` of a float64 numpy array, with the
    buckets of more than EXACT_LIMIT values counted by numpy (the finishing
    tasks sketch some 450,000 latencies of bench_spark.py's 108k-exchange
    archive: 0.06-0.09 s through `math.log` and a Counter, 0.02 s here).

    The same sketch bit for bit, not a close one: the sum accumulated left
    to right (`np.add.accumulate`, as `of`'s `+=` loop; a zero sum is +0.0,
    as from 0.0 + ...); min and max from Python where a zero (of either
    sign) could be one; a bucket is ceil(log(|v|) / log(gamma)), and where
    numpy's logarithm could round differently from `math.log` (a quotient
    within 1e-6 of an integer, far more than a few ulps) it is taken from
    `math.log`. A NaN or an infinity goes through `of`, which raises as `add` does.
    (Here and not in kdissect.sketch: numpy is the spark extra's, not base code's.)"""
    import math

    import numpy as np

    from kdissect.sketch import _LOG_GAMMA, _POSITIVE, _ZERO

    if len(values) <= EXACT_LIMIT or not np.isfinite(values).all():
        return QuantileSketch.of(values.tolist())
    made = QuantileSketch()
    made.count, made.values = len(values), None
    made.total = float(np.add.accumulate(values)[-1]) + 0.0
    low, high = float(values.min()), float(values.max())
    if low == 0 or high == 0:  # (0.0 and -0.0: the first met, as `of` finds it)
        listed = values.tolist()
        low, high = min(math.inf, *listed), max(-math.inf, *listed)
    made.min, made.max = low, high
    buckets = made.buckets
    for sign, magnitudes in ((1, values[values > 0]), (-1, -values[values < 0])):
        if not len(magnitudes):
            continue
        quotients = np.log(magnitudes) / _LOG_GAMMA
        keys = np.ceil(quotients)
        for i in np.flatnonzero(np.abs(quotients - np.rint(quotients)) < 1e-6):
            keys[i] = math.ceil(math.log(float(magnitudes[i])) / _LOG_GAMMA)
        found, counts = np.unique(keys, return_counts=True)
        for key, n in zip(found.tolist(), counts.tolist()):
            buckets[sign * (_POSITIVE + int(key))] = n
    zero = int(np.count_nonzero(values == 0))
    if zero:
        buckets[_ZERO] = zero
    return made


def _percentiles(values: QuantileSketch, *qs: float) -> list[float | None]:
    """Percentiles (q in [0, 100]) as `kdissect stats` computes them; None for no values."""
    if not values.count:
        return [None for _ in qs]
    found: list[float | None] = list(values.percentiles(*qs))
    return found


def _merged_row(key: dict[str, Any], sums: dict[str, int], values: QuantileSketch) -> dict[str, Any]:
    """One table row from the summed contributions of one group and the sketch of its values."""
    table = key["table"]
    top = values.max if values.count else None
    if table in ("latency", "service"):
        dimension = key["dimension"]
        p50, p90, p99 = _percentiles(values, 50, 90, 99)
        merged = {"dimension": dimension, "api_name": None, "api_version": None, "client_id": None, "broker": None,
                  "count": values.count, "p50": p50, "p90": p90, "p99": p99, "max": top,
                  "mean": values.mean() if values.count else None, "waits": sums["waited"]}
        merged.update({name: key[name] for name in _LATENCY_DIMENSIONS[dimension]})
        return merged
    if table == "waits":
        return {"reason": key["dimension"], "api_name": key["api_name"], "count": sums["count"],
                "median_ms": _percentiles(values, 50)[0], "max_ms": top}
    if table == "errors":
        from kdissect.protocol.errors import error_name

        from kdissect.conn.normal_flow import is_normal_flow

        return {"api_name": key["api_name"], "error_code": key["error_code"], "error_name": error_name(key["error_code"]),
                "top_level": sums["count"], "anywhere": sums["anywhere"],
                "normal_flow": is_normal_flow(key["error_code"])}
    if table == "errors_by_client":
        from kdissect.conn.normal_flow import is_normal_flow
        from kdissect.protocol.errors import error_name

        return {"client_id": key["client_id"], "error_code": key["error_code"],
                "error_name": error_name(key["error_code"]), "normal_flow": is_normal_flow(key["error_code"]),
                "exchanges": sums["count"]}
    if table == "throttle":
        p50, p90, p99 = _percentiles(values, 50, 90, 99)
        return {"client_id": key["client_id"], "broker": key["broker"], "responses": sums["count"],
                "throttled": values.count, "p50_ms": p50, "p90_ms": p90, "p99_ms": p99,
                "max_ms": None if top is None else int(top), "total_ms": int(values.total),
                "sent_while_muted": sums["muted"]}
    if table == "timeseries":
        return {"minute": key["minute"], "api_name": key["api_name"], "exchanges": sums["count"],
                "bytes": sums["bytes"], "errors": sums["errors"], "p99_latency_ms": _percentiles(values, 99)[0]}
    return {"table": key["dimension"], "rows": sums["count"]}  # WRITTEN


_SUMMED = ("count", "anywhere", "bytes", "errors", "waited", "muted")


def merged_rows(table: pa.Table) -> list[tuple[str, dict[str, Any]]]:
    """CONTRIBUTION_SCHEMA rows sorted by GROUP_COLUMNS -> (table name, table
    row) per group, on the driver.

    Vectorised: groups are runs of equal keys (the rows are sorted), their
    sums `reduceat` over the runs, and their values, flattened, are runs too.
    (The rows stay Python objects: until 2026-11-26 they went through JSON
    and an Arrow batch, from when a Spark stage merged them.)
    """
    import numpy as np

    table = table.cast(CONTRIBUTION_SCHEMA)
    rows = table.num_rows
    if rows == 0:
        return []
    starts_mask = np.zeros(rows, dtype=bool)
    starts_mask[0] = True
    for name in GROUP_COLUMNS:
        column = table[name]
        missing = pc.is_null(column).to_numpy(zero_copy_only=False)
        filler = "" if pa.types.is_string(column.type) else 0
        values = pc.fill_null(column, filler).to_numpy(zero_copy_only=False)
        starts_mask[1:] |= (missing[1:] != missing[:-1]) | (values[1:] != values[:-1])
    starts = np.flatnonzero(starts_mask)
    group_of_row = np.cumsum(starts_mask) - 1
    # (as lists of Python ints: a group's sums are then looked up, not converted, each time)
    sums = {name: np.add.reduceat(pc.fill_null(table[name], 0).to_numpy(), starts).tolist() for name in _SUMMED}
    lists = table["values"].combine_chunks()
    flat = pc.list_flatten(lists)
    parents = pc.list_parent_indices(lists).to_numpy()
    present = pc.is_valid(flat).to_numpy(zero_copy_only=False)
    flat_values = pc.fill_null(flat, 0.0).to_numpy(zero_copy_only=False)[present]
    group_of_value = group_of_row[parents[present]]  # non-decreasing: rows are in group order
    bounds = np.searchsorted(group_of_value, np.arange(len(starts) + 1)).tolist()
    keys = table.select(GROUP_COLUMNS).take(pa.array(starts)).to_pylist()
    sketches: dict[int, list[tuple[str, str | None]]] = {}  # group -> its contributions' sketches, exact sums
    for row in pc.indices_nonzero(pc.is_valid(table["sketch"])).to_pylist():
        sketches.setdefault(int(group_of_row[row]), []).append((table["sketch"][row].as_py(),
                                                                table["exact_sum"][row].as_py()))
    out = []
    for group, key in enumerate(keys):
        # sorted: the sum behind the mean is then the same however the
        # exchanges were spread over tasks (in place or shipped, one slot or several)
        kept = np.sort(flat_values[bounds[group]:bounds[group + 1]])
        values = _sketch_of(kept)
        for state, _ in sketches.get(group, ()):
            values.merge(QuantileSketch.from_state(json.loads(state)))
        if values.count > EXACT_LIMIT:
            # a group of more values than a contribution keeps may have been
            # sketched in some tasks and not in others: its total is the exact
            # sum of all its values, rounded once (the same however they were spread)
            exact = _exact_total([_exact_sum(kept), *(exact_sum for _, exact_sum in sketches.get(group, ()))])
            if exact is not None:
                values.total = exact
        group_sums = {name: sums[name][group] for name in _SUMMED}
        out.append((key["table"], _merged_row(key, group_sums, values)))
    return out


def _exact_total(sums: list[tuple[int, int] | str | None]) -> float | None:
    """The float nearest to the sum of exact sums (`_exact_sum`'s pairs, or
    their "numerator:exponent" text); None if one is missing (a sketch of
    values that were not all finite)."""
    from fractions import Fraction

    total = Fraction(0)
    for found in sums:
        if found is None:
            return None
        numerator, exponent = (int(part) for part in found.split(":")) if isinstance(found, str) else found
        total += Fraction(numerator) * Fraction(2) ** exponent
    return float(total) + 0.0


def _none_first(value: Any) -> tuple:
    return (value is not None, value)


_ORDER = {
    "latency": lambda r: (list(_LATENCY_DIMENSIONS).index(r["dimension"]), _none_first(r["api_name"]),
                          _none_first(r["api_version"]), _none_first(r["client_id"]), _none_first(r["broker"])),
    "waits": lambda r: (r["reason"], r["api_name"]),
    "errors": lambda r: (-r["anywhere"], r["api_name"], r["error_code"]),
    # as `kdissect stats`: failures first, then by client id, each client's errors by exchanges
    "errors_by_client": lambda r: (r["normal_flow"], r["client_id"], -r["exchanges"], r["error_name"]),
    "throttle": lambda r: (r["client_id"], r["broker"]),
    "timeseries": lambda r: (r["minute"], r["api_name"]),
}


def split_merged(merged: Iterable[tuple[str, dict[str, Any]]]) -> tuple[dict[str, list[dict[str, Any]]], dict[str, int]]:
    """(rows per summary table, rows written per task table) from the merged rows."""
    tables: dict[str, list[dict[str, Any]]] = {name: [] for name in TABLE_SCHEMAS}
    written: dict[str, int] = {}
    service: dict[tuple, dict[str, Any]] = {}
    for table, row in merged:
        if table == WRITTEN:
            written[row["table"]] = written.get(row["table"], 0) + row["rows"]
        elif table == "service":
            service[_latency_key(row)] = row
        else:
            tables[table].append(row)
    for row in tables["latency"]:  # service time beside the wire latency of the same group
        times = service.get(_latency_key(row), {})
        row.update({"service_count": times.get("count", 0), "service_p50": times.get("p50"),
                    "service_p90": times.get("p90"), "service_p99": times.get("p99"),
                    "service_max": times.get("max")})
    return tables, written


def _latency_key(row: dict[str, Any]) -> tuple:
    return (row["dimension"], row["api_name"], row["api_version"], row["client_id"], row["broker"])


def write_tables(tables: dict[str, list[dict[str, Any]]], outdir: Any) -> None:
    """Each summary table as one Parquet file, sorted, under OUTDIR/<name>/
    (`outdir`: a kdissect.shared.outdir_tree.Tree, or a path)."""
    import pyarrow.parquet as pq

    from kdissect.shared.outdir_tree import as_tree

    outdir = as_tree(outdir)
    for name, rows in tables.items():
        rows = sorted(rows, key=_ORDER[name])
        if name == "timeseries":
            rows = [{**row, "minute": row["minute"] * 1_000_000} for row in rows]  # seconds -> microseconds
        # timestamps as INT96, as Spark writes them: Spark reads them back as
        # timestamps (in UTC), pyarrow and pandas as naive UTC times
        with outdir.output(name, "part-00000.parquet") as stream:
            pq.write_table(pa.Table.from_pylist(rows, schema=TABLE_SCHEMAS[name]), stream,
                           use_deprecated_int96_timestamps=True)
        outdir.write_bytes(b"", name, "_SUCCESS")
