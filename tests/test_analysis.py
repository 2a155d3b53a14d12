"""pipegnn.analysis: summaries over seeds, ratios to a baseline, and the figures (checked on their Axes)."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import matplotlib.image
import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import LineCollection

from pipegnn import analysis
from pipegnn.analysis import (NoData, device_type, draw, plot_accuracy_vs_chunks, plot_epoch_time_vs_chunks,
                              plot_inflation_by_partitioner, plot_memory_vs_chunks, plot_scaling, plot_time_to_accuracy_vs_chunks,
                              plot_timeline, relative, repeats_note, setup_label, summarize)
from pipegnn.results import flatten, load

RECORDS = Path(__file__).resolve().parent / "data" / "records"
DEVICES = {"cpu2": ("gpipe", ["cpu", "cpu"]), "cpu": ("single", "cpu"), "gpu": ("single", "cuda:0"),
           "gpu2": ("gpipe", ["cuda:0", "cuda:1"])}


def record(*, status: str = "completed", dataset: str = "cora", num_nodes: int = 2708, model: str = "gat",
           framework: str = "pyg", devices: str = "cpu2", chunks: int = 1, halo: str = "exact",
           partition: str = "metis", seed: int = 0, hidden: int = 8, **values: float) -> dict[str, Any]:
    """A hand-made record shaped like pipegnn.train's; ``values`` fill final/timing/memory/microbatch."""
    engine, dev = DEVICES[devices]
    engine_cfg = {"name": engine, **({"devices": dev} if engine == "gpipe" else {"device": dev})}
    final = {k: values[k] for k in ("test_acc", "val_acc") if k in values}
    if "tta_train_s" in values:
        final["time_to_accuracy"] = {"train_s": values["tta_train_s"], "epoch": 3, "target_val_acc": 0.7}
    timing = {k: values[k] for k in ("epoch_time_median_s",) if k in values}
    memory = {"peak_rss_bytes": values["rss_mb"] * 2 ** 20 if "rss_mb" in values else None,
              "peak_device_bytes": {"cuda:0": values["device_mb"] * 2 ** 20} if "device_mb" in values else {}}
    mb = {k: values[k] for k in ("inflation", "replication") if k in values}
    done = status == "completed"
    return {"status": status, "error": None if done else "RuntimeError: boom",
            "config": {"chunks": chunks, "microbatch": {"halo": halo, "partition": partition},
                       "train": {"seed": seed}, "dataset": {"name": dataset},
                       "model": {"name": model, "hidden": hidden, "layers": 2},
                       "framework": {"name": framework}, "engine": engine_cfg},
            "choices": {}, "dataset": {"num_nodes": num_nodes}, "final": final if done else {},
            "timing": timing if done else {}, "memory": memory, "microbatch": mb if done else {}}


def frame(*records: dict[str, Any], index: list[int] | None = None) -> pd.DataFrame:
    return pd.DataFrame([flatten(r) for r in records], index=index)


# ------------------------------------------------------------------------------------------- summarize

def test_summarize_mean_std_count_over_seeds_and_dropped_runs() -> None:
    df = frame(record(halo="exact", chunks=2, seed=0, test_acc=0.7),
               record(halo="exact", chunks=2, seed=1, test_acc=0.8),
               record(halo="exact", chunks=2, seed=2, test_acc=0.9),
               record(halo="exact", chunks=2, seed=3, status="failed", test_acc=0.1),
               record(halo="none", chunks=2, seed=0, test_acc=0.5),
               record(halo="none", chunks=2, seed=1, status="invalid"),
               record(halo="none", chunks=2, seed=2, status="failed"),
               record(halo="none", chunks=4, seed=0),  # completed without an accuracy
               record(halo="none", chunks=4, seed=1, test_acc=0.25))
    out = summarize(df, ["halo", "chunks"], ["test_acc"])
    assert list(out.columns) == ["halo", "chunks", "runs", "test_acc_mean", "test_acc_std", "test_acc_count"]
    assert list(zip(out["halo"], out["chunks"])) == [("exact", 2), ("none", 2), ("none", 4)]
    assert list(out["runs"]) == [3, 1, 2] and list(out["test_acc_count"]) == [3, 1, 1]
    assert out["test_acc_mean"].tolist() == pytest.approx([0.8, 0.5, 0.25])
    assert out.loc[0, "test_acc_std"] == pytest.approx(0.1)  # sample std: sqrt((0.01 + 0 + 0.01) / 2)
    assert math.isnan(out.loc[1, "test_acc_std"]) and math.isnan(out.loc[2, "test_acc_std"])
    assert out.attrs["dropped"] == 3 and out.attrs["dropped_by_status"] == {"failed": 2, "invalid": 1}


def test_summarize_keys_metrics_and_derived_columns() -> None:
    df = frame(record(devices="cpu2", hidden=8, epoch_time_median_s=0.5, rss_mb=100.0),
               record(devices="cpu2", hidden=8, seed=1, epoch_time_median_s=1.5, rss_mb=300.0),
               record(devices="cpu", hidden=16, epoch_time_median_s=2.0, rss_mb=50.0))
    out = summarize(df, ["setup", "model.hidden"], ["epoch_time_median_s", "peak_rss_mb"])
    assert list(out["setup"]) == ["gpipe 2×cpu", "single cpu"] and list(out["cfg.model.hidden"]) == [8, 16]
    assert out["epoch_time_median_s_mean"].tolist() == [1.0, 2.0]
    assert out["peak_rss_mb_mean"].tolist() == [200.0, 50.0]
    assert out.loc[0, "peak_rss_mb_std"] == pytest.approx(math.sqrt(2) * 100)
    assert out.attrs["dropped"] == 0 and out.attrs["dropped_by_status"] == {}
    only_failed = summarize(frame(record(status="failed"), record(status="oom")), "halo", "test_acc")
    assert only_failed.empty and only_failed.attrs["dropped_by_status"] == {"failed": 1, "oom": 1}
    with pytest.raises(KeyError, match="colour"):
        summarize(df, "colour", "test_acc")


# -------------------------------------------------------------------------------------------- relative

def test_relative_to_full_batch_single_device_within_groups() -> None:
    base = {"chunks": 1, "halo": "none", "engine": "single"}
    records = [
        record(framework="pyg", devices="cpu", chunks=1, halo="none", seed=0, epoch_time_median_s=0.25),
        record(framework="pyg", devices="cpu", chunks=1, halo="none", seed=1, epoch_time_median_s=0.75),
        record(framework="pyg", devices="cpu2", chunks=4, halo="exact", epoch_time_median_s=1.5),
        record(framework="pyg", devices="cpu2", chunks=8, halo="none", epoch_time_median_s=0.125),
        record(framework="dgl", devices="cpu", chunks=1, halo="none", epoch_time_median_s=2.0),
        record(framework="dgl", devices="cpu2", chunks=4, halo="exact", epoch_time_median_s=3.0),
        record(framework="pyg", devices="gpu", chunks=1, halo="none", epoch_time_median_s=0.0625),
        record(framework="pyg", devices="gpu2", chunks=4, halo="exact", epoch_time_median_s=0.25),
        record(framework="pyg", devices="cpu2", chunks=4, halo="exact", dataset="citeseer", num_nodes=3327,
               epoch_time_median_s=1.0),  # no baseline for citeseer
        record(framework="pyg", devices="cpu2", chunks=4, halo="exact", status="failed"),
    ]
    index = [10 * i for i in range(len(records))]
    out = relative(frame(*records, index=index), "epoch_time_median_s", base)
    assert out.name == "epoch_time_median_s_relative" and list(out.index) == index
    # pyg/cpu baseline = mean of its two seeds = 0.5; dgl/cpu = 2.0; pyg/cuda = 0.0625
    expected = [0.5, 1.5, 3.0, 0.25, 1.0, 1.5, 1.0, 4.0, math.nan, math.nan]
    np.testing.assert_array_equal(out.to_numpy(), expected)


def test_relative_ambiguous_baseline_and_custom_within() -> None:
    df = frame(record(devices="cpu", chunks=1, halo="none", epoch_time_median_s=1.0),
               record(devices="cpu2", chunks=1, halo="none", epoch_time_median_s=2.0),
               record(devices="cpu2", chunks=4, halo="exact", epoch_time_median_s=6.0))
    with pytest.raises(ValueError, match="engine"):
        relative(df, "epoch_time_median_s", {"chunks": 1, "halo": "none"})
    # within the same setup (engine and devices), the gpipe rows compare with gpipe's full batch
    out = relative(df, "epoch_time_median_s", {"chunks": 1, "halo": "none"},
                   within=("dataset", "model", "framework", "setup"))
    assert out.tolist() == [1.0, 1.0, 3.0]


def test_setup_label_and_device_type() -> None:
    assert setup_label("gpipe", "cpu,cpu") == "gpipe 2×cpu"
    assert setup_label("single", "cuda:0") == "single cuda"
    assert setup_label("pipelining", "cuda:0,cuda:1,cuda:2,cuda:3") == "pipelining 4×cuda"
    assert setup_label("single", None) == "single" and device_type(float("nan")) is None
    assert device_type("cuda:0,cpu") == "cpu+cuda" and device_type("cpu") == "cpu"


# --------------------------------------------------------------------------------------------- figures

def _png(path: Path, panels_wide: int, panels_high: int) -> None:
    assert path.is_file() and path.stat().st_size > 5_000
    image = matplotlib.image.imread(path)
    w, h = analysis.PANEL_SIZE
    assert image.shape[:2] == (round(h * analysis.DPI * panels_high), round(w * analysis.DPI * panels_wide))


def _legend(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_plot_epoch_time_vs_chunks_one_line_per_framework_and_device(tmp_path: Path) -> None:
    records = [record(framework=f, devices=d, chunks=c, halo="none", seed=s,
                      epoch_time_median_s=c * (2 if d == "cpu" else 1) + s)
               for f in ("pyg", "dgl") for d in ("cpu", "cpu2") for c in (1, 2, 4, 8) for s in (0, 1)]
    records.append(record(status="failed", framework="pyg", devices="cpu", chunks=16, halo="none"))
    fig = plot_epoch_time_vs_chunks(frame(*records), tmp_path / "t.png")
    (ax,) = fig.axes
    assert len(ax.lines) == 4
    assert _legend(ax) == ["dgl, gpipe 2×cpu", "dgl, single cpu", "pyg, gpipe 2×cpu", "pyg, single cpu"]
    assert ax.get_xscale() == "log" and ax.xaxis.get_transform().base == 2
    assert list(ax.get_xticks()) == [1, 2, 4, 8]  # the failed chunks=16 run is left out
    assert ax.get_ylabel() == "median epoch time (s)" and "(chunks)" in ax.get_xlabel()
    assert ax.get_title() == "cora (2708 nodes) / gat"
    line = ax.lines[_legend(ax).index("pyg, single cpu")]
    assert list(line.get_xdata()) == [1, 2, 4, 8] and list(line.get_ydata()) == [2.5, 4.5, 8.5, 16.5]
    _png(tmp_path / "t.png", 1, 1)


def test_plot_accuracy_vs_chunks_lines_per_halo_with_error_bars(tmp_path: Path) -> None:
    acc = {"none": [0.8, 0.6, 0.4], "exact": [0.8, 0.8, 0.8], "historical": [0.8, 0.78, 0.76]}
    records = [record(halo=h, chunks=c, seed=s, test_acc=acc[h][i] + 0.02 * s)
               for h in ("exact", "historical", "none") for i, c in enumerate((1, 4, 16)) for s in (0, 1, 2)]
    fig = plot_accuracy_vs_chunks(frame(*records), tmp_path / "a.png")
    (ax,) = fig.axes
    assert _legend(ax) == ["naive (no halo)", "exact halo", "historical halo"]
    assert len(ax.lines) == 3 and ax.get_ylabel() == "test accuracy (%)"
    assert fig.get_suptitle() == "Accuracy vs micro-batches (mean ± std over 3 seeds)"
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [82.0, 62.0, 42.0])  # mean of seeds, in %
    bars = [c for c in ax.collections if isinstance(c, LineCollection)]
    assert len(bars) == 3
    (x, low), (_, high) = bars[0].get_segments()[0]  # naive at chunks 1: 82 +- std(80, 82, 84) = 2
    assert x == 1 and (low, high) == pytest.approx((80.0, 84.0))
    _png(tmp_path / "a.png", 1, 1)


def test_plot_time_to_accuracy_leaves_out_runs_that_never_reached_it(tmp_path: Path) -> None:
    records = [record(halo=h, chunks=c, seed=s, tta_train_s=(1.0 if h == "exact" else 2.0) * c + s)
               for h in ("exact", "historical") for c in (1, 4) for s in (0, 1)]
    records.append(record(halo="exact", chunks=4, seed=2))  # never reached its target: no time
    fig = plot_time_to_accuracy_vs_chunks(frame(*records), tmp_path / "t.png")
    (ax,) = fig.axes
    assert ax.get_ylabel() == "time to accuracy (s of training)"
    assert fig.get_suptitle() == "Time to accuracy vs micro-batches (mean ± std over 2 seeds)"
    assert _legend(ax) == ["exact halo", "historical halo"]
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [1.5, 4.5])  # exact: mean of seeds 0, 1
    np.testing.assert_allclose(ax.lines[1].get_ydata(), [2.5, 8.5])
    _png(tmp_path / "t.png", 1, 1)


def test_panels_split_settings_that_vary_off_the_axes(tmp_path: Path) -> None:
    records = [record(halo=h, chunks=c, framework=f, test_acc=0.5, epoch_time_median_s=0.1 * c)
               for h in ("none", "exact") for f in ("pyg", "dgl") for c in (1, 2)]
    records += [record(dataset="citeseer", num_nodes=3327, halo="exact", chunks=c, test_acc=0.6,
                       epoch_time_median_s=0.2) for c in (1, 2)]
    fig = plot_epoch_time_vs_chunks(frame(*records))
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["citeseer (3327 nodes) / gat\nexact halo", "cora (2708 nodes) / gat\nexact halo",
                      "cora (2708 nodes) / gat\nnaive (no halo)"]
    assert [len(ax.lines) for ax in fig.axes] == [1, 2, 2]
    fig = plot_accuracy_vs_chunks(frame(*records), where={"dataset": "cora"})
    assert [ax.get_title() for ax in fig.axes] == ["cora (2708 nodes) / gat\ndgl",
                                                   "cora (2708 nodes) / gat\npyg"]
    assert [_legend(ax) for ax in fig.axes] == [["naive (no halo)", "exact halo"]] * 2
    # the colour of a halo mode is the same in every panel
    assert fig.axes[0].lines[1].get_color() == fig.axes[1].lines[1].get_color()
    fig.savefig(tmp_path / "p.png")


def test_plot_memory_vs_chunks_device_memory_when_recorded(tmp_path: Path) -> None:
    cpu = [record(halo=h, chunks=c, rss_mb=100.0 * c) for h in ("none", "exact") for c in (1, 2)]
    (ax,) = plot_memory_vs_chunks(frame(*cpu), tmp_path / "m.png").axes
    assert ax.get_ylabel() == "peak resident memory (MiB)" and len(ax.lines) == 2
    assert list(ax.lines[0].get_ydata()) == [100.0, 200.0]
    gpu = [record(devices="gpu", halo="exact", chunks=c, rss_mb=500.0, device_mb=64.0 / c) for c in (1, 2, 4)]
    (ax,) = plot_memory_vs_chunks(frame(*gpu)).axes
    assert ax.get_ylabel() == "peak device memory (MiB)" and list(ax.lines[0].get_ydata()) == [64, 32, 16]
    both = plot_memory_vs_chunks(frame(*cpu, *gpu))  # one panel per device setup, each with its memory
    assert [ax.get_ylabel() for ax in both.axes] == ["peak resident memory (MiB)", "peak device memory (MiB)"]
    assert [ax.get_title().split("\n")[1] for ax in both.axes] == ["gpipe 2×cpu", "single cuda"]
    _png(tmp_path / "m.png", 1, 1)


def test_plot_inflation_by_partitioner_pools_frameworks(tmp_path: Path) -> None:
    records = [record(halo=h, partition=p, chunks=c, framework=f, inflation=1 + c / 8 * (i + 1),
                      replication=1.5)
               for h in ("exact", "historical") for i, p in enumerate(("metis", "random", "sequential"))
               for c in (2, 8) for f in ("pyg", "dgl")]
    fig = plot_inflation_by_partitioner(frame(*records), tmp_path / "i.png")
    assert len(fig.axes) == 2  # one panel per halo mode; pyg and dgl runs pooled (same plans)
    for ax in fig.axes:
        assert _legend(ax) == ["metis", "random", "sequential"] and len(ax.lines) == 3
        assert ax.get_ylabel() == "work inflation (× one micro-batch)"
    assert list(fig.axes[0].lines[2].get_ydata()) == [1.75, 4.0]
    _png(tmp_path / "i.png", 2, 1)
    (ax, _) = plot_inflation_by_partitioner(frame(*records), metric="replication").axes
    assert ax.get_ylabel().startswith("replication")


def test_plot_scaling_time_and_memory_vs_nodes(tmp_path: Path) -> None:
    records = [record(dataset="synthetic", num_nodes=n, model=m, chunks=c, seed=s,
                      epoch_time_median_s=n / 1000 * (2 if c > 1 else 1), rss_mb=n / 100 / c)
               for n in (8192, 16384, 32768) for m in ("gcn", "gat") for c in (1, 8) for s in (0, 1)]
    records.append(record(dataset="cora", chunks=1, epoch_time_median_s=1.0, rss_mb=1.0))  # one size only
    fig = plot_scaling(frame(*records), tmp_path / "s.png")
    assert len(fig.axes) == 4  # gat and gcn panels, each epoch time over memory
    time_ax, memory_ax = fig.axes[0], fig.axes[1]
    assert time_ax.get_title() == "synthetic / gat"
    assert _legend(time_ax) == ["full batch", "8 micro-batches"] and len(memory_ax.lines) == 2
    assert time_ax.get_xlabel() == "graph nodes" and time_ax.get_ylabel() == "median epoch time (s)"
    assert memory_ax.get_ylabel() == "peak resident memory (MiB)"
    assert list(time_ax.lines[1].get_ydata()) == [16.384, 32.768, 65.536]
    assert list(memory_ax.lines[1].get_xdata()) == [8192, 16384, 32768]
    _png(tmp_path / "s.png", 2, 2)


def test_plot_scaling_against_edges_or_hidden_size() -> None:
    def shaped(density: float, hidden: int, model: str, chunks: int) -> dict[str, Any]:
        r = record(dataset="synthetic", num_nodes=32000, model=model, hidden=hidden, chunks=chunks,
                   epoch_time_median_s=density * 1e4 * hidden / 8 * chunks, rss_mb=100.0)
        r["config"]["dataset"]["density"] = density
        r["dataset"]["num_edges"] = round(density * 32000 * 31999)
        return r
    records = [shaped(d, 8, m, c) for d in (0.0002, 0.0004, 0.0008) for m in ("gcn", "gat") for c in (1, 8)]
    fig = plot_scaling(frame(*records), x="num_edges")
    assert fig.get_suptitle() == "Scaling with graph edges (one run per point)" and len(fig.axes) == 4
    time_ax = fig.axes[0]
    assert time_ax.get_title() == "synthetic (32000 nodes) / gat"  # density is on the axis, not a panel
    assert time_ax.get_xlabel() == "graph edges"
    assert list(time_ax.lines[0].get_xdata()) == [204794, 409587, 819174]
    np.testing.assert_allclose(time_ax.lines[1].get_ydata(), [16.0, 32.0, 64.0])
    records = [shaped(0.0008, h, "gat", c) for h in (8, 16, 32) for c in (1, 8)]
    records.append(shaped(0.0002, 8, "gat", 1))  # another graph: its own panel, one value: not drawn
    fig = plot_scaling(frame(*records), x="model.hidden")
    assert fig.get_suptitle() == "Scaling with hidden size (one run per point)" and len(fig.axes) == 2
    assert fig.axes[0].get_title() == "synthetic (32000 nodes) / gat\ndensity=0.0008"
    assert list(fig.axes[0].lines[0].get_xdata()) == [8, 16, 32]
    with pytest.raises(NoData, match="model.hidden"):
        plot_scaling(frame(record(chunks=1, epoch_time_median_s=1.0)).drop(columns="cfg.model.hidden"),
                     x="model.hidden")


def test_hidden_size_splits_panels_and_settings_a_dataset_lacks_do_not() -> None:
    synthetic = []
    for hidden in (8, 16):
        for chunks in (1, 2):
            r = record(dataset="synthetic", num_nodes=32000, hidden=hidden, chunks=chunks,
                       epoch_time_median_s=0.1 * hidden)
            r["config"]["dataset"]["density"] = 0.0008
            synthetic.append(r)
    cora = [record(chunks=c, epoch_time_median_s=0.5) for c in (1, 2)]
    fig = plot_epoch_time_vs_chunks(frame(*synthetic, *cora))
    # one density among the graphs that have one: no density panels
    assert [ax.get_title() for ax in fig.axes] == ["cora (2708 nodes) / gat\nhidden=8",
                                                   "synthetic (32000 nodes) / gat\nhidden=8",
                                                   "synthetic (32000 nodes) / gat\nhidden=16"]
    assert list(fig.axes[2].lines[0].get_ydata()) == [1.6, 1.6]
    with pytest.raises(ValueError, match="cfg.model.hidden"):  # a baseline over two hidden sizes
        relative(frame(*synthetic), "epoch_time_median_s", {"chunks": 1})


def test_no_data_raises_and_draw_skips(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one_size = frame(record(chunks=1, epoch_time_median_s=1.0), record(chunks=8, epoch_time_median_s=2.0))
    with pytest.raises(NoData, match="more than one value of num_nodes"):
        plot_scaling(one_size)
    assert draw(plot_scaling, one_size, tmp_path / "scaling.png") is None
    assert not (tmp_path / "scaling.png").exists()
    assert capsys.readouterr().out.startswith("skipped scaling.png: ")
    failed = frame(record(status="failed"))
    for plot in (plot_epoch_time_vs_chunks, plot_accuracy_vs_chunks, plot_memory_vs_chunks,
                 plot_inflation_by_partitioner, plot_time_to_accuracy_vs_chunks):
        with pytest.raises(NoData):
            plot(failed)
    with pytest.raises(NoData, match="matching"):
        plot_epoch_time_vs_chunks(one_size, where={"halo": "historical"})
    assert draw(plot_epoch_time_vs_chunks, one_size, tmp_path / "t.png") is not None
    assert capsys.readouterr().out == f"wrote {tmp_path / 't.png'}\n"


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
    assert _legend(ax) == ["forward", "backward", "wait for activation", "wait for gradient"]
    waits = [p for p in ax.patches if p.get_hatch()]
    assert len(waits) == 2 and all(p.get_height() < 0.8 for p in waits)
    assert sorted(t.get_text() for t in ax.texts) == ["0", "0", "0", "0", "1", "1", "1"]  # not B1 of stage 1
    assert fig.get_suptitle() == "Stage timeline: pipelining, schedule gpipe, 2 micro-batches, epoch 1"
    image = matplotlib.image.imread(tmp_path / "timeline.png")  # two panels wide, a row per stage
    width = 2 * analysis.PANEL_SIZE[0] * analysis.DPI
    assert image.shape[:2] == (round((1.6 + 0.55 * 2) * analysis.DPI), width)


def test_plot_timeline_draws_the_first_layer_transform_boxes() -> None:
    """The once-per-step first-layer transform (micro-batch -1) gets its own bars, without a number."""
    shared = [{"name": "first-layer transform", "cat": "shared_forward", "ph": "X", "ts": 10000.0,
               "dur": 3000.0, "pid": 0, "tid": 0, "args": {"stage": 0, "micro_batch": -1}},
              {"name": "first-layer transform backward", "cat": "shared_backward", "ph": "X", "ts": 13000.0,
               "dur": 1000.0, "pid": 0, "tid": 0, "args": {"stage": 0, "micro_batch": -1}}]
    trace = {**_trace(), "traceEvents": [*_trace()["traceEvents"], *shared]}
    (ax,) = plot_timeline(trace).axes
    assert len(ax.patches) == 12
    assert _legend(ax) == ["forward", "backward", "first-layer transform", "first-layer transform backward",
                           "wait for activation", "wait for gradient"]
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


# ------------------------------------------------------------------------------- committed real records

def test_committed_records_match_their_generator() -> None:
    sys.path.insert(0, str(RECORDS.parent))
    try:
        from make_records import jobs
    finally:
        sys.path.remove(str(RECORDS.parent))
    df = load(RECORDS)
    names = sorted(str(Path(p).parent.relative_to(RECORDS)) for p in df["path"])
    assert names == sorted(name for name, _ in jobs())
    assert df["status"].value_counts().to_dict() == {"completed": 31, "invalid": 1}
    done = df[df["status"] == "completed"]
    assert set(done["framework"]) == {"pyg", "dgl"} and set(done["halo"]) == {"none", "exact", "historical"}
    assert set(done["epochs"]) == {2} and done["test_acc"].between(0, 1).all()
    summary = summarize(df, ["halo", "chunks"], "test_acc")
    assert summary.attrs["dropped_by_status"] == {"invalid": 1}


def test_speedup_vs_chunks_is_over_the_single_engine_at_the_same_chunks() -> None:
    df = load(RECORDS / "devices")
    fig = analysis.plot_speedup_vs_chunks(df, where={"framework": "dgl"})
    lines = [l for l in fig.axes[0].get_lines() if l.get_label() and not l.get_label().startswith("_")]
    assert [l.get_label() for l in lines] == ["gpipe"]  # records written before pipelines recorded more
    single = df[(df.engine == "single") & (df.framework == "dgl")].set_index("chunks").epoch_time_median_s
    gpipe = df[(df.engine == "gpipe") & (df.framework == "dgl")].set_index("chunks").epoch_time_median_s
    x, y = lines[0].get_data()
    assert list(x) == sorted(gpipe.index) and list(y) == pytest.approx([single[k] / gpipe[k] for k in x])
    with pytest.raises(NoData, match="needs single-engine runs"):
        analysis.plot_speedup_vs_chunks(df[df.engine != "single"])


def test_repeats_note_counts_the_runs_behind_each_point() -> None:
    runs = frame(*[record(chunks=c, seed=s) for c in (1, 2) for s in range(5 if c == 1 else 3)])
    assert repeats_note(runs, ["chunks"]) == "mean ± std over 3-5 seeds"
    assert repeats_note(runs[runs["seed"] < 3], ["chunks"]) == "mean ± std over 3 seeds"
    assert repeats_note(runs, ["chunks", "seed"]) == "one run per point"
