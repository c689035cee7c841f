"""`kdissect topics`, `groups`, `clients` and the forensic part of `stats`:
every table in every format holds the Python API's rows; bad options are one
line and exit status 2."""

from __future__ import annotations

import csv
import json
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kdissect.cli import main
from kdissect.forensics import COMMAND_TABLES, TABLE_COLUMNS, forensic_tables
from tests.support.paths import REPO

CAPTURES = REPO / "captures"
FORENSICS = CAPTURES / "forensics_kafka.pcap"


@pytest.fixture(scope="module")
def expected():
    return forensic_tables([FORENSICS])[0]


def _cli(capsys, argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _timestamps(table: str) -> set[str]:
    return {name for name, kind in TABLE_COLUMNS[table] if kind == "timestamp"}


def _lists(table: str) -> set[str]:
    return {name for name, kind in TABLE_COLUMNS[table] if kind.startswith("list<")}


@pytest.mark.parametrize("command,table", [(c, t) for c, tables in COMMAND_TABLES.items() for t in tables])
def test_every_table_in_every_format(capsys, tmp_path, expected, command, table) -> None:
    rows = expected.table(table)
    assert rows, table
    names = [name for name, _ in TABLE_COLUMNS[table]]
    for ext in ("jsonl", "csv", "parquet"):
        target = tmp_path / f"{table}.{ext}"
        code, out, err = _cli(capsys, [command, str(FORENSICS), "--table", table, "-o", str(target)])
        assert code == 0, err
        assert out == "" and "exchanges:" in err
        if ext == "jsonl":
            got = [json.loads(line, parse_float=Decimal) for line in target.read_text().splitlines()]
            for row in got:
                for name in _timestamps(table):
                    if row[name] is not None:  # exact decimal seconds (microsecond capture)
                        row[name] = int(row[name] * 1_000_000_000)
                for name, value in row.items():
                    if isinstance(value, Decimal):
                        row[name] = float(value)
        elif ext == "csv":
            with target.open(newline="") as handle:
                got = list(csv.DictReader(handle))
            assert list(got[0]) == names
            for row in got:
                for name in names:
                    value = row[name]
                    if value == "":
                        row[name] = None
                    elif name in _lists(table):
                        row[name] = json.loads(value)
                    elif name in _timestamps(table):
                        row[name] = int(Decimal(value) * 1_000_000_000)
            rows = [{k: (str(v) if v is not None and k not in _lists(table) and k not in _timestamps(table)
                         else v) for k, v in row.items()} for row in expected.table(table)]
            rows = [{k: (repr(float(v)) if isinstance(v, str) and k in _floats(table) else v)
                     for k, v in row.items()} for row in rows]
            got = [{k: (repr(float(v)) if isinstance(v, str) and k in _floats(table) else v)
                    for k, v in row.items()} for row in got]
        else:
            got = pq.read_table(target).to_pylist()
            for row in got:
                for name in _timestamps(table):
                    if row[name] is not None:
                        row[name] = int(row[name].timestamp() * 1_000_000) * 1000
        assert [list(row) for row in got] == [names] * len(got)
        assert got == rows, (table, ext)
        rows = expected.table(table)


def _floats(table: str) -> set[str]:
    return {name for name, kind in TABLE_COLUMNS[table] if kind == "float64"}


@pytest.mark.parametrize("command", sorted(COMMAND_TABLES))
def test_text_tables(capsys, command) -> None:
    code, out, err = _cli(capsys, [command, str(FORENSICS), "-q"])
    assert code == 0 and err == ""
    assert out.splitlines()[0].startswith({"topics": "topics:", "groups": "group generations",
                                           "clients": "clients"}[command])
    assert "fx-orders" in out or "fx-classic" in out


def test_topic_filter(capsys, tmp_path, expected) -> None:
    target = tmp_path / "t.jsonl"
    assert _cli(capsys, ["topics", str(FORENSICS), "-t", "fx-txn", "-o", str(target), "-q"])[0] == 0
    got = [json.loads(line) for line in target.read_text().splitlines()]
    assert got and {row["topic"] for row in got} == {"fx-txn"}
    assert len(got) == sum(1 for row in expected.topics if row["topic"] == "fx-txn")


@pytest.mark.parametrize("argv,message", [
    (["groups", "--table", "topics"], "--table 'topics': groups has the tables groups, group_commits"),
    (["topics", "--e2e-horizon", "0"], "--e2e-horizon must be more than 0 seconds"),
    (["clients", "-o", "out.txt"], "cannot tell the output format"),
])
def test_bad_options_are_one_line(capsys, tmp_path, argv, message) -> None:
    code, out, err = _cli(capsys, [*argv[:1], str(FORENSICS), *argv[1:]])
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_not_a_capture(capsys, tmp_path) -> None:
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"not a capture at all")
    code, _, err = _cli(capsys, ["clients", str(junk)])
    assert code == 2 and err.startswith("kdissect: error:") and len(err.strip().splitlines()) == 1


def test_stats_json_holds_the_forensic_tables(capsys, expected) -> None:
    code, out, _ = _cli(capsys, ["stats", str(FORENSICS), "--json"])
    assert code == 0
    payload = json.loads(out)
    for name in ("topics", "topic_lag", "end_to_end", "groups", "group_commits", "clients", "producers",
                 "rebalance_storms", "member_rejoins", "metadata_storms", "unresolved_topic_ids"):
        assert payload[name] == json.loads(json.dumps(expected.table(name))), name
    assert payload["exchanges"] > 0 and "accounting" in payload


def test_stats_text_flags(capsys) -> None:
    code, out, _ = _cli(capsys, ["stats", str(FORENSICS)])
    assert code == 0
    storms = out.split("rebalance storms")[1].split("\n\n")[0]
    assert "fx-classic" in storms
    rejoins = out.split("members that left and rejoined")[1].split("\n\n")[0]
    assert "fx-classic-3" in rejoins
