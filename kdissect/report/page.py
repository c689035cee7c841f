"""The report as one self-contained HTML page.

Everything is inline: the styles, the data (in each chart's Vega-Lite spec and
in the tables), and the JavaScript that draws the charts (Vega, Vega-Lite and
vega-embed, from `kdissect.report.bundle`). A Content-Security-Policy forbids
the page any request (nothing but inline scripts, styles and data: images),
so it opens the same on an air-gapped laptop as anywhere, and a browser
refuses, and reports, any request something in it might try.

The page's size does not grow with the number of exchanges: the charts are
drawn from summary entries (time series of at most a few hundred buckets, the
busiest APIs/clients apart), tables show at most `TABLE_ROWS` rows and the
lists of slowest and failed exchanges at most `LIST_LIMIT`; each says when it
leaves rows out.

For machines (and the tests), numbers carry their exact value: headline
figures as `data-stat="<path in the stats dict>"` with `data-value`, table
cells as `<td data-col="<column>" data-value="<JSON value>">` in
`<table data-table="<stats key>">`. A chart's figure gets
`data-rendered="true"` once drawn; script errors, failed charts and blocked
requests are written into `#kdissect-errors` (with `data-count`), and the
body gets `data-charts="done"` when every chart has settled.
"""

from __future__ import annotations

import html
import json
import math
from typing import Any, Callable

from kdissect.report.text import script_json, visible

TABLE_ROWS = 200

# stats entries that the page shows in a section of their own (any other is
# shown under "More tables", so new entries appear without a change here)
_KNOWN_STATS = {"exchanges", "statuses", "latency_by_api", "latency_by_client", "latency_by_broker",
                "top_level_errors", "errors_anywhere", "partition_errors", "throttle", "no_response",
                "accounting", "waits", "throttle_by_client",
                # errors split by normal flow (kdissect.conn.normal_flow), by client
                "paired_with_error_codes", "paired_normal_flow_only", "error_codes", "errors_by_client",
                # the topic, group and client tables and their flags (`_forensics`)
                "topics", "topic_lag", "end_to_end", "groups", "group_commits", "group_lag",
                "group_lag_over_time", "clients",
                "producers", "share_groups", "share_group_members", "transactions", "transaction_markers",
                "rebalance_storms", "member_rejoins", "metadata_storms", "unresolved_topic_ids",
                "topic_id_conflicts"}

# exchange fields in the slowest / failed lists, in order
# (key columns first: what happened to whom and how long it was served, then where to find it)
_LIST_COLUMNS = ["time", "api_name", "api_version", "client_id", "service_ms", "wait_reason", "wait_ms", "latency_ms",
                 "status", "errors", "throttle_time_ms", "problems", "broker", "request_bytes", "response_bytes",
                 "records", "capture", "stream", "client", "correlation_id", "request_frame", "response_frame"]

_CSP = ("default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; "
        "img-src data: blob:; font-src data:; connect-src 'none'; base-uri 'none'; form-action 'none'")

_STYLE = """
:root { --ink: #1f2328; --muted: #59636e; --line: #d1d9e0; --soft: #f6f8fa; --bad: #b42318; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink); }
main { max-width: 1180px; margin: 0 auto; padding: 1rem clamp(0.6rem, 3vw, 2rem) 3rem; }
h1 { font-size: 1.6rem; margin: 0.6rem 0 0.2rem; }
h2 { font-size: 1.25rem; margin: 2.2rem 0 0.6rem; padding-bottom: 0.25rem; border-bottom: 1px solid var(--line); }
h3 { font-size: 1.02rem; margin: 1.4rem 0 0.4rem; }
p, figcaption, caption { color: var(--muted); }
nav { display: flex; flex-wrap: wrap; gap: 0.3rem 1rem; margin: 0.6rem 0 1rem; font-size: 0.92rem; }
nav a { color: #0b57d0; text-decoration: none; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(10.5rem, 1fr)); gap: 0.6rem; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 0.6rem 0.8rem; background: var(--soft); }
.card .label { font-size: 0.8rem; color: var(--muted); text-transform: uppercase; letter-spacing: 0.03em; }
.card .value { font-size: 1.35rem; font-weight: 600; overflow-wrap: anywhere; }
.card .detail { font-size: 0.82rem; color: var(--muted); overflow-wrap: anywhere; }
figure { margin: 1rem 0 1.6rem; }
figure .vis { width: 100%; min-height: 60px; }
figure:not([data-rendered="true"]) .vis::before { content: "this chart has not been drawn (its script did not run)"; color: var(--bad); }
figure[data-rendered="false"] .vis::before { content: "this chart could not be drawn (see the errors at the top)"; }
.scroll { overflow-x: auto; margin: 0.4rem 0 1rem; }
table { border-collapse: collapse; font-size: 0.86rem; font-variant-numeric: tabular-nums; }
caption { text-align: left; font-size: 0.85rem; padding: 0.2rem 0; caption-side: bottom; }
th, td { unicode-bidi: isolate; border-bottom: 1px solid var(--line); padding: 0.25rem 0.6rem; text-align: left; vertical-align: top; }
th { background: var(--soft); position: sticky; top: 0; }
td.num { text-align: right; white-space: nowrap; }
td { white-space: nowrap; }
td[data-col="meaning"] { white-space: normal; min-width: 24ch; }
td.list { white-space: normal; min-width: 24ch; }
td.list span { white-space: nowrap; }
tr:target { background: #fff3bf; }
.selection { border: 2px solid #b54708; background: #fffaeb; border-radius: 8px; padding: 0.2rem 1rem 0.4rem; }
.selection h2 { margin: 0.5rem 0 0.3rem; border: none; color: #b54708; }
.selection p { color: var(--ink); }
.selection code.value { overflow-wrap: anywhere; }
#findings ol { padding-left: 1.3rem; }
#findings li { margin: 0.35rem 0; }
.empty { color: var(--muted); font-style: italic; }
#kdissect-errors { color: var(--bad); white-space: pre-wrap; border: 1px solid var(--bad); padding: 0.5rem; }
footer { margin-top: 3rem; font-size: 0.8rem; color: var(--muted); }
"""

# runs first: records script errors, failed promises, console errors and
# blocked requests into #kdissect-errors
_WATCH = """
(function () {
  var seen = [];
  function show() {
    var box = document.getElementById("kdissect-errors");
    if (!box) return;
    box.textContent = seen.join("\\n");
    box.setAttribute("data-count", String(seen.length));
    box.hidden = seen.length === 0;
  }
  window.kdissectRecord = function (kind, text) { seen.push(kind + ": " + text); show(); };
  window.addEventListener("error", function (e) {
    window.kdissectRecord("error", e.message || (e.target && (e.target.src || e.target.href)) || String(e));
  }, true);
  window.addEventListener("unhandledrejection", function (e) { window.kdissectRecord("unhandled rejection", String(e.reason)); });
  document.addEventListener("securitypolicyviolation", function (e) {
    window.kdissectRecord("blocked request", e.blockedURI + " (" + e.violatedDirective + ")");
  });
  var consoleError = console.error;
  console.error = function () {
    window.kdissectRecord("console.error", Array.prototype.slice.call(arguments).join(" "));
    return consoleError.apply(console, arguments);
  };
  document.addEventListener("DOMContentLoaded", show);
})();
"""

_DRAW = """
(function () {
  var figures = document.querySelectorAll("figure[data-chart]");
  var pending = figures.length;
  function settled() { pending -= 1; if (pending === 0) document.body.setAttribute("data-charts", "done"); }
  if (pending === 0) document.body.setAttribute("data-charts", "done");
  figures.forEach(function (figure) {
    var name = figure.getAttribute("data-chart");
    try {
      var spec = JSON.parse(figure.querySelector("script[type='application/json']").textContent);
      window.kdissectEmbed(figure.querySelector(".vis"), spec, {
        renderer: "svg", actions: {export: true, source: false, compiled: false, editor: false}
      }).then(function () {
        figure.setAttribute("data-rendered", "true"); settled();
      }).catch(function (problem) {
        figure.setAttribute("data-rendered", "false"); window.kdissectRecord("chart " + name, String(problem)); settled();
      });
    } catch (problem) {
      figure.setAttribute("data-rendered", "false"); window.kdissectRecord("chart " + name, String(problem)); settled();
    }
  });
})();
"""


# -- small builders ---------------------------------------------------------------

def _e(value: Any) -> str:
    """Text for the page: visible escapes, then HTML escaping."""
    return html.escape(visible(str(value)), quote=True)


def _json_attr(value: Any) -> str:
    # exact for machines: JSON (ASCII, its own escapes) inside an HTML attribute
    return html.escape(json.dumps(value, allow_nan=True, default=str), quote=True)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _text(value: Any) -> str:
    """A cell's text: floats with 3 decimals (as `kdissect stats` prints them)."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.3f}"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items())
    return str(value)


def _cell(column: str, value: Any, text: Callable[[str, Any], str] | None = None) -> str:
    if isinstance(value, list) and len(value) > 1:
        # a list wraps between its items, never inside one (a UUID stays on one line)
        items = [_text(v) if text is None else text(column, [v]) for v in value]
        separator = ", " if text is None else ",<wbr>"  # the text as `_text` / `text` give it
        shown_html = separator.join(f"<span>{_e(item)}</span>" for item in items)
        return f'<td data-col="{_e(column)}" data-value="{_json_attr(value)}" class="list">{shown_html}</td>'
    kind = ' class="num"' if _is_number(value) else ""
    shown = _text(value) if text is None else text(column, value)
    return f'<td data-col="{_e(column)}" data-value="{_json_attr(value)}"{kind}>{_e(shown)}</td>'


def table(name: str, rows: list[dict[str, Any]], columns: list[str] | None = None, limit: int = TABLE_ROWS,
          total: int | None = None, note: str = "", text: Callable[[str, Any], str] | None = None) -> str:
    """A table of dict rows (columns: the union of their keys, in order;
    `text(column, value)`: a cell's text, by default `_text(value)`)."""
    if not rows:
        return f'<p class="empty" data-table-empty="{_e(name)}">none</p>'
    if columns is None:
        columns = []
        for row in rows:
            columns += [key for key in row if key not in columns]
    total = len(rows) if total is None else total
    shown = rows[:limit]
    caption = []
    if total > len(shown):
        caption.append(f"showing {len(shown)} of {total} rows")
    if note:
        caption.append(note)
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    from kdissect.report.findings import row_id

    body = "".join(f'<tr id="{_e(row_id(name, index))}">' + "".join(_cell(c, row.get(c), text) for c in columns)
                   + "</tr>" for index, row in enumerate(shown))
    caption_html = f"<caption>{_e('; '.join(caption))}</caption>" if caption else ""
    return (f'<div class="scroll"><table data-table="{_e(name)}" data-rows="{len(shown)}" data-total="{total}">'
            f"{caption_html}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>")


def _mapping_table(name: str, mapping: dict[str, Any], key: str, value: str) -> str:
    return table(name, [{key: k, value: v} for k, v in mapping.items()])


def any_table(name: str, value: Any) -> str:
    """Any stats entry: a list of rows, a mapping, or one value."""
    if isinstance(value, list) and all(isinstance(r, dict) for r in value):
        return table(name, value)
    if isinstance(value, dict):
        if all(not isinstance(v, (dict, list)) for v in value.values()):
            return _mapping_table(name, value, "name", "value")
        return "".join(f"<h3>{_e(name)}: {_e(k)}</h3>" + any_table(f"{name}.{k}", v) for k, v in value.items())
    return f'<p data-stat="{_e(name)}" data-value="{_json_attr(value)}">{_e(_text(value))}</p>'


def _card(label: str, value: Any, stat: str | None, detail: str = "", exact: Any = None) -> str:
    """A headline figure; `exact`: its value for machines when `value` is a text for people."""
    exact = value if exact is None else exact
    attrs = f' data-stat="{_e(stat)}" data-value="{_json_attr(exact)}"' if stat else ""
    detail_html = f'<div class="detail">{_e(detail)}</div>' if detail else ""
    return (f'<div class="card"><div class="label">{_e(label)}</div>'
            f'<div class="value"{attrs}>{_e(_text(value))}</div>{detail_html}</div>')


def _figure(name: str, chart: Any, missing: str) -> str:
    if chart is None:
        return f'<p class="empty" data-chart-empty="{_e(name)}">{_e(missing)}</p>'
    spec = script_json(chart.to_dict())
    return (f'<figure data-chart="{_e(name)}"><div class="vis" role="img" aria-label="{_e(name)}"></div>'
            f'<script type="application/json">{spec}</script></figure>')


# -- sections ------------------------------------------------------------------------

def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.3f} s"
    minutes, rest = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    parts = [f"{days} d" if days else "", f"{hours} h" if hours else "", f"{minutes} min", f"{rest} s"]
    return " ".join(p for p in parts if p)


def _summary(data: dict[str, Any], chart: Callable[[str, str], str]) -> str:
    stats, report, source = data["stats"], data["report"], data["source"]
    accounting = stats.get("accounting", {})
    inputs = source.get("inputs", [])
    names = ", ".join(inputs[:8]) + (f" and {len(inputs) - 8} more" if len(inputs) > 8 else "")
    span = report.get("span")
    cards = [_card("captures", len(inputs), "captures", names)]
    if span:
        cards.append(_card("time span", _duration(span["seconds"]), "span.seconds",
                           f"{span['first'][:23]} to {span['last'][:23]} (UTC)", span["seconds"]))
    cards.append(_card("Kafka connections", accounting.get("kafka_connections"), "accounting.kafka_connections",
                       f"{accounting.get('connections', 0)} TCP connections in all"))
    cards.append(_card("exchanges", stats.get("exchanges"), "exchanges",
                       f"{report.get('answered', 0)} answered"))
    for status, count in stats.get("statuses", {}).items():
        if status == "ok":  # paired: "ok" must not read as "without error"
            with_errors = stats.get("paired_with_error_codes", 0)
            normal = stats.get("paired_normal_flow_only", 0)
            cards.append(_card("paired (status ok)", count, "statuses.ok",
                               f"{count - with_errors} without error codes, {with_errors} with error codes "
                               f"({normal} of them only normal-flow codes)"))
            cards.append(_card("with failure codes", with_errors - normal, "paired_failures",
                               "paired exchanges with an error code that is not the protocol's normal flow"))
            continue
        cards.append(_card(status.replace("_", " "), count, f"statuses.{status}"))
    return (f'<section id="summary"><h2>Summary</h2><div class="cards">{"".join(cards)}</div>'
            + chart("statuses", "no exchanges") + "</section>")


def _quality_rows(stats: dict[str, Any], report: dict[str, Any], tls: dict[str, Any] | None = None
                  ) -> list[dict[str, Any]]:
    a = stats.get("accounting", {})
    tls = tls or {}
    reasons = "; ".join(f"{n} {why}" for why, n in sorted((tls.get("reasons") or {}).items()))
    problems = {p["code"]: p["exchanges"] for p in report.get("problems", [])}
    statuses = stats.get("statuses", {})

    def p(*codes: str) -> int:
        return sum(problems.get(c, 0) for c in codes)

    rows = [
        ("bytes never captured (sequence gaps)", "gaps", a.get("gaps"), a.get("gap_bytes"),
         f"{p('response-lost-bytes')} exchanges lost response bytes while waiting; "
         f"{a.get('tail_gap_bytes', 0)} bytes acknowledged at a connection's end"),
        ("frames cut by loss or snaplen", "truncated_frames", a.get("truncated_frames"),
         a.get("incomplete_frame_bytes"),
         f"{statuses.get('truncated', 0)} truncated exchanges; {p('request-truncated', 'response-truncated')} "
         f"exchanges with truncated frames; {a.get('snaplen_bytes', 0)} bytes cut by snaplen"),
        ("resynchronisations after a loss", "resyncs", a.get("resyncs"), a.get("skipped_bytes"),
         "bytes skipped while hunting for the next frame boundary"),
        ("streams joined mid-way", "mid_stream_starts", a.get("mid_stream_starts"), a.get("mid_stream_bytes"),
         f"{statuses.get('orphan_response', 0)} responses without their request; "
         f"{a.get('before_start_bytes', 0)} bytes before the capture joined"),
        ("malformed frames", "malformed_frames", a.get("malformed_frames"), None,
         f"{statuses.get('malformed', 0)} malformed exchanges"),
        ("bodies decoded with an assumed version, bytes left over", "inexact_frames", a.get("inexact_frames"), None,
         f"{statuses.get('inexact', 0)} inexact exchanges (not exact: fields may be wrong)"),
        ("TLS connections not decrypted", "encrypted_connections", a.get("encrypted_connections"),
         tls.get("undecrypted_bytes", a.get("tls_bytes") if a.get("encrypted_connections") else 0),
         f"of {a.get('tls_connections', 0)} TLS connections; their exchanges are not in this report "
         f"(bytes: left encrypted; {a.get('tls_plaintext_bytes', 0)} bytes decrypted)"
         + (f"; why: {reasons}" if reasons else "")),
        ("requests without a response", "no_response", a.get("no_response"), None,
         f"{a.get('acks0_requests', 0)} requests expect none (acks=0)"),
        ("damaged capture files", "damaged_files", a.get("damaged_files"), a.get("unread_file_bytes"),
         "file bytes after the damage are not read"),
        ("undecodable packets", "undecodable_packets", a.get("undecodable_packets"), None,
         "damaged headers, unsupported link types, IP fragments"),
        ("retransmitted bytes", "retransmitted_bytes", None, a.get("retransmitted_bytes"),
         "copies of bytes already seen (no loss)"),
    ]
    return [{"what": what, "field": field, "count": count, "bytes": size, "cost": cost}
            for what, field, count, size, cost in rows]


def _quality(data: dict[str, Any], chart: Callable[[str, str], str]) -> str:
    from kdissect.model.problems import CATALOG

    stats, report = data["stats"], data["report"]
    rows = _quality_rows(stats, report, data.get("tls"))
    body = "".join(
        "<tr>" + f"<td>{_e(r['what'])}</td>"
        + (f'<td class="num" data-stat="accounting.{_e(r["field"])}" data-value="{_json_attr(r["count"])}">'
           f"{_e(_text(r['count']))}</td>" if r["count"] is not None else "<td>-</td>")
        + f'<td class="num" data-value="{_json_attr(r["bytes"])}">{_e(_text(r["bytes"]))}</td>'
        + f"<td>{_e(r['cost'])}</td></tr>" for r in rows)
    quality = (f'<div class="scroll"><table data-table="quality"><thead><tr><th>what</th><th>count</th>'
               f"<th>bytes</th><th>what it cost</th></tr></thead><tbody>{body}</tbody></table></div>")
    problems = [{"code": p["code"], "exchanges": p["exchanges"], "meaning": CATALOG.get(p["code"], "")}
                for p in report.get("problems", [])]
    return ('<section id="quality"><h2>Capture quality</h2>'
            "<p>What the capture did not hold or kdissect could not read, and what that cost. "
            "Every byte is accounted for (see the accounting at the end).</p>" + quality
            + chart("problems", "no exchange carries a problem")
            + table("problems", problems) + "</section>")


def _forensics(stats: dict[str, Any], chart: Callable[[str, str], str]) -> str:
    """The topic, group and client tables (as `kdissect topics`, `groups` and
    `clients` write them, every column; times as the terminal shows them)."""
    from kdissect.forensics.render import DISPLAY, TITLES, cell
    from kdissect.forensics.tables import STATS_TABLES, TABLE_COLUMNS

    def shown(column: str, value: Any) -> str:  # strings are lossless already: `_e` escapes the rest
        return cell(column, value, escape=str)

    parts = ['<section id="forensics"><h2>Topics, groups and clients</h2>'
             "<p>From the decoded requests and responses: the tables of <code>kdissect topics</code>, "
             "<code>groups</code> and <code>clients</code>, with every column.</p>"]
    for name, columns in TABLE_COLUMNS.items():
        if name in STATS_TABLES:  # shown with the stats' tables (errors by client: the Errors section)
            continue
        if name == "group_lag_over_time":
            parts.append(chart("group_lag_over_time", "no group committed an offset of a partition whose high "
                                                      "watermark a fetch showed"))
        # the terminal's columns first (its priority order), then the rest
        ordered = [c for c in DISPLAY.get(name, []) if any(c == n for n, _kind in columns)]
        ordered += [c for c, _kind in columns if c not in ordered]
        parts.append(f"<h3>{_e(TITLES[name].capitalize())}</h3>"
                     + table(name, stats.get(name) or [], ordered, text=shown))
    for name, title in (("rebalance_storms", "Rebalance storms (5+ generations within 5 minutes)"),
                        ("member_rejoins", "Members that left and rejoined"),
                        ("metadata_storms", "Metadata storms (60+ Metadata requests in a minute)")):
        parts.append(f"<h3>{_e(title)}</h3>" + table(name, stats.get(name) or [], text=shown))
    unnamed = stats.get("unresolved_topic_ids") or []
    parts.append(f'<p>Topic ids no response named: <span data-stat="unresolved_topic_ids" '
                 f'data-value="{_json_attr(unnamed)}">{_e(", ".join(unnamed) or "none")}</span>; '
                 f'ids named twice differently: <span data-stat="topic_id_conflicts" '
                 f'data-value="{_json_attr(stats.get("topic_id_conflicts") or 0)}">'
                 f'{_e(_text(stats.get("topic_id_conflicts") or 0))}</span>.</p>')
    return "".join(parts) + "</section>"


def _findings(data: dict[str, Any]) -> str:
    """What to look at first (kdissect.report.findings), each linked to its rows."""
    from kdissect.report.findings import findings

    found = findings(data)
    if not found:
        return ('<section id="findings"><h2>What to look at first</h2>'
                '<p class="empty" data-findings="0">nothing stands out: no slow service, error code, throttling, '
                "rebalance, growing lag or capture problem</p></section>")
    items = []
    for item in found:
        links = " ".join(f'<a href="#{_e(anchor)}">row {n}</a>' for n, anchor in enumerate(item["anchors"], 1))
        items.append(f'<li data-finding="{_e(item["kind"])}"><strong>{_e(item["title"])}</strong>: '
                     f'{_e(item["text"])} <span class="links">({_e(item["table"])}: {links})</span></li>')
    return (f'<section id="findings"><h2>What to look at first</h2><ol data-findings="{len(found)}">'
            + "".join(items) + "</ol></section>")


def _selection(data: dict[str, Any]) -> str:
    """What the page covers, at its top: the selection applied (-Y, --from/--to,
    --client ..., --top/--sort; each value through `_e`, the page's one
    escaping, since a filter may quote captured strings) and how many
    exchanges it kept of how many, so a filtered page is never read as the
    whole capture."""
    chosen = data.get("selection")
    if chosen is None:  # data made from exchanges alone (from_exchanges): nothing known of a selection
        return ""
    kept, total = chosen.get("exchanges"), chosen.get("of")
    attributes = f'data-kept="{_json_attr(kept)}" data-of="{_json_attr(total)}"'
    if not chosen.get("applied"):
        return (f'<p id="selection" data-selection="none" {attributes}>No selection: every exchange of the '
                f"captures ({_e(_text(kept))}) is in this page.</p>")
    items = "".join(f'<li data-option="{_e(item["option"])}">{_e(item["what"])} '
                    f'(<code>{_e(item["option"])}</code>): <code class="value">{_e(item["value"])}</code></li>'
                    for item in chosen["applied"])
    return (f'<section id="selection" class="selection" data-selection="applied" {attributes}>'
            f"<h2>A selection, not the whole capture</h2>"
            f"<p><strong>This page shows {_e(_text(kept))} of {_e(_text(total))} exchanges</strong>: "
            "the tables, charts, findings and lists are computed over these only; the capture quality "
            "and the accounting are the whole capture's.</p>"
            f"<ul>{items}</ul></section>")


def _list_section(section: str, title: str, entry: dict[str, Any], what: str, order: str) -> str:
    rows = entry["rows"]
    total = entry["total"]
    note = (f"the {len(rows)} {order} of {total} {what}" if total > len(rows) else f"all {total} {what}")
    note += f" (at most {entry['limit']} are listed)"
    columns = [c for c in _LIST_COLUMNS if any(c in r for r in rows)]
    return (f'<section id="{section}"><h2>{_e(title)}</h2>'
            f'<p data-list="{section}" data-total="{total}" data-shown="{len(rows)}">{_e(note)}</p>'
            + table(section, rows, columns) + "</section>")


def render(data: dict[str, Any], javascript: str | None = None, title: str = "Kafka capture report") -> str:
    """The page for the report's data (`javascript`: the chart bundle, by
    default kdissect.report.bundle's)."""
    from kdissect.report import charts

    if javascript is None:
        from kdissect.report.bundle import javascript as bundle

        javascript = bundle()

    def chart(name: str, missing: str) -> str:
        return _figure(name, charts.CHARTS[name](data), missing)

    stats, report, source = data["stats"], data["report"], data["source"]
    if source.get("kind") == "spark":
        origin = f"Spark output {source.get('path', '')}: tables of {len(source.get('inputs', []))} captures"
    else:
        origin = f"{len(source.get('inputs', []))} captures read by kdissect"
    sections = [
        _findings(data),
        _summary(data, chart),
        _quality(data, chart),
        '<section id="traffic"><h2>Traffic</h2>' + chart("traffic_over_time", "no exchanges") + "</section>",
        '<section id="latency"><h2>Latency</h2>'
        "<p>From the packet that completed the request to the one that completed the response (wire latency); "
        "service time is the latency without the waits the protocol asked for (long polls, group barriers, "
        "throttling).</p>"
        + chart("latency_over_time", "no answered exchange")
        + chart("latency_by_api", "no answered exchange")
        + chart("service_by_api", "no answered exchange")
        + chart("waits", "no wait the protocol asked for")
        + "<h3>Waits the protocol asked for</h3>" + table("waits", stats.get("waits", []))
        + table("latency_by_api", stats.get("latency_by_api", []))
        + chart("latency_by_client", "no answered exchange")
        + table("latency_by_client", stats.get("latency_by_client", []))
        + chart("latency_by_broker", "no answered exchange")
        + table("latency_by_broker", stats.get("latency_by_broker", [])) + "</section>",
        '<section id="errors"><h2>Errors</h2>'
        + chart("error_heatmap", "no error code in any response")
        + chart("errors_over_time", "no error code in any response")
        + "<p>normal_flow: a code the protocol uses to steer a healthy client (a new member's "
        "MEMBER_ID_REQUIRED, REBALANCE_IN_PROGRESS, a coordinator move ...), not a failure.</p>"
        + "<h3>Error codes</h3>" + table("errors_by_api", report.get("errors_by_api", []))
        + "<h3>Errors by client</h3>" + table("errors_by_client", stats.get("errors_by_client", []))
        + "<h3>Top-level errors</h3>" + _mapping_table("top_level_errors", stats.get("top_level_errors", {}),
                                                        "error", "exchanges")
        + "<h3>Errors anywhere in the response</h3>"
        + _mapping_table("errors_anywhere", stats.get("errors_anywhere", {}), "error", "exchanges")
        + "<h3>Per-partition errors</h3>" + table("partition_errors", stats.get("partition_errors", []))
        + "<h3>Requests without a response</h3>"
        + _mapping_table("no_response", stats.get("no_response", {}), "api", "requests") + "</section>",
        '<section id="throttling"><h2>Throttling</h2>' + chart("throttle_over_time", charts.throttle_note(data))
        + "<h3>Per client</h3>"
        "<p>Requests sent while the broker had muted the connection (KIP-219) did not respect the mute.</p>"
        + table("throttle_by_client", stats.get("throttle_by_client", []))
        + "<h3>Per broker</h3>" + table("throttle", stats.get("throttle", [])) + "</section>",
        _forensics(stats, chart),
        _list_section("slowest", "Slowest exchanges (service time)", report["slowest"],
                      "answered exchanges with a service time (the waits the protocol asked for set apart; "
                      "an exchange that was all wait has none)", "slowest"),
        _list_section("failed", "Failed exchanges", report["failed"],
                      "failed exchanges (a status other than ok, or an error code)", "first (by time)"),
    ]
    others = [key for key in stats if key not in _KNOWN_STATS]
    if others:
        sections.append('<section id="more"><h2>More tables</h2>'
                        + "".join(f"<h3>{_e(key)}</h3>" + any_table(key, stats[key]) for key in others)
                        + "</section>")
    sections.append('<section id="accounting"><h2>Accounting</h2>'
                    "<p>What the run did with every packet and byte (the counters of "
                    "<code>kdissect stats</code>).</p>"
                    + _mapping_table("accounting", stats.get("accounting", {}), "counter", "value") + "</section>")
    nav = "".join(f'<a href="#{s}">{_e(t)}</a>' for s, t in (
        ("findings", "Findings"), ("summary", "Summary"), ("quality", "Capture quality"), ("traffic", "Traffic"), ("latency", "Latency"),
        ("errors", "Errors"), ("throttling", "Throttling"),
        ("forensics", "Topics, groups, clients"), ("slowest", "Slowest"), ("failed", "Failed"),
        *((("more", "More tables"),) if others else ()), ("accounting", "Accounting")))
    version = _version()
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        f"<title>{_e(title)}</title><style>{_STYLE}</style><script>{_WATCH}</script></head>"
        f'<body data-charts="pending"><main>'
        f'<pre id="kdissect-errors" data-count="0" hidden></pre>'
        f"<h1>{_e(title)}</h1><p>{_e(origin)}. Times are UTC.</p>{_selection(data)}<nav>{nav}</nav>"
        + "".join(sections)
        + f"<footer>kdissect {_e(version)} report; charts drawn with Vega-Lite (inlined).</footer></main>"
        f"<script>{javascript}</script><script>{_DRAW}</script></body></html>\n"
    )


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("kdissect")
    except Exception:  # not installed (a checkout on sys.path)
        return "(development)"
