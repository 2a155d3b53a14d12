"""The notebooks run against tests/fixtures and write their figures; they are committed without outputs.

Each notebook runs in a kernel of this interpreter (the .venv's python, through a kernel spec made in a
temporary folder, never a global Jupyter's): poster.ipynb reads its folders from $PIPEGNN_RESULTS /
$PIPEGNN_FIGURES, memory_and_halo.ipynb gets them injected after its `parameters` cell, as papermill
does; timeline.ipynb shows the run directory tests/fixtures/timeline (injected), then a missing one.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib.image
import nbformat
import pytest
from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpecManager
from nbclient import NotebookClient

from pipegnn import results

from tests.helpers import ROOT

NOTEBOOKS = ROOT / "notebooks"
RECORDS = ROOT / "tests" / "fixtures" / "records"
TIMELINE = ROOT / "tests" / "fixtures" / "timeline"  # a pipelining run with its trace.json
KERNEL = "pipegnn-test"
#: notebook -> (figures it writes from the test records, figures it must skip with a printed line)
FIGURES = {
    "poster.ipynb": ({"epoch_time_vs_chunks.png": results.plot_epoch_time_vs_chunks,
                      "accuracy_vs_chunks.png": results.plot_accuracy_vs_chunks}, []),
    "memory_and_halo.ipynb": ({"memory_vs_chunks.png": results.plot_memory_vs_chunks,
                               "inflation_by_partitioner.png": results.plot_inflation_by_partitioner},
                              # the test records have one graph size, edge count and hidden size
                              ["scaling.png", "scaling_edges.png", "scaling_hidden.png"]),
}
#: notebook -> its parameters: (environment variable of the input, input variable, output variable)
PARAMETERS = {"poster.ipynb": ("PIPEGNN_RESULTS", "results_dir", "figures_dir"),
              "memory_and_halo.ipynb": ("PIPEGNN_RESULTS", "results_dir", "figures_dir"),
              "timeline.ipynb": ("PIPEGNN_RUN", "run_dir", "figures_dir")}


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kernels folder with one spec: ipykernel on this interpreter, one thread, Agg."""
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-Xfrozen_modules=off", "-m", "ipykernel_launcher",
                 "-f", "{connection_file}"],
        "display_name": "pipegnn test (.venv)", "language": "python",
        "env": {"OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg", "IPYTHONDIR": str(root / "ipython")},
    }))
    return root / "kernels"


def _execute(name: str, kernels: Path, injected: dict[str, str] | None = None) -> str:
    """Run the notebook (in its own folder, as Jupyter does) and return everything it printed."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    if injected:
        at = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
        cell = nbformat.v4.new_code_cell("\n".join(f"{k} = {v!r}" for k, v in injected.items()))
        cell.metadata["tags"] = ["injected-parameters"]
        nb.cells.insert(at + 1, cell)
    km = KernelManager(kernel_name=KERNEL, kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernels)]))
    NotebookClient(nb, km=km, timeout=120, resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    return "".join(out.get("text", "") for c in nb.cells if c.cell_type == "code" for out in c.outputs
                   if out.output_type == "stream")


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_notebook_writes_figures_from_records(name: str, kernels: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    figures = tmp_path / "figures"
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))  # connection files, not ~/.local
    if name == "poster.ipynb":  # the environment variables
        monkeypatch.setenv("PIPEGNN_RESULTS", str(RECORDS))
        monkeypatch.setenv("PIPEGNN_FIGURES", str(figures))
        printed = _execute(name, kernels)
    else:  # papermill-style injection overrides the defaults
        monkeypatch.setenv("PIPEGNN_RESULTS", str(tmp_path / "nothing-here"))
        printed = _execute(name, kernels, {"results_dir": str(RECORDS), "figures_dir": str(figures)})
    assert f"{RECORDS}: 32 runs: 31 completed, 1 invalid" in printed
    assert "left out 1 runs that did not complete: {'invalid': 1}" in printed
    written, skipped = FIGURES[name]
    df = results.load(RECORDS)
    for png, plot in written.items():
        path = figures / png
        assert f"wrote {path}" in printed
        assert path.stat().st_size > 20_000, png
        width, height = plot(df).get_size_inches() * results.DPI  # the same figure drawn here
        assert matplotlib.image.imread(path).shape == (round(height), round(width), 4), png
    for png in skipped:
        assert f"skipped {png}: " in printed and not (figures / png).exists()
    assert sorted(p.name for p in figures.iterdir()) == sorted(written)


def test_timeline_notebook_shows_a_run_or_says_there_is_none(kernels: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    figures = tmp_path / "figures"
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("PIPEGNN_RUN", str(tmp_path / "nothing-here"))
    printed = _execute("timeline.ipynb", kernels, {"run_dir": str(TIMELINE), "figures_dir": str(figures)})
    assert f"{TIMELINE}: 1 run: 1 completed" in printed
    assert "pipelining, schedule gpipe, 4 micro-batches, balance 2,2 (auto): bubble " in printed
    assert "% in theory; ideal speedup " in printed
    path = figures / "timeline.png"
    assert f"wrote {path}" in printed and sorted(p.name for p in figures.iterdir()) == ["timeline.png"]
    width, height = results.plot_timeline(TIMELINE).get_size_inches() * results.DPI
    assert matplotlib.image.imread(path).shape == (round(height), round(width), 4)

    monkeypatch.setenv("PIPEGNN_FIGURES", str(tmp_path / "none"))
    printed = _execute("timeline.ipynb", kernels)  # $PIPEGNN_RUN names no run
    assert f"no run at {tmp_path / 'nothing-here'}" in printed and "0 runs: 0 completed" in printed
    assert "skipped timeline.png: timeline: no trace at " in printed
    assert not list((tmp_path / "none").iterdir())


@pytest.mark.parametrize("name", sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")))
def test_notebook_committed_without_outputs(name: str) -> None:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.outputs == [] and c.execution_count is None for c in code)
    assert [c for c in code if "parameters" in c.metadata.get("tags", [])] == [code[0]]
    assert all(p in code[0].source for p in PARAMETERS[name]), "a new notebook: add it to PARAMETERS"
