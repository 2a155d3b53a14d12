"""The OGB-style table of [`leaderboard`][pipegnn.results.stats.leaderboard] as a figure, drawn like
[`pipegnn.results.figures`][pipegnn.results.figures]' figures (Agg canvas, a PNG when given a path,
[`NoData`][pipegnn.results.figures.NoData] when there is nothing to draw).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from pipegnn.results.figures import _METRIC_LABELS, DPI, PANEL_SIZE, _finish, _label, _panel_title, _prepare
from pipegnn.results.stats import LEADERBOARD_SETTINGS, leaderboard

__all__ = ["plot_leaderboard"]


def plot_leaderboard(df: pd.DataFrame, path: str | Path | None = None, *,
                     where: Mapping[str, Any] | None = None,
                     reference: Mapping[str, tuple[float, float]] | None = None) -> Figure:
    """The OGB-style table ([`leaderboard`][pipegnn.results.stats.leaderboard]) as a figure: per setting, test
    accuracy at the best validation epoch as mean ± std over its seeds, one row per setting (named by
    the settings that vary in its panel), one panel per dataset and model. ``reference`` maps a dataset
    to a published ``(mean, std)`` in percent, drawn as a band with its mean."""
    data = _prepare(df, where, ["test_acc_at_best_val"], "test accuracy per setting")
    board = leaderboard(data)
    keys = [k for k in ("dataset", "model") if k in board]
    panels = list(board.groupby(keys, sort=True))
    rows = [len(panel) for _, panel in panels]
    fig = Figure(figsize=(3 * PANEL_SIZE[0], 1.2 + 0.35 * sum(rows) + 0.9 * len(panels)), dpi=DPI,
                 layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(panels), 1, squeeze=False, height_ratios=[r + 2 for r in rows])[:, 0]
    for (key, panel), ax in zip(panels, axes):
        varying = [k for k in LEADERBOARD_SETTINGS if k in panel and k not in keys
                   and panel[k].nunique(dropna=False) > 1]
        labels = [", ".join(f"k={v}" if k == "chunks" else _label(k, v, bare=("engine", "devices", "halo"))
                            for k, v in zip(varying, values)) + f" ({n} seeds)"
                  for values, n in zip(zip(*(panel[k] for k in varying)), panel["seeds"])]
        at = np.arange(len(panel))
        mean, std = (100 * panel[c].to_numpy(dtype=float) for c in ("test_mean", "test_std"))
        ax.errorbar(mean, at, xerr=np.nan_to_num(std), fmt="o", capsize=3, color="C0")
        dataset = dict(zip(keys, key if isinstance(key, tuple) else (key,))).get("dataset")
        published = None if dataset is None else (reference or {}).get(dataset)
        if published is not None:
            centre, spread = published
            ax.axvspan(centre - spread, centre + spread, color="C1", alpha=0.2)
            ax.axvline(centre, color="C1", label=f"published {centre:g} ± {spread:g}")
            ax.legend(fontsize="small", loc="best")
        ax.set_yticks(at, labels, fontsize="small")
        ax.set_ylim(len(panel) - 0.5, -0.5)  # the table's order, top down
        ax.set(xlabel=_METRIC_LABELS["test_acc_at_best_val"], title=_panel_title(keys, key))
        ax.grid(axis="x", alpha=0.3)
    return _finish(fig, "test accuracy per setting (mean ± std over seeds)", path)
