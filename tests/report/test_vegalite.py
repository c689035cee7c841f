"""The report's chart specs, built without altair (kdissect.report.vegalite),
equal the specs altair writes for the same calls, on every bundled capture.

Each chart function of kdissect.report.charts runs twice on the same data:
once as the page runs it, once with its module's `alt` swapped for altair
itself (the independent source), and the two dicts must be the same Vega-Lite
spec (altair lifts a layer's shared data to the top, which Vega-Lite reads
alike: both are compared with each layer's data in the layer)."""

from __future__ import annotations

import copy
import sys
from typing import Any

import pytest

from kdissect.report import charts
from kdissect.report.data import from_captures
from tests.support.paths import REPO

CAPTURES = sorted(p for p in (REPO / "captures").glob("*.pcap*") if p.is_file())


def _layer_data_down(spec: dict[str, Any]) -> dict[str, Any]:
    spec = copy.deepcopy(spec)
    spec.pop("datasets", None)
    if "layer" in spec:
        data = spec.pop("data", None)
        for layer in spec["layer"]:
            if data is not None and "data" not in layer:
                layer["data"] = copy.deepcopy(data)
    return spec


def _altair_specs(data: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    import altair

    with monkeypatch.context() as patch:
        patch.setattr(charts, "alt", altair)
        patch.setattr(charts, "UTC", altair.Scale(type="utc"))
        return {name: (None if (made := build(data)) is None else made.to_dict())
                for name, build in charts.CHARTS.items()}


@pytest.mark.parametrize("capture", CAPTURES[:12], ids=lambda p: p.name)
def test_specs_equal_altairs(capture, monkeypatch):
    data = from_captures([capture], ports=(9092, 19092))
    ours = {name: (None if (made := build(data)) is None else made.to_dict())
            for name, build in charts.CHARTS.items()}
    theirs = _altair_specs(data, monkeypatch)
    assert set(ours) == set(theirs)
    drawn = 0
    for name in ours:
        assert (ours[name] is None) == (theirs[name] is None), name
        if ours[name] is not None:
            drawn += 1
            assert _layer_data_down(ours[name]) == _layer_data_down(theirs[name]), name
    assert drawn


def test_the_page_does_not_import_altair(tmp_path):
    """The report's path (data, charts, page) loads neither altair, vl-convert nor pyarrow."""
    import subprocess

    code = ("import sys; from kdissect.cli import main; "
            f"status = main(['report', {str(REPO / 'captures' / 'forensics_kafka.pcap')!r}, '-q', "
            f"'-o', {str(tmp_path / 'r.html')!r}]); "
            "print(status, *(name in sys.modules for name in ('altair', 'vl_convert', 'pyarrow', 'numpy')),"
            " file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert result.stderr.split()[-5:] == ["0", "False", "False", "False", "False"], result.stderr
    assert (tmp_path / "r.html").stat().st_size > 100_000
