"""The broker's request log joined to the wire (issue 26), on real runs of
Apache Kafka 4.4.0 (captures/brokerlog/, recorded by tools/lab/broker_log.py).

Expected values come from the log's own JSON (read here with the json module,
whole lines) and from tshark's request/response pairing, never from kdissect.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.tshark import kafka_pdus
from tests.support.paths import REPO

ROOT = REPO
RUNS = ROOT / "captures" / "brokerlog"
PLAIN = RUNS / "plain_quota"
TLS = RUNS / "sasl_ssl_trace"
COMPONENTS = {"broker_total_ms": "totalTimeMs", "broker_request_queue_ms": "requestQueueTimeMs",
              "broker_local_ms": "localTimeMs", "broker_remote_ms": "remoteTimeMs",
              "broker_throttle_ms": "throttleTimeMs", "broker_response_queue_ms": "responseQueueTimeMs",
              "broker_send_ms": "sendTimeMs"}


def manifest(run: Path) -> dict:
    return json.loads((run / "manifest.json").read_text())


def log_lines(run: Path) -> list[dict]:
    """Every request-log line of a run, parsed whole by the json module."""
    rows = []
    for path in run.glob("request.log*"):
        for line in path.read_text().splitlines():
            if "Completed request:" in line:
                body = line.split("Completed request:", 1)[1].rsplit(" (kafka.request.logger)", 1)[0]
                rows.append(json.loads(body))
    return rows


def log_key(row: dict) -> tuple[str, int, int]:
    client = row["connection"].split("-")[1]
    header = row["requestHeader"]
    return client, header["correlationId"], header["requestApiKey"]


def kdissect(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "kdissect", *args], capture_output=True, text=True, cwd=ROOT)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def export_rows(run: Path, *logs: str | Path, tmp_path: Path, extra: tuple[str, ...] = ()) -> tuple[list[dict], str]:
    out = tmp_path / "out.jsonl"
    args = [str(run / "capture.pcap"), "-p", str(manifest(run)["port"]), "-o", str(out), *extra]
    for log in logs:
        args += ["--broker-log", str(log)]
    done = kdissect("export", *args)
    return [json.loads(line) for line in out.read_text().splitlines()], done.stderr


def tshark_pairs(tshark: str, run: Path, keylog: Path | None = None) -> dict[tuple, tuple[int, int]]:
    """(client, correlation id, api key) -> (request ts, response ts) of every pair tshark makes."""
    port = manifest(run)["port"]
    pdus = kafka_pdus(tshark, run / "capture.pcap", (port,), keylog)
    requests = {(pdu.tcp_stream, pdu.frame, pdu.correlation_id): pdu for pdu in pdus if pdu.is_request}
    pairs = {}
    for pdu in pdus:  # tshark's own pairing: a response names its request's frame
        request = requests.get((pdu.tcp_stream, pdu.request_frame, pdu.correlation_id))
        if not pdu.is_request and request is not None:
            pairs[(request.src, request.correlation_id, request.api_key)] = (request.ts, pdu.ts)
    return pairs


def tshark_streams(tshark: str, run: Path, keylog: Path | None = None) -> dict[tuple, int]:
    """(client, correlation id, api key) -> tshark's tcp stream of the request."""
    pdus = kafka_pdus(tshark, run / "capture.pcap", (manifest(run)["port"],), keylog)
    return {(p.src, p.correlation_id, p.api_key): p.tcp_stream for p in pdus if p.is_request}


def socket_waits(pairs: dict[tuple, tuple[int, int]], streams: dict[tuple, int],
                 logged: dict[tuple, dict]) -> dict[tuple, tuple[float, bool]]:
    """key -> (ms the request sat unread, whether a quota's mute held it), from
    tshark's times and the log's throttle times alone: Apache Kafka reads a
    connection's next request only once it has answered the one before, and
    after a throttled answer (KIP-219) not for its throttle time."""
    waits = {}
    by_stream: dict[int, list[tuple]] = {}
    for key, (request_ts, response_ts) in pairs.items():
        by_stream.setdefault(streams[key], []).append((request_ts, response_ts, key))
    for exchanges in by_stream.values():
        answered = muted = 0
        for request_ts, response_ts, key in sorted(exchanges):
            free = max(answered, muted)
            waits[key] = (max(0, min(free, response_ts) - request_ts) / 1e6, muted > max(answered, request_ts))
            answered = max(answered, response_ts)
            throttle = logged.get(key, {}).get("throttleTimeMs") or 0
            muted = max(muted, response_ts + int(throttle * 1e6))
    return waits


def check_network_time(tshark: str, run: Path, pairs: dict, by_key: dict, by_log: dict, keys: list,
                       keylog: Path | None = None, median_ms: float | None = 1.0) -> None:
    """network_ms = time to the first response byte - socket wait - (broker
    total - broker send), each from tshark or the log; captured on the broker's
    host, never negative (the broker's processor reads the request after its
    last byte arrived, and writes the response's first byte after taking it
    off its queue, where sendTimeMs starts), up to the log's microsecond
    truncation; beyond the loopback's round trip only by the processor's own
    lag (and its TLS work on a TLS listener), whose median `median_ms` bounds."""
    waits = socket_waits(pairs, tshark_streams(tshark, run, keylog), by_log)
    checked = []
    for key in keys:
        row, logged = by_key[key], by_log[key]
        request_ts, response_ts = pairs[key]
        waited, mute = waits[key]
        if mute:  # the mute's end is an estimate (answer time + throttle time), not the broker's moment
            continue
        assert row["socket_wait_ms"] == pytest.approx(waited, abs=1e-6), key
        if row["response_transfer_ms"] != 0:  # tshark's time is the response's last packet
            continue
        ttfb_ms = (response_ts - request_ts) / 1e6
        expected = ttfb_ms - waited - (logged["totalTimeMs"] - logged["sendTimeMs"])
        assert row["network_ms"] == pytest.approx(expected, abs=2e-6), key
        assert row["network_ms"] >= -0.002, (key, row["network_ms"])  # two microsecond truncations
        checked.append(row["network_ms"] - (row["rtt_ms"] or 0))
    assert len(checked) >= 0.8 * len(keys)
    checked.sort()
    if median_ms is not None:
        assert checked[len(checked) // 2] < median_ms


def test_tshark_pairs_join_exactly_one_log_line(tshark: str, tmp_path: Path) -> None:
    pairs = tshark_pairs(tshark, PLAIN)
    lines = log_lines(PLAIN)
    counts: dict[tuple, int] = {}
    for row in lines:
        counts[log_key(row)] = counts.get(log_key(row), 0) + 1
    assert len(pairs) >= 20  # tshark pairs what its dissector follows (not every newer version)
    once = [key for key in pairs if counts.get(key) == 1]
    assert len(once) >= 0.99 * len(pairs)
    rows, stderr = export_rows(PLAIN, PLAIN, tmp_path=tmp_path)
    by_key = {(r["client"], r["correlation_id"], r["api_key"]): r for r in rows}
    by_log = {log_key(row): row for row in lines}
    for key in once:
        row = by_key[key]
        assert row["broker_log"] == "joined", key
        logged = by_log[key]
        for column, field in COMPONENTS.items():
            assert row[column] == pytest.approx(float(logged[field]), abs=1e-12), (key, column)
        assert row["principal"] == logged["principal"] == "User:ANONYMOUS"
        assert row["security_protocol"] == logged["securityProtocol"] == "PLAINTEXT"
        assert row["listener"] == logged["listener"]
        request_ts, response_ts = pairs[key]
        assert row["latency_ms"] == pytest.approx((response_ts - request_ts) / 1e6, abs=1e-6)
    check_network_time(tshark, PLAIN, pairs, by_key, by_log, once)
    assert "broker log clock offset (log - capture): median" in stderr


def test_quota_throttle_component_matches_the_response(tshark: str, tmp_path: Path) -> None:
    rows, _ = export_rows(PLAIN, PLAIN, tmp_path=tmp_path)
    throttled = [r for r in rows if r["broker_throttle_ms"]]
    assert throttled, "the quota run must throttle"
    quota_client = [c for c in manifest(PLAIN)["notes"] if "producer_byte_rate" in c]
    assert quota_client
    for row in throttled:
        assert row["client_id"] == "bl-throttled"
        # the throttle the broker logged is the one it put in the response (decoded by kdissect,
        # checked against tshark in test_vs_tshark); both from the broker
        assert row["broker_throttle_ms"] == float(row["throttle_time_ms"])


def test_accounting_adds_up_and_reasons(tmp_path: Path) -> None:
    done = kdissect("stats", str(PLAIN / "capture.pcap"), "-p", str(manifest(PLAIN)["port"]), "--broker-log",
                    str(PLAIN), "--json")
    payload = json.loads(done.stdout)["broker_log"]
    accounting = payload["accounting"]
    lines = log_lines(PLAIN)
    assert accounting["request_lines"] == len(lines)
    assert accounting["lines"] == accounting["request_lines"] + accounting["other_lines"] + accounting["bad_lines"]
    assert accounting["request_lines"] == accounting["joined"] + sum(accounting["log_only"].values())
    assert accounting["exchanges"] == accounting["joined"] + sum(accounting["capture_only"].values())
    # the lab's internal listener and the controller are logged, never captured
    other = sum(1 for row in lines if row["listener"] in ("INTERNAL", "CONTROLLER"))
    uncaptured = [r for r in payload["unmatched"] if r["side"] == "log_only" and r["detail"] in ("INTERNAL", "CONTROLLER")]
    assert sum(r["count"] for r in uncaptured) == other > 0
    assert {r["reason"] for r in uncaptured} <= {"before_capture", "after_capture", "connection_not_captured"}
    assert abs(accounting["clock_offset"]["median_ms"]) < 5  # same host, UTC log times
    assert {r["by"] for r in payload["latency_decomposition"]} == {"api", "client", "broker"}
    clients = {r["group"] for r in payload["latency_decomposition"] if r["by"] == "client"}
    assert {"bl-throttled", "bl-librdkafka", "bl-consumer", "bl-java"} <= clients
    principals = {(r["client_id"], r["principal"]) for r in payload["principals"]}
    assert ("bl-librdkafka", "User:ANONYMOUS") in principals
    text = kdissect("stats", str(PLAIN / "capture.pcap"), "-p", str(manifest(PLAIN)["port"]), "--broker-log",
                    str(PLAIN)).stdout
    assert "Broker log: latency decomposition" in text and "Broker log: principals" in text


def test_tls_sasl_trace_names_the_principal_and_keeps_secrets_out(tshark: str, tmp_path: Path) -> None:
    data = manifest(TLS)
    rows, stderr = export_rows(TLS, TLS, tmp_path=tmp_path, extra=("--tls-keylog", str(TLS / "keys")))
    joined = [r for r in rows if r["broker_log"] == "joined"]
    assert joined and all(r["principal"] == f"User:{data['sasl']['user']}" for r in joined)
    assert all(r["security_protocol"] == "SASL_SSL" for r in joined)
    # the broker's authenticator answers these; they never reach the request log
    pre = [r for r in rows if r["broker_log"] == "pre_authentication"]
    assert {r["api_name"] for r in pre} == {"ApiVersions", "SaslHandshake", "SaslAuthenticate"}
    assert len(joined) + len(pre) == len(rows)
    pairs = tshark_pairs(tshark, TLS, TLS / "keys")
    by_key = {(r["client"], r["correlation_id"], r["api_key"]): r for r in rows}
    assert len(pairs) >= 15 and all(key in by_key for key in pairs)  # every pair tshark makes is a row
    by_log = {log_key(row): row for row in log_lines(TLS)}
    # (the processor decrypts the request and encrypts the response outside the broker's times)
    check_network_time(tshark, TLS, pairs, by_key, by_log, [key for key in pairs if key in by_log], TLS / "keys",
                       median_ms=None)
    # secrets: the TRACE log plus a line carrying SASL tokens in its bodies
    line = next(l for l in (TLS / "request.log").read_text().splitlines() if '"PRODUCE"' in l)
    secret = "c2VjcmV0LXNjcmFtLXByb29mLTQy"
    head, tail = line.split(',"connection":', 1)
    header = head.split(',"request":', 1)[0]
    hostile = (f'{header},"request":{{"authBytes":"{secret}","password":"{data["password"]}"}},"response":'
               f'{{"authBytes":"{secret}"}},"connection":{tail}')
    log = tmp_path / "server-request.log"
    log.write_text((TLS / "request.log").read_text() + hostile + "\n")
    out_rows, stderr = export_rows(TLS, log, tmp_path=tmp_path, extra=("--tls-keylog", str(TLS / "keys")))
    stats = kdissect("stats", str(TLS / "capture.pcap"), "-p", str(data["port"]), "--tls-keylog",
                     str(TLS / "keys"), "--broker-log", str(log), "--json")
    for text in (json.dumps(out_rows), stderr, stats.stdout, stats.stderr):
        assert secret not in text and data["password"] not in text


def test_bad_input_garbage_cut_and_truncated_rotation(tmp_path: Path) -> None:
    rows_whole, _ = export_rows(PLAIN, PLAIN, tmp_path=tmp_path)
    whole = {(r["client"], r["correlation_id"], r["api_key"]): r for r in rows_whole if r["broker_log"] == "joined"}
    files = {p.name: p.read_text() for p in PLAIN.glob("request.log*")}
    damaged = tmp_path / "logs"
    damaged.mkdir()
    lost: set[tuple] = set()

    def keys_of(text: str) -> set[tuple]:
        found = set()
        for line in text.splitlines():
            if "Completed request:" in line:
                try:
                    found.add(log_key(json.loads(line.split("Completed request:", 1)[1].rsplit(" (", 1)[0])))
                except ValueError:
                    pass
        return found

    # garbage between lines of the oldest file; the newest ends mid-line; the
    # middle one lost its first half (a copy-truncate rotation), starting mid-line
    oldest, middle, newest = files["request.log.2"], files["request.log.1"], files["request.log"]
    garbage = "\n".join(["java.lang.IllegalStateException: boom", "\tat kafka.Foo(Foo.scala:1)", "\x00\x01 binary",
                         "Completed request:{not json", "[2026-11-26 06:48:00,000] DEBUG Completed request:{\"a\":1}"])
    lines = oldest.splitlines(keepends=True)
    (damaged / "request.log.2").write_text("".join(lines[:5]) + garbage + "\n" + "".join(lines[5:]))
    cut_at = len(middle) // 2
    (damaged / "request.log.1").write_text(middle[cut_at:])
    lost |= keys_of(middle) - keys_of(middle[cut_at:].split("\n", 1)[1])
    last = newest.rstrip("\n").rsplit("\n", 1)
    (damaged / "request.log").write_text(last[0] + "\n" + last[1][: len(last[1]) // 2])
    lost |= keys_of(last[1])
    rows, stderr = export_rows(PLAIN, damaged, tmp_path=tmp_path)
    got = {(r["client"], r["correlation_id"], r["api_key"]): r for r in rows if r["broker_log"] == "joined"}
    # everything intact that was not cut away
    assert set(got) == set(whole) - lost
    for key, row in got.items():
        assert row["broker_total_ms"] == whole[key]["broker_total_ms"]
    assert "0 cut mid-line" not in stderr  # the cut last line is counted
    stats = json.loads(kdissect("stats", str(PLAIN / "capture.pcap"), "-p", str(manifest(PLAIN)["port"]),
                                "--broker-log", str(damaged), "--json").stdout)["broker_log"]["accounting"]
    assert stats["bad_lines"] >= 3 and stats["cut_lines"] == 1 and stats["other_lines"] >= 3
    assert stats["lines"] == stats["request_lines"] + stats["other_lines"] + stats["bad_lines"]


def test_rotated_files_read_as_one_in_any_order(tmp_path: Path) -> None:
    one = tmp_path / "all.log"
    one.write_text("".join((PLAIN / name).read_text() for name in ("request.log.2", "request.log.1", "request.log")))
    rows_one, _ = export_rows(PLAIN, one, tmp_path=tmp_path)
    rows_split, _ = export_rows(PLAIN, PLAIN / "request.log", PLAIN / "request.log.1", PLAIN / "request.log.2",
                                tmp_path=tmp_path)
    rows_glob, _ = export_rows(PLAIN, str(PLAIN / "request.log*"), tmp_path=tmp_path)
    assert rows_one == rows_split == rows_glob


def test_python_api_and_usage_errors() -> None:
    from kdissect.conn.pipeline import Analysis

    analysis = Analysis([PLAIN / "capture.pcap"], ports=(manifest(PLAIN)["port"],), broker_logs=[PLAIN])
    rows = list(analysis)
    assert sum(ex.broker_log == "joined" for ex in rows) == analysis.broker_log.accounting.joined >= 80
    assert analysis.broker_log.accounting.balance() == []
    # the function form takes the same option (it once dropped it and joined nothing)
    from kdissect.conn.pipeline import analyze

    exchanges, _ = analyze([PLAIN / "capture.pcap"], ports=(manifest(PLAIN)["port"],), broker_logs=[PLAIN])
    assert [ex.broker_log for ex in exchanges] == [ex.broker_log for ex in rows]
    done = kdissect("export", str(PLAIN / "capture.pcap"), "--broker-log", "/nonexistent/server-request.log",
                    check=False)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_line_shapes_fast_and_general_paths_agree(tmp_path: Path) -> None:
    """IPv6 connection ids, escaped strings, exponents, fields out of the usual
    order, zones in the time, a damaged body (the json path on the header and
    the tail): read the same every way."""
    from kdissect.conn.brokerlog import parse

    tail = ('"connection":"0:0:0:0:0:0:0:1:9092-0:0:0:0:0:0:0:1:5555-3-7","totalTimeMs":1.5,"requestQueueTimeMs":1,'
            '"localTimeMs":0.25,"remoteTimeMs":0.0,"throttleTimeMs":7,"responseQueueTimeMs":0.125,"sendTimeMs":1.5E-4,'
            '"securityProtocol":"SSL","principal":"User:CN=a\\"x","listener":"EXTERNAL",'
            '"clientInformation":{"softwareName":"x","softwareVersion":"1"}}')
    header = '"requestHeader":{"requestApiKey":3,"requestApiVersion":12,"correlationId":-5,"clientId":"c\\"\\u00e9"}'
    usual = f'[2026-11-26 06:52:38,749] DEBUG Completed request:{{"isForwarded":false,{header},{tail} (kafka.request.logger)'
    entry = parse.parse_line(usual)
    assert entry and entry.client == "[::1]:5555" and entry.broker == "[::1]:9092"
    assert (entry.api_key, entry.api_version, entry.correlation_id, entry.client_id) == (3, 12, -5, 'c"\u00e9')
    assert (entry.total_ms, entry.throttle_ms, entry.send_ms) == (1.5, 7.0, 1.5e-4)
    assert entry.principal == 'User:CN=a"x' and entry.listener == "EXTERNAL"
    assert entry.ts == 1795675958749000000
    # reordered header fields and a zone in another layout: same values
    other = ('2026-11-26T07:52:38.749+01:00 DEBUG Completed request:{"requestHeader":{"clientId":"c\\"\\u00e9",'
             '"correlationId":-5,"requestApiVersion":12,"requestApiKey":3},' + tail)
    again = parse.parse_line(other)
    assert again and {n: getattr(again, n) for n in again.__slots__} == {n: getattr(entry, n) for n in entry.__slots__}
    # a body that is not JSON (msgspec refuses the line): the header and the tail are still read, alone
    damaged = usual.replace(f"{header},", f'{header},"request":{{"records":[1,2}},"response":NaN,', 1)
    again = parse.parse_line(damaged)
    assert again and {n: getattr(again, n) for n in again.__slots__} == {n: getattr(entry, n) for n in entry.__slots__}
    # bodies nested deeper than a decoder recurses (a hostile log): the same, no RecursionError
    deep = usual.replace(f"{header},", f'{header},"request":{"[" * 100_000}{"]" * 100_000},', 1)
    again = parse.parse_line(deep)
    assert again and again.key == entry.key and again.times() == entry.times()
    # and in a file, through the reader's own path
    from kdissect.conn.brokerlog.parse import LogReadStats, read_entries

    log = tmp_path / "request.log"
    log.write_text(usual + "\n" + damaged + "\n" + deep + "\n" + "[2026-11-26 06:52:38,749] INFO something else\n")
    stats = LogReadStats()
    read = list(read_entries([str(log)], stats))
    assert [e.key for e in read] == [entry.key] * 3 and (stats.request_lines, stats.other_lines) == (3, 1)
    assert parse.parse_line("[2026-11-26 06:52:38,749] INFO something else") is False
    assert parse.parse_line("[2026-11-26 06:52:38,749] DEBUG Completed request:RequestHeader(apiKey=3...)") is None


def test_report_has_the_stats_tables(tmp_path: Path) -> None:
    port = str(manifest(PLAIN)["port"])
    stats = json.loads(kdissect("stats", str(PLAIN / "capture.pcap"), "-p", port, "--broker-log", str(PLAIN),
                                "--json").stdout)["broker_log"]
    page = tmp_path / "report.html"
    kdissect("report", str(PLAIN / "capture.pcap"), "-p", port, "--broker-log", str(PLAIN), "-o", str(page))
    text = page.read_text()
    for name in ("latency_decomposition", "principals", "unmatched"):
        assert stats[name]
        assert f'data-table="broker_log.{name}" data-rows="{min(len(stats[name]), 200)}"' in text


def test_memory_is_bounded_by_the_window_not_the_log(tmp_path: Path) -> None:
    """A day's worth of lines before and after the capture: they are counted
    (before/after the capture) without being held."""
    from kdissect.conn.brokerlog.join import BrokerLogJoin
    from kdissect.conn.pipeline import Analysis

    real = [line for name in ("request.log.2", "request.log.1", "request.log")
            for line in (PLAIN / name).read_text().splitlines(keepends=True)]
    sample = real[len(real) // 2]
    filler_before = [sample.replace("[2026-11-26 ", "[2026-11-25 ", 1)] * 20000
    filler_after = [sample.replace("[2026-11-26 ", "[2026-11-27 ", 1)] * 20000
    log = tmp_path / "big-request.log"
    log.write_text("".join(filler_before + real + filler_after))
    analysis = Analysis([PLAIN / "capture.pcap"], ports=(manifest(PLAIN)["port"],))
    join = BrokerLogJoin([str(log)])
    rows = list(join.join(analysis))
    accounting = join.accounting
    assert accounting.log_only["before_capture"] >= 20000 and accounting.log_only["after_capture"] >= 20000
    assert accounting.joined == sum(r.broker_log == "joined" for r in rows) >= 80
    assert accounting.balance() == []
    assert join.peak_pending <= len(real)  # never the 40,000 filler lines (the run spans under a minute)


def test_principals_of_tls_connections_not_decrypted(tshark: str) -> None:
    """Without the key log nothing is decrypted, yet the log names who is
    behind each captured TLS connection (its client endpoint, from tshark
    with the key log)."""
    data = manifest(TLS)
    clients = {key[0] for key in tshark_pairs(tshark, TLS, TLS / "keys")}
    assert len(clients) == 4
    done = kdissect("stats", str(TLS / "capture.pcap"), "-p", str(data["port"]), "--broker-log", str(TLS), "--json")
    payload = json.loads(done.stdout)
    assert payload["accounting"]["encrypted_connections"] == 4
    rows = {r["client"]: r for r in payload["broker_log"]["principals"]}
    for client in clients:
        assert rows[client]["captured"] == "encrypted"
        assert rows[client]["principal"] == f"User:{data['sasl']['user']}"
    assert all(r["captured"] == "no" for c, r in rows.items() if c not in clients)


def test_output_over_a_broker_log_is_refused(tmp_path: Path) -> None:
    log = tmp_path / "server-request.log"
    original = (PLAIN / "request.log").read_bytes()
    log.write_bytes(original)
    done = kdissect("export", str(PLAIN / "capture.pcap"), "-p", str(manifest(PLAIN)["port"]), "--broker-log",
                    str(tmp_path), "-o", str(log), check=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert log.read_bytes() == original


def test_reader_batches_keep_every_line_and_its_own_time(tmp_path):
    """More lines than one batch holds, in runs sharing their millisecond
    (the reader reuses the previous line's time when the first 25 bytes are
    the same) broken by the same time written with a "T": every entry in
    order, each with its own line's time as datetime reads the stamp and
    its correlation id as the json module reads the line."""
    from datetime import datetime, timezone

    from kdissect.conn.brokerlog.parse import LogReadStats, read_batches, read_entries

    template = (REPO / "captures/brokerlog/plain_quota/request.log").read_text().splitlines()[0]
    json_part = template.split(" DEBUG Completed request:", 1)[1]
    json_part, trailer = json_part[:json_part.rindex("}") + 1], json_part[json_part.rindex("}") + 1:]
    lines, expected = [], []
    for n in range(700):
        stamp = f"2026-11-26 07:19:{16 + n // 300:02d},{(n // 3) % 1000:03d}"  # three lines a millisecond
        if n % 50 == 49:
            stamp = stamp.replace(" ", "T")
        body = json.loads(json_part)
        body["requestHeader"]["correlationId"] = n
        lines.append(f"[{stamp}] DEBUG Completed request:{json.dumps(body, separators=(',', ':'))}{trailer}")
        if n == 400:
            lines.append("[2026-11-26 07:19:17,100] INFO something else")
        when = datetime.strptime(stamp.replace("T", " "), "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=timezone.utc)
        expected.append((n, round(when.timestamp() * 1000) * 1_000_000))
    log = tmp_path / "request.log"
    log.write_text("\n".join(lines) + "\n")
    stats = LogReadStats()
    batches = list(read_batches([str(log)], stats))
    assert all(batches) and max(len(batch) for batch in batches) <= 256 and len(batches) >= 3
    assert [(e.correlation_id, e.ts) for batch in batches for e in batch] == expected
    assert [(e.correlation_id, e.ts) for e in read_entries([str(log)])] == expected
    assert (stats.lines, stats.request_lines, stats.other_lines, stats.bad_lines) == (701, 700, 1, 0)
