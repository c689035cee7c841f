"""Bounded memory of the summary verbs (issue #23, item 7): their start-up
loads no columnar libraries, and per-key tallies past a limit spill to
sorted runs on disk and merge back to the same output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
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
