"""The spark-submit entry (kdissect/spark/submit_main.py): the options of
`kdissect spark` without --master, parsed and reported the same way, and a
run in the session it finds gives `kdissect export`'s exchanges."""

from __future__ import annotations

from pathlib import Path

import pytest

from kdissect.spark import submit_main
from tests.support.spark import canonical, editcap_split, export_rows, local_session, table_rows
from tests.support.paths import REPO

CAPTURES = REPO / "captures"


@pytest.mark.parametrize("argv, message", [
    ([], "Missing argument 'CAPTURE...'"),
    (["ADMIN"], "Missing option '-o'"),
    (["ADMIN", "-o", "OUT", "--master", "local[1]"], "No such option '--master'"),
    (["ADMIN", "-o", "OUT", "--split-size", "12q"], "Invalid value for '--split-size': '12q': expected a number"),
    (["ADMIN", "-o", "OUT", "-p", "0"], "Invalid value for '-p' / '--port': 0 is not in the range 1<=x<=65535"),
])
def test_usage_errors_as_kdissect_spark_gives_them(capsys, tmp_path, argv, message) -> None:
    args = [str(CAPTURES / "admin.pcap") if a == "ADMIN" else str(tmp_path / "out") if a == "OUT" else a for a in argv]
    assert submit_main.main(args) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"kdissect: error: {err.splitlines()[0][len('kdissect: error: '):]}",
                                "kdissect: hint: 'submit_main.py --help' lists the options"], err
    assert message in err.splitlines()[0] and "Usage:" not in err, err
    assert not (tmp_path / "out").exists()


def test_bad_input_is_one_line_before_anything_starts(capsys, tmp_path) -> None:
    assert submit_main.main([str(tmp_path / "missing.pcap"), "-o", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.splitlines() == [f"kdissect: error: {tmp_path / 'missing.pcap'}: no such file or directory"]
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")
def test_a_run_in_the_session_found_equals_export(capsys, tmp_path) -> None:
    pieces = editcap_split(CAPTURES / "admin.pcap", 20, tmp_path / "rotated")
    assert len(pieces) >= 3
    with local_session(cores=1, shuffle_partitions=2):
        status = submit_main.main([str(tmp_path / "rotated" / "*.pcap"), "-o", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert status == 0 and "exchanges: 17 " in out
    assert canonical(table_rows(tmp_path / "out", "exchanges")) == canonical(export_rows(pieces, tmp_path / "x.parquet"))
