"""Figures of the runs table (pipegnn/results/figures.py), checked on their Axes; the committed records they
are drawn from in the notebooks."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import matplotlib.image
import numpy as np
import pytest
from matplotlib.collections import LineCollection

from pipegnn.results.figures import (
    DPI,
    PANEL_SIZE,
    NoData,
    draw,
    plot_accuracy_vs_chunks,
    plot_epoch_time_vs_chunks,
    plot_inflation_by_partitioner,
    plot_memory_vs_chunks,
    plot_scaling,
    plot_speedup_vs_chunks,
    plot_time_to_accuracy_vs_chunks,
    repeats_note,
)
from pipegnn.results.stats import relative, summarize
from pipegnn.results.table import load

from tests.helpers import legend_texts, make_frame, make_record

RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "records"


def _png(path: Path, panels_wide: int, panels_high: int) -> None:
    assert path.is_file() and path.stat().st_size > 5_000
    image = matplotlib.image.imread(path)
    w, h = PANEL_SIZE
    assert image.shape[:2] == (round(h * DPI * panels_high), round(w * DPI * panels_wide))


def test_plot_epoch_time_vs_chunks_one_line_per_framework_and_device(tmp_path: Path) -> None:
    records = [make_record(framework=f, devices=d, chunks=c, halo="none", seed=s,
                      epoch_time_median_s=c * (2 if d == "cpu" else 1) + s)
               for f in ("pyg", "dgl") for d in ("cpu", "cpu2") for c in (1, 2, 4, 8) for s in (0, 1)]
    records.append(make_record(status="failed", framework="pyg", devices="cpu", chunks=16, halo="none"))
    fig = plot_epoch_time_vs_chunks(make_frame(*records), tmp_path / "t.png")
    (ax,) = fig.axes
    assert len(ax.lines) == 4
    assert legend_texts(ax) == ["dgl, gpipe 2×cpu", "dgl, single cpu",
                                "pyg, gpipe 2×cpu", "pyg, single cpu"]
    assert ax.get_xscale() == "log" and ax.xaxis.get_transform().base == 2
    assert list(ax.get_xticks()) == [1, 2, 4, 8]  # the failed chunks=16 run is left out
    assert ax.get_ylabel() == "median epoch time (s)" and "(chunks)" in ax.get_xlabel()
    assert ax.get_title() == "cora (2708 nodes) / gat"
    line = ax.lines[legend_texts(ax).index("pyg, single cpu")]
    assert list(line.get_xdata()) == [1, 2, 4, 8] and list(line.get_ydata()) == [2.5, 4.5, 8.5, 16.5]
    _png(tmp_path / "t.png", 1, 1)


def test_plot_accuracy_vs_chunks_lines_per_halo_with_error_bars(tmp_path: Path) -> None:
    acc = {"none": [0.8, 0.6, 0.4], "exact": [0.8, 0.8, 0.8], "historical": [0.8, 0.78, 0.76]}
    records = [make_record(halo=h, chunks=c, seed=s, test_acc=acc[h][i] + 0.02 * s)
               for h in ("exact", "historical", "none") for i, c in enumerate((1, 4, 16)) for s in (0, 1, 2)]
    fig = plot_accuracy_vs_chunks(make_frame(*records), tmp_path / "a.png")
    (ax,) = fig.axes
    assert legend_texts(ax) == ["full batch (chunks=1)", "halo=none", "halo=exact", "halo=historical"]
    assert len(ax.lines) == 4 and ax.get_ylabel() == "test accuracy (%)"
    assert fig.get_suptitle() == "Accuracy vs micro-batches (mean ± std over 3 seeds)"
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [82.0, 82.0])  # full batch: naive at chunks=1
    np.testing.assert_allclose(ax.lines[1].get_ydata(), [82.0, 62.0, 42.0])  # mean of seeds, in %
    bars = [c for c in ax.collections if isinstance(c, LineCollection)]
    assert len(bars) == 3
    (x, low), (_, high) = bars[0].get_segments()[0]  # naive at chunks 1: 82 +- std(80, 82, 84) = 2
    assert x == 1 and (low, high) == pytest.approx((80.0, 84.0))
    _png(tmp_path / "a.png", 1, 1)


def test_full_batch_is_drawn_in_every_partitioners_panel() -> None:
    """A sweep that ran chunks=1 with one partitioner (the same run whichever cut one micro-batch) shows
    full batch, mean +- std over seeds, beside each partitioner's micro-batches and whichever nodes they
    compute; another dataset's full batch is not drawn, nor a band where a panel's settings have no
    full-batch run."""
    records = [make_record(halo="none", chunks=1, partition="metis", seed=s, test_acc=0.80 + 0.02 * s)
               for s in (0, 1, 2)]
    records += [make_record(halo=h, chunks=8, partition=p, seed=s, test_acc=0.5)
                for h in ("none", "exact") for p in ("metis", "sequential") for s in (0, 1)]
    # halo=historicals computing every node of their parts: full batch computes every node too
    records += [make_record(halo="historical", chunks=8, partition="metis", seed=s, test_acc=0.7,
                            targets="all") for s in (0, 1)]
    records += [make_record(dataset="citeseer", num_nodes=3327, halo="exact", chunks=c, partition=p,
                            test_acc=0.6) for c in (1, 8) for p in ("metis", "sequential")]
    fig = plot_accuracy_vs_chunks(make_frame(*records))
    titles = [ax.get_title().replace("\n", " ") for ax in fig.axes]
    assert titles == ["citeseer (3327 nodes) / gat partition=metis, targets=train",
                      "citeseer (3327 nodes) / gat partition=sequential, targets=train",
                      "cora (2708 nodes) / gat partition=metis, targets=all",
                      "cora (2708 nodes) / gat partition=metis, targets=train",
                      "cora (2708 nodes) / gat partition=sequential, targets=train"]
    for ax in fig.axes[:2]:
        assert "full batch (chunks=1)" not in legend_texts(ax)
    for ax in fig.axes[2:]:
        assert legend_texts(ax)[0] == "full batch (chunks=1)"
        np.testing.assert_allclose(ax.lines[0].get_ydata(), [82.0, 82.0])
        (band,) = [p for p in ax.patches]  # 82 +- std(80, 82, 84) = 2
        np.testing.assert_allclose([band.get_y(), band.get_y() + band.get_height()], [80.0, 84.0])


def test_plot_time_to_accuracy_leaves_out_runs_that_never_reached_it(tmp_path: Path) -> None:
    records = [make_record(halo=h, chunks=c, seed=s, tta_train_s=(1.0 if h == "exact" else 2.0) * c + s)
               for h in ("exact", "historical") for c in (1, 4) for s in (0, 1)]
    records.append(make_record(halo="exact", chunks=4, seed=2))  # never reached its target: no time
    fig = plot_time_to_accuracy_vs_chunks(make_frame(*records), tmp_path / "t.png")
    (ax,) = fig.axes
    assert ax.get_ylabel() == "time to accuracy (s of training)"
    assert fig.get_suptitle() == "Time to accuracy vs micro-batches (mean ± std over 2 seeds)"
    assert legend_texts(ax) == ["halo=exact", "halo=historical"]
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [1.5, 4.5])  # exact: mean of seeds 0, 1
    np.testing.assert_allclose(ax.lines[1].get_ydata(), [2.5, 8.5])
    _png(tmp_path / "t.png", 1, 1)


def test_panels_split_settings_that_vary_off_the_axes(tmp_path: Path) -> None:
    records = [make_record(halo=h, chunks=c, framework=f, test_acc=0.5, epoch_time_median_s=0.1 * c)
               for h in ("none", "exact") for f in ("pyg", "dgl") for c in (1, 2)]
    records += [make_record(dataset="citeseer", num_nodes=3327, halo="exact", chunks=c, test_acc=0.6,
                       epoch_time_median_s=0.2) for c in (1, 2)]
    fig = plot_epoch_time_vs_chunks(make_frame(*records))
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["citeseer (3327 nodes) / gat\nhalo=exact", "cora (2708 nodes) / gat\nhalo=exact",
                      "cora (2708 nodes) / gat\nhalo=none"]
    assert [len(ax.lines) for ax in fig.axes] == [1, 2, 2]
    fig = plot_accuracy_vs_chunks(make_frame(*records), where={"dataset": "cora"})
    assert [ax.get_title() for ax in fig.axes] == ["cora (2708 nodes) / gat\ndgl",
                                                   "cora (2708 nodes) / gat\npyg"]
    assert [legend_texts(ax) for ax in fig.axes] == [
        ["full batch (chunks=1)", "halo=none", "halo=exact"]] * 2
    # the colour of a halo mode is the same in every panel
    assert fig.axes[0].lines[1].get_color() == fig.axes[1].lines[1].get_color()
    fig.savefig(tmp_path / "p.png")


def test_plot_memory_vs_chunks_device_memory_when_recorded(tmp_path: Path) -> None:
    cpu = [make_record(halo=h, chunks=c, rss_mb=100.0 * c) for h in ("none", "exact") for c in (1, 2)]
    (ax,) = plot_memory_vs_chunks(make_frame(*cpu), tmp_path / "m.png").axes
    assert ax.get_ylabel() == "peak resident memory (MiB)" and len(ax.lines) == 2
    assert list(ax.lines[0].get_ydata()) == [100.0, 200.0]
    gpu = [make_record(devices="gpu", halo="exact", chunks=c, rss_mb=500.0, device_mb=64.0 / c)
           for c in (1, 2, 4)]
    (ax,) = plot_memory_vs_chunks(make_frame(*gpu)).axes
    assert ax.get_ylabel() == "peak device memory (MiB)" and list(ax.lines[0].get_ydata()) == [64, 32, 16]
    both = plot_memory_vs_chunks(make_frame(*cpu, *gpu))  # one panel per device setup, each with its memory
    assert [ax.get_ylabel() for ax in both.axes] == ["peak resident memory (MiB)", "peak device memory (MiB)"]
    assert [ax.get_title().split("\n")[1] for ax in both.axes] == ["gpipe 2×cpu", "single cuda"]
    _png(tmp_path / "m.png", 1, 1)


def test_plot_inflation_by_partitioner_pools_frameworks(tmp_path: Path) -> None:
    records = [make_record(halo=h, partition=p, chunks=c, framework=f, inflation=1 + c / 8 * (i + 1),
                      replication=1.5)
               for h in ("exact", "historical") for i, p in enumerate(("metis", "random", "sequential"))
               for c in (2, 8) for f in ("pyg", "dgl")]
    fig = plot_inflation_by_partitioner(make_frame(*records), tmp_path / "i.png")
    assert len(fig.axes) == 2  # one panel per halo mode; pyg and dgl runs pooled (same plans)
    for ax in fig.axes:
        assert legend_texts(ax) == ["metis", "random", "sequential"] and len(ax.lines) == 3
        assert ax.get_ylabel() == "work inflation (× one micro-batch)"
    assert list(fig.axes[0].lines[2].get_ydata()) == [1.75, 4.0]
    _png(tmp_path / "i.png", 2, 1)
    (ax, _) = plot_inflation_by_partitioner(make_frame(*records), metric="replication").axes
    assert ax.get_ylabel().startswith("replication")


def test_plot_scaling_time_and_memory_vs_nodes(tmp_path: Path) -> None:
    records = [make_record(dataset="synthetic", num_nodes=n, model=m, chunks=c, seed=s,
                      epoch_time_median_s=n / 1000 * (2 if c > 1 else 1), rss_mb=n / 100 / c)
               for n in (8192, 16384, 32768) for m in ("gcn", "gat") for c in (1, 8) for s in (0, 1)]
    # one size only
    records.append(make_record(dataset="cora", chunks=1, epoch_time_median_s=1.0, rss_mb=1.0))
    fig = plot_scaling(make_frame(*records), tmp_path / "s.png")
    assert len(fig.axes) == 4  # gat and gcn panels, each epoch time over memory
    time_ax, memory_ax = fig.axes[0], fig.axes[1]
    assert time_ax.get_title() == "synthetic / gat"
    assert legend_texts(time_ax) == ["full batch", "8 micro-batches"] and len(memory_ax.lines) == 2
    assert time_ax.get_xlabel() == "graph nodes" and time_ax.get_ylabel() == "median epoch time (s)"
    assert memory_ax.get_ylabel() == "peak resident memory (MiB)"
    assert list(time_ax.lines[1].get_ydata()) == [16.384, 32.768, 65.536]
    assert list(memory_ax.lines[1].get_xdata()) == [8192, 16384, 32768]
    _png(tmp_path / "s.png", 2, 2)


def test_plot_scaling_against_edges_or_hidden_size() -> None:
    def shaped(density: float, hidden: int, model: str, chunks: int) -> dict[str, Any]:
        r = make_record(dataset="synthetic", num_nodes=32000, model=model, hidden=hidden, chunks=chunks,
                   epoch_time_median_s=density * 1e4 * hidden / 8 * chunks, rss_mb=100.0)
        r["config"]["dataset"]["density"] = density
        r["dataset"]["num_edges"] = round(density * 32000 * 31999)
        return r
    records = [shaped(d, 8, m, c) for d in (0.0002, 0.0004, 0.0008) for m in ("gcn", "gat") for c in (1, 8)]
    fig = plot_scaling(make_frame(*records), x="num_edges")
    assert fig.get_suptitle() == "Scaling with graph edges (one run per point)" and len(fig.axes) == 4
    time_ax = fig.axes[0]
    assert time_ax.get_title() == "synthetic (32000 nodes) / gat"  # density is on the axis, not a panel
    assert time_ax.get_xlabel() == "graph edges"
    assert list(time_ax.lines[0].get_xdata()) == [204794, 409587, 819174]
    np.testing.assert_allclose(time_ax.lines[1].get_ydata(), [16.0, 32.0, 64.0])
    records = [shaped(0.0008, h, "gat", c) for h in (8, 16, 32) for c in (1, 8)]
    records.append(shaped(0.0002, 8, "gat", 1))  # another graph: its own panel, one value: not drawn
    fig = plot_scaling(make_frame(*records), x="model.hidden")
    assert fig.get_suptitle() == "Scaling with hidden size (one run per point)" and len(fig.axes) == 2
    assert fig.axes[0].get_title() == "synthetic (32000 nodes) / gat\ndensity=0.0008"
    assert list(fig.axes[0].lines[0].get_xdata()) == [8, 16, 32]
    with pytest.raises(NoData, match="model.hidden"):
        frame = make_frame(make_record(chunks=1, epoch_time_median_s=1.0))
        plot_scaling(frame.drop(columns="cfg.model.hidden"), x="model.hidden")


def test_hidden_size_splits_panels_and_settings_a_dataset_lacks_do_not() -> None:
    synthetic = []
    for hidden in (8, 16):
        for chunks in (1, 2):
            r = make_record(dataset="synthetic", num_nodes=32000, hidden=hidden, chunks=chunks,
                       epoch_time_median_s=0.1 * hidden)
            r["config"]["dataset"]["density"] = 0.0008
            synthetic.append(r)
    cora = [make_record(chunks=c, epoch_time_median_s=0.5) for c in (1, 2)]
    fig = plot_epoch_time_vs_chunks(make_frame(*synthetic, *cora))
    # one density among the graphs that have one: no density panels
    assert [ax.get_title() for ax in fig.axes] == ["cora (2708 nodes) / gat\nhidden=8",
                                                   "synthetic (32000 nodes) / gat\nhidden=8",
                                                   "synthetic (32000 nodes) / gat\nhidden=16"]
    assert list(fig.axes[2].lines[0].get_ydata()) == [1.6, 1.6]
    with pytest.raises(ValueError, match="cfg.model.hidden"):  # a baseline over two hidden sizes
        relative(make_frame(*synthetic), "epoch_time_median_s", {"chunks": 1})


def test_no_data_raises_and_draw_skips(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one_size = make_frame(make_record(chunks=1, epoch_time_median_s=1.0),
                          make_record(chunks=8, epoch_time_median_s=2.0))
    with pytest.raises(NoData, match="more than one value of num_nodes"):
        plot_scaling(one_size)
    assert draw(plot_scaling, one_size, tmp_path / "scaling.png") is None
    assert not (tmp_path / "scaling.png").exists()
    assert capsys.readouterr().out.startswith("skipped scaling.png: ")
    failed = make_frame(make_record(status="failed"))
    for plot in (plot_epoch_time_vs_chunks, plot_accuracy_vs_chunks, plot_memory_vs_chunks,
                 plot_inflation_by_partitioner, plot_time_to_accuracy_vs_chunks):
        with pytest.raises(NoData):
            plot(failed)
    with pytest.raises(NoData, match="matching"):
        plot_epoch_time_vs_chunks(one_size, where={"halo": "historical"})
    assert draw(plot_epoch_time_vs_chunks, one_size, tmp_path / "t.png") is not None
    assert capsys.readouterr().out == f"wrote {tmp_path / 't.png'}\n"


def test_repeats_note_counts_the_runs_behind_each_point() -> None:
    runs = make_frame(*[make_record(chunks=c, seed=s) for c in (1, 2) for s in range(5 if c == 1 else 3)])
    assert repeats_note(runs, ["chunks"]) == "mean ± std over 3-5 seeds"
    assert repeats_note(runs[runs["seed"] < 3], ["chunks"]) == "mean ± std over 3 seeds"
    assert repeats_note(runs, ["chunks", "seed"]) == "one run per point"


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
    fig = plot_speedup_vs_chunks(df, where={"framework": "dgl"})
    lines = [line for line in fig.axes[0].get_lines()
             if line.get_label() and not line.get_label().startswith("_")]
    assert [line.get_label() for line in lines] == ["gpipe"]  # records written before pipelines recorded more
    single = df[(df.engine == "single") & (df.framework == "dgl")].set_index("chunks").epoch_time_median_s
    gpipe = df[(df.engine == "gpipe") & (df.framework == "dgl")].set_index("chunks").epoch_time_median_s
    x, y = lines[0].get_data()
    assert list(x) == sorted(gpipe.index) and list(y) == pytest.approx([single[k] / gpipe[k] for k in x])
    with pytest.raises(NoData, match="needs single-engine runs"):
        plot_speedup_vs_chunks(df[df.engine != "single"])
