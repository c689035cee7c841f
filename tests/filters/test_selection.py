"""Display filters, time windows, sorting and the incident-workflow lines of
`show` and `stats`, run as a user runs them (`python -m kdissect ...`) on
bundled captures. Expected values come from the unfiltered export checked by
hand-written Python predicates, from tshark (frame numbers, times) and from
the capture manifests; never from the filtered output under test."""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from tests.support.pcaps import epoch_ns, tshark_output
from tests.support.tshark import kafka_pdus
from tests.support.paths import REPO

CAPTURES = REPO / "captures"
GROUP = CAPTURES / "consume_group_kafka.pcap"  # a rebalance, MEMBER_ID_REQUIRED, per-partition errors


def kdissect(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kdissect", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


def rows_of(*args: str) -> list[dict]:
    run = kdissect("export", *args, "-q")
    assert run.returncode == 0, run.stderr
    return [json.loads(line, parse_float=Decimal) for line in run.stdout.splitlines()]


@pytest.fixture(scope="module")
def all_rows() -> list[dict]:
    return rows_of(str(GROUP))


def _ns(seconds: Decimal | None) -> int | None:
    return None if seconds is None else int(seconds * 1_000_000_000)


def _iso_ns(text: str) -> int:
    when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return int(when.timestamp()) * 1_000_000_000 + when.microsecond * 1000


# (filter, the same question asked of a row in plain Python)
CASES = [
    ('api_name == "Produce" and service_ms > 5',
     lambda r: r["api_name"] == "Produce" and r["service_ms"] is not None and r["service_ms"] > 5),
    ('error_codes contains "MEMBER_ID_REQUIRED"', lambda r: 79 in r["error_codes"]),  # 79: Kafka's code
    ("not (wait_reason is null) or status in {no_response, truncated}",
     lambda r: r["wait_reason"] is not None or r["status"] in ("no_response", "truncated")),
    ('api_key == "Fetch" || client_id contains "consumer"',
     lambda r: r["api_key"] == 1 or "consumer" in (r["client_id"] or "")),
    ("error_code != 0", lambda r: r["error_code"] is not None and r["error_code"] != 0),
    ('latency_ms >= 10 && !(api_name in {"Metadata", "ApiVersions"})',
     lambda r: r["latency_ms"] is not None and r["latency_ms"] >= 10
     and r["api_name"] not in ("Metadata", "ApiVersions")),
    ('request_ts >= "2026-11-23T08:13:04.5Z" and response_frame < 250',
     lambda r: r["request_ts"] is not None and _ns(r["request_ts"]) >= _iso_ns("2026-11-23T08:13:04.500000Z")
     and r["response_frame"] is not None and r["response_frame"] < 250),
    ("error_codes", lambda r: bool(r["error_codes"])),
    ("wait_ms == null and api_version <= 3", lambda r: r["wait_ms"] is None and r["api_version"] <= 3),
]


@pytest.mark.parametrize("expression, wanted", CASES, ids=[c[0] for c in CASES])
def test_filter_keeps_the_rows_python_picks(all_rows, expression, wanted) -> None:
    expected = [r for r in all_rows if wanted(r)]
    assert 0 < len(expected) < len(all_rows), "a case that keeps all or nothing tests little"
    assert rows_of(str(GROUP), "-Y", expression) == expected


@pytest.mark.parametrize("args, message", [
    (["-Y", "servce_ms > 5"], "filter: unknown column 'servce_ms' (did you mean service_ms?)"),
    (["-Y", 'api_name == "Metdata"'], "unknown API 'Metdata' (did you mean Metadata?)"),
    (["-Y", 'error_code == "NOT_COORDINATR"'], "(did you mean NOT_COORDINATOR?)"),
    (["-Y", "service_ms >"], "ends too early"),
    (["-Y", "(service_ms > 5"], "missing ')'"),
    (["-Y", 'client_id > "a"'], "holds text"),
    (["-Y", "service_ms = 5"], "cannot read"),
    (["--from", "yesterday"], "is not a time"),
    (["--from", "+2s", "--to", "+1s"], "--to must be later than --from"),
])
@pytest.mark.parametrize("verb", ["show", "export", "stats", "records", "topics", "groups", "clients", "report"])
def test_a_bad_selection_is_one_line_and_exit_2_in_every_verb(tmp_path, verb, args, message) -> None:
    extra = ["-o", str(tmp_path / "out.html")] if verb == "report" else []
    run = kdissect(verb, str(GROUP), *extra, *args)
    assert run.returncode == 2, run.stderr
    assert run.stderr.splitlines() == [run.stderr.splitlines()[0]] and message in run.stderr, run.stderr
    assert run.stderr.startswith("kdissect: error: ") and run.stdout == ""
    assert not (tmp_path / "out.html").exists()


def test_show_api_typo_is_an_error_with_a_suggestion() -> None:
    run = kdissect("show", str(GROUP), "--api", "Metdata")
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr == "kdissect: error: unknown API 'Metdata' (did you mean Metadata?)\n"
    run = kdissect("show", str(GROUP), "--sort", "servce_ms")
    assert run.returncode == 2 and "did you mean service_ms?" in run.stderr


def _latency(values: list[float]) -> dict:
    values = sorted(values)
    return {"count": len(values), "p50": float(np.percentile(values, 50)), "p99": float(np.percentile(values, 99)),
            "max": values[-1]}


@pytest.mark.parametrize("selection", [
    ["-Y", 'service_ms > 3 or error_codes'],
    ["--client", "lab-librdkafka-consumer", "--client", "lab-kafka-python"],
    ["--from", "+0.9s", "--to", "+1.6s", "--broker", "127.0.0.1"],
])
def test_filtered_stats_are_the_stats_of_the_filtered_rows(all_rows, selection) -> None:
    run = kdissect("stats", "--json", str(GROUP), *selection)
    assert run.returncode == 0, run.stderr
    stats = json.loads(run.stdout)
    rows = rows_of(str(GROUP), *selection)
    assert 0 < len(rows) < len(all_rows)
    # latency per API, from the rows with numpy's percentiles
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["latency_ms"] is not None and r["api_key"] is not None:
            groups.setdefault((r["api_name"], r["api_version"]), []).append(r)
    got = {(g["api"], g["version"]): g for g in stats["latency_by_api"]}
    assert set(got) == set(groups)
    for key, members in groups.items():
        wire = _latency([float(r["latency_ms"]) for r in members])
        for name in ("count", "p50", "p99", "max"):
            assert got[key][name] == pytest.approx(wire[name], rel=1e-9), (key, name)
        service = [float(r["service_ms"]) for r in members if r["service_ms"] is not None]
        assert got[key]["service_count"] == len(service)
        assert got[key]["waits"] == sum(1 for r in members if r["wait_reason"] is not None)
    # statuses, error codes anywhere, errors by client
    statuses: dict[str, int] = {}
    for r in rows:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    assert stats["statuses"] == statuses and stats["exchanges"] == len(rows)
    by_client: dict[tuple, int] = {}
    for r in rows:
        for code in (set(r["error_codes"]) | {r["error_code"] or 0}) - {0}:
            key = (r["client_id"] or "(none)", code)
            by_client[key] = by_client.get(key, 0) + 1
    names = _error_names()
    assert {(e["client_id"], e["error"]): e["exchanges"] for e in stats["errors_by_client"]} == \
        {(client, names[code]): n for (client, code), n in by_client.items()}
    # the accounting stays the whole capture's
    assert stats["accounting"]["exchanges"] == len(all_rows)


def _error_names() -> dict[int, str]:
    # Kafka's error table, as the spec data in the repository names it
    from kdissect.protocol.errors import ERRORS

    return {code: entry[0] for code, entry in ERRORS.items()}


def test_time_window_relative_to_the_first_packet_and_absolute(all_rows) -> None:
    # the capture's first packet, as tshark times it
    first = epoch_ns(tshark_output(GROUP, ["-c", "1", "-T", "fields", "-e", "frame.time_epoch"]).strip())
    low, high = first + 1_000_000_000, first + 1_500_000_000

    def when(r: dict) -> int:
        return _ns(r["request_ts"] if r["request_ts"] is not None else r["response_ts"])

    expected = [r for r in all_rows if low <= when(r) < high]
    assert 0 < len(expected) < len(all_rows)
    assert rows_of(str(GROUP), "--from", "+1s", "--to", "+1500ms") == expected
    iso = [dt.datetime.fromtimestamp(t / 1e9, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ") for t in (low, high)]
    assert low % 1000 == 0 and high % 1000 == 0  # microsecond pcap: the ISO texts are exact
    assert rows_of(str(GROUP), "--from", iso[0], "--to", iso[1]) == expected


_SHOW = re.compile(r"^(?:\d{4}-\d\d-\d\d )?(?P<clock>\d\d:\d\d:\d\d\.\d{6})Z  (?:\[(?P<capture>[^\]]+)\]  )?"
                   r"(?P<client>\S+) -> (?P<broker>\S+)  (?P<api>\S+) v\d+  corr=(?P<corr>-?\d+)  "
                   r"frames=(?P<req>\d+|-)/(?P<resp>\d+|-)  (?P<rest>.*)$")


def test_show_lines_carry_the_frames_and_times_tshark_gives() -> None:
    run = kdissect("show", str(GROUP))
    assert run.returncode == 0, run.stderr
    assert "kdissect: times are UTC; lines in request order (--sort COLUMN to reorder)" in run.stderr
    lines = [_SHOW.match(line) for line in run.stdout.splitlines()]
    assert lines and all(lines), run.stdout
    pdus = kafka_pdus("tshark", GROUP)
    requests = {(p.src, p.correlation_id): p for p in pdus if p.is_request}
    checked = 0
    for match in lines:
        pdu = requests.get((match["client"], int(match["corr"])))
        if pdu is None:
            continue
        assert int(match["req"]) == pdu.frame
        if pdu.response_frame is not None:
            assert int(match["resp"]) == pdu.response_frame
        clock = dt.datetime.fromtimestamp(pdu.ts // 1000 / 1e6, dt.timezone.utc).strftime("%H:%M:%S.%f")
        assert match["clock"] == clock
        assert "wire=" in match["rest"] and "service=" in match["rest"] or "no response" in match["rest"]
        checked += 1
    assert checked == len(requests) > 40


def test_show_names_waits_and_per_partition_errors(all_rows) -> None:
    run = kdissect("show", str(GROUP), "--errors")
    out = run.stdout
    # per-partition errors with their topic and partition, from the export's per-exchange codes and the manifest's topics
    produce_errors = [r for r in all_rows if r["api_name"] == "Produce" and 6 in r["error_codes"]]
    assert len(produce_errors) == out.count("NOT_LEADER_OR_FOLLOWER(orders-") > 0
    assert "MEMBER_ID_REQUIRED[normal flow]" in out
    waited = [r for r in all_rows if r["wait_reason"] is not None and r["latency_ms"] is not None]
    run = kdissect("show", str(GROUP), "-Y", "wait_reason")
    shown = run.stdout.splitlines()
    assert len(shown) == len(waited)
    for line, row in zip(shown, waited):
        assert f"wait={row['wait_reason']} {float(row['wait_ms']):.3f} ms" in line
        service = "-" if row["service_ms"] is None else f"{float(row['service_ms']):.3f} ms"
        assert f"service={service}" in line


def test_slowest_means_service_time_and_top_n(all_rows) -> None:
    answered = [r for r in all_rows if r["service_ms"] is not None]
    slowest = sorted(answered, key=lambda r: -r["service_ms"])[:5]
    run = kdissect("show", str(GROUP), "--sort", "service_ms", "--top", "5")
    assert run.returncode == 0 and "largest service_ms first" in run.stderr
    got = [(m["client"], int(m["corr"])) for m in map(_SHOW.match, run.stdout.splitlines())]
    assert got == [(r["client"], r["correlation_id"]) for r in slowest]
    assert rows_of(str(GROUP), "--sort", "service_ms", "--top", "5") == slowest


def test_several_captures_get_a_capture_column() -> None:
    other = CAPTURES / "admin_kafka.pcap"
    run = kdissect("show", str(GROUP), str(other))
    captures = {m["capture"] for m in map(_SHOW.match, run.stdout.splitlines())}
    assert captures == {GROUP.name, other.name}
    assert all(m["capture"] is None for m in map(_SHOW.match, kdissect("show", str(other)).stdout.splitlines()))


def test_normal_flow_codes_are_kafkas() -> None:
    # the codes of the names in Kafka's protocol guide error table: LEADER_NOT_AVAILABLE 5,
    # COORDINATOR_LOAD_IN_PROGRESS 14, NOT_COORDINATOR 16, REBALANCE_IN_PROGRESS 27,
    # FETCH_SESSION_ID_NOT_FOUND 70, MEMBER_ID_REQUIRED 79, UNSTABLE_OFFSET_COMMIT 88,
    # OFFSET_MOVED_TO_TIERED_STORAGE 109
    from kdissect.conn.normal_flow import NORMAL_FLOW, NORMAL_FLOW_CODES

    assert NORMAL_FLOW_CODES == {5, 14, 16, 27, 70, 79, 88, 109}
    assert all(why and source for _, why, source in NORMAL_FLOW)


def test_statuses_say_which_paired_exchanges_carry_error_codes(all_rows) -> None:
    from kdissect.conn.normal_flow import NORMAL_FLOW_CODES

    paired = [r for r in all_rows if r["status"] == "ok"]
    erring = [r for r in paired if r["error_code"] or r["error_codes"]]
    normal = [r for r in erring if (set(r["error_codes"]) | {r["error_code"] or 0}) - {0} <= NORMAL_FLOW_CODES]
    assert 0 < len(normal) < len(erring)
    text = (f"{len(paired)} paired: {len(paired) - len(erring)} without error codes, {len(erring)} with error codes "
            f"({len(normal)} of them only normal-flow codes)")
    run = kdissect("export", str(GROUP), "-o", "/dev/null")
    assert f"kdissect: exchanges: {len(all_rows)} ({text}, " in run.stderr
    stats = kdissect("stats", str(GROUP)).stdout
    assert stats.startswith(f"exchanges: {len(all_rows)} ({text}")
    assert re.search(r"MEMBER_ID_REQUIRED\s+yes", stats) and re.search(r"NOT_LEADER_OR_FOLLOWER\s+no", stats)
    assert "errors by client id" in stats


def test_failures_hide_normal_flow_codes(all_rows) -> None:
    from kdissect.conn.normal_flow import NORMAL_FLOW_CODES

    failing = [r for r in all_rows if (set(r["error_codes"]) | {r["error_code"] or 0}) - {0} - NORMAL_FLOW_CODES]
    run = kdissect("show", str(GROUP), "--failures")
    assert len(run.stdout.splitlines()) == len(failing) > 0


def test_a_run_that_decodes_nothing_names_the_ports() -> None:
    manifest = json.loads((CAPTURES / "port_19092_kafka.manifest.json").read_text())
    run = kdissect("show", str(CAPTURES / "port_19092_kafka.pcap"), "--no-detect")
    assert run.returncode == 0 and run.stdout == ""
    hint = [line for line in run.stderr.splitlines() if "decoded nothing" in line]
    assert len(hint) == 1 and f"port {manifest['port']} (" in hint[0] and f"--port {manifest['port']}" in hint[0]


def test_tls_without_keys_points_to_the_keylog() -> None:
    run = kdissect("stats", str(CAPTURES / "tls" / "apache_tls13.pcap"))
    assert run.returncode == 0
    assert "--tls-keylog" in run.stderr and "inject-secrets" in run.stderr
    keyed = kdissect("stats", str(CAPTURES / "tls" / "apache_tls13.pcap"),
                     "--tls-keylog", str(CAPTURES / "tls" / "apache_tls13.keys"))
    assert "--tls-keylog" not in keyed.stderr and "decoded nothing" not in keyed.stderr


@pytest.mark.parametrize("args", [["show", "--bogus"], ["stats"], ["shw", "x"]])
def test_usage_errors_are_one_line_and_a_hint(args) -> None:
    run = kdissect(*args)
    lines = run.stderr.splitlines()
    assert run.returncode == 2 and len(lines) == 2, run.stderr
    assert lines[0].startswith("kdissect: error: ") and lines[1].startswith("kdissect: hint: ")
    if args[0] == "shw":
        assert "Did you mean 'show'?" in lines[0]


@pytest.mark.parametrize("verb, counted", [
    ("clients", "clients"), ("groups", "groups"), ("topics", "topics"),
])
def test_forensic_verbs_count_only_the_kept_exchanges(verb, counted) -> None:
    everything = kdissect(verb, str(GROUP), "-o", "-")
    nothing = kdissect(verb, str(GROUP), "-o", "-", "-Y", "correlation_id < 0")
    assert everything.returncode == nothing.returncode == 0, nothing.stderr
    assert everything.stdout.strip() and not nothing.stdout.strip()
    assert "selection: 0 of " in nothing.stderr


def test_records_follow_the_filter() -> None:
    fetch_only = kdissect("records", str(GROUP), "-Y", 'api_name == "Fetch"')
    rows = [json.loads(line) for line in fetch_only.stdout.splitlines()]
    everything = [json.loads(line) for line in kdissect("records", str(GROUP)).stdout.splitlines()]
    assert rows == [r for r in everything if r["direction"] == "fetch"] and len(rows) < len(everything)


def _tshark_frames(display_filter: str) -> set[int]:
    out = tshark_output(GROUP, ["-Y", display_filter, "-T", "fields", "-e", "frame.number"])
    return {int(line) for line in out.split()}


@pytest.mark.parametrize("option, value, fields", [
    ("--group", "lab-group-kp", ("kafka.consumer_group", "kafka.coordinator_key")),  # the manifest's groups
    ("--group", "lab-group-ck", ("kafka.consumer_group", "kafka.coordinator_key")),
    ("--topic", "orders", ("kafka.topic_name",)),
    ("-t", "events", ("kafka.topic_name",)),
])
def test_topic_and_group_selection_agrees_with_tshark(option, value, fields) -> None:
    rows = rows_of(str(GROUP), option, value)
    ours = {r["request_frame"] for r in rows} | {r["response_frame"] for r in rows}
    named = _tshark_frames(" or ".join(f'{field} == "{value}"' for field in fields))
    assert named and named <= ours  # every frame tshark sees naming it is in a kept exchange
    # what tshark does not name is in versions its dissector does not decode (topics by id among them)
    unread = _tshark_frames("kafka.unsupported_api_version")
    for r in rows:
        frames = {r["request_frame"], r["response_frame"]} - {None}
        assert frames & (named | unread), r
    assert all(r["api_name"] != "Produce" for r in rows) if option == "--group" else True


@pytest.mark.parametrize("sort, top", [("service_ms", 5), ("wait_ms", 4), ("response_bytes", 20), ("throttle_time_ms", 30), (None, 7),
                                       ("latency_ms", None)])
def test_ranked_keeps_the_rows_python_ranks(all_rows, sort, top) -> None:
    """`Ranked` (the report's --top/--sort) keeps the exchanges ranked here in
    plain Python over the export's rows (largest first, nulls last, request
    order among equals), yields them in request order, and reads every
    exchange (the accounting whole)."""
    from kdissect.conn.pipeline import Analysis
    from kdissect.filters.selection import Ranked

    order = list(range(len(all_rows)))  # the export lists rows in request order
    if sort is not None:
        valued = [i for i in order if all_rows[i][sort] is not None]
        valued.sort(key=lambda i: all_rows[i][sort], reverse=True)
        order = valued + [i for i in order if all_rows[i][sort] is None]
    wanted = sorted(order[:top] if top is not None else order)
    analysis = Analysis([str(GROUP)], (9092,))
    ranked = Ranked(analysis, sort, top)
    dropped: list[tuple] = []
    ranked.on_hidden.append(lambda ex: dropped.append((ex.stream, ex.correlation_id)))  # context: topic names ...
    kept = [(ex.stream, ex.correlation_id) for ex in ranked]
    assert kept == [(all_rows[i]["stream"], all_rows[i]["correlation_id"]) for i in wanted]
    assert sorted(dropped) == sorted((r["stream"], r["correlation_id"]) for i, r in enumerate(all_rows)
                                     if i not in set(wanted))
    assert ranked.shown == len(wanted) and ranked.shown + ranked.hidden == len(all_rows)
    assert analysis.accounting.exchanges == len(all_rows)


def test_ranked_over_a_selection_hears_what_either_drops(all_rows) -> None:
    """`report -Y ... --top N`: the hook for context (topic names) hears every
    exchange the page does not hold, whether the filter or the ranking dropped it."""
    from kdissect.conn.pipeline import Analysis
    from kdissect.filters.display_filter import DisplayFilter
    from kdissect.filters.selection import Ranked, Selected, Selection

    ranked = Ranked(Selected(Analysis([str(GROUP)], (9092,)), Selection(DisplayFilter('api_name != "Metadata"'))),
                    "latency_ms", 3)
    heard: list[tuple] = []
    ranked.on_hidden.append(lambda ex: heard.append((ex.stream, ex.correlation_id)))
    kept = [(ex.stream, ex.correlation_id) for ex in ranked]
    assert len(kept) == 3 and len(heard) == len(all_rows) - 3
    assert set(kept).isdisjoint(heard)
    assert sum(r["api_name"] == "Metadata" for r in all_rows) > 0
