"""The map's figure (pipegnn/results/tta_plot.py): wall time to accuracy against peak memory, a point per
setting, checked on its Axes."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pipegnn.results.figures import NoData
from pipegnn.results.tta_plot import plot_time_to_accuracy_vs_memory, setting_label

from tests.helpers import make_frame, make_record


def _run(chunks: int, halo: str, engine: str, seed: int, wall: float, best: float, rss: float,
         fanouts: list[int] | None = None) -> dict[str, Any]:
    record = make_record(devices="cpu", chunks=chunks, halo=halo, seed=seed, rss_mb=rss, tta_train_s=1.0)
    record["final"]["time_to_accuracy"]["wall_s"] = wall
    record["final"]["time_to_best"] = {"epoch": 9, "wall_s": best, "train_s": 1.0}
    record["config"]["microbatch"]["fanouts"] = fanouts
    record["config"]["engine"] = ({"name": "single", "device": "cpu", "threads": 2} if engine == "single"
                                  else {"name": "pipelining", "devices": ["cpu", "cpu"]})
    return record


def test_setting_labels() -> None:
    assert setting_label(1, "none", None, "single", 2) == "full batch, 1 process x 2 threads"
    assert setting_label(8, "sampled", "25,10", "pipelining") == "sampled [25,10] k=8, pipelining"
    assert setting_label(32, "exact", None, "single", float("nan")) == "exact k=32, 1 process"
    assert setting_label(8, "sampled", "10,10", "dgl_loader", 2) == \
        "sampled [10,10] k=8, DGL's loader, 1 process x 2 threads"


def test_a_point_per_setting_with_its_time_to_best(tmp_path: Path) -> None:
    records = [_run(1, "none", "single", s, 10.0 + s, 20.0, 1000.0 + 10 * s) for s in (0, 1)]
    records += [_run(8, "sampled", "pipelining", s, 4.0, 6.0 + 2 * s, 300.0, [25, 10]) for s in (0, 1)]
    records += [_run(8, "exact", "single", s, 30.0, 30.0, 500.0) for s in (0, 1)]
    never = _run(8, "exact", "single", 2, 1.0, 1.0, 1.0)
    never["final"]["time_to_accuracy"]["wall_s"] = None  # never reached 98% of its best: left out
    fig = plot_time_to_accuracy_vs_memory(make_frame(*records, never), tmp_path / "map.png")
    (ax,) = fig.axes
    assert ax.get_legend() is None  # one legend below the panels: inside, it hid the slowest points
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "full batch, 1 process x 2 threads", "exact k=8, 1 process x 2 threads",
        "sampled [25,10] k=8, pipelining"]
    assert ax.get_xscale() == ax.get_yscale() == "log"
    assert "mean ± std over 2 seeds" in fig.get_suptitle()
    hollow = {tuple(np.ravel(line.get_xydata())) for line in ax.lines if line.get_markerfacecolor() == "none"}
    assert hollow == {(1005.0, 20.0), (300.0, 7.0), (500.0, 30.0)}  # the best epoch: mean over seeds
    # errorbar draws its points as a line of one marker: the time to 98% of the best, mean over seeds
    points = {tuple(np.ravel(line.get_xydata())) for line in ax.lines
              if line.get_marker() not in ("None", None, "") and line.get_markerfacecolor() != "none"}
    assert points == {(1005.0, 10.5), (300.0, 4.0), (500.0, 30.0)}
    assert (tmp_path / "map.png").stat().st_size > 5_000


def test_no_run_reached_its_target() -> None:
    record = _run(1, "none", "single", 0, 1.0, 1.0, 1.0)
    record["final"]["time_to_accuracy"]["wall_s"] = None
    with pytest.raises(NoData, match="tta_wall_s"):
        plot_time_to_accuracy_vs_memory(make_frame(record))


def test_all_processes_memory_sums_a_pipelines_ranks_and_launcher(tmp_path: Path) -> None:
    """memory="total": a pipeline's point at its ranks' and launcher's peaks summed (a one-process run's at
    its own); no figure when every run is one process."""
    single = [_run(1, "none", "single", s, 10.0, 20.0, 1000.0) for s in (0, 1)]
    piped = [_run(8, "historical", "pipelining", s, 5.0, 8.0, 700.0) for s in (0, 1)]
    for s, record in enumerate(piped):
        record["memory"] |= {"peak_rss_bytes_per_rank": [700 << 20, (400 + 100 * s) << 20],
                             "launcher_peak_rss_bytes": 300 << 20}
    df = make_frame(*single, *piped)
    assert df["peak_rss_total_mb"].tolist() == [1000.0, 1000.0, 1400.0, 1500.0]
    fig = plot_time_to_accuracy_vs_memory(df, tmp_path / "total.png", memory="total")
    (ax,) = fig.axes
    points = {tuple(np.ravel(line.get_xydata())) for line in ax.lines
              if line.get_marker() not in ("None", None, "") and line.get_markerfacecolor() != "none"}
    assert points == {(1000.0, 10.0), (1450.0, 5.0)}
    assert ax.get_xlabel() == "peak resident memory, all processes (MiB)"
    assert "of all processes" in fig.get_suptitle()
    process = plot_time_to_accuracy_vs_memory(df)  # the largest process: the pipeline's rank 0
    assert {tuple(np.ravel(line.get_xydata())) for line in process.axes[0].lines
            if line.get_marker() not in ("None", None, "") and line.get_markerfacecolor() != "none"} == {
        (1000.0, 10.0), (700.0, 5.0)}
    with pytest.raises(NoData, match="every run is one process"):
        plot_time_to_accuracy_vs_memory(make_frame(*single), memory="total")
    with pytest.raises(ValueError, match="memory='device'"):
        plot_time_to_accuracy_vs_memory(df, memory="device")
