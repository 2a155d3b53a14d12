"""Figures of a runs table, for notebooks and papers.

Everything takes the DataFrame of [`pipegnn.results.load`][pipegnn.results.table.load] (one row per run), plus
the derived columns of [`pipegnn.results.stats.with_setup`][pipegnn.results.stats.with_setup] (``setup``,
``device_type``). Only completed runs enter a figure; a point is the mean over repeated runs of the same
setting (seeds).

Figures are drawn on the Agg canvas (no display, no pyplot state), one panel per dataset / model /
graph size and per setting that varies but is not on the figure's axes (the panel title names it), so
that runs of different settings are never averaged together. Each figure function returns the
`Figure`, writes a PNG when given a path, and raises [`NoData`][pipegnn.results.figures.NoData] when
the frame holds nothing to draw; [`draw`][pipegnn.results.figures.draw] turns that into a printed "skipped"
line for notebooks.

[`plot_timeline`][pipegnn.results.timeline_plot.plot_timeline] draws one run's ``trace.json`` instead, and
[`plot_leaderboard`][pipegnn.results.leaderboard_plot.plot_leaderboard] the OGB-style table.
"""
from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from pipegnn.results.stats import _completed, _missing, with_setup
from pipegnn.results.table import column, select

__all__ = ["DPI", "NoData", "PANEL_SIZE", "draw", "plot_accuracy_vs_chunks", "plot_epoch_time_vs_chunks",
           "plot_inflation_by_partitioner", "plot_memory_vs_chunks", "plot_scaling", "plot_speedup_vs_chunks",
           "plot_time_to_accuracy_vs_chunks", "repeats_note"]

#: Resolution of saved PNGs; a figure of r x c panels is (c * 4.8 * DPI) x (r * 3.6 * DPI) pixels.
DPI = 100
#: Size of one panel in inches (width, height).
PANEL_SIZE = (4.8, 3.6)
#: Graph-shape settings of synthetic datasets (missing for the others).
_SHAPE = ("cfg.dataset.density", "cfg.dataset.avg_degree")
#: Settings that get their own panels when they vary and are not on a figure's axes.
_FACETS = ("framework", "setup", "halo", "partition", "targets", "cfg.model.layers", "cfg.model.hidden",
           *_SHAPE)
_NAMES = {"setup": "devices", "cfg.model.layers": "layers", "cfg.model.hidden": "hidden",
          "cfg.dataset.density": "density", "cfg.dataset.avg_degree": "avg degree",
          "cfg.microbatch.halo_dropout": "halo dropout"}
#: Axis labels of the x values plot_scaling accepts by name.
_SCALING_X = {"num_nodes": "graph nodes", "num_edges": "graph edges", "cfg.model.hidden": "hidden size"}
#: Halo modes in the order their lines take (each labelled by its name, as the config spells it).
_HALO_ORDER = ("none", "exact", "historical", "sampled")
_CHUNKS_LABEL = "micro-batches per step (chunks)"
_METRIC_LABELS = {
    "epoch_time_median_s": "median epoch time (s)",
    "eval_time_median_s": "median evaluation time (s)",
    "test_acc": "test accuracy (%)", "val_acc": "validation accuracy (%)",
    "best_val_acc": "best validation accuracy (%)",
    "test_acc_at_best_val": "test accuracy at best validation (%)",
    "peak_rss_mb": "peak resident memory (MiB)", "peak_device_mb": "peak device memory (MiB)",
    "peak_rss_total_mb": "peak resident memory, all processes (MiB)",
    "peak_memory_mb": "peak memory (MiB)",
    "inflation": "work inflation (× one micro-batch)",
    "tta_train_s": "time to accuracy (s of training)",
    "replication": "replication (rows computed / distinct rows)",
    "cut_edge_fraction": "cut-edge fraction",
}


class NoData(ValueError):
    """The frame holds no completed run with what a figure needs."""


def _label(key: str, value: Any, bare: Sequence[str] = ("framework", "setup", "partition")) -> str:
    """A setting's value as shown in a legend (``bare`` keys without their name) or a title."""
    if key == "halo" and value in _HALO_ORDER:
        return f"halo={value}"
    if _missing(value):
        value = "-"
    elif isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value) if key in bare else f"{_NAMES.get(key, key)}={value}"


def _panel_title(keys: Sequence[str], values: Sequence[Any]) -> str:
    """``dataset (N nodes) / model``, then the panel's other settings on a second line."""
    # a setting a dataset does not have (a Planetoid graph's density) is left out of its title
    named = {k: v for k, v in zip(keys, values) if not (k.startswith("cfg.") and _missing(v))}
    dataset, model, nodes = (named.pop(k, None) for k in ("dataset", "model", "num_nodes"))
    size = "" if _missing(nodes) else f" ({int(nodes)} nodes)"
    rest = ", ".join(_label(k, v, bare=("framework", "setup")) for k, v in named.items())
    # long lists of settings wrap at a panel's width instead of running into the next panel
    return f"{dataset}{size} / {model}" + (f"\n{textwrap.fill(rest, 48)}" if rest else "")


def _prepare(df: pd.DataFrame, where: Mapping[str, Any] | None, needed: Sequence[str],
             what: str) -> pd.DataFrame:
    data = _completed(with_setup(select(df, where) if where else df))
    for name in needed:
        if name not in data:
            raise NoData(f"{what}: the results have no column {name!r}")
        data = data[pd.to_numeric(data[name], errors="coerce").notna()]
    if data.empty:
        scope = f" matching {dict(where)}" if where else ""
        raise NoData(f"{what}: no completed run{scope} with {', '.join(needed)}")
    return data


def _facets(data: pd.DataFrame, used: Sequence[str]) -> list[str]:
    """Setting columns not on the figure's axes that take more than one value (for config keys, more
    than one present value: a key some datasets lack, such as a density, is no reason for panels)."""
    return [c for c in _FACETS if c in data and c not in used
            and data[c].nunique(dropna=c.startswith("cfg.")) > 1]


def _figure(panels: int, rows_per_panel: int = 1, max_cols: int = 3) -> tuple[Figure, list[list[Axes]]]:
    cols = min(panels, max_cols)
    grid_rows = math.ceil(panels / cols) * rows_per_panel
    fig = Figure(figsize=(PANEL_SIZE[0] * cols, PANEL_SIZE[1] * grid_rows), dpi=DPI,
                 layout="constrained")
    FigureCanvasAgg(fig)
    axes = []
    for p in range(panels):
        r0, c = (p // cols) * rows_per_panel, p % cols
        axes.append([fig.add_subplot(grid_rows, cols, (r0 + i) * cols + c + 1)
                     for i in range(rows_per_panel)])
    return fig, axes


def _line_labels(data: pd.DataFrame, lines: Sequence[str]) -> tuple[pd.Series, dict[str, str]]:
    """Each row's legend label (its values of ``lines``) and a colour per label, fixed across panels
    (halo modes in the order none, exact, historical, sampled; other values sorted)."""
    def rank(row: tuple) -> tuple:
        return tuple((_HALO_ORDER.index(v) if k == "halo" and v in _HALO_ORDER else len(_HALO_ORDER), str(v))
                     for k, v in zip(lines, row))
    rows = list(zip(*(data[k] for k in lines)))
    labels = pd.Series([", ".join(_label(k, v) for k, v in zip(lines, row)) for row in rows],
                       index=data.index, dtype=object)
    order = dict.fromkeys(label for _, label in sorted(zip(map(rank, rows), labels), key=lambda t: t[0]))
    return labels, {label: f"C{i % 10}" for i, label in enumerate(order)}


def _lines(ax: Axes, data: pd.DataFrame, x: str, y: str, labels: pd.Series, colors: Mapping[str, str],
           scale: float = 1.0) -> None:
    """One line per label (in the order of ``colors``): the mean of ``y`` over the runs at each ``x``,
    with +- one standard deviation as error bars where there are several runs."""
    for label, color in colors.items():
        group = data[labels.reindex(data.index) == label]
        if group.empty:
            continue
        stats = (pd.to_numeric(group[y], errors="coerce") * scale).groupby(
            pd.to_numeric(group[x], errors="coerce")).agg(["mean", "std"]).sort_index()
        ax.plot(stats.index, stats["mean"], marker="o", color=color, label=label)
        std = stats["std"].to_numpy(dtype=float)
        if np.isfinite(std).any():
            ax.errorbar(stats.index, stats["mean"], yerr=np.nan_to_num(std), fmt="none", ecolor=color,
                        capsize=0, elinewidth=1.5)


def _log2_x(ax: Axes, values: Sequence[float]) -> None:
    ax.set_xscale("log", base=2)
    ticks = sorted({float(v) for v in values})
    ax.set_xticks(ticks, [f"{v:g}" for v in ticks])
    ax.xaxis.set_minor_locator(NullLocator())


def repeats_note(data: pd.DataFrame, point: Sequence[str]) -> str:
    """How many runs (seeds) each point of a figure averages, for its title: ``mean ± std over 5 seeds``,
    ``over 3-5 seeds`` when points differ, ``one run per point`` when none is repeated. ``point`` are
    the columns that tell a figure's points apart (its panels, lines and x)."""
    counts = data.groupby([column(data, k) for k in point if k in data], dropna=False).size()
    low, high = int(counts.min()), int(counts.max())
    if high == 1:
        return "one run per point"
    return f"mean ± std over {low if low == high else f'{low}-{high}'} seeds"


def _finish(fig: Figure, title: str, path: str | Path | None) -> Figure:
    fig.suptitle(title)
    if path is not None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format="png", dpi=DPI)
    return fig


def _full_batch_band(ax: Axes, data: pd.DataFrame, keys: Sequence[str], key: Sequence[Any], y: str,
                     scale: float) -> None:
    """The panel's full-batch runs as a grey dashed line (their mean) in a band (+- one std): chunks=1
    without a halo, of the panel's settings but its partitioner and targets (one micro-batch without a
    halo computes the whole graph, whichever partitioner cut it and whichever nodes the loss reads), so
    that a sweep running chunks=1 with one partitioner shows full batch in every panel. Nothing when the
    settings have none."""
    if "halo" not in data:
        return
    full = data[(pd.to_numeric(data["chunks"], errors="coerce") == 1) & (data["halo"] == "none")]
    for k, v in zip(keys, key):
        if k not in ("partition", "targets"):
            full = full[full[k].isna() if _missing(v) else full[k] == v]
    values = pd.to_numeric(full[y], errors="coerce").dropna() * scale
    if values.empty:
        return
    mean, std = values.mean(), values.std()
    ax.axhline(mean, color="0.35", linestyle="--", linewidth=1, label="full batch (chunks=1)")
    if np.isfinite(std):
        ax.axhspan(mean - std, mean + std, color="0.5", alpha=0.15, linewidth=0)


def _vs_chunks(df: pd.DataFrame, path: str | Path | None, where: Mapping[str, Any] | None, *, y: str,
               lines: Sequence[str], pool: Sequence[str], title: str,
               ylabel: str | Callable[[pd.DataFrame], str], scale: float = 1.0, legend: str,
               full_batch: bool = False) -> Figure:
    data = _prepare(df, where, ["chunks", y], title)
    keys = ["dataset", "model", "num_nodes", *_facets(data, [*lines, *pool])]
    keys = [k for k in keys if k in data]
    panels = list(data.groupby(keys, dropna=False, sort=True))
    labels, colors = _line_labels(data, lines)
    fig, axes = _figure(len(panels))
    for (key, panel), (ax,) in zip(panels, axes):
        if full_batch and (pd.to_numeric(panel["chunks"], errors="coerce") > 1).any():
            _full_batch_band(ax, data, keys, key, y, scale)
        _lines(ax, panel, "chunks", y, labels, colors, scale)
        _log2_x(ax, panel["chunks"])
        ax.set(xlabel=_CHUNKS_LABEL, ylabel=ylabel(panel) if callable(ylabel) else ylabel,
               title=_panel_title(keys, key))
        ax.grid(alpha=0.3)
        ax.legend(title=legend, fontsize="small", title_fontsize="small")
    return _finish(fig, f"{title} ({repeats_note(data, [*keys, *lines, 'chunks'])})", path)


def plot_epoch_time_vs_chunks(df: pd.DataFrame, path: str | Path | None = None, *,
                              where: Mapping[str, Any] | None = None) -> Figure:
    """The poster's figure: median epoch time against chunks (log2 axis), one line per framework x
    device setup (mean +- std over seeds); panels per dataset/model and per other varying setting
    (e.g. halo mode)."""
    return _vs_chunks(df, path, where, y="epoch_time_median_s", lines=["framework", "setup"], pool=[],
                      title="Epoch time vs micro-batches", ylabel=_METRIC_LABELS["epoch_time_median_s"],
                      legend="framework, devices")


def plot_accuracy_vs_chunks(df: pd.DataFrame, path: str | Path | None = None, *,
                            metric: str = "test_acc", where: Mapping[str, Any] | None = None) -> Figure:
    """Accuracy (%) against chunks, one line per halo mode (none, exact, historical) with error bars
    over seeds, beside full batch's (chunks=1 without a halo: a grey band, mean +- std, in every panel of
    its settings with micro-batched runs, whatever the partitioner and targets): the poster's accuracy loss
    under chunks without halos (``halo=none``) and its fix."""
    return _vs_chunks(df, path, where, y=metric, lines=["halo"], pool=[], scale=100.0,
                      title="Accuracy vs micro-batches", legend="halo mode",
                      ylabel=_METRIC_LABELS.get(metric, f"{metric} (%)"), full_batch=True)


def plot_time_to_accuracy_vs_chunks(df: pd.DataFrame, path: str | Path | None = None, *,
                                    where: Mapping[str, Any] | None = None) -> Figure:
    """Time to accuracy (training seconds until validation accuracy first reaches the run's target,
    ``tta_train_s``) against chunks, one line per halo mode, error bars over seeds. Runs that never
    reached their target are left out; give every run the same ``train.target_val_acc`` to compare
    settings (without it each run's target is 0.98 x its own best)."""
    return _vs_chunks(df, path, where, y="tta_train_s", lines=["halo"], pool=[],
                      title="Time to accuracy vs micro-batches", legend="halo mode",
                      ylabel=_METRIC_LABELS["tta_train_s"])


def _with_memory(data: pd.DataFrame) -> pd.DataFrame:
    """``data`` with ``peak_memory_mb``: the run's peak device memory when it recorded one (CUDA), else
    its peak resident memory."""
    device = pd.to_numeric(data["peak_device_mb"], errors="coerce") if "peak_device_mb" in data else None
    rss = pd.to_numeric(data["peak_rss_mb"], errors="coerce") if "peak_rss_mb" in data else np.nan
    return data.assign(peak_memory_mb=rss if device is None else device.fillna(rss))


def _memory_label(panel: pd.DataFrame) -> str:
    if "peak_device_mb" not in panel:
        return _METRIC_LABELS["peak_rss_mb"]
    device = pd.to_numeric(panel["peak_device_mb"], errors="coerce").notna()
    key = "peak_device_mb" if device.all() else "peak_rss_mb" if not device.any() else "peak_memory_mb"
    return _METRIC_LABELS[key]


def plot_memory_vs_chunks(df: pd.DataFrame, path: str | Path | None = None, *,
                          where: Mapping[str, Any] | None = None) -> Figure:
    """Peak memory (MiB) against chunks, one line per halo mode: a run's device memory when it
    recorded any (CUDA), else the process's peak resident memory (the axis label says which)."""
    return _vs_chunks(_with_memory(df), path, where, y="peak_memory_mb", lines=["halo"], pool=[],
                      title="Peak memory vs micro-batches", ylabel=_memory_label, legend="halo mode")


def plot_inflation_by_partitioner(df: pd.DataFrame, path: str | Path | None = None, *,
                                  metric: str = "inflation",
                                  where: Mapping[str, Any] | None = None) -> Figure:
    """A plan statistic (``inflation``, ``replication`` or ``cut_edge_fraction``) against chunks, one
    line per partitioner, panels per halo mode. Plans do not depend on the framework or devices, so
    runs differing only in those are pooled."""
    return _vs_chunks(df, path, where, y=metric, lines=["partition"], pool=["framework", "setup"],
                      title=f"{metric.replace('_', ' ').capitalize()} by partitioner",
                      ylabel=_METRIC_LABELS.get(metric, metric), legend="partitioner")


def plot_scaling(df: pd.DataFrame, path: str | Path | None = None, *, x: str = "num_nodes",
                 where: Mapping[str, Any] | None = None) -> Figure:
    """Epoch time (top) and peak memory (bottom) against ``x`` (log2 axis): graph nodes by default,
    ``num_edges`` (a density sweep at a fixed node count) or ``model.hidden``; one line per chunks
    value (``full batch`` for 1, micro-batched otherwise). Only panels with at least two values of
    ``x`` are drawn.

    Raises:
        NoData: no panel has runs of two or more values of ``x``.
    """
    try:
        x = column(df, x)
    except KeyError:
        pass  # _prepare names the missing column
    what = _SCALING_X.get(x, x)
    title = "Scaling with graph size" if x == "num_nodes" else f"Scaling with {what}"
    data = _with_memory(_prepare(df, where, [x, "chunks", "epoch_time_median_s"], title))
    # The halo mode of a full-batch run (chunks=1) is immaterial: it labels micro-batched lines only.
    micro = data["chunks"] != 1
    with_halo = "halo" in data and data.loc[micro, "halo"].nunique(dropna=False) > 1
    halos = data["halo"] if "halo" in data else [None] * len(data)
    data = data.assign(batching=["full batch" if c == 1 else f"{int(c)} micro-batches"
                                 + (f", {_label('halo', h)}" if with_halo else "")
                                 for c, h in zip(data["chunks"], halos)])
    # density and average degree follow the edge count at a fixed node count: not panels then
    on_axis = ["chunks", "halo", x, *(_SHAPE if x == "num_edges" else ())]
    keys = ["dataset", "model", *([] if x == "num_nodes" else ["num_nodes"]), *_facets(data, on_axis)]
    keys = [k for k in keys if k in data]
    panels = [(key, panel) for key, panel in data.groupby(keys, dropna=False, sort=True)
              if panel[x].nunique() > 1]
    if not panels:
        raise NoData(f"{title}: no dataset/model has runs of more than one value of {x}")
    fig, axes = _figure(len(panels), rows_per_panel=2)
    order = data.sort_values(["chunks", "batching"])["batching"].drop_duplicates()
    colors = {label: f"C{i % 10}" for i, label in enumerate(order)}
    for (key, panel), (top, bottom) in zip(panels, axes):
        for ax, y, label in ((top, "epoch_time_median_s", _METRIC_LABELS["epoch_time_median_s"]),
                             (bottom, "peak_memory_mb", _memory_label(panel))):
            _lines(ax, panel, x, y, panel["batching"], colors)
            _log2_x(ax, panel[x])
            ax.set(xlabel=what, ylabel=label)
            ax.grid(alpha=0.3)
            ax.legend(fontsize="small")
        top.set_title(_panel_title(keys, key))
    for ax in fig.axes:  # node and edge counts are large: keep the tick labels readable
        ax.tick_params(axis="x", labelrotation=30)
    return _finish(fig, f"{title} ({repeats_note(data, [*keys, 'batching', x])})", path)


def plot_speedup_vs_chunks(df: pd.DataFrame, path: str | Path | None = None, *,
                           where: Mapping[str, Any] | None = None) -> Figure:
    """Speedup of every pipeline over the single engine on the same micro-batches (epoch time of
    ``engine=single`` at the same chunks / its own) against chunks (log2 axis), measured (solid) and the
    ideal its own measured stage busy times allow (``pipeline_ideal_speedup``, dashed), one line per
    engine, schedule and balance (mean over seeds). The speedup is over the mean single-engine epoch
    time of the same dataset and model.

    Raises:
        NoData: no completed single-engine run, or no pipeline run beside one.
    """
    data = _prepare(df, where, ["epoch_time_median_s", "chunks"], "plot_speedup_vs_chunks")
    single = data[data["engine"] == "single"].groupby("chunks")["epoch_time_median_s"].mean()
    piped = data[(data["engine"] != "single") & data["chunks"].isin(single.index)].copy()
    if single.empty or piped.empty:
        raise NoData("plot_speedup_vs_chunks: needs single-engine runs and pipeline runs at the same chunks")
    piped["speedup"] = piped["chunks"].map(single) / piped["epoch_time_median_s"]
    piped["line"] = [" ".join(str(v) for v in (e, s, b) if not _missing(v)) for e, s, b in
                     zip(piped["engine"], piped["pipeline_schedule"], piped["pipeline_balance_source"])]
    fig, axes = _figure(1)
    ax = axes[0][0]
    for i, (line, rows) in enumerate(piped.groupby("line", sort=True)):
        mean = rows.groupby("chunks")[["speedup", "pipeline_ideal_speedup"]].mean()
        ax.plot(mean.index, mean["speedup"], "o-", color=f"C{i}", label=line)
        if mean["pipeline_ideal_speedup"].notna().any() and (mean["pipeline_ideal_speedup"] > 1).any():
            ax.plot(mean.index, mean["pipeline_ideal_speedup"], "--", color=f"C{i}", alpha=0.6)
    ax.axhline(1.0, color="black", linewidth=0.8)
    _log2_x(ax, sorted(piped["chunks"].unique()))
    ax.set_xlabel(_CHUNKS_LABEL)
    ax.set_ylabel("speedup over the single engine")
    ax.legend(fontsize=7, title="solid: measured, dashed: ideal", title_fontsize=7)
    note = repeats_note(piped, ["line", "chunks"]).replace("mean ± std", "mean")
    return _finish(fig, f"pipeline speedup vs chunks ({note})", path)


def draw(plot: Callable[..., Figure], df: Any, path: str | Path, **kwargs: Any) -> Figure | None:
    """``plot(df, path, **kwargs)``, printing ``wrote <path>``; when the results (a frame of records, or
    a trace for [`plot_timeline`][pipegnn.results.timeline_plot.plot_timeline]) hold no data for the figure,
    prints ``skipped <file>: <reason>`` and returns None instead of raising."""
    try:
        fig = plot(df, path, **kwargs)
    except NoData as e:
        print(f"skipped {Path(path).name}: {e}")
        return None
    print(f"wrote {path}")
    return fig
