"""The export / show / stats commands, run in-process through the CLI shell."""

from __future__ import annotations

import csv
import json
import random
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kdissect.cli import main
from kdissect.model.exchange import COLUMN_NAMES, LIST_COLUMNS, TIMESTAMP_COLUMNS
from tests.support.pipeline import ports_of, reference_captures, run
from tests.support.paths import REPO

CAPTURES = reference_captures()


@pytest.fixture(scope="module")
def capture() -> Path:
    assert CAPTURES, "no captures in captures/"
    # the richest small capture: most exchanges per run
    return max(CAPTURES, key=lambda p: p.stat().st_size)


def _port_args(path: Path) -> list[str]:
    args = []
    for port in ports_of(path):
        args += ["--port", str(port)]
    return args


def _cli(capsys, argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_export_jsonl_to_stdout(capsys, capture):
    code, out, err = _cli(capsys, ["export", str(capture), *_port_args(capture)])
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    expected, _ = run([capture], ports_of(capture))
    assert len(rows) == len(expected) > 0
    assert all(list(row) == COLUMN_NAMES for row in rows)
    assert [r["correlation_id"] for r in rows] == [e.correlation_id for e in expected]
    assert "exchanges:" in err and "frames:" in err  # accounting summary on stderr


def test_export_formats_agree(capsys, capture, tmp_path):
    outputs = {}
    for ext in ("jsonl", "csv", "parquet"):
        target = tmp_path / f"table.{ext}"
        code, _, _ = _cli(capsys, ["export", str(capture), *_port_args(capture), "-o", str(target)])
        assert code == 0 and target.exists()
        outputs[ext] = target
    # timestamps: exact decimal seconds in text, microseconds in Parquet
    # (the captures are microsecond pcap), compared as exact integers
    texts = [json.loads(line, parse_float=Decimal) for line in outputs["jsonl"].read_text().splitlines()]
    rows = [{k: (float(v) if isinstance(v, Decimal) and k not in TIMESTAMP_COLUMNS else v) for k, v in r.items()}
            for r in texts]

    table = pq.read_table(outputs["parquet"])
    assert table.column_names == COLUMN_NAMES
    for name in TIMESTAMP_COLUMNS:
        assert table.schema.field(name).type == pa.timestamp("us", tz="UTC")
        table = table.set_column(table.column_names.index(name), name, table.column(name).cast(pa.int64()))
    micros = [{k: (int(v * 1_000_000) if k in TIMESTAMP_COLUMNS and v is not None else v) for k, v in r.items()}
              for r in rows]
    assert table.to_pylist() == micros

    with outputs["csv"].open(newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        assert header == COLUMN_NAMES
        csv_rows = list(reader)
    assert len(csv_rows) == len(rows)
    for cells, row in zip(csv_rows, rows):
        for name, cell in zip(header, cells):
            value = row[name]
            if value is None:
                assert cell == ""
            elif name in LIST_COLUMNS:
                assert json.loads(cell) == value
            elif name in TIMESTAMP_COLUMNS:
                assert Decimal(cell) == value
            elif isinstance(value, float):
                assert float(cell) == value
            else:
                assert cell == str(value)


def test_show_one_line_per_exchange_and_filters(capsys, capture):
    expected, _ = run([capture], ports_of(capture))
    code, out, _ = _cli(capsys, ["show", str(capture), *_port_args(capture)])
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == len(expected)
    first = expected[0]
    assert f"corr={first.correlation_id}" in lines[0] and first.broker in lines[0]

    api = first.api_name
    code, out, _ = _cli(capsys, ["show", str(capture), *_port_args(capture), "--api", api])
    assert len(out.splitlines()) == sum(1 for e in expected if e.api_name == api)
    assert all(f" {api} v" in line for line in out.splitlines())

    # --slower-than is about service time (the wait the protocol asked for set apart)
    slow = sorted(e.service_ms for e in expected if e.service_ms is not None)
    threshold = slow[len(slow) // 2]
    code, out, _ = _cli(capsys, ["show", str(capture), *_port_args(capture), "--slower-than", str(threshold)])
    assert len(out.splitlines()) == sum(1 for e in expected if e.service_ms is not None and e.service_ms > threshold)

    code, out, _ = _cli(capsys, ["show", str(capture), *_port_args(capture), "--errors"])
    assert len(out.splitlines()) == sum(1 for e in expected if e.error_code or e.error_codes)

    client_id = next(e.client_id for e in expected if e.client_id)
    code, out, _ = _cli(capsys, ["show", str(capture), *_port_args(capture), "--client-id", client_id])
    assert len(out.splitlines()) == sum(1 for e in expected if e.client_id == client_id)


def test_show_verbose_prints_trees(capsys, capture):
    code, out, _ = _cli(capsys, ["show", "-v", str(capture), *_port_args(capture)])
    assert code == 0
    assert "  request:" in out and "  response:" in out


def test_stats_tables(capsys, capture):
    expected, _ = run([capture], ports_of(capture))
    code, out, _ = _cli(capsys, ["stats", str(capture), *_port_args(capture)])
    assert code == 0
    for title in ("latency (ms) by API", "latency (ms) by client id", "latency (ms) by broker",
                  "error codes", "per-partition errors", "throttling", "without response", "accounting"):
        assert title in out
    code, out, _ = _cli(capsys, ["stats", "--json", str(capture), *_port_args(capture)])
    data = json.loads(out)
    answered = [e for e in expected if e.latency_ms is not None and e.api_key is not None]
    assert sum(r["count"] for r in data["latency_by_api"]) == len(answered)
    assert data["accounting"]["exchanges"] == len(expected)
    by_api = {(r["api"], r["version"]): r for r in data["latency_by_api"]}
    some = answered[0]
    values = sorted(e.latency_ms for e in answered if (e.api_name, e.api_version) == (some.api_name, some.api_version))
    assert by_api[(some.api_name, some.api_version)]["max"] == values[-1]


@pytest.mark.parametrize("argv, message", [
    (["export", "/nonexistent/file.pcap"], "/nonexistent/file.pcap: no such file or directory"),
    (["export", "EMPTY"], "no capture files found in EMPTY"),
    (["show", "EMPTY/*.pcap"], "EMPTY/*.pcap: no file matches"),
    (["records", "EMPTY/**"], "no capture files found in EMPTY/**"),
    (["stats", "/etc/hostname"], "/etc/hostname: not a pcap, pcapng or gzip capture file"),
])
def test_bad_input_one_line_error(capsys, tmp_path, argv, message):
    empty = tmp_path / "empty"
    (empty / "sub").mkdir(parents=True)
    (empty / "sub" / "notes.txt").write_text("not a capture")
    code, out, err = _cli(capsys, [arg.replace("EMPTY", str(empty)) for arg in argv])
    assert code == 2
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kdissect: error:")
    assert message.replace("EMPTY", str(empty)) in lines[0]


def test_bad_output_extension(capsys, capture, tmp_path):
    code, _, err = _cli(capsys, ["export", str(capture), "-o", str(tmp_path / "x.xlsx")])
    assert code == 2 and "format" in err


def test_bad_option_value(capsys, capture):
    code, _, err = _cli(capsys, ["export", str(capture), "--port", "70000"])
    assert code != 0 and "Traceback" not in err


def _corruptions(data: bytes, rng: random.Random):
    yield "flipped", bytes(b ^ 0xFF if rng.random() < 0.002 else b for b in data)
    for _ in range(3):
        cut = rng.randrange(1, len(data))
        yield f"cut{cut}", data[:cut]
    yield "garbage-appended", data + rng.randbytes(3000)
    yield "broken-header", rng.randbytes(24) + data[24:]
    yield "zeroed-middle", data[: len(data) // 2] + bytes(512) + data[len(data) // 2 + 512 :]
    body = bytearray(data)
    for _ in range(20):
        pos = rng.randrange(24, len(body))
        body[pos] = rng.randrange(256)
    yield "random-bytes", bytes(body)


# seed 0 corrupts the richest capture; the others corrupt two smaller ones
# of other shapes (the Java client's many APIs, a pipelined producer), so each seed's
# eight corruptions hit different APIs at a third of the cost
CORRUPTED = {0: None, 1: "java_clients_kafka.pcap", 2: "produce_pipelined.pcap"}


@pytest.mark.parametrize("seed", sorted(CORRUPTED))
def test_corrupted_captures_never_crash(capsys, capture, tmp_path, seed):
    rng = random.Random(seed)
    if CORRUPTED[seed] is not None:
        capture = next(p for p in CAPTURES if p.name == CORRUPTED[seed])
    data = capture.read_bytes()
    for name, corrupted in _corruptions(data, rng):
        target = tmp_path / f"{name}.pcap"
        target.write_bytes(corrupted)
        for command in ("export", "stats"):
            code, _, err = _cli(capsys, [command, str(target), *_port_args(capture)])
            assert code in (0, 2), f"{command} on {name}: exit {code}: {err[-500:]}"
            assert "internal error" not in err and "Traceback" not in err, f"{name}: {err[-500:]}"


# -- hand-built captures -------------------------------------------------------

from tests.support.pipeline import (  # noqa: E402
    Conversation,
    heartbeat_request,
    heartbeat_response,
    request_v0_header,
    sasl_handshake_request,
    sasl_handshake_response,
    write_pcap,
)


def _sasl_capture(path: Path) -> Path:
    import struct

    conv = Conversation(client=("fd00::1", 40000), broker=("fd00::2", 9092)).handshake()
    conv.send(sasl_handshake_request(1))
    conv.reply(sasl_handshake_response(1))
    token = b"\x00alice\x00hunter2-pass"
    frame = request_v0_header(36, 0, 2) + struct.pack(">i", len(token)) + token
    conv.send(struct.pack(">i", len(frame)) + frame)
    conv.reply(struct.pack(">i", 12) + struct.pack(">ihhi", 2, 0, -1, 0))
    conv.close()
    return write_pcap(path, conv.segments)


def test_show_verbose_redacts_secrets(capsys, tmp_path):
    capture = _sasl_capture(tmp_path / "sasl.pcap")
    code, out, err = _cli(capsys, ["show", "-v", str(capture)])
    assert code == 0, err
    assert "[fd00::1]:40000 -> [fd00::2]:9092" in out
    assert "SaslAuthenticate v0" in out and "[malformed]" not in out
    assert "hunter2" not in out and "redacted" in out
    code, out, _ = _cli(capsys, ["show", "-v", "--show-secrets", str(capture)])
    assert "hunter2" in out


def test_export_detects_kafka_on_unnamed_port(capsys, tmp_path):
    conv = Conversation(broker=("10.1.1.1", 31000)).handshake()
    conv.send(heartbeat_request(1, client_id="detect-me"))
    conv.reply(heartbeat_response(1, error_code=25))
    conv.close()
    capture = write_pcap(tmp_path / "other-port.pcap", conv.segments)
    code, out, _ = _cli(capsys, ["export", str(capture)])
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["broker"], r["client_id"], r["error_code"], r["status"]) for r in rows] == \
        [("10.1.1.1:31000", "detect-me", 25, "ok")]
    code, out, err = _cli(capsys, ["export", "--no-detect", str(capture)])
    assert out == "" and "1 other" in err


SASL_CAPTURE = REPO / "captures" / "sasl.pcap"


def test_real_sasl_capture_redacted_and_raw_tokens_counted(capsys):
    # the lab's broker has no users: kafka-python logs in as "alice" with SCRAM
    code, out, err = _cli(capsys, ["show", "-v", str(SASL_CAPTURE)])
    assert code == 0
    assert "SaslAuthenticate" in out and "n=alice" not in out and "redacted" in out
    assert "raw SASL" in err and " 0 raw SASL" not in err
    code, out, _ = _cli(capsys, ["show", "-v", "--show-secrets", str(SASL_CAPTURE)])
    assert "n=alice" in out
