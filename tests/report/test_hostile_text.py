"""The report of a capture whose client ids are hostile, opened in headless Chromium.

The capture is a real one (consume_group_kafka.pcap, recorded from real
clients) with three client ids rewritten in place to strings of the same
byte length, so every frame, length and offset stays valid; tshark (the
independent oracle) reads the hostile ids back. The page must draw every
chart, run no script of the capture's, request nothing, and show the hostile
text literally, with its controls and bidi overrides as visible escapes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from kdissect.cli import main as cli_main
from kdissect.report.page import render
from kdissect.report.text import script_json, visible
from tests.support.chromium import chromium_path, visit
from tests.report.test_report import DONE, assert_clean_visit, assert_self_contained, numbers_of
from tests.support.paths import REPO

SOURCE = REPO / "captures" / "consume_group_kafka.pcap"
# original client id -> hostile text (padded with "_" to the original's byte length)
HOSTILE = {
    "lab-kafka-python-consumer": "<!--<script>\u202eevil",  # swallowed every chart's script before
    "lab-librdkafka-consumer": "</script><b>&amp;\u2028",
    "lab-kafka-python": "\x1b[2J\u202egpj",  # clears a terminal; reverses text
}
# how the page must show each (written out by hand, not by the code under test)
SHOWN = {
    "<!--<script>\u202eevil______": "<!--<script>\\u202eevil______",
    "</script><b>&amp;\u2028___": "</script><b>&amp;\\u2028___",
    "\x1b[2J\u202egpj______": "\\x1b[2J\\u202egpj______",
}


def padded(old: str, new: str) -> bytes:
    raw = new.encode()
    assert len(raw) <= len(old.encode())
    return raw + b"_" * (len(old.encode()) - len(raw))


def hostile_capture(path: Path) -> Path:
    """SOURCE with the client ids of HOSTILE rewritten (int16 length + bytes, as the request header has them)."""
    data = SOURCE.read_bytes()
    for old, new in HOSTILE.items():
        before = len(old).to_bytes(2, "big") + old.encode()
        assert before in data, old
        data = data.replace(before, len(old).to_bytes(2, "big") + padded(old, new))
    path.write_bytes(data)
    return path


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    if chromium_path() is None:
        pytest.fail("chromium is not installed: run tools/setup.sh (it installs Debian's chromium)")
    directory = tmp_path_factory.mktemp("hostile")
    capture = hostile_capture(directory / "hostile.pcap")
    out = directory / "report.html"
    assert cli_main(["report", str(capture), "-q", "-o", str(out)]) == 0
    result = visit(out.as_uri(), directory, done_js=DONE, width=1200, timeout=90)
    return capture, out, result


def test_tshark_reads_the_hostile_client_ids(hostile_run):
    capture, _out, _result = hostile_run
    fields = subprocess.run(["tshark", "-r", str(capture), "-Y", "kafka", "-T", "fields", "-e", "kafka.client_id"],
                            capture_output=True, text=True, timeout=120, check=True).stdout
    ids = Counter(line for line in fields.split("\n") if line)
    for hostile in ("<!--<script>\u202eevil______", "</script><b>&amp;\u2028___"):
        assert ids[hostile] > 0, ids
    assert ids["\x1b[2J\u202egpj______"] > 0, ids


@pytest.mark.slow
def test_every_chart_drawn_and_no_script_of_the_capture_ran(hostile_run):
    _capture, out, result = hostile_run
    page = numbers_of(result.dom)
    assert_clean_visit(result, out.as_uri(), page, set(page.figures))
    assert {"latency_by_client", "traffic_over_time"} <= set(page.figures)
    # nothing in this capture was throttled: one line, not a chart of its client ids at zero
    assert "throttle_over_time" in page.figures or 'data-chart-empty="throttle_over_time"' in result.dom
    assert_self_contained(out.read_text(encoding="utf-8"))
    # the page's own scripts only: the watcher, the bundle, the drawer and one JSON spec per chart
    assert result.dom.count("<script") == 3 + len(page.figures)
    assert "<b>" not in result.dom  # the capture's tag stayed text


@pytest.mark.slow
def test_hostile_text_shown_literally(hostile_run):
    _capture, _out, result = hostile_run
    page = numbers_of(result.dom)
    for table, column in (("latency_by_client", "client_id"), ("clients", "client_id")):
        shown = {row[column][0]: row[column][1] for row in page.tables[table]}
        for value, text in SHOWN.items():
            assert shown[value] == text, (table, shown)  # exact value for machines, escaped text for people
    # no bidi override, line separator or terminal control reaches the rendered page, charts included
    for char in ("\u202e", "\u2028", "\x1b"):
        assert char not in result.dom
    assert "\\u202eevil______" in result.dom.split('data-chart="latency_by_client"')[1]  # the chart's label


def test_script_json_escapes_what_could_end_the_element():
    value = {"a": "</script><!--<script>&amp;\u2028\u2029>", "b": [1.5, None]}
    text = script_json(value)
    for unsafe in ("<", ">", "&", "\u2028", "\u2029"):
        assert unsafe not in text
    assert json.loads(text) == value


def test_visible_escapes_controls_formats_and_separators():
    assert visible("plain text, é and 中") == "plain text, é and 中"
    # the one form of every text face (README: Reading untrusted captures)
    assert visible("a\x00b\rc\nd\x7f\x9b") == "a\\x00b\\rc\\nd\\x7f\\u009b"
    assert visible("\u202eabc\u2066\u200b\ufeff\u2028") == "\\u202eabc\\u2066\\u200b\\ufeff\\u2028"
    assert visible("\U000e0041") == "\\U000e0041"  # a tag character (Cf)


@pytest.mark.slow
def test_a_failing_chart_is_an_error_on_the_page(tmp_path):
    """A chart library that fails: every figure says so, the error box lists it, the page settles."""
    if chromium_path() is None:
        pytest.fail("chromium is not installed: run tools/setup.sh (it installs Debian's chromium)")
    from kdissect.report import from_captures

    data = from_captures([str(SOURCE)])
    failing = "window.kdissectEmbed = function () { return Promise.reject(new Error('cannot draw')); };"
    out = tmp_path / "failing.html"
    out.write_text(render(data, javascript=failing), encoding="utf-8")
    result = visit(out.as_uri(), tmp_path, done_js=DONE, width=1200, timeout=60)
    page = numbers_of(result.dom)
    assert result.done
    assert page.figures and all(attrs.get("data-rendered") == "false" for attrs in page.figures.values())
    assert page.errors.get("data-count") == str(len(page.figures))
    assert "hidden" not in page.errors
    assert "chart latency_by_client: Error: cannot draw" in result.dom


def test_a_selection_quoting_captured_text_is_shown_escaped(tmp_path):
    """The page says what was selected (-Y, --client) at its top, the
    filter's quoted client id and the --client value shown as visible
    escapes (no control, bidi override or tag of theirs reaches the page),
    and how many exchanges it kept: the rows `kdissect export` keeps with the
    same options, of every row."""
    capture = hostile_capture(tmp_path / "hostile.pcap")
    terminal_id, script_id = "\x1b[2J\u202egpj______", "</script><b>&amp;\u2028___"
    selection = ["-Y", f'client_id == "{terminal_id}" or client_id == "{script_id}"', "--client", script_id,
                 "--client", terminal_id]
    out = tmp_path / "report.html"
    assert cli_main(["report", str(capture), *selection, "-q", "-o", str(out)]) == 0
    kept = subprocess.run([sys.executable, "-m", "kdissect", "export", str(capture), "-q", *selection],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    every = subprocess.run([sys.executable, "-m", "kdissect", "export", str(capture), "-q"],
                           cwd=REPO, capture_output=True, text=True, timeout=300)
    assert kept.returncode == 0 and every.returncode == 0, kept.stderr
    n_kept, n_every = len(kept.stdout.splitlines()), len(every.stdout.splitlines())
    assert 0 < n_kept < n_every
    page = out.read_text(encoding="utf-8")
    head = page[:page.index("<nav>")]
    assert f'data-selection="applied" data-kept="{n_kept}" data-of="{n_every}"' in head
    assert f"This page shows {n_kept} of {n_every} exchanges" in head
    shown_filter = ('client_id == &quot;\\x1b[2J\\u202egpj______&quot; or client_id == '
                    '&quot;&lt;/script&gt;&lt;b&gt;&amp;amp;\\u2028___&quot;')
    assert f'<code class="value">{shown_filter}</code>' in head
    assert ('<code class="value">&lt;/script&gt;&lt;b&gt;&amp;amp;\\u2028___, \\x1b[2J\\u202egpj______</code>'
            in head)
    for char in ("\u202e", "\u2028", "\x1b"):
        assert char not in page
    assert "<b>" not in page
