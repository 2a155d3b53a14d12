"""Time to accuracy against peak memory, a point per setting: the map of full batch, exact, historical
and sampled micro-batches, on one process or a pipeline, drawn like
[`pipegnn.results.figures`][pipegnn.results.figures]' figures (Agg canvas, a PNG when given a path,
[`NoData`][pipegnn.results.figures.NoData] when there is nothing to draw).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from pipegnn.results.figures import (
    _METRIC_LABELS,
    NoData,
    _figure,
    _finish,
    _memory_label,
    _panel_title,
    _prepare,
    _with_memory,
    repeats_note,
)

__all__ = ["plot_time_to_accuracy_vs_memory", "setting_label"]

_HALO_MARKERS = {"full batch": "*", "none": "x", "exact": "o", "historical": "s", "sampled": "^"}


def setting_label(chunks: Any, halo: Any, fanouts: Any, engine: Any, threads: Any = None) -> str:
    """A setting of the map in words: ``full batch`` (one chunk), else the halo mode (with its fan-outs)
    and chunks; then how it ran (``pipelining``, ``gpipe``, or one process with its threads, DGL's own
    loop named)."""
    if chunks == 1:
        how = "full batch"
    else:
        how = f"{halo} [{fanouts}]" if halo == "sampled" and isinstance(fanouts, str) else str(halo)
        how += f" k={int(chunks)}"
    if engine in ("single", "dgl_loader"):  # dgl_loader: DGL's own loop (pipegnn.training.dgl_loader)
        runs = ("DGL's loader, " if engine == "dgl_loader" else "") + "1 process" + (
            f" x {int(threads)} threads" if pd.notna(threads) else "")
    else:
        runs = str(engine)
    return f"{how}, {runs}"


def plot_time_to_accuracy_vs_memory(df: pd.DataFrame, path: str | Path | None = None, *,
                                    where: Mapping[str, Any] | None = None,
                                    memory: str = "process") -> Figure:
    """Wall time to accuracy (``tta_wall_s``: set-up included, until validation accuracy first reaches
    0.98 of the run's best; filled marker) and to the best epoch (``best_wall_s``, hollow marker, joined
    to it) against peak memory, a point per setting
    ([`setting_label`][pipegnn.results.tta_plot.setting_label]), mean ± std over seeds on both axes, one
    panel per dataset and model. Marker shape: the halo mode; colour: the setting.

    ``memory``: ``process``, the largest process's (device memory where recorded, else resident: what each
    device of a pipeline holds); ``total``, every process's resident memory together (``peak_rss_total_mb``:
    what the machine holds; [`NoData`][pipegnn.results.figures.NoData] when every run is one process, whose
    figure ``process`` draws)."""
    if memory not in ("process", "total"):
        raise ValueError(f"memory={memory!r}: expected 'process' or 'total'")
    title = "Time to accuracy vs peak memory" + (" of all processes" if memory == "total" else "")
    if memory == "process":
        data = _with_memory(_prepare(df, where, ["tta_wall_s", "peak_rss_mb"], title))
    else:
        data = _prepare(df, where, ["tta_wall_s", "peak_rss_total_mb"], title)
        if not (data["peak_rss_total_mb"] > data["peak_rss_mb"]).any():
            raise NoData(f"{title}: every run is one process (the figure of the largest process draws it)")
        data = data.assign(peak_memory_mb=data["peak_rss_total_mb"])
    none = pd.Series(None, index=data.index)
    threads = data["cfg.engine.threads"] if "cfg.engine.threads" in data else none
    fanouts = data["fanouts"] if "fanouts" in data else none
    data = data.assign(setting=[setting_label(c, h, f, e, t) for c, h, f, e, t in
                                zip(data["chunks"], data["halo"], fanouts, data["engine"], threads)])
    keys = [k for k in ("dataset", "model") if k in data]
    panels = list(data.groupby(keys, dropna=False, sort=True)) if keys else [((), data)]
    fig, axes = _figure(len(panels), max_cols=2)
    order = sorted(data["setting"].unique(), key=lambda s: (not s.startswith("full batch"), s))
    colors = {s: f"C{i % 10}" for i, s in enumerate(order)}
    for (key, panel), (ax,) in zip(panels, axes):
        stats = panel.groupby("setting").agg(
            memory=("peak_memory_mb", "mean"), memory_std=("peak_memory_mb", "std"),
            tta=("tta_wall_s", "mean"), tta_std=("tta_wall_s", "std"),
            best=("best_wall_s", "mean"), halo=("halo", "first"), chunks=("chunks", "first"))
        for setting, row in stats.iterrows():
            marker = _HALO_MARKERS["full batch" if row["chunks"] == 1 else row["halo"]]
            color = colors[setting]
            ax.errorbar(row["memory"], row["tta"], xerr=row["memory_std"], yerr=row["tta_std"], fmt=marker,
                        color=color, markersize=8, capsize=0, elinewidth=1)
            if pd.notna(row["best"]):
                ax.plot([row["memory"]] * 2, [row["tta"], row["best"]], color=color, linewidth=0.8)
                ax.plot(row["memory"], row["best"], marker=marker, markerfacecolor="none", color=color,
                        markersize=8, linestyle="none")
        ax.set(xlabel=_memory_label(panel) if memory == "process" else _METRIC_LABELS["peak_rss_total_mb"],
               ylabel="wall time to accuracy (s, set-up included)",
               xscale="log", yscale="log")
        ax.grid(alpha=0.3, which="both")
        ax.set_title(_panel_title(keys, key if isinstance(key, tuple) else (key,)))
    handles = [Line2D([], [], color=colors[s], marker=_HALO_MARKERS["full batch" if s.startswith("full")
                                                                   else s.split(" ")[0]],
                      linestyle="none", label=s) for s in order]
    # one legend for every panel (a setting's colour is the same in each), below them: inside a panel it
    # hid the map's slowest points
    fig.set_figheight(fig.get_figheight() + 0.2 + 0.16 * len(handles))  # the legend's rows, in inches
    fig.legend(handles=handles, fontsize="x-small", loc="outside lower center")
    note = repeats_note(data, [*keys, "setting"])
    what = "filled: 98% of the best val. accuracy; hollow: the best"
    return _finish(fig, f"{title}\n{what}\n({note})", path)
