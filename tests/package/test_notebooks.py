"""The notebooks run top to bottom (nbclient, kernel `python3`) and are stored
with their outputs cleared. Their charts are the report's
(`kdissect.report.charts`), output as Vega-Lite 5 specs that JupyterLab draws
natively; the specs are checked to carry the data they chart."""

from __future__ import annotations

import os
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


def _run(name: str, tmp_path: Path, timeout: int) -> nbformat.NotebookNode:
    _kernel_env(tmp_path)
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
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
    # one capture's tables, slowest by service time (the waits apart)
    assert "service_ms" in text and "service_p99" in text


@pytest.mark.slow
def test_report_notebook_runs(tmp_path):
    notebook = _run("report.ipynb", tmp_path, timeout=600)
    specs = _charts(notebook)
    assert _titles(specs) >= {"Latency distribution per API and version", "Exchanges over time per API",
                              "Latency over time per API", "Errors by API and error code",
                              "Throttling over time by client id"}
    assert all(_has_values(spec) for spec in specs)
    text = _text(notebook)
    assert "Spark job finished in" in text and "report page: " in text
    assert_charts_render_without_javascript(notebook)
