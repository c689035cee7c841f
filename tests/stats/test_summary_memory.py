"""Bounded memory of the summary verbs (issue #23, item 7): their start-up
loads no columnar libraries, and per-key tallies past a limit spill to
sorted runs on disk and merge back to the same output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.paths import REPO

CAPTURES = REPO / "captures"


@pytest.mark.parametrize("verb", [["stats"], ["stats", "--json"], ["clients", "-q"]])
def test_text_summaries_do_not_import_pyarrow_or_numpy(verb: list[str]) -> None:
    """pyarrow and numpy cost about 45 MB at start: only the columnar
    outputs (-o x.parquet) and the report need them."""
    argv = [verb[0], str(CAPTURES / "java_transactions_kafka.pcap"), *verb[1:]]
    code = (f"import sys; from kdissect.cli import main; status = main({argv!r}); "
            "print(status, 'pyarrow' in sys.modules, 'numpy' in sys.modules, file=sys.stderr)")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO)
    assert result.stderr.split()[-3:] == ["0", "False", "False"], result.stderr
    assert result.stdout  # the tables were printed


def _kdissect(args: list[str], spill_keys: int | None = None) -> str:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("KDISSECT_SPILL_KEYS", None)
    if spill_keys is not None:
        env["KDISSECT_SPILL_KEYS"] = str(spill_keys)
    result = subprocess.run([sys.executable, "-m", "kdissect", *args], capture_output=True, text=True, env=env,
                            cwd=REPO)
    assert result.returncode == 0, result.stderr
    return result.stdout


FACES = [["stats", "--json"], ["stats"], ["clients", "-q"], ["clients", "-q", "--table", "clients"],
         ["clients", "-q", "--table", "producers"]]


@pytest.mark.parametrize("capture", ["java_transactions_kafka.pcap", "forensics_kafka.pcap", "go_clients_kafka.pcap",
                                     "consume_group_kafka.pcap"])
def test_spilled_tallies_give_the_same_output(capture: str) -> None:
    """A limit of one key spills at every new client id; the merged runs must
    print exactly what the in-memory tallies print, on every face."""
    for face in FACES:
        args = [face[0], str(CAPTURES / capture), *face[1:]]
        assert _kdissect(args, spill_keys=1) == _kdissect(args), face


@pytest.fixture(scope="module")
def many_clients(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3,000 distinct client ids over 60 connections (benchmarks/manyclients.py)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from manyclients import write_capture

    path = tmp_path_factory.mktemp("many") / "manyclients-3000.pcap"
    assert write_capture(path, 3000, each=2, connections=60) == 6000
    return path


def test_many_client_ids_spilled_and_in_memory_agree(many_clients: Path, tmp_path: Path) -> None:
    """Many runs (3,000 ids, 7 keys in memory: the runs are merged into one
    on the way, kdissect.forensics.spill.MAX_RUNS) give the in-memory output;
    every client id is there once, with its two exchanges."""
    import json

    for face in FACES[:3]:
        args = [face[0], str(many_clients), *face[1:]]
        assert _kdissect(args, spill_keys=7) == _kdissect(args), face
    payload = json.loads(_kdissect(["stats", str(many_clients), "--json"], spill_keys=7))
    rows = payload["latency_by_client"]
    assert [row["client_id"] for row in rows] == sorted(f"client-{n}" for n in range(3000))
    assert {row["count"] for row in rows} == {2}
    assert len(payload["clients"]) == 3000 and {row["requests"] for row in payload["clients"]} == {2}
    out = tmp_path / "clients.jsonl"
    _kdissect(["clients", str(many_clients), "-q", "-o", str(out)], spill_keys=7)
    assert [json.loads(line)["client_id"] for line in out.read_text().splitlines()] == \
        [row["client_id"] for row in payload["clients"]]


def test_report_data_is_the_same_when_spilled(many_clients: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The report's data (its stats part, as the page reads it) from spilled
    tallies equals the in-memory one; the distribution chart keeps the busiest."""
    import json

    from kdissect.report.data import from_captures

    def data(keys: int | None) -> str:
        if keys is None:
            monkeypatch.delenv("KDISSECT_SPILL_KEYS", raising=False)
        else:
            monkeypatch.setenv("KDISSECT_SPILL_KEYS", str(keys))
        found = from_captures([many_clients])
        return json.dumps(found["stats"], default=list, sort_keys=True, allow_nan=True)

    assert data(5) == data(None)


def test_spill_map_merges_partial_tallies_and_removes_its_files() -> None:
    from kdissect.forensics.spill import SpillMap

    def merge(into: list[int], other: list[int]) -> None:
        into[0] += other[0]

    spilled = SpillMap(lambda: [0], merge, limit=3)
    expected: dict[str, int] = {}
    for n in range(500):
        key = f"k{(n * 37) % 101}"
        spilled[key][0] += n
        expected[key] = expected.get(key, 0) + n
    assert spilled.runs and spilled.scratch.path is not None
    directory = spilled.scratch.path
    assert [(key, tally[0]) for key, tally in spilled.items()] == sorted(expected.items())
    assert len(spilled) == 101
    spilled.close()
    assert not os.path.exists(directory)


def test_json_pieces_are_json_dumps() -> None:
    import json
    import math

    from kdissect.forensics.spill import RowSpool, json_pieces

    rows = [{"client_id": f"c{n}\u202e\n", "p50": math.nan if n % 3 else n / 7, "list": [n, None]}
            for n in range(40)]
    obj = {"exchanges": 3, "rows": RowSpool(rows, limit=4), "empty": RowSpool([], limit=4), "nested": {"a": [1]},
           "small": RowSpool(rows[:2], limit=4)}
    plain = {**obj, "rows": rows, "empty": [], "small": rows[:2]}
    assert "".join(json_pieces(obj, allow_nan=True)) == json.dumps(plain, indent=2, allow_nan=True) + "\n"


def test_forensics_state_travels_whole_when_spilled(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Spark tasks pickle their tallies to the driver: a spilled client
    tally arrives whole (its runs read back), and merges to the same rows."""
    import pickle

    from kdissect.forensics import FORENSIC_APIS, Forensics
    from kdissect.conn.pipeline import analyze

    capture = CAPTURES / "java_transactions_kafka.pcap"

    def tallied(keys: str | None) -> Forensics:
        if keys is None:
            monkeypatch.delenv("KDISSECT_SPILL_KEYS", raising=False)
        else:
            monkeypatch.setenv("KDISSECT_SPILL_KEYS", keys)
        forensics = Forensics()
        exchanges, _ = analyze([capture], keep_apis=FORENSIC_APIS)
        for ex in exchanges:
            forensics.add(ex)
        forensics.finish()
        return forensics

    spilled = tallied("1")
    assert spilled.clients.stats.runs  # it did spill
    travelled = Forensics.from_state(pickle.loads(pickle.dumps(spilled.state())))
    merged = Forensics.from_state(pickle.loads(pickle.dumps(tallied(None).state())))
    merged.merge(Forensics.from_state(pickle.loads(pickle.dumps(Forensics().state()))))
    assert travelled.tables().clients == merged.tables().clients
    assert len(travelled.tables().clients) > 1


@pytest.mark.parametrize("capture", ["consume_group_kafka.pcap", "forensics_kafka.pcap"])
def test_errors_by_client_spilled_counts_and_order(capture: str) -> None:
    """errors_by_client (client id x error) spills like the other tallies per
    client id: with one key in memory its rows still count what `export`'s
    rows carry, failures first, then by client id, each client's errors by
    exchanges."""
    import json

    from kdissect.conn.normal_flow import is_normal_flow_name
    from kdissect.protocol.errors import error_name

    expected: dict[tuple[str, str], int] = {}
    for line in _kdissect(["export", str(CAPTURES / capture), "-q"]).splitlines():
        row = json.loads(line)
        codes = set(row["error_codes"] or ()) | ({row["error_code"]} if row["error_code"] else set())
        for code in codes - {0}:
            key = (row["client_id"] if row["client_id"] is not None else "(none)", error_name(code))
            expected[key] = expected.get(key, 0) + 1
    assert expected  # the capture has error codes to tally
    rows = json.loads(_kdissect(["stats", "--json", str(CAPTURES / capture)], spill_keys=1))["errors_by_client"]
    assert {(r["client_id"], r["error"]): r["exchanges"] for r in rows} == expected
    assert all(r["normal_flow"] == is_normal_flow_name(r["error"]) for r in rows)
    order = [(r["normal_flow"], r["client_id"], -r["exchanges"], r["error"]) for r in rows]
    assert order == sorted(order)
