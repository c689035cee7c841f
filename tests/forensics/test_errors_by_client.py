"""`kdissect clients --table errors_by_client -o FILE` (the clients verb is
its home: the errors are counted per client id) against the error codes
tshark reads in the responses of real lab captures, and equal to the table
`kdissect stats --json` shows.

tshark counts, per client id (from the request) and error code, the
responses that carry the code anywhere (top level or per partition). The
responses tshark does not decode (versions newer than its dissector) must
carry no code in kdissect's export, so the tshark count covers everything."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from tests.support.pcaps import tshark_output
from tests.support.paths import REPO

# captures where tshark decodes every response that carries an error code (on Apache Kafka 4.4 and 3.9, Tansu)
CAPTURES = ["group_lag_kafka.pcap", "old_v0_10_1_kafka3.pcap", "old_v0_9_kafka3.pcap", "consume_group.pcap",
            "port_19092.pcap"]
_FIELDS = ["frame.number", "kafka.request_frame", "kafka.client_id", "kafka.error", "kafka.unsupported_api_version",
           "_ws.malformed", "tcp.srcport", "tcp.dstport"]


def _kdissect(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "kdissect", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return done


def _port(capture: Path) -> int:
    return json.loads(capture.with_name(capture.name.replace(".pcap", ".manifest.json")).read_text())["port"]


def _tshark_errors(capture: Path) -> tuple[Counter, set[int]]:
    """(Counter of (client id, code) over the responses tshark decodes, the
    frames of the responses it does not decode)."""
    port = _port(capture)
    text = tshark_output(capture, ["-d", f"tcp.port=={port},kafka", "-Y", "kafka", "-T", "fields",
                                   "-E", "separator=\t", *[x for f in _FIELDS for x in ("-e", f)]])
    client_of: dict[int, str] = {}
    responses = []
    for line in text.splitlines():
        frame, request_frame, client_id, errors, unsupported, malformed, source, _target = line.split("\t")
        if int(source) != port:  # a request: its client id
            client_of[int(frame)] = client_id or "(none)"
        else:
            responses.append((int(frame), request_frame, errors, bool(unsupported or malformed)))
    counts: Counter = Counter()
    undecoded = set()
    for frame, request_frame, errors, bad in responses:
        if bad or not request_frame:
            undecoded.add(frame)
            continue
        for code in {int(value) for value in errors.split(",") if value} - {0}:
            counts[(client_of[int(request_frame)], code)] += 1
    return counts, undecoded


@pytest.mark.parametrize("name", CAPTURES)
def test_errors_by_client_file_is_tshark_s_count(name: str, tmp_path: Path) -> None:
    capture = REPO / "captures" / name
    expected, undecoded = _tshark_errors(capture)
    export = tmp_path / "rows.jsonl"
    _kdissect("export", str(capture), "-o", str(export), "-q")
    for line in export.read_text().splitlines():
        row = json.loads(line)
        if row["response_frame"] in undecoded:  # tshark cannot vouch for it: it must hold no code
            assert not row["error_code"] and not row["error_codes"], row
    assert expected  # each capture has errors
    for ext in ("jsonl", "csv", "parquet"):
        out = tmp_path / f"errors.{ext}"
        _kdissect("clients", str(capture), "--table", "errors_by_client", "-o", str(out), "-q")
        if ext == "jsonl":
            rows = [json.loads(line) for line in out.read_text().splitlines()]
        elif ext == "csv":
            with out.open(newline="") as stream:
                rows = [{**r, "error_code": int(r["error_code"]), "exchanges": int(r["exchanges"]),
                         "normal_flow": r["normal_flow"] == "True"} for r in csv.DictReader(stream)]
        else:
            rows = pq.read_table(out).to_pylist()
        assert {(r["client_id"], r["error_code"]): r["exchanges"] for r in rows} == dict(expected), ext
    stats = json.loads(_kdissect("stats", str(capture), "--json").stdout)
    assert [{"client_id": r["client_id"], "error": r["error_name"], "normal_flow": r["normal_flow"],
             "exchanges": r["exchanges"]} for r in rows] == stats["errors_by_client"]
