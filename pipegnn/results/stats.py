"""Statistics of a runs table ([`pipegnn.results.load`][pipegnn.results.table.load], one row per run).

- [`summary`][pipegnn.results.stats.summary]: how many runs ended in each status, in one line;
- [`summarize`][pipegnn.results.stats.summarize]: mean, std and count of metrics over the completed runs of
  each group;
- [`relative`][pipegnn.results.stats.relative]: each run's metric divided by its baseline's (e.g. against full
  batch);
- [`leaderboard`][pipegnn.results.stats.leaderboard]: an OGB-style table, test and validation accuracy per
  setting;
- [`with_setup`][pipegnn.results.stats.with_setup]: the derived columns ``setup`` (e.g. ``gpipe 2×cpu``,
  ``single cuda``) and ``device_type`` (``cpu``, ``cuda``) from ``engine`` and ``devices``; both may be used
  in ``by``, ``within`` and ``where``.

Only completed runs enter a statistic; aggregates are over repeated runs of the same setting (seeds):
mean, sample standard deviation (ddof=1, NaN for one run) and count.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from pipegnn.results.table import ROW_STATUSES, column, select

__all__ = ["LEADERBOARD_SETTINGS", "WITHIN", "device_type", "leaderboard", "relative", "setup_label",
           "summarize", "summary", "with_setup"]

#: Columns a baseline row must share with a row in [`relative`][pipegnn.results.stats.relative] (the
#: comparable group).
WITHIN = ("dataset", "model", "num_nodes", "framework", "device_type")
#: Columns that define a run's setting (besides the seed).
_SETTINGS = ("dataset", "model", "num_nodes", "framework", "setup", "engine", "devices", "chunks",
             "halo", "partition", "targets", "cfg.model.layers", "cfg.model.hidden", "cfg.dataset.density",
             "cfg.dataset.avg_degree")


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA


def _devices(devices: Any) -> list[str]:
    return [] if _missing(devices) else [d.strip() for d in str(devices).split(",") if d.strip()]


def device_type(devices: Any) -> str | None:
    """``cpu`` / ``cuda`` (``cpu+cuda`` when mixed) of a ``devices`` value such as ``cuda:0,cuda:1``."""
    types = sorted({d.split(":")[0] for d in _devices(devices)})
    return "+".join(types) if types else None


def setup_label(engine: Any, devices: Any) -> str:
    """``gpipe 2×cpu``, ``single cuda``, ``pipelining 4×cuda``: the engine and its devices."""
    parts, kind = _devices(devices), device_type(devices)
    engine = "?" if _missing(engine) else str(engine)
    if kind is None:
        return engine
    return f"{engine} {len(parts)}×{kind}" if len(parts) > 1 else f"{engine} {kind}"


def with_setup(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``df`` with the derived ``setup`` and ``device_type`` columns."""
    out = df.copy()
    engine = out["engine"] if "engine" in out else pd.Series(None, index=out.index, dtype=object)
    devices = out["devices"] if "devices" in out else pd.Series(None, index=out.index, dtype=object)
    out["setup"] = [setup_label(e, d) for e, d in zip(engine, devices)]
    out["device_type"] = [device_type(d) for d in devices]
    return out


def _completed(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"] == "completed"]


def _key(values: Sequence[Any]) -> tuple:
    """Group key values with every kind of missing value as None (so keys compare equal)."""
    return tuple(None if _missing(v) else v for v in values)


def _list(keys: str | Sequence[str]) -> list[str]:
    return [keys] if isinstance(keys, str) else list(keys)


def summarize(df: pd.DataFrame, by: str | Sequence[str], metrics: str | Sequence[str]) -> pd.DataFrame:
    """Mean, std (ddof=1) and count of each metric over the completed runs of each group of ``by``.

    Returns one row per group (sorted, missing keys kept as a group) with the ``by`` columns, ``runs``
    (completed runs in the group), then ``<metric>_mean``, ``<metric>_std``, ``<metric>_count`` (runs
    with a value). Rows not completed are left out and counted in ``attrs["dropped"]`` (total) and
    ``attrs["dropped_by_status"]`` ({status: count}).
    """
    data = with_setup(df)
    by = [column(data, k) for k in _list(by)]
    metrics = [column(data, m) for m in _list(metrics)]
    done = _completed(data)
    statuses = data.loc[data["status"] != "completed", "status"].fillna("unknown").value_counts()
    if done.empty:
        out = pd.DataFrame(columns=[*by, "runs", *(f"{m}_{s}" for m in metrics
                                                   for s in ("mean", "std", "count"))])
    else:
        values = done[metrics].apply(pd.to_numeric, errors="coerce")
        groups = values.groupby([done[k] for k in by], dropna=False, sort=True)
        out = groups.agg(["mean", "std", "count"])
        out.columns = [f"{m}_{s}" for m, s in out.columns]
        out.insert(0, "runs", groups.size())
        out = out.reset_index()
    out.attrs["dropped"] = int(statuses.sum())
    out.attrs["dropped_by_status"] = {str(k): int(v) for k, v in statuses.items()}
    return out


def relative(df: pd.DataFrame, metric: str, baseline: Mapping[str, Any],
             within: Sequence[str] = WITHIN) -> pd.Series:
    """Each row's ``metric`` divided by its baseline's: e.g. epoch-time overhead against full batch
    with ``baseline={"chunks": 1, "halo": "none", "engine": "single"}``.

    A row's baseline is the mean ``metric`` of the completed runs that match ``baseline`` (as
    [`pipegnn.results.select`][pipegnn.results.table.select] matches) and share the row's ``within`` columns
    (by default dataset, model, graph size, framework and device type), over seeds. Returns a Series aligned
    with ``df`` named ``<metric>_relative``: NaN for rows not completed or without a baseline.

    Raises:
        KeyError: a column is missing.
        ValueError: in some group the baseline matches runs of more than one setting (e.g. both the
            gpipe and the single engine); the message names the columns to add to ``baseline``.
    """
    data = with_setup(df).reset_index(drop=True)
    within = [column(data, k) for k in within]
    value = column(data, metric)
    base = _completed(select(data, baseline))
    settings = [c for c in _SETTINGS if c in base and c not in within and c != "setup"]
    means: dict[tuple, float] = {}
    for key, group in base.groupby(within, dropna=False):
        key = _key(key if isinstance(key, tuple) else (key,))
        varying = [c for c in settings if group[c].nunique(dropna=False) > 1]
        if varying:
            raise ValueError(f"baseline {dict(baseline)} matches runs of several settings in group "
                             f"{dict(zip(within, key))}: {', '.join(varying)} vary; add them to baseline")
        means[key] = float(pd.to_numeric(group[value], errors="coerce").mean())
    reference = [means.get(_key(row), math.nan) for row in zip(*(data[k] for k in within))]
    ratio = (pd.to_numeric(data[value], errors="coerce").to_numpy(dtype=float)
             / np.array(reference, dtype=float))
    ratio[(data["status"] != "completed").to_numpy()] = np.nan
    return pd.Series(ratio, index=df.index, name=f"{metric}_relative")


#: What a leaderboard row is (those of them the runs have): the method and the setting it ran in.
LEADERBOARD_SETTINGS = ("dataset", "model", "framework", "engine", "devices", "chunks", "halo", "partition",
                        "targets", "cfg.microbatch.halo_dropout", "monitor")


def leaderboard(df: pd.DataFrame, by: Sequence[str] = LEADERBOARD_SETTINGS) -> pd.DataFrame:
    """An OGB-style table of the completed runs: one row per setting of ``by``, with test accuracy
    (at the best validation epoch) and best validation accuracy as mean and std (ddof=1) over the
    runs, the number of runs and of distinct seeds, the model's parameters, the hardware and the
    latest date. Text columns ``test`` and ``val`` show ``mean ± std`` in percent."""
    done = df[df["status"] == "completed"]
    keys = [k for k in by if k in done and done[k].notna().any()]
    rows = []
    for key, group in done.groupby(keys, dropna=False, sort=True) if keys else [((), done)]:
        test, val = (pd.to_numeric(group[c], errors="coerce")
                     for c in ("test_acc_at_best_val", "best_val_acc"))
        row = dict(zip(keys, key if isinstance(key, tuple) else (key,)))
        row.update(test_mean=test.mean(), test_std=test.std(), val_mean=val.mean(), val_std=val.std(),
                   runs=len(group), seeds=group["seed"].nunique(),
                   parameters=group["parameters"].max(),
                   hardware="; ".join(sorted(group["hardware"].dropna().astype(str).unique())) or None,
                   date=group["date"].dropna().max() if group["date"].notna().any() else None)
        row["test"] = _mean_std(row["test_mean"], row["test_std"])
        row["val"] = _mean_std(row["val_mean"], row["val_std"])
        rows.append(row)
    return pd.DataFrame(rows)


def _mean_std(mean: float, std: float) -> str:
    if math.isnan(mean):
        return "-"
    return f"{100 * mean:.2f} ± {100 * std:.2f}" if not math.isnan(std) else f"{100 * mean:.2f}"


def summary(df: pd.DataFrame) -> str:
    """``N runs: X completed, Y failed, ...`` (statuses other than completed only when present, in the
    order of `ROW_STATUSES`, then unknown ones)."""
    counts = df["status"].fillna("unknown").value_counts().to_dict()
    order = [*ROW_STATUSES, *sorted(set(counts) - set(ROW_STATUSES))]
    parts = [f"{counts.get(s, 0)} {s}" for s in order if s == "completed" or counts.get(s)]
    return f"{len(df)} run{'' if len(df) == 1 else 's'}: {', '.join(parts)}"
