"""The report's charts, as Vega-Lite charts of the report's data
(`kdissect.report.data`). The HTML page and the notebooks both call these.
They are written with altair's names but built by `kdissect.report.vegalite`
(the same specs, without importing altair: about 50 MB less memory for the
report page); in a notebook each shows as an altair chart.

Each function takes the whole data dict and returns a chart, or None when the
data has nothing to show (the page then says so). Every chart has a title,
axis titles with units, a legend where colour carries meaning, tooltips with
the values, and takes the width of its container (readable in a narrow
window). Times are shown in UTC.
"""

from __future__ import annotations

import heapq
from typing import Any, Callable

from kdissect.report import vegalite as alt

from kdissect.report.text import visible

DISTRIBUTION_ROWS = 25  # rows of a latency distribution chart (the busiest)
HEIGHT = 260
ROW_HEIGHT = 18
PERCENTILES = ("p50", "p90", "p99", "max")
MEASURES = ["wire p50", "wire p99", "service p50", "service p99"]
UTC = alt.Scale(type="utc")


def _chart(rows: list[dict[str, Any]]) -> alt.Chart:
    return alt.Chart(alt.Data(values=rows))


def _title(text: str, subtitle: str | list[str] | None = None) -> alt.TitleParams:
    return alt.TitleParams(text, subtitle=subtitle or "", anchor="start")


def _time_axis(report: dict[str, Any], title: str = "time (UTC)") -> alt.X:
    """The x axis of a chart over time buckets: 24-hour UTC labels in one
    format (Vega's default mixes `:35`, `11 AM` and `.500`), no tick between
    two bucket starts, the date where the span crosses midnight."""
    width = report["bucket_seconds"]
    span = report.get("span") or {}
    if span.get("first", "")[:10] != span.get("last", "")[:10]:
        label = "%m-%d %H:%M"
    elif width < 60:
        label = "%H:%M:%S"
    else:
        label = "%H:%M"
    # a utc scale formats with utcFormat
    axis = alt.Axis(labelOverlap=True, format=label, tickMinStep=width * 1000)
    return alt.X("start:T", title=title, scale=UTC, axis=axis)


def _integer_ticks(largest: float) -> dict[str, Any]:
    """Integer ticks for counts up to `largest`: each integer up to 10 (the
    browser's Vega ignores tickMinStep there and drew 0.2 steps), else steps of 1 or more."""
    if largest <= 10:
        return {"values": list(range(0, int(largest) + 1))}
    return {"tickMinStep": 1}


def _count_axis(title: str, largest: float) -> alt.Axis:
    """An axis of counts: integer ticks only."""
    return alt.Axis(title=title, format=",d", **_integer_ticks(largest))


def _count_legend(title: str, largest: float) -> alt.Legend:
    """A colour gradient of counts: integer labels only."""
    return alt.Legend(title=title, format=",d", **_integer_ticks(largest))


def _stacked(rows: list[dict[str, Any]], key: str, value: str) -> list[dict[str, Any]]:
    """Rows with `y0`/`y1`: `value` stacked from zero per bucket, in the
    order of the legend (`key` sorted). Stacking here, not in Vega-Lite: its
    stack of ranged (x, x2) bars drew floating strips."""
    tops: dict[str, float] = {}
    out = []
    for row in sorted(rows, key=lambda r: (r["start"], str(r[key]))):
        low = tops.get(row["start"], 0)
        tops[row["start"]] = low + (row[value] or 0)
        out.append({**row, "y0": low, "y1": tops[row["start"]]})
    return out


def _finish(chart: Any) -> alt.TopLevelMixin:
    """Legends under the plot and titles that wrap, so a narrow window keeps the plot's width."""
    return chart.configure_legend(orient="bottom", columns=3, labelLimit=260, symbolLimit=40).configure_title(
        subtitleFontSize=11, limit=0)


def _finished(build: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    """A chart function whose chart (if any) is `_finish`ed."""
    import functools

    @functools.wraps(build)
    def chart(data: dict[str, Any]) -> Any:
        made = build(data)
        return None if made is None else _finish(made)

    return chart


def _with_bucket_end(rows: list[dict[str, Any]], width: int) -> list[dict[str, Any]]:
    """Rows with `start` and `end` of their bucket (ISO texts)."""
    import datetime as dt

    out = []
    for row in rows:
        start = dt.datetime.strptime(row["time"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
        end = start + dt.timedelta(seconds=width)
        out.append({**row, "start": row["time"], "end": end.strftime("%Y-%m-%dT%H:%M:%SZ")})
    return out


def _bucket_text(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


@_finished
def statuses(data: dict[str, Any]) -> alt.TopLevelMixin | None:
    counts = data["stats"].get("statuses") or {}
    if not counts:
        return None
    rows = [{"status": name, "exchanges": count} for name, count in counts.items()]
    return _chart(rows).mark_bar().encode(
        x=alt.X("exchanges:Q", axis=_count_axis("exchanges", max(counts.values()))),
        y=alt.Y("status:N", title="status", sort="-x"),
        color=alt.Color("status:N", title="status", legend=alt.Legend(symbolType="square")),
        tooltip=[alt.Tooltip("status:N"), alt.Tooltip("exchanges:Q", format=",")],
    ).properties(title=_title("Exchanges by status"), width="container", height=ROW_HEIGHT * 2 * len(rows))


@_finished
def latency_over_time(data: dict[str, Any]) -> alt.TopLevelMixin | None:
    report = data["report"]
    timeline = report["timeline"]
    rows = [r for r in timeline["rows"] if r.get("p99") is not None and r["p99"] > 0]
    if not rows:
        return None
    width = report["bucket_seconds"]
    rows = _with_bucket_end(rows, width)
    shown, total = len(timeline["apis_shown"]), timeline["apis"]
    subtitle = [f"p99 latency per {_bucket_text(width)} bucket: {timeline['latency_basis']}",
                f"the {shown} busiest of {total} APIs" if shown < total else f"all {total} APIs"]
    tooltip = [alt.Tooltip("start:N", title="bucket start (UTC)"), alt.Tooltip("api:N", title="API"),
               alt.Tooltip("exchanges:Q", title="exchanges")]
    tooltip += [alt.Tooltip(f"{name}:Q", title=f"{name} (ms)", format=",.3f")
                for name in ("p50", "p99", "max") if any(name in r for r in rows)]
    base = _chart(rows).encode(
        x=_time_axis(report),
        y=alt.Y("p99:Q", title="p99 latency (ms, log scale)", scale=alt.Scale(type="log")),
        color=alt.Color("api:N", title="API"),
        tooltip=tooltip,
    )
    # points, not lines: buckets without answered exchanges (often long gaps between captures) have no value
    return base.mark_point(filled=True, size=40, opacity=0.85).properties(
        title=_title("Latency over time per API", subtitle), width="container", height=HEIGHT)


@_finished
def traffic_over_time(data: dict[str, Any]) -> alt.TopLevelMixin | None:
    report = data["report"]
    rows = report["timeline"]["rows"]
    if not rows:
        return None
    width = report["bucket_seconds"]
    stacked = _stacked(_with_bucket_end(rows, width), "api", "exchanges")
    largest = max(r["y1"] for r in stacked)
    return _chart(stacked).mark_bar().encode(
        x=_time_axis(report), x2="end:T",
        y=alt.Y("y0:Q", axis=_count_axis(f"exchanges per {_bucket_text(width)}", largest),
                scale=alt.Scale(zero=True)),
        y2="y1:Q",
        color=alt.Color("api:N", title="API", legend=alt.Legend(symbolType="square")),
        tooltip=[alt.Tooltip("start:N", title="bucket start (UTC)"), alt.Tooltip("api:N", title="API"),
                 alt.Tooltip("exchanges:Q"), alt.Tooltip("errors:Q", title="with errors"),
                 alt.Tooltip("bytes:Q", title="bytes (request + response)", format=",")],
    ).properties(title=_title("Exchanges over time per API", f"{_bucket_text(width)} buckets, stacked"),
                 width="container", height=HEIGHT)


def _distribution(rows: list[dict[str, Any]], label: Callable[[dict[str, Any]], str], title: str,
                  what: str) -> alt.TopLevelMixin | None:
    # the busiest rows, read once (a table may have a row per client id, on disk: kdissect.forensics.spill)
    total = 0
    busiest: list[tuple[int, int, dict[str, Any]]] = []  # (count, -position, row): a min-heap of the busiest
    for position, row in enumerate(rows):
        if not row.get("count"):
            continue
        total += 1
        entry = (row["count"], -position, row)
        if len(busiest) < DISTRIBUTION_ROWS:
            heapq.heappush(busiest, entry)
        elif entry[:2] > busiest[0][:2]:
            heapq.heapreplace(busiest, entry)
    if not total:
        return None
    # as sorted(rows, key=-count) orders them: the busiest first, ties in table order
    rows = [row for _, _, row in sorted(busiest, key=lambda e: (-e[0], -e[1]))]
    long = []
    for row in rows:
        for name in PERCENTILES:
            value = row.get(name)
            if value is not None and value > 0:
                long.append({"label": label(row), "percentile": name, "ms": value, "count": row["count"],
                             "p50": row.get("p50"), "max": row.get("max")})
    if not long:
        return None
    order = [label(r) for r in rows]
    y = alt.Y("label:N", title=what, sort=order)
    x = alt.X("ms:Q", title="latency (ms, log scale)", scale=alt.Scale(type="log"))
    spread = _chart([{"label": label(r), "p50": r["p50"], "max": r["max"]} for r in rows
                     if r.get("p50") and r.get("max")]).mark_rule(color="#999").encode(
        y=y, x=alt.X("p50:Q", scale=alt.Scale(type="log")), x2="max:Q")
    points = _chart(long).mark_point(filled=True, size=60).encode(
        y=y, x=x,
        # colour and shape in one legend, whose symbols are then the marks (Vega-Lite
        # merges the two when field, title and domain agree; a `sort` keeps them apart)
        color=alt.Color("percentile:N", title="percentile", scale=alt.Scale(domain=list(PERCENTILES))),
        shape=alt.Shape("percentile:N", title="percentile", scale=alt.Scale(domain=list(PERCENTILES))),
        tooltip=[alt.Tooltip("label:N", title=what), alt.Tooltip("percentile:N"),
                 alt.Tooltip("ms:Q", title="latency (ms)", format=",.3f"), alt.Tooltip("count:Q", title="exchanges")],
    )
    subtitle = "p50, p90, p99 and max of the answered exchanges; the line spans p50 to max"
    if total > len(rows):
        subtitle = [subtitle, f"the {len(rows)} busiest of {total}"]  # type: ignore[assignment]
    return (spread + points).properties(title=_title(title, subtitle), width="container",
                                        height=max(ROW_HEIGHT * len(rows), 60))


@_finished
def latency_by_api(data: dict[str, Any]) -> alt.TopLevelMixin | None:
    return _distribution(data["stats"].get("latency_by_api", []),
                         lambda r: r["api"] if r.get("version") is None else f"{r['api']} v{r['version']}",
                         "Latency distribution per API and version", "API and version")


@_finished
def latency_by_client(data: dict[str, Any]) -> alt.TopLevelMixin | None:
    return _distribution(data["stats"].get("latency_by_client", []), lambda r: visible(str(r["client_id"])),
                         "Latency by client id", "client id")


@_finished
def latency_by_broker(data: dict[str, Any]) -> alt.TopLevelMixin | None:
    return _distribution(data["stats"].get("latency_by_broker", []), lambda r: str(r["broker"]),
                         "Latency by broker", "broker")


@_finished
def service_by_api(data: dict[str, Any]) -> alt.TopLevelMixin | None:
    """Wire latency beside service time (p50 and p99) per API and version."""
    rows = [r for r in data["stats"].get("latency_by_api", []) if r.get("count")]
    rows = sorted(rows, key=lambda r: -r["count"])[:DISTRIBUTION_ROWS]
    long = []
    for row in rows:
        label = row["api"] if row.get("version") is None else f"{row['api']} v{row['version']}"
        for measure, key in (("wire p50", "p50"), ("wire p99", "p99"), ("service p50", "service_p50"),
                             ("service p99", "service_p99")):
            value = row.get(key)
            if value is not None and value > 0:
                long.append({"label": label, "measure": measure, "ms": value, "waits": row.get("waits", 0)})
    if not long:
        return None
    order = list(dict.fromkeys(item["label"] for item in long))
    return _chart(long).mark_point(filled=True, size=60).encode(
        y=alt.Y("label:N", title="API and version", sort=order),
        x=alt.X("ms:Q", title="time (ms, log scale)", scale=alt.Scale(type="log")),
        color=alt.Color("measure:N", title="measure", scale=alt.Scale(domain=MEASURES)),  # one legend, as above
        shape=alt.Shape("measure:N", title="measure", scale=alt.Scale(domain=MEASURES)),
        tooltip=[alt.Tooltip("label:N", title="API and version"), alt.Tooltip("measure:N"),
                 alt.Tooltip("ms:Q", title="ms", format=",.3f"), alt.Tooltip("waits:Q", title="waits set aside")],
    ).properties(title=_title("Wire latency and service time per API and version",
                              "service time: the latency without the waits the protocol asked for; "
                              "APIs whose every exchange was a wait show wire latency only"),
                 width="container", height=max(ROW_HEIGHT * len(order), 60))


@_finished
def waits(data: dict[str, Any]) -> alt.TopLevelMixin | None:
    """The waits the protocol asked for: how many, and how long (median, max)."""
    rows = data["stats"].get("waits", [])
    if not rows:
        return None
    long = [{"what": f"{r['reason']} ({r['api']})", "statistic": name, "ms": r[key], "count": r["count"]}
            for r in rows for name, key in (("median", "median_ms"), ("max", "max_ms")) if r.get(key)]
    return _chart(long).mark_bar().encode(
        y=alt.Y("what:N", title="reason (API)"),
        x=alt.X("ms:Q", title="wait (ms)"),
        color=alt.Color("statistic:N", title="statistic", legend=alt.Legend(symbolType="square")),
        yOffset="statistic:N",
        tooltip=[alt.Tooltip("what:N", title="reason (API)"), alt.Tooltip("statistic:N"),
                 alt.Tooltip("ms:Q", title="ms", format=",.3f"), alt.Tooltip("count:Q", title="exchanges")],
    ).properties(title=_title("Waits the protocol asked for", "long polls, group barriers, throttling"),
                 width="container", height=max(2 * ROW_HEIGHT * len(rows), 60))


@_finished
def error_heatmap(data: dict[str, Any]) -> alt.TopLevelMixin | None:
    rows = data["report"]["errors_by_api"]
    if not rows:
        return None
    # failures first, in red; the codes of the protocol's normal flow after them, in grey
    rows = [{**r, "error": f"{r['error']} (normal flow)" if r.get("normal_flow") else r["error"]} for r in rows]
    order = [r["error"] for r in sorted(rows, key=lambda r: (bool(r.get("normal_flow")), -r["anywhere"]))]
    order = list(dict.fromkeys(order))
    base = _chart(rows).encode(
        x=alt.X("error:N", title="error code", sort=order, axis=alt.Axis(labelAngle=-30, labelLimit=220)),
        y=alt.Y("api:N", title="API"),
    )
    largest = max(r["anywhere"] for r in rows)
    tooltip = [alt.Tooltip("api:N", title="API"), alt.Tooltip("error:N", title="error"),
               alt.Tooltip("error_code:Q", title="code"),
               alt.Tooltip("anywhere:Q", title="exchanges carrying it"),
               alt.Tooltip("top_level:Q", title="as the top-level error")]
    failures = base.transform_filter("!datum.normal_flow").mark_rect().encode(
        color=alt.Color("anywhere:Q", legend=_count_legend("failures", largest), scale=alt.Scale(scheme="reds")),
        tooltip=tooltip)
    normal = base.transform_filter("datum.normal_flow").mark_rect().encode(
        color=alt.Color("anywhere:Q", legend=_count_legend("normal flow", largest), scale=alt.Scale(scheme="greys")),
        tooltip=tooltip)
    text = base.mark_text(fontSize=11).encode(text="anywhere:Q")
    apis = len({r["api"] for r in rows})
    return (failures + normal + text).resolve_scale(color="independent").properties(
        title=_title("Errors by API and error code",
                     "exchanges whose response carries the code anywhere; normal-flow codes in grey"),
        width="container", height=max(28 * apis, 60))


@_finished
def errors_over_time(data: dict[str, Any]) -> alt.TopLevelMixin | None:
    report = data["report"]
    timeline = report["error_timeline"]
    if not timeline["rows"]:
        return None
    width = report["bucket_seconds"]
    shown, total = len(timeline["series_shown"]), timeline["series"]
    subtitle = f"exchanges per {_bucket_text(width)} bucket"
    if shown < total:
        subtitle += f"; the {shown} biggest of {total} (API, error) pairs apart, the rest summed"
    series = {r["series"] for r in timeline["rows"]}
    return _chart(_with_bucket_end(timeline["rows"], width)).mark_rect().encode(
        x=_time_axis(report), x2="end:T",
        y=alt.Y("series:N", title="API: error"),
        color=alt.Color("count:Q", legend=_count_legend("exchanges", max(r["count"] for r in timeline["rows"])),
                        scale=alt.Scale(scheme="reds")),
        tooltip=[alt.Tooltip("start:N", title="bucket start (UTC)"), alt.Tooltip("series:N", title="API: error"),
                 alt.Tooltip("count:Q", title="exchanges")],
    ).properties(title=_title("Errors over time by API and error code", subtitle), width="container",
                 height=max(24 * len(series), 60))


@_finished
def throttle_over_time(data: dict[str, Any]) -> alt.TopLevelMixin | None:
    report = data["report"]
    timeline = report["throttle_timeline"]
    rows = timeline["rows"]
    if not rows:
        return None
    width = report["bucket_seconds"]
    if not sum(r["throttled"] for r in rows):
        return None  # a flat line at zero says less than the page's one line (throttle_note)
    subtitle = [f"throttle time the brokers asked for, summed per {_bucket_text(width)} bucket and client id"]
    shown, total = len(timeline["clients_shown"]), timeline["clients"]
    if shown < total:
        subtitle.append(f"the {shown} most throttled of {total} client ids apart, the rest summed")
    rows = [{**row, "client_id": visible(str(row["client_id"]))} for row in rows]
    base = _chart(_with_bucket_end(rows, width)).encode(
        x=_time_axis(report),
        y=alt.Y("total_ms:Q", title="throttle time (ms per bucket)"),
        color=alt.Color("client_id:N", title="client id"),
        tooltip=[alt.Tooltip("start:N", title="bucket start (UTC)"), alt.Tooltip("client_id:N", title="client id"),
                 alt.Tooltip("responses:Q", title="responses with a throttle field"),
                 alt.Tooltip("throttled:Q", title="throttled (> 0 ms)"),
                 alt.Tooltip("total_ms:Q", title="total (ms)", format=","),
                 alt.Tooltip("max_ms:Q", title="largest (ms)", format=",")],
    )
    return (base.mark_line(strokeWidth=1.5) + base.mark_point(filled=True, size=30)).properties(
        title=_title("Throttling over time by client id", subtitle), width="container", height=HEIGHT)


def throttle_note(data: dict[str, Any]) -> str:
    """What the page says where it draws no throttling chart."""
    rows = data["report"]["throttle_timeline"]["rows"]
    if not rows:
        return "no response carries a throttle time"
    responses = sum(r["responses"] for r in rows)
    return f"no response was throttled: all {responses:,} responses with a throttle field say 0 ms"


@_finished
def problems(data: dict[str, Any]) -> alt.TopLevelMixin | None:
    rows = data["report"]["problems"]
    if not rows:
        return None
    from kdissect.model.problems import CATALOG

    rows = [{**r, "meaning": CATALOG.get(r["code"], "")} for r in rows]
    return _chart(rows).mark_bar(color="#c0504d").encode(
        x=alt.X("exchanges:Q", axis=_count_axis("exchanges", max(r["exchanges"] for r in rows))),
        y=alt.Y("code:N", title="problem code", sort="-x"),
        tooltip=[alt.Tooltip("code:N", title="problem"), alt.Tooltip("meaning:N"), alt.Tooltip("exchanges:Q")],
    ).properties(title=_title("Problems on exchanges", "exchanges carrying each problem code"),
                 width="container", height=max(ROW_HEIGHT * 1.5 * len(rows), 60))


GROUP_LAG_SERIES = 12  # group/partition lines of the group lag chart (the most lagging)


@_finished
def group_lag_over_time(data: dict[str, Any]) -> alt.TopLevelMixin | None:
    """Lag in records per group and partition at each interval's end
    (the group_lag_over_time table), the most lagging series apart."""
    import datetime as dt

    rows = [r for r in data["stats"].get("group_lag_over_time") or [] if r.get("lag") is not None]
    if not rows:
        return None
    peaks: dict[str, int] = {}
    points = []
    for row in rows:
        series = visible(f"{row['group_id']} {row['topic']}-{row['partition']}")
        peaks[series] = max(peaks.get(series, 0), row["lag"])
        end = dt.datetime.fromtimestamp(row["window_end"] / 1e9, dt.timezone.utc)
        points.append({"series": series, "end": end.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "lag": row["lag"],
                       "lag_ms": row.get("lag_ms"), "committed_offset": row["committed_offset"],
                       "high_watermark": row["high_watermark"]})
    shown = set(heapq.nlargest(GROUP_LAG_SERIES, peaks, key=lambda name: (peaks[name], name)))
    points = [p for p in points if p["series"] in shown]
    subtitle = ["records between the group's committed offset and the partition's high watermark, "
                "as of each interval's end"]
    if len(shown) < len(peaks):
        subtitle.append(f"the {len(shown)} most lagging of {len(peaks)} group partitions")
    largest = max(p["lag"] for p in points)
    base = _chart(points).encode(
        x=alt.X("end:T", title="time (UTC)", scale=UTC, axis=alt.Axis(labelOverlap=True, format="%H:%M:%S")),
        y=alt.Y("lag:Q", axis=_count_axis("lag (records)", largest)),
        color=alt.Color("series:N", title="group, topic-partition"),
        tooltip=[alt.Tooltip("end:N", title="interval end (UTC)"), alt.Tooltip("series:N", title="group partition"),
                 alt.Tooltip("lag:Q", title="lag (records)"), alt.Tooltip("lag_ms:Q", title="lag (ms)"),
                 alt.Tooltip("committed_offset:Q", title="committed offset"),
                 alt.Tooltip("high_watermark:Q", title="high watermark")],
    )
    return (base.mark_line(strokeWidth=1.5) + base.mark_point(filled=True, size=30)).properties(
        title=_title("Group lag over time", subtitle), width="container", height=HEIGHT)


# id -> chart function, in the page's order (sections are in kdissect.report.page)
CHARTS: dict[str, Callable[[dict[str, Any]], alt.TopLevelMixin | None]] = {
    "statuses": statuses,
    "problems": problems,
    "traffic_over_time": traffic_over_time,
    "latency_over_time": latency_over_time,
    "latency_by_api": latency_by_api,
    "latency_by_client": latency_by_client,
    "latency_by_broker": latency_by_broker,
    "service_by_api": service_by_api,
    "waits": waits,
    "error_heatmap": error_heatmap,
    "errors_over_time": errors_over_time,
    "throttle_over_time": throttle_over_time,
    "group_lag_over_time": group_lag_over_time,
}


def notebook_charts() -> None:
    """Show charts in notebooks as Vega-Lite (JupyterLab draws it, with
    tooltips) and as a PNG beside it (drawn here by vl-convert), so they
    render wherever the notebook is read: nbconvert's HTML, GitHub, a
    viewer without JavaScript."""
    import base64

    import altair
    import vl_convert

    def render(spec: dict[str, Any], **_options: Any) -> dict[str, Any]:
        png = vl_convert.vegalite_to_png(spec, scale=1)
        title = spec.get("title")
        text = title.get("text") if isinstance(title, dict) else title
        return {"application/vnd.vegalite.v5+json": spec, "image/png": base64.b64encode(png).decode("ascii"),
                "text/plain": f"<chart: {text or 'untitled'}>"}

    altair.renderers.register("kdissect", render)
    altair.renderers.enable("kdissect")
