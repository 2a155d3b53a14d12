"""The stage timeline of one traced step (pipegnn/results/timeline_plot.py), checked on its Axes."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib.image
import pytest

from pipegnn.results.figures import DPI, PANEL_SIZE, NoData
from pipegnn.results.timeline_plot import _stage_label, plot_timeline

from tests.helpers import legend_texts


def _trace() -> dict[str, Any]:
    """A pipelining trace (Chrome trace format, as pipegnn.timeline.trace writes it): 2 ranks, 2
    micro-batches; stage 1 has no thread_name (labelled by its number)."""
    def box(name: str, kind: str, stage: int, m: int, ts: float, dur: float) -> dict[str, Any]:
        return {"name": name, "cat": kind, "ph": "X", "ts": ts, "dur": dur, "pid": stage, "tid": stage,
                "args": {"stage": stage, "micro_batch": m}}
    meta = [{"name": "process_name", "ph": "M", "pid": r, "args": {"name": f"rank {r}"}} for r in (0, 1)]
    meta.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": 0,
                 "args": {"name": "stage 0 (transform0) on rank0:cpu"}})
    boxes = [box("F0", "forward", 0, 0, 0.0, 2000.0), box("F1", "forward", 0, 1, 2000.0, 2000.0),
             box("recv F0", "recv_forward", 1, 0, 100.0, 1900.0), box("F0", "forward", 1, 0, 2000.0, 1000.0),
             box("F1", "forward", 1, 1, 4000.0, 1000.0), box("B0", "backward", 1, 0, 5000.0, 1500.0),
             box("B1", "backward", 1, 1, 6500.0, 100.0),  # too narrow for its number
             box("recv B0", "recv_backward", 0, 0, 4000.0, 2500.0),
             box("B0", "backward", 0, 0, 6500.0, 1000.0),
             box("B1", "backward", 0, 1, 7500.0, 2500.0)]
    return {"traceEvents": meta + boxes, "displayTimeUnit": "ms",
            "otherData": {"epoch": 1, "engine": "pipelining", "schedule": "gpipe", "chunks": 2,
                          "stage_units": [["transform0"], ["propagate0"]]}}


def test_plot_timeline_one_row_per_stage_one_bar_per_box(tmp_path: Path) -> None:
    fig = plot_timeline(_trace(), tmp_path / "timeline.png")
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_yticklabels()] == ["stage 0 (transform0)\non rank0:cpu", "stage 1"]
    assert ax.get_ylim() == (1.5, -0.5)  # stage 0 on top
    rows = [round(p.get_y() + p.get_height() / 2) for p in ax.patches]
    assert (rows.count(0), rows.count(1)) == (5, 5)
    assert sorted((round(p.get_x(), 3), round(p.get_width(), 3)) for p in ax.patches if p.get_y() < 0.5) == \
        [(0.0, 2.0), (2.0, 2.0), (4.0, 2.5), (6.5, 1.0), (7.5, 2.5)]  # ms
    assert ax.get_xlim() == (0.0, 10.0) and "(ms)" in ax.get_xlabel()
    assert legend_texts(ax) == ["forward", "backward", "wait for activation", "wait for gradient"]
    waits = [p for p in ax.patches if p.get_hatch()]
    assert len(waits) == 2 and all(p.get_height() < 0.8 for p in waits)
    assert sorted(t.get_text() for t in ax.texts) == ["0", "0", "0", "0", "1", "1", "1"]  # not B1 of stage 1
    assert fig.get_suptitle() == "Stage timeline: pipelining, schedule gpipe, 2 micro-batches, epoch 1"
    image = matplotlib.image.imread(tmp_path / "timeline.png")  # two panels wide, a row per stage
    width = 2 * PANEL_SIZE[0] * DPI
    assert image.shape[:2] == (round((1.6 + 0.55 * 2) * DPI), width)


def test_plot_timeline_draws_the_first_layer_transform_boxes() -> None:
    """The once-per-step first-layer transform (micro-batch -1) gets its own bars, without a number."""
    shared = [{"name": "first-layer transform", "cat": "shared_forward", "ph": "X", "ts": 10000.0,
               "dur": 3000.0, "pid": 0, "tid": 0, "args": {"stage": 0, "micro_batch": -1}},
              {"name": "first-layer transform backward", "cat": "shared_backward", "ph": "X", "ts": 13000.0,
               "dur": 1000.0, "pid": 0, "tid": 0, "args": {"stage": 0, "micro_batch": -1}}]
    trace = {**_trace(), "traceEvents": [*_trace()["traceEvents"], *shared]}
    (ax,) = plot_timeline(trace).axes
    assert len(ax.patches) == 12
    assert legend_texts(ax) == ["forward", "backward", "first-layer transform",
                                "first-layer transform backward", "wait for activation", "wait for gradient"]
    assert "-1" not in [t.get_text() for t in ax.texts]


def test_plot_timeline_reads_a_run_directory_and_needs_boxes(tmp_path: Path) -> None:
    (tmp_path / "trace.json").write_text(json.dumps(_trace()))
    (tmp_path / "untraced-run").mkdir()
    fig = plot_timeline(tmp_path, title="one step")
    assert fig.get_suptitle() == "one step" and len(fig.axes[0].patches) == 10
    assert len(plot_timeline(tmp_path / "trace.json").axes[0].patches) == 10
    empty = {**_trace(), "traceEvents": [e for e in _trace()["traceEvents"] if e["ph"] == "M"]}
    with pytest.raises(NoData, match="no box"):
        plot_timeline(empty)
    with pytest.raises(NoData, match="no trace at"):
        plot_timeline(tmp_path / "untraced-run")


def test_stage_labels_cut_long_unit_lists() -> None:
    """A 64-layer stage's 130 units become their first and last and a count; short lists stay whole."""
    units = " ".join(["input", *(f"transform{i} propagate{i}" for i in range(64)), "output"])
    assert _stage_label(f"stage 0 ({units}) on cpu") == "stage 0 (input ... output, 130\nunits)\non cpu"
    assert _stage_label("stage 1 (transform0 propagate0) on rank1:cpu") == \
        "stage 1 (transform0 propagate0)\non rank1:cpu"
    assert _stage_label("stage 2") == "stage 2"
