"""The native request-log reader (kdissect/conn/brokerlog/_native_lines.c,
built by tools/build_native.py) against the Python path (msgspec, and the
json module for the lines msgspec refuses): the same entries, field by
field, and the same counts, on the bundled logs of real Apache Kafka 4.4.0
runs and on hand-made hostile lines (escapes, non-ASCII and invalid UTF-8,
malformed JSON, duplicated members, odd numbers, IPv6 and named hosts, huge
lines, cut files, TRACE bodies holding secrets).

The lines the native reader must take are checked against values read from
the JSON text by the json module (an independent decoder), and are seen to
be read natively (their entries are its `Entry`); every other line must be
declined, so that the Python path reads it exactly as it always did.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from kdissect import native
from kdissect.conn.brokerlog import parse
from kdissect.conn.brokerlog.parse import LogReadStats, read_batches
from tests.support.paths import REPO

if parse._native_lines is None:
    pytest.skip("the native reader is not built here (tools/build_native.py): the Python path runs",
                allow_module_level=True)

Entry = parse._native_lines.Entry
RUNS = REPO / "captures" / "brokerlog"
FIELDS = ("ts", "key", "client", "broker", "connection", "client_id", "security_protocol", "principal", "listener",
          "total_ms", "request_queue_ms", "local_ms", "remote_ms", "throttle_ms", "response_queue_ms", "send_ms",
          "correlation_id", "api_key", "api_version", "software", "matched")
SECRET = "s3cr3t-SCRAM-proof"


def fields(entry: object) -> tuple:
    values = tuple(getattr(entry, name) for name in FIELDS) + (entry.times(),)  # type: ignore[attr-defined]
    # floats compared with their sign and NaN-ness, as text would show them
    return tuple(repr(v) if isinstance(v, float) else v for v in values)


def read(paths: list[Path], use_native: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list, dict, list[type]]:
    with monkeypatch.context() as patch:
        if not use_native:
            patch.setattr(parse, "_native_lines", None)
        stats = LogReadStats()
        entries = [e for batch in read_batches([str(p) for p in paths], stats) for e in batch]
    return [fields(e) for e in entries], stats.to_dict(), [type(e) for e in entries]


def same_both_ways(paths: list[Path], monkeypatch: pytest.MonkeyPatch) -> tuple[list, dict, list[type]]:
    native_entries, native_stats, types = read(paths, True, monkeypatch)
    plain_entries, plain_stats, plain_types = read(paths, False, monkeypatch)
    assert Entry not in plain_types
    assert native_entries == plain_entries
    assert native_stats == plain_stats
    return native_entries, native_stats, types


@pytest.mark.parametrize("run", ["plain_quota", "sasl_ssl_trace"])
def test_the_bundled_logs_read_the_same_natively(run: str, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = sorted((RUNS / run).glob("request.log*"))
    entries, stats, types = same_both_ways(paths, monkeypatch)
    assert stats["request_lines"] == len(entries) > 30
    assert Entry in types  # (read natively, at least in part)


def template() -> str:
    """A real DEBUG line of the plain_quota run (a Produce, with its bodies)."""
    for line in (RUNS / "plain_quota" / "request.log.1").read_text().splitlines():
        if '"requestApiKeyName":"PRODUCE"' in line and '"clientInformation":{' in line:
            return line
    raise AssertionError("no Produce line in the bundled log")


def body_of(line: str) -> dict:
    return json.loads(line.split("Completed request:", 1)[1].rsplit(" (kafka.request.logger)", 1)[0])


def with_body(line: str, body: str) -> str:
    head = line.split("Completed request:", 1)[0]
    return f"{head}Completed request:{body} (kafka.request.logger)"


def replaced(line: str, old: str, new: str) -> str:
    assert old in line, old
    return line.replace(old, new, 1)


def test_plain_lines_are_read_natively_with_the_values_of_their_json(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    line = template()
    body = body_of(line)
    variants = [
        line,
        replaced(line, '"clientInformation":{', '"clientInformation":null,"x":{'),
        replaced(line, '"principal":', ' \t"principal" : '),  # whitespace between tokens
        replaced(line, '"totalTimeMs":', '"totalTimeMs":null,"_":'),  # a time given as null
        replaced(line, '"request":{',
                 '"request":{"esc":"a\\"b\\\\c\\u00e9\\n","deep":[[[{"n":-1.5,"t":true,"f":false,"z":null}]]],'),
        line.replace("DEBUG Completed", "TRACE Completed", 1),
        # another connection id: other hosts, a port written with a leading zero
        replaced(line, f'"connection":"{body["connection"]}"', '"connection":"10.0.0.1:9092-192.168.1.20:047874-3-17"'),
    ]
    log = tmp_path / "request.log"
    log.write_text("\n".join(variants) + "\n")
    entries, stats, types = same_both_ways([log], monkeypatch)
    assert types == [Entry] * len(variants)  # every one read natively
    first = dict(zip(FIELDS, entries[0]))
    assert first["client_id"] == body["requestHeader"]["clientId"]
    assert first["correlation_id"] == body["requestHeader"]["correlationId"]
    assert first["api_key"] == body["requestHeader"]["requestApiKey"] == 0
    assert first["total_ms"] == repr(float(body["totalTimeMs"]))
    assert first["throttle_ms"] == repr(float(body["throttleTimeMs"]))
    assert first["principal"] == body["principal"]
    assert first["connection"] == body["connection"]
    broker_host, broker_port, client_host, client_port = body["connection"].replace("-", ":").split(":")[:4]
    assert first["client"] == f"{client_host}:{int(client_port)}" and first["broker"] == f"{broker_host}:{broker_port}"
    assert first["software"] == "{softwareName}/{softwareVersion}".format(**body["clientInformation"])
    assert dict(zip(FIELDS, entries[1]))["software"] is None
    assert dict(zip(FIELDS, entries[3]))["total_ms"] is None
    last = dict(zip(FIELDS, entries[-1]))
    assert (last["client"], last["broker"]) == ("192.168.1.20:47874", "10.0.0.1:9092")


def hostile_lines() -> list[str]:
    line = template()
    huge = replaced(line, '"request":{', '"request":{"pad":"' + "x" * 300_000 + '",')
    return [
        replaced(line, '"clientId":"', '"clientId":"\\u0041\\"q'),  # escapes in a field the join reads
        replaced(line, '"principal":"User:', '"principal":"User:é'),  # non-ASCII (valid UTF-8)
        replaced(line, '"request":{', '"request":{"bytes":"\xff\xfe",'),  # invalid UTF-8 (written raw below)
        replaced(line, '"connection":', '"connection":"x","connection":'),  # a repeated member
        replaced(line, '"correlationId":', '"correlationId":1,"correlationId":'),
        replaced(line, '"request":{', '"request":{"a":[1,2,}],'),  # malformed JSON in a body
        replaced(line, '"request":{', '"request":{"a":01,'),  # a leading zero
        replaced(line, '"request":{', '"request":{"a":"tab\there",'),  # a raw control character
        replaced(line, '"request":{', '"request":{"a":"\\ud800",'),  # a lone surrogate escape
        replaced(line, '"request":{', '"request":{"a":1e999,'),  # an exponent
        replaced(line, '"request":{', '"request":{"a":tru,'),
        replaced(line, '"totalTimeMs":', '"totalTimeMs":1.5e2,"_":'),
        replaced(line, '"totalTimeMs":', '"totalTimeMs":-0.0,"_":'),
        replaced(line, '"totalTimeMs":', '"totalTimeMs":"1.0","_":'),
        replaced(line, '"totalTimeMs":', '"totalTimeMs":123456789012345678,"_":'),
        replaced(line, '"totalTimeMs":', '"totalTimeMs":0.12345678901234567890,"_":'),
        replaced(line, '"requestApiVersion":', '"requestApiVersion":1.0,"_":'),
        replaced(line, '"correlationId":', '"correlationId":99999999999999999999,"_":'),
        replaced(line, '"requestHeader":{', '"requestHeader":null,"_":{'),
        replaced(line, '"connection":"127.0.0.1:', '"connection":"[::1]:'),  # IPv6
        replaced(line, '"connection":"127.0.0.1:', '"connection":"broker.example:'),  # a name
        replaced(line, '"connection":"', '"connection":"1.2.3.4:5-'),  # not the connection form
        replaced(line, '"connection":', '"conn\\u0065ction":'),  # a key spelled with an escape
        replaced(line, '"principal":', '"~kdissect~ts":5,"principal":'),  # the reader's own field names
        replaced(line, '"clientInformation":{', '"clientInformation":[],"x":{'),
        replaced(line, '"clientInformation":{', '"clientInformation":{"softwareName":7,'),
        line.replace("DEBUG Completed", "INFO Completed", 1),
        line.replace("[20", "[00", 1),  # year 0: no date
        line.replace("-11-", "-13-", 1),  # month 13
        line.replace(",", ".", 1),  # another layout of the time
        line[:-5] + "} (kafka.request.logger)",  # the JSON cut
        line + " trailing",
        "[2026-11-26 07:18:00,000] INFO [Broker id=1] something else (kafka.server)",
        "",
        "Completed request:{}",
        huge,
    ]


def test_hostile_lines_read_the_same_natively(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    line = template()
    lines = hostile_lines()
    # each alone between plain lines (a block of its own kind or mixed), then all together
    for i, hostile in enumerate(lines):
        log = tmp_path / f"request{i}.log"
        log.write_bytes(("\n".join([line, hostile, line]) + "\n").encode("utf-8", "surrogateescape")
                        .replace("\xff\xfe".encode(), b"\xff\xfe"))
        same_both_ways([log], monkeypatch)
    log = tmp_path / "request.log"
    text = "\n".join(lines * 2 + [line[:400]])  # the last line cut (no newline)
    log.write_bytes(text.encode().replace("\xff\xfe".encode(), b"\xff\xfe"))
    entries, stats, _ = same_both_ways([log], monkeypatch)
    assert stats["cut_lines"] == 1 and stats["other_lines"] >= 2


def test_declined_lines_leave_the_python_path_to_read_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hostile line sends its block to the Python path: none of those
    entries is the native reader's, and a block of plain lines after it is."""
    line = template()
    for hostile in hostile_lines()[:5]:
        data = ("\n".join([line, hostile, line]) + "\n").encode()
        assert parse._native_lines.block_entries(data, len(data)) is None
    data = (line + "\n").encode() * 3
    assert [type(e) for e in parse._native_lines.block_entries(data, len(data))] == [Entry] * 3


def test_secrets_in_trace_bodies_are_not_kept(tmp_path: Path) -> None:
    line = template().replace("DEBUG Completed", "TRACE Completed", 1)
    line = replaced(line, '"request":{', f'"request":{{"authBytes":"{SECRET}","mechanism":"SCRAM-SHA-512",')
    data = (line + "\n").encode()
    (entry,) = parse._native_lines.block_entries(data, len(data))
    assert SECRET not in repr([getattr(entry, name) for name in FIELDS]) + repr(entry)


def test_times_are_the_floats_their_text_means() -> None:
    """Each broker time as float() reads its JSON text (correctly rounded),
    over random times of the log's forms and a few long ones."""
    line = template()
    generator = random.Random(26)
    texts = ["0", "0.0", "7", "0.211", "12345.678", "999999999999999", "0.000000000000001", "3.141592653589793",
             "123456789.123456", "1.0000000000000002", "9007199254740993.0"]
    texts += [f"{generator.randrange(0, 10 ** generator.randrange(1, 8))}.{generator.randrange(0, 1000):03d}"
              for _ in range(3000)]
    texts += [f"{generator.random() * 10 ** generator.randrange(0, 12):.{generator.randrange(1, 12)}f}"
              for _ in range(3000)]
    data = "".join(replaced(line, '"totalTimeMs":', f'"totalTimeMs":{text},"_":') + "\n" for text in texts).encode()
    entries = parse._native_lines.block_entries(data, len(data))
    assert entries is not None
    assert [repr(e.total_ms) for e in entries] == [repr(float(text)) for text in texts]


def test_the_native_reader_imports_no_msgspec() -> None:
    """A log the native reader takes whole is joined without importing
    msgspec (its imports are a tenth of the join's cost)."""
    code = ("import sys\n"
            "from kdissect.conn.brokerlog.parse import read_batches, LogReadStats\n"
            f"n = sum(map(len, read_batches([{str(RUNS / 'sasl_ssl_trace' / 'request.log')!r}], LogReadStats())))\n"
            "print(n, 'msgspec' in sys.modules)\n")
    env = {k: v for k, v in os.environ.items() if k != "KDISSECT_PURE_PYTHON"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO, env=env)
    count, imported = out.stdout.split()
    assert int(count) > 30 and imported == "False"
    env["KDISSECT_PURE_PYTHON"] = "1"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO, env=env)
    assert out.stdout.split() == [count, "True"]
    assert "conn.brokerlog._native_lines" in native.C_EXTENSIONS


def _joined_rows(run: str, monkeypatch: pytest.MonkeyPatch, native_take: bool) -> list[tuple]:
    from kdissect.conn.brokerlog import join
    from kdissect.conn.pipeline import Analysis

    manifest = json.loads((RUNS / run / "manifest.json").read_text())
    keys = RUNS / run / "keys"
    with monkeypatch.context() as patch:
        if not native_take:
            patch.setattr(join, "_take", join._take_python)
        exchanges = Analysis([RUNS / run / "capture.pcap"], [manifest["port"]],
                             tls_keylogs=[keys] if keys.exists() else [], broker_logs=[RUNS / run])
        return [tuple(repr(v) if isinstance(v, float) else v for v in ex.to_row().values()) for ex in exchanges]


@pytest.mark.parametrize("run", ["plain_quota", "sasl_ssl_trace"])
def test_the_native_take_gives_the_columns_of_the_python_one(run: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every row of the bundled runs the same with the join's columns set in
    C as by join._take, and network_ms as join.network_ms computes it."""
    from kdissect.conn.brokerlog import join
    from kdissect.conn.pipeline import Analysis

    native_rows = _joined_rows(run, monkeypatch, True)
    assert native_rows == _joined_rows(run, monkeypatch, False)
    manifest = json.loads((RUNS / run / "manifest.json").read_text())
    keys = RUNS / run / "keys"
    exchanges = Analysis([RUNS / run / "capture.pcap"], [manifest["port"]],
                         tls_keylogs=[keys] if keys.exists() else [], broker_logs=[RUNS / run])
    joined = [ex for ex in exchanges if ex.broker_log == "joined"]
    assert len(joined) > 10
    for ex in joined:
        assert repr(ex.network_ms) == repr(join.network_ms(ex.request_ts, ex.response_first_ts, ex.socket_wait_ns,
                                                           ex.broker_total_ms, ex.broker_send_ms))


def test_the_native_take_leaves_odd_cases_to_the_python_one() -> None:
    """Times beyond 64 bits, or not ints, and entries of msgspec's class: join._take decides."""
    from kdissect.conn.brokerlog import join
    from kdissect.model.exchange import Exchange

    data = (template() + "\n").encode()
    for request_ts, first_ts, wait in ((10**30, 10**30 + 5_000_000, None), (1.5, 2.5, None),
                                       (1_000_000_000, 1_000_500_000, 3), (None, 5, 0)):
        (native_entry,) = parse._native_lines.block_entries(data, len(data))
        ex_native, ex_python = Exchange(), Exchange()
        for ex in (ex_native, ex_python):
            ex.request_ts, ex.response_first_ts, ex.socket_wait_ns = request_ts, first_ts, wait
        join._take(ex_native, native_entry)
        join._take_python(ex_python, native_entry)
        assert repr(ex_native.to_row()) == repr(ex_python.to_row())
        assert native_entry.matched
