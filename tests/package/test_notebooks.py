"""The notebooks run top to bottom (nbclient, kernel `python3`) and are stored
with their outputs cleared. They are recipes: one parameter cell at the top
(the capture or OUTDIR, the selection), one capture analysed on its own, the
library's own tables, slowest by service time. Their charts are the report's
(`kdissect.report.charts`), output as Vega-Lite 5 specs that JupyterLab draws
natively with a PNG beside each; the specs are checked to carry the data they
chart, and the notebook exported to HTML by nbconvert to hold every chart as
an image (no script needed to see it)."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from tests.support.paths import REPO

NOTEBOOKS = REPO / "notebooks"
KERNEL = "python3"


def _kernel_env(tmp_path: Path) -> None:
    """Make sure a `python3` kernel spec exists (write one in a temp dir if not)."""
    from jupyter_client.kernelspec import KernelSpecManager

    if KERNEL in KernelSpecManager().find_kernel_specs():
        return
    from ipykernel.kernelspec import write_kernel_spec

    write_kernel_spec(str(tmp_path / "kernels" / KERNEL))
    os.environ["JUPYTER_PATH"] = os.pathsep.join(
        [str(tmp_path)] + [p for p in os.environ.get("JUPYTER_PATH", "").split(os.pathsep) if p])


def _run(name: str, tmp_path: Path, timeout: int, parameters: str = "") -> nbformat.NotebookNode:
    """The notebook executed; `parameters`: lines appended to its parameter cell."""
    _kernel_env(tmp_path)
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    if parameters:
        _parameter_cell(notebook).source += "\n" + parameters
    client = NotebookClient(notebook, timeout=timeout, kernel_name=KERNEL,
                            resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()  # raises CellExecutionError on the first failing cell
    return notebook


def _outputs(notebook: nbformat.NotebookNode, kind: str) -> list:
    return [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs
            if o.output_type == kind]


VEGALITE = "application/vnd.vegalite.v5+json"


def _charts(notebook: nbformat.NotebookNode) -> list[dict]:
    """The Vega-Lite specs the notebook displayed."""
    return [o.data[VEGALITE] for kind in ("display_data", "execute_result") for o in _outputs(notebook, kind)
            if VEGALITE in o.get("data", {})]


def assert_charts_render_without_javascript(notebook: nbformat.NotebookNode) -> None:
    """Every chart output carries a PNG beside its Vega-Lite spec (what
    nbconvert's HTML, GitHub and viewers without JavaScript show), a real
    image of a real size."""
    import base64
    import struct

    charts = [o for kind in ("display_data", "execute_result") for o in _outputs(notebook, kind)
              if VEGALITE in o.get("data", {})]
    assert charts
    for output in charts:
        assert "image/png" in output.data, "a chart without a PNG renders nowhere but JupyterLab"
        png = base64.b64decode(output.data["image/png"])
        assert png.startswith(b"\x89PNG\r\n\x1a\n")
        width, height = struct.unpack(">II", png[16:24])
        assert width > 200 and height > 50, (width, height)


def _parameter_cell(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    return next(cell for cell in notebook.cells if cell.cell_type == "code")


def assert_charts_in_exported_html(notebook: nbformat.NotebookNode) -> None:
    """nbconvert's HTML export holds every chart as an inline PNG image (what
    a reader of the exported file sees, offline and without JavaScript)."""
    from nbconvert import HTMLExporter

    charts = [o for kind in ("display_data", "execute_result") for o in _outputs(notebook, kind)
              if VEGALITE in o.get("data", {})]
    body, _resources = HTMLExporter().from_notebook_node(notebook)
    images = re.findall(r'<img [^>]*src="data:image/png;base64,([A-Za-z0-9+/=]+)"', body)
    pngs = {o.data["image/png"].replace("\n", "") for o in charts}
    assert pngs and pngs <= set(images), "a chart is missing from the exported HTML"


def _printed(notebook: nbformat.NotebookNode, pattern: str) -> re.Match:
    found = re.search(pattern, _text(notebook))
    assert found, pattern
    return found


def _kdissect_json(*args: str) -> dict:
    run = subprocess.run([sys.executable, "-m", "kdissect", *args], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def _export_count(*args: str) -> int:
    run = subprocess.run([sys.executable, "-m", "kdissect", "export", *args, "-q"], cwd=REPO, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return len(run.stdout.splitlines())


def _titles(specs: list[dict]) -> set[str]:
    titles = set()
    for spec in specs:
        title = spec.get("title")
        titles.add(title.get("text") if isinstance(title, dict) else title)
    return titles


def _has_values(spec: dict) -> bool:
    datasets = spec.get("datasets", {})
    inline = spec.get("data", {}).get("values")
    return any(datasets.values()) or bool(inline) or any(
        layer.get("data", {}).get("values") for layer in spec.get("layer", []))


def _text(notebook: nbformat.NotebookNode) -> str:
    parts = []
    for cell in notebook.cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", ""))
            parts.append(out.get("data", {}).get("text/plain", ""))
    return "\n".join(parts)


@pytest.mark.parametrize("name", ["forensics.ipynb", "report.ipynb"])
def test_stored_without_outputs(name):
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, "clear the outputs before committing"


@pytest.mark.parametrize("name", ["forensics.ipynb", "report.ipynb"])
def test_one_parameter_cell_at_the_top(name):
    """The first code cell, tagged `parameters` (papermill's convention), sets
    plain values only; no other cell sets them again; every parameter is used."""
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    cell = _parameter_cell(notebook)
    assert "parameters" in cell.metadata.get("tags", [])
    names = set()
    for statement in ast.parse(cell.source).body:
        assert isinstance(statement, ast.Assign) and len(statement.targets) == 1, ast.dump(statement)
        ast.literal_eval(statement.value)  # a plain value: a string, a number, a tuple, None
        names.add(statement.targets[0].id)  # type: ignore[attr-defined]
    assert {"FILTER", "TIME_FROM", "TIME_TO"} <= names
    rest = [c.source for c in notebook.cells if c.cell_type == "code" and c is not cell]
    for source in rest:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                assert node.id not in names, (name, node.id)
    used = {node.id for source in rest for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Name)}
    assert names <= used, names - used


@pytest.mark.slow
def test_forensics_notebook_runs(tmp_path):
    notebook = _run("forensics.ipynb", tmp_path, timeout=300)
    specs = _charts(notebook)
    assert _titles(specs) >= {"Latency over time per API", "Latency distribution per API and version",
                              "Errors by API and error code", "Errors over time by API and error code"}
    assert all(_has_values(spec) for spec in specs)
    text = _text(notebook)
    assert "records in the failing request" in text
    assert "Scapy: KafkaRequest / Kafka ProduceRequest" in text
    assert "###[ ProduceResponse ]###" in text
    assert "JoinGroup v" in text and "SyncGroup v" in text  # consumer-protocol table
    assert_charts_render_without_javascript(notebook)
    assert_charts_in_exported_html(notebook)
    # one capture's tables, slowest by service time (the waits apart)
    assert "service_ms" in text and "service_p99" in text
    # one capture, not the drill-down's merged in: its exchanges are `kdissect stats`' for it alone
    capture = str(REPO / "captures" / "forensics_kafka.pcap")
    count = _kdissect_json("stats", capture, "--json")["exchanges"]
    assert _printed(notebook, r"forensics_kafka\.pcap: (\d+) of (\d+) exchanges \(no selection\)").groups() == \
        (str(count), str(count))


@pytest.mark.slow
def test_forensics_notebook_with_a_selection(tmp_path):
    """The parameter cell set to another capture, a display filter and a time
    window: the notebook runs, and says it kept the exchanges `kdissect
    export` keeps with the same options."""
    selection = ["-Y", "service_ms > 3 or error_codes", "--from", "+0.5s"]
    notebook = _run("forensics.ipynb", tmp_path, timeout=300, parameters="\n".join([
        'CAPTURE = "consume_group_kafka.pcap"', f"FILTER = {selection[1]!r}", f"TIME_FROM = {selection[3]!r}"]))
    capture = str(REPO / "captures" / "consume_group_kafka.pcap")
    kept, every = _export_count(capture, *selection), _export_count(capture)
    assert 0 < kept < every
    found = _printed(notebook, r"consume_group_kafka\.pcap: (\d+) of (\d+) exchanges \(selection: -Y (.*); --from")
    assert found.groups() == (str(kept), str(every), selection[1])
    assert_charts_in_exported_html(notebook)


@pytest.mark.slow
def test_report_notebook_runs(tmp_path):
    notebook = _run("report.ipynb", tmp_path, timeout=600)
    specs = _charts(notebook)
    assert _titles(specs) >= {"Latency distribution per API and version", "Exchanges over time per API",
                              "Latency over time per API", "Errors by API and error code",
                              "Throttling over time by client id", "Wire latency and service time per API and version"}
    assert all(_has_values(spec) for spec in specs)
    text = _text(notebook)
    assert "Spark job finished in" in text and "report page: " in text
    assert_charts_render_without_javascript(notebook)
    assert_charts_in_exported_html(notebook)
    # one capture (waits_kafka.pcap), its exchanges `kdissect stats`' for it alone
    count = _kdissect_json("stats", str(REPO / "captures" / "waits_kafka.pcap"), "--json")["exchanges"]
    assert _printed(notebook, r"(\d+) of (\d+) exchanges \(no selection\)").groups() == (str(count), str(count))
    assert "inputs: waits_kafka.pcap\n" in text
    # the same notebook on the OUTDIR that run wrote: no job, the same report
    outdir = _printed(notebook, r"tables in (\S+)").group(1)
    again = _run("report.ipynb", tmp_path, timeout=300, parameters=f"OUTDIR = {outdir!r}")
    assert f"reading the tables of {outdir}" in _text(again) and "Spark job finished" not in _text(again)
    assert _printed(again, r"(\d+) of (\d+) exchanges \(no selection\)").groups() == (str(count), str(count))
    assert _titles(_charts(again)) == _titles(specs)
