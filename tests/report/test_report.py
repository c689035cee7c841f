"""`kdissect report` on the bundled captures, opened in headless Chromium.

The page must draw every chart without a script error and without any
request beyond its own file; its numbers must equal `kdissect stats --json`
for the same input (run as a separate process); its lists and time series
must equal what the `kdissect export` rows say (counted here in plain Python,
apart from the report's collector); and its size must not grow with the
number of exchanges.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import subprocess
import sys
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Callable

import pytest

from kdissect.cli import main as cli_main
from tests.support.chromium import chromium_path, visit
from tests.support.text_rules import controls_escaped
from tests.support.paths import REPO

CAPTURES = REPO / "captures"
PORTS = ["-p", "9092", "-p", "19092"]  # port_19092.pcap listens on 19092 (captures/README.md)
KEYLOGS = [arg for keys in sorted((CAPTURES / "tls").glob("*.keys")) for arg in ("--tls-keylog", str(keys))]
DONE = "document.body && document.body.getAttribute('data-charts') === 'done'"
# the vendored Vega is 6, which notes that Vega-Lite 5 (altair's) compiles to Vega 5 specs
KNOWN_WARNING = "The compiled spec uses Vega v5, but current version is v6"
ALL_CHARTS = {"statuses", "problems", "traffic_over_time", "latency_over_time", "latency_by_api",
              "latency_by_client", "latency_by_broker", "error_heatmap", "errors_over_time", "throttle_over_time",
              "service_by_api", "waits", "group_lag_over_time"}


def kdissect(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kdissect", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


class PageNumbers(HTMLParser):
    """The page's machine-readable numbers: data-stat elements, table cells,
    chart figures and the error box."""

    def __init__(self) -> None:
        super().__init__()
        self.stats: dict[str, Any] = {}
        self.tables: dict[str, list[dict[str, tuple[Any, str]]]] = {}
        self.figures: dict[str, dict[str, str]] = {}
        self.lists: dict[str, dict[str, str]] = {}
        self.errors: dict[str, str] = {}
        self.svg_in: Counter[str] = Counter()
        self._table: str | None = None
        self._row: dict[str, tuple[Any, str]] | None = None
        self._cell: tuple[str, Any] | None = None
        self._text: list[str] = []
        self._figure: str | None = None
        self._depth = 0

    def handle_starttag(self, tag: str, attrs_list: list) -> None:
        attrs = dict(attrs_list)
        if "data-stat" in attrs and "data-value" in attrs:
            self.stats[attrs["data-stat"]] = json.loads(attrs["data-value"])
        if tag == "table" and "data-table" in attrs:
            self._table = attrs["data-table"]
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self._row = {}
        elif tag == "td" and self._row is not None and "data-col" in attrs:
            self._cell = (attrs["data-col"], json.loads(attrs["data-value"]))
            self._text = []
        elif tag == "figure" and "data-chart" in attrs:
            self._figure = attrs["data-chart"]
            self.figures[self._figure] = attrs
        elif tag == "svg" and self._figure is not None and "marks" in (attrs.get("class") or ""):
            self.svg_in[self._figure] += 1
        elif tag == "pre" and attrs.get("id") == "kdissect-errors":
            self.errors = attrs
        if "data-list" in attrs:
            self.lists[attrs["data-list"]] = attrs

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None and self._row is not None:
            column, value = self._cell
            self._row[column] = (value, "".join(self._text))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._row and self._table is not None:
                self.tables[self._table].append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None
        elif tag == "figure":
            self._figure = None


def numbers_of(dom: str) -> PageNumbers:
    parser = PageNumbers()
    parser.feed(dom)
    return parser


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def cell_text(value: Any) -> str:
    """How the page prints a value (as `kdissect stats` does: floats with 3 decimals)."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.3f}"
    return controls_escaped(str(value))  # README: Reading untrusted captures


def forensic_cell_text(column: str, value: Any) -> str:
    """How the page prints a topic/group/client table cell: times as UTC clock
    times to the millisecond (with the date for the minute of a lag row),
    lists comma-separated."""
    if isinstance(value, int) and column in FORENSIC_TIMES:
        when = dt.datetime.fromtimestamp(value // 10**9, dt.timezone.utc)
        head = when.strftime("%Y-%m-%d %H:%M:%S" if column == "minute" else "%H:%M:%S")
        return f"{head}.{value % 10**9 // 10**6:03d}"
    if isinstance(value, list):
        return ",".join(controls_escaped(str(v)) for v in value) if value else "-"
    return cell_text(value)


PAGE_ROWS = 200
FORENSIC_TIMES = {"first_ts", "last_ts", "rebalance_start", "rebalance_end", "minute", "last_commit_ts",
                  "window_start", "window_end"}
FORENSIC_TABLES = ("topics", "topic_lag", "end_to_end", "groups", "group_commits", "clients", "producers",
                   "rebalance_storms", "member_rejoins", "metadata_storms")


def assert_table_equals(page: PageNumbers, name: str, rows: list[dict[str, Any]],
                        text: Callable[[str, Any], str] | None = None) -> None:
    if not rows:
        assert name not in page.tables, name  # an empty table is shown as "none"
        return
    got = page.tables[name]
    rows = rows[:PAGE_ROWS]  # the page shows at most this many rows of a table, and says so
    assert len(got) == len(rows), name
    for got_row, row in zip(got, rows):
        assert set(got_row) == set(row), (name, row)
        for column, value in row.items():
            shown, shown_text = got_row[column]
            assert same(shown, value), (name, column, shown, value)
            expected = cell_text(value) if text is None else text(column, value)
            assert shown_text == expected, (name, column, shown_text, value)


def assert_mapping_equals(page: PageNumbers, name: str, mapping: dict[str, Any]) -> None:
    got = {tuple(r.values())[0][0]: tuple(r.values())[1][0] for r in page.tables.get(name, [])}
    assert got == mapping, name


def assert_numbers_equal_stats(page: PageNumbers, stats: dict[str, Any], data_captures: int) -> None:
    """Every number the page shows from the stats dict equals `stats --json`'s."""
    assert page.stats["exchanges"] == stats["exchanges"]
    assert page.stats["captures"] == data_captures
    for status, count in stats["statuses"].items():
        assert page.stats[f"statuses.{status}"] == count
    accounting = stats["accounting"]
    for key, value in page.stats.items():
        if key.startswith("accounting."):
            assert value == accounting[key.removeprefix("accounting.")], key
    assert {"accounting.kafka_connections", "accounting.gaps", "accounting.truncated_frames", "accounting.resyncs",
            "accounting.encrypted_connections", "accounting.malformed_frames"} <= set(page.stats)
    for name in ("latency_by_api", "latency_by_client", "latency_by_broker", "throttle", "waits",
                 "throttle_by_client", "errors_by_client"):
        assert_table_equals(page, name, stats[name])
    # the summary card of paired exchanges with failure codes (not only the protocol's normal flow)
    assert page.stats["paired_failures"] == stats["paired_with_error_codes"] - stats["paired_normal_flow_only"]
    for name in ("top_level_errors", "errors_anywhere", "no_response", "accounting"):
        assert_mapping_equals(page, name, stats[name])
    for name in FORENSIC_TABLES:  # the topic, group and client tables, every column
        assert_table_equals(page, name, stats[name], forensic_cell_text)
    assert page.stats["unresolved_topic_ids"] == stats["unresolved_topic_ids"]
    assert page.stats["topic_id_conflicts"] == stats["topic_id_conflicts"]
    got = Counter(json.dumps({k: v[0] for k, v in row.items()}, sort_keys=True)
                  for row in page.tables.get("partition_errors", []))
    assert got == Counter(json.dumps(row, sort_keys=True) for row in stats["partition_errors"])


def assert_clean_visit(result: Any, page_url: str, page: PageNumbers, charts: set[str]) -> None:
    assert result.done, "the page never said its charts were done"
    assert result.exceptions == []
    assert [c for c in result.console if c[0] in ("error", "assert")] == []
    assert [c for c in result.console if c[0] == "warning" and KNOWN_WARNING not in c[1]] == []
    assert [entry for entry in result.log if entry[0] == "error"] == []
    assert page.errors.get("data-count") == "0", page.errors
    # no request but the page itself: nothing leaves the machine
    assert result.requests == [page_url]
    assert set(page.figures) == charts
    for name, attrs in page.figures.items():
        assert attrs.get("data-rendered") == "true", name
        assert page.svg_in[name] == 1, f"{name}: no drawn SVG"


def assert_self_contained(html_text: str) -> None:
    """No reference out of the file: no src/href but in-page anchors, a CSP that forbids requests."""
    page = HTMLParser()
    references: list[str] = []

    def start(tag: str, attrs: list) -> None:
        references.extend(value for name, value in attrs if name in ("src", "href", "action") and value)

    page.handle_starttag = start  # type: ignore[method-assign]
    page.feed(html_text)
    assert all(ref.startswith("#") for ref in references), references
    assert "Content-Security-Policy" in html_text and "default-src 'none'" in html_text
    assert "connect-src 'none'" in html_text


# -- the bundled captures ------------------------------------------------------------

@pytest.fixture(scope="module")
def capture_run(tmp_path_factory):
    """The report of every bundled capture (the TLS ones with their key logs),
    `stats --json` and `export` of the same input, and the page in Chromium."""
    if chromium_path() is None:
        pytest.fail("chromium is not installed: run tools/setup.sh (it installs Debian's chromium)")
    directory = tmp_path_factory.mktemp("report")
    out = directory / "report.html"
    assert cli_main(["report", str(CAPTURES), *PORTS, *KEYLOGS, "-q", "-o", str(out)]) == 0
    stats = kdissect("stats", str(CAPTURES), *PORTS, *KEYLOGS, "--json")
    assert stats.returncode == 0, stats.stderr
    export = kdissect("export", str(CAPTURES), *PORTS, *KEYLOGS, "-q")
    assert export.returncode == 0, export.stderr
    rows = [json.loads(line) for line in export.stdout.splitlines()]
    result = visit(out.as_uri(), directory, done_js=DONE, width=1200, timeout=90)
    return out, json.loads(stats.stdout), rows, result


@pytest.mark.slow
def test_page_draws_every_chart_offline(capture_run):
    out, _stats, _rows, result = capture_run
    page = numbers_of(result.dom)
    assert_clean_visit(result, out.as_uri(), page, ALL_CHARTS)
    assert_self_contained(out.read_text(encoding="utf-8"))


@pytest.mark.slow
def test_numbers_equal_stats_json(capture_run):
    _out, stats, rows, result = capture_run
    page = numbers_of(result.dom)
    captures = len(list(CAPTURES.rglob("*.pcap")))
    assert stats["exchanges"] == len(rows) > 600
    assert stats["accounting"]["tls_plaintext_bytes"] > 0  # the key logs were used
    assert_numbers_equal_stats(page, stats, captures)


def _failed(row: dict[str, Any]) -> bool:
    return row["status"] != "ok" or bool(row["error_code"]) or bool(row["error_codes"])


@pytest.mark.slow
def test_lists_and_series_equal_export_rows(capture_run):
    """The slowest and failed lists, the error table and the time series,
    against the exchange rows of `kdissect export` counted in plain Python."""
    _out, _stats, rows, result = capture_run
    page = numbers_of(result.dom)
    first = {id(r): min(t for t in (r["request_ts"], r["response_ts"]) if t is not None) for r in rows}

    # slowest: by service time (waits the protocol asked for set apart), with the wait beside it
    answered = [r for r in rows if r["service_ms"] is not None]
    slowest = sorted(answered, key=lambda r: (-r["service_ms"], first[id(r)], r["stream"], r["correlation_id"]))[:50]
    shown = page.tables["slowest"]
    assert [(r["capture"][0], r["stream"][0], r["correlation_id"][0]) for r in shown] == \
        [(r["capture"], r["stream"], r["correlation_id"]) for r in slowest]
    assert [r["service_ms"][0] for r in shown] == [r["service_ms"] for r in slowest]
    assert [r["latency_ms"][0] for r in shown] == [r["latency_ms"] for r in slowest]
    assert [r["wait_reason"][0] for r in shown] == [r["wait_reason"] for r in slowest]
    assert page.lists["slowest"]["data-total"] == str(len(answered))
    assert page.lists["slowest"]["data-shown"] == "50"

    failed = [r for r in rows if _failed(r)]
    earliest = sorted(failed, key=lambda r: (first[id(r)], r["stream"], r["correlation_id"]))[:50]
    assert page.lists["failed"]["data-total"] == str(len(failed))
    assert [(r["capture"][0], r["stream"][0], r["correlation_id"][0], r["status"][0]) for r in page.tables["failed"]] \
        == [(r["capture"], r["stream"], r["correlation_id"], r["status"]) for r in earliest]

    # errors per API and code: exchanges carrying the code anywhere, and as the top-level error
    anywhere = Counter((r["api_name"] or "unknown", c) for r in rows for c in r["error_codes"] if c)
    top = Counter((r["api_name"] or "unknown", r["error_code"]) for r in rows if r["error_code"])
    got = {(r["api"][0], r["error_code"][0]): (r["anywhere"][0], r["top_level"][0])
           for r in page.tables["errors_by_api"]}
    assert got == {key: (anywhere[key], top[key]) for key in set(anywhere) | set(top)}

    # the traffic series adds up to every exchange, bucket by bucket
    spec = _spec(result.dom, "traffic_over_time")
    width = _bucket_seconds(spec)
    counted = Counter()
    for r in rows:
        seconds = math.floor(first[id(r)])
        counted[seconds // width * width] += 1
    drawn = Counter()
    for item in spec_values(spec):
        start = dt.datetime.strptime(item["start"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
        drawn[int(start.timestamp())] += item["exchanges"]
    assert drawn == counted


def _spec(dom: str, name: str) -> dict[str, Any]:
    marker = f'data-chart="{name}"'
    start = dom.index(marker)
    begin = dom.index('<script type="application/json">', start) + len('<script type="application/json">')
    end = dom.index("</script>", begin)
    return json.loads(dom[begin:end])


def spec_values(spec: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "values" in node and isinstance(node["values"], list):
                found.extend(node["values"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(spec.get("data", {}))
    walk(spec.get("datasets", {}))
    return found


def _bucket_seconds(spec: dict[str, Any]) -> int:
    item = spec_values(spec)[0]
    parse = lambda text: dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    return int((parse(item["end"]) - parse(item["start"])).total_seconds())


@pytest.mark.slow
def test_narrow_window_screenshot(capture_run, tmp_path):
    """At phone width the page still draws every chart and keeps within the window."""
    out, _stats, _rows, _result = capture_run
    narrow = visit(out.as_uri(), tmp_path, done_js=DONE, width=400, height=800, timeout=90, screenshot=True)
    page = numbers_of(narrow.dom)
    assert_clean_visit(narrow, out.as_uri(), page, ALL_CHARTS)
    assert narrow.screenshot and narrow.screenshot.startswith(b"\x89PNG")
    # nothing but the scrolling tables is wider than the window
    wide = visit(out.as_uri(), tmp_path / "again", width=400, height=800, timeout=90,
                 done_js=DONE + " && (window.__wide = Array.from(document.querySelectorAll('main > *, section > *'))"
                 ".filter(e => !e.classList.contains('scroll') && e.getBoundingClientRect().width > 400)"
                 ".map(e => e.tagName + '.' + e.className)).length >= 0 "
                 "&& (document.body.setAttribute('data-wide', JSON.stringify(window.__wide)), true)")
    assert 'data-wide="[]"' in wide.dom


# -- page size ----------------------------------------------------------------------------

def _repeated(source: Path, copies: int, directory: Path) -> list[Path]:
    """The capture `copies` times, each copy an hour later (editcap -t), as rotated files."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(copies):
        path = directory / f"copy{index:03d}.pcap"
        subprocess.run(["editcap", "-t", str(3600 * index), str(source), str(path)], check=True, capture_output=True)
        paths.append(path)
    return paths


@pytest.mark.slow
def test_page_size_does_not_grow_with_exchanges(tmp_path):
    from kdissect.report import from_captures, write_page

    source = CAPTURES / "produce_pipelined.pcap"
    small = from_captures([source])
    many = _repeated(source, 40, tmp_path / "copies")
    large = from_captures(many)
    assert large["stats"]["exchanges"] == 40 * small["stats"]["exchanges"] > 6000
    small_size = write_page(small, tmp_path / "small.html")
    large_size = write_page(large, tmp_path / "large.html")
    # the same order of size: only the bounded parts (buckets, capped lists) differ
    assert large_size < small_size * 1.15, (small_size, large_size)
    assert large["report"]["slowest"]["total"] == 40 * small["report"]["slowest"]["total"]
    assert len(large["report"]["slowest"]["rows"]) == 50
    assert len({row["time"] for row in large["report"]["timeline"]["rows"]}) <= 240
    assert large_size < 2_000_000


# -- command line -------------------------------------------------------------------------

def test_bad_inputs_are_one_line_errors(tmp_path):
    outdir = tmp_path / "spark-out"
    (outdir / "exchanges").mkdir(parents=True)
    (outdir / "manifest.json").write_text("{}")
    (outdir / "_SUCCESS").write_bytes(b"")  # a finished job's (the commit protocol's last write)
    unfinished = tmp_path / "spark-unfinished"
    (unfinished / "exchanges").mkdir(parents=True)
    (unfinished / "manifest.json").write_text("{}")
    cases = [
        (["report", str(CAPTURES / "admin.pcap")], "Missing option '-o'"),
        (["report", str(outdir), str(CAPTURES / "admin.pcap"), "-o", str(tmp_path / "x.html")],
         "give it alone"),
        (["report", str(outdir), "-p", "9093", "-o", str(tmp_path / "x.html")], "--port applies to captures"),
        (["report", str(CAPTURES / "README.md"), "-o", str(tmp_path / "x.html")], "error"),
        (["report", str(outdir), "-o", str(tmp_path / "x.html")], "is missing"),
        (["report", str(unfinished), "-o", str(tmp_path / "x.html")], "did not finish (no _SUCCESS marker)"),
        (["report", str(CAPTURES / "admin.pcap"), "-o", str(tmp_path / "no" / "such" / "x.html")], "cannot write"),
    ]
    for args, expected in cases:
        done = kdissect(*args)
        assert done.returncode == 2, (args, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert expected in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr
        assert len([line for line in lines if "error" in line.lower()]) == 1, done.stderr


def test_readme_screenshot_is_small_and_present():
    shot = REPO / "docs" / "report.png"
    assert shot.is_file() and shot.read_bytes().startswith(b"\x89PNG")
    assert shot.stat().st_size < 500_000
    assert "docs/report.png" in (REPO / "README.md").read_text(encoding="utf-8")


def test_a_selected_report_shows_the_selected_stats(tmp_path):
    """`report -Y ...` shows what `stats --json -Y ...` prints: the tables of
    the kept exchanges, the whole capture's accounting (the page's own HTML,
    read without a browser: its tables are written by the server side)."""
    source = CAPTURES / "consume_group_kafka.pcap"
    selection = ["-Y", "service_ms > 3 or error_codes", "--from", "+0.5s"]
    out = tmp_path / "selected.html"
    assert cli_main(["report", str(source), *selection, "-q", "-o", str(out)]) == 0
    stats = kdissect("stats", str(source), *selection, "--json")
    assert stats.returncode == 0, stats.stderr
    expected = json.loads(stats.stdout)
    everything = json.loads(kdissect("stats", str(source), "--json").stdout)
    assert 0 < expected["exchanges"] < everything["exchanges"]
    assert expected["accounting"] == everything["accounting"]
    page = numbers_of(out.read_text(encoding="utf-8"))
    assert_numbers_equal_stats(page, expected, 1)


def test_the_page_says_what_it_selected(tmp_path):
    """At its top, before the findings: what was selected (a display filter,
    a time window, --top/--sort) and how many exchanges of how many, the
    counts those of `kdissect export` with the same options (another
    process), the --from time tshark's first packet plus the offset; a page
    of every exchange says that instead."""
    from tests.support.pcaps import epoch_ns, tshark_output

    source = CAPTURES / "consume_group_kafka.pcap"
    every = kdissect("export", str(source), "-q")
    assert every.returncode == 0, every.stderr
    n_every = len(every.stdout.splitlines())
    whole = tmp_path / "whole.html"
    assert cli_main(["report", str(source), "-q", "-o", str(whole)]) == 0
    page = whole.read_text(encoding="utf-8")
    assert (f'<p id="selection" data-selection="none" data-kept="{n_every}" data-of="{n_every}">No selection: '
            f"every exchange of the captures ({n_every}) is in this page.</p><nav>") in page

    selection = ["-Y", 'api_name != "Metadata"', "--from", "+0.5s", "--top", "3", "--sort", "service_ms"]
    out = tmp_path / "selected.html"
    assert cli_main(["report", str(source), *selection, "-q", "-o", str(out)]) == 0
    kept = kdissect("export", str(source), "-q", *selection)
    assert kept.returncode == 0, kept.stderr
    rows = [json.loads(line) for line in kept.stdout.splitlines()]
    assert len(rows) == 3
    page = out.read_text(encoding="utf-8")
    assert page.index('id="selection"') < page.index("<nav>") < page.index('id="findings"')
    head = page[page.index('<section id="selection"'):page.index("<nav>")]
    assert f'data-kept="3" data-of="{n_every}"' in head and f"This page shows 3 of {n_every} exchanges" in head
    first = epoch_ns(tshark_output(source, ["-c", "1", "-T", "fields", "-e", "frame.time_epoch"]).strip())
    start = first + 500_000_000
    when = dt.datetime.fromtimestamp(start // 10**9, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    items = re.findall(r'<li data-option="([^"]+)">(.*?)</li>', head)
    assert [option for option, _text in items] == ["-Y", "--from", "--sort", "--top"]
    texts = dict(items)
    assert texts["-Y"].endswith('<code class="value">api_name != &quot;Metadata&quot;</code>')
    assert texts["--from"].endswith(f'<code class="value">{when}.{start % 10**9:09d}Z</code>')
    assert texts["--top"].endswith('<code class="value">3 exchanges by largest service_ms</code>')
    # the page's exchanges are the export's three: the slowest list holds them all
    listed = numbers_of(page).tables["slowest"]
    assert sorted((r["stream"][0], r["correlation_id"][0]) for r in listed) == \
        sorted((r["stream"], r["correlation_id"]) for r in rows)


# -- what the charts draw (read from the SVG Chromium rendered) -------------------------

class ChartText(HTMLParser):
    """Per chart: the visible axis labels per axis ("X-axis titled ..."), the
    legend labels and the legend symbols' shapes (`d` path of each)."""

    def __init__(self) -> None:
        super().__init__()
        self.axes: dict[str, dict[str, list[str]]] = {}
        self.legend_labels: dict[str, list[str]] = {}
        self._figure: str | None = None
        self._axis: str | None = None
        self._in: str | None = None  # "axis" or "legend" while inside a label group
        self._depth = 0
        self._text: list[str] | None = None

    def handle_starttag(self, tag: str, attrs_list: list) -> None:
        attrs = dict(attrs_list)
        if tag == "figure" and "data-chart" in attrs:
            self._figure = attrs["data-chart"]
            self.axes[self._figure] = {}
            self.legend_labels[self._figure] = []
        if self._figure is None:
            return
        classes = attrs.get("class") or ""
        if tag == "g" and "role-axis" in classes.split() and attrs.get("aria-label"):
            self._axis = attrs["aria-label"]
            self.axes[self._figure].setdefault(self._axis, [])
        if tag == "g" and ("role-axis-label" in classes or "role-legend-label" in classes):
            self._in = "axis" if "role-axis-label" in classes else "legend"
            self._depth = 0
        if tag == "g" and self._in is not None:
            self._depth += 1
        if tag == "text" and self._in is not None and attrs.get("opacity", "1") != "0":
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._text is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "text" and self._text is not None and self._figure is not None:
            text = "".join(self._text)
            if self._in == "axis" and self._axis is not None:
                self.axes[self._figure][self._axis].append(text)
            elif self._in == "legend":
                self.legend_labels[self._figure].append(text)
            self._text = None
        elif tag == "g" and self._in is not None:
            self._depth -= 1
            if self._depth == 0:
                self._in = None
        elif tag == "figure":
            self._figure = self._axis = None


def chart_text(dom: str) -> ChartText:
    parser = ChartText()
    parser.feed(dom)
    return parser


def _labels(text: ChartText, chart: str, axis_start: str) -> list[str]:
    found = [labels for name, labels in text.axes[chart].items() if name.startswith(axis_start)]
    assert found, (chart, list(text.axes[chart]))
    return [label for labels in found for label in labels]


@pytest.mark.slow
def test_charts_draw_readable_axes(capture_run):
    """As Chromium drew them: exchanges over time start at zero (stacked bars,
    no negative ticks), count axes and legends have integer ticks, time axes
    24-hour UTC labels of one format (no `.500`, no AM/PM)."""
    _out, _stats, _rows, result = capture_run
    text = chart_text(result.dom)
    counts = _labels(text, "traffic_over_time", "Y-axis")
    assert counts and all(re.fullmatch(r"[\d,]+", label) for label in counts), counts
    assert counts[0] == "0"
    for chart in ("statuses", "problems"):
        ticks = _labels(text, chart, "X-axis")
        assert all(re.fullmatch(r"[\d,]+", label) for label in ticks), (chart, ticks)
    for chart in ("error_heatmap", "errors_over_time"):
        numbers = [label for label in text.legend_labels[chart] if re.fullmatch(r"[\d.,]+", label)]
        assert numbers and all(re.fullmatch(r"[\d,]+", label) for label in numbers), (chart, numbers)
    assert_time_labels(result.dom)


def assert_time_labels(dom: str) -> None:
    """Every time axis drawn: 24-hour UTC labels, all of one format."""
    text = chart_text(dom)
    for chart in ("traffic_over_time", "latency_over_time", "errors_over_time", "throttle_over_time"):
        if chart not in text.axes:
            continue
        times = _labels(text, chart, "X-axis")
        assert times, chart
        kinds = {re.sub(r"\d", "9", label) for label in times}
        assert len(kinds) == 1 and kinds <= {"99:99:99", "99:99", "99-99 99:99"}, (chart, times)


@pytest.mark.slow
def test_each_legend_is_one_legend_of_the_marks(capture_run):
    """Charts that tell series apart by colour and shape show one legend
    (each entry once), not a colour legend of circles beside a shape legend."""
    _out, _stats, _rows, result = capture_run
    text = chart_text(result.dom)
    for chart, entries in (("latency_by_api", ["p50", "p90", "p99", "max"]),
                           ("service_by_api", ["wire p50", "wire p99", "service p50", "service p99"])):
        labels = [label for label in text.legend_labels[chart] if label in entries]
        assert sorted(labels) == sorted(entries), (chart, text.legend_labels[chart])


@pytest.mark.slow
def test_findings_come_first_and_link_to_their_rows(capture_run):
    _out, stats, _rows, result = capture_run
    dom = result.dom
    assert dom.index('id="findings"') < dom.index('id="summary"')
    found = re.findall(r'<li data-finding="([a-z_]+)">(.*?)</li>', dom)
    kinds = [kind for kind, _body in found]
    order = ["slowest_service", "failures_by_client", "throttled_clients", "rebalances", "growing_lag",
             "capture_problems"]
    assert kinds == [k for k in order if k in kinds] and "slowest_service" in kinds
    ids = set(re.findall(r'<tr id="([^"]+)"', dom))
    for _kind, body in found:
        anchors = re.findall(r'href="#([^"]+)"', body)
        assert anchors and all(anchor in ids for anchor in anchors), body
    # the slowest service is the API with the highest service p99 (stats --json), not the highest wire latency
    timed = [r for r in stats["latency_by_api"] if r.get("service_count")]
    slowest = max(timed, key=lambda r: r["service_p99"])
    first = dict(found)["slowest_service"]
    assert f"{slowest['api']} v{slowest['version']}: p99" in first.split(";")[0]
    throttled = [r for r in stats["throttle_by_client"] if r["throttled"]]
    assert ("throttled_clients" in kinds) == bool(throttled)


def test_no_throttling_is_one_line_not_a_flat_chart(tmp_path):
    """forensics_kafka.pcap: responses carry throttle fields, none above 0 ms
    (stats --json, another process): one line with their number, no chart."""
    from kdissect.report import from_captures, write_page

    capture = CAPTURES / "forensics_kafka.pcap"
    stats = json.loads(kdissect("stats", str(capture), "--json").stdout)
    responses = sum(row["responses"] for row in stats["throttle"])
    assert responses > 0 and sum(row["throttled"] for row in stats["throttle"]) == 0
    out = tmp_path / "report.html"
    write_page(from_captures([capture]), out)
    page = out.read_text(encoding="utf-8")
    assert 'data-chart="throttle_over_time"' not in page
    assert (f'<p class="empty" data-chart-empty="throttle_over_time">no response was throttled: all '
            f'{responses:,} responses with a throttle field say 0 ms</p>') in page
