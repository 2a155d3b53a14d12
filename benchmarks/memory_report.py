"""What ``benchmarks/memory.py`` prints and writes of its cases: each case's line as it ends, the tables
(printed, and saved as CSV), two runs of a mode side by side with their ratios, and part f's figure."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory_case import EXTRA, ROOT  # noqa: E402 - a sibling: one case's measurement


def show(title: str, rows: list[dict[str, Any]], columns: list[str], csv: Path) -> None:
    """Print ``rows`` (their ``columns`` present, in that order) under ``title`` and save them to ``csv``."""
    import pandas as pd

    table = pd.DataFrame(rows)
    table = table[[c for c in columns if c in table.columns]]
    print(f"\n{title}" + (f" [overrides: {' '.join(EXTRA)}]" if EXTRA else ""))
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}" if abs(v) < 10 else f"{v:.0f}"))
    csv.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(csv, index=False)
    print(f"-> {csv.relative_to(ROOT) if csv.is_relative_to(ROOT) else csv}")


def log_case(label: str, row: dict[str, Any]) -> None:
    """One line on stderr for a case that ended: its status, peak, time and error."""
    peak = row.get("peak_mb")
    print(f"  {label}: {row['status']}" + (f", peak {peak:.0f} MiB" if peak else "")
          + f", {row.get('total_s', 0):.0f}s" + (f" ({row['error'][:160]})" if row.get("error") else ""),
          file=sys.stderr, flush=True)


def side_by_side(rows: list[dict[str, Any]], axis: str, base: str, other: str, keys: tuple[str, ...],
                 copied: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """One row per mode (in first-seen order) with the figures ``keys`` of its ``axis`` = ``base`` and
    ``other`` runs side by side (``<base>_<key>``, ``<other>_<key>``) and their ratios other / base
    (``peak_ratio`` for ``peak_mb``, ...), plus the ``copied`` figures of the ``other`` run; a ratio is
    None unless both completed. E.g. ``axis="precision"``, ``base="fp32"``, ``other="bf16"``."""
    out = []
    for mode in dict.fromkeys(r["mode"] for r in rows):
        pair = {r[axis]: r for r in rows if r["mode"] == mode}
        first, second = pair.get(base, {}), pair.get(other, {})
        ok = first.get("status") == second.get("status") == "completed"
        row: dict[str, Any] = {"mode": mode, f"{base}_status": first.get("status"),
                               f"{other}_status": second.get("status"), **{k: second.get(k) for k in copied}}
        for key in keys:
            a, b = first.get(key), second.get(key)
            row[f"{base}_{key}"], row[f"{other}_{key}"] = a, b
            row[f"{key.rsplit('_', 1)[0]}_ratio"] = b / a if ok and a and b else None
        out.append(row)
    return out


def plot_f(rows: list[dict[str, Any]], cap_gb: float, features: int, about: str, path: Path) -> Any:
    """Part f's figure: peak memory (with the cap) and epoch time against the node count (top axis: the
    float32 feature matrix in GiB), one line per mode; a cross marks a size that did not train under the cap.
    Saved to ``path``; returns the figure."""
    import pandas as pd
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    table = pd.DataFrame(rows)
    fig = Figure(figsize=(11, 4.2))
    FigureCanvasAgg(fig)
    memory_ax, time_ax = fig.subplots(1, 2)
    for mode, group in table.groupby("mode", sort=False):
        done = group[group["status"] == "completed"]
        line = memory_ax.plot(done["nodes"], done["peak_mb"] / 1024, marker="o", label=mode)[0]
        failed = group[group["status"] != "completed"]
        memory_ax.plot(failed["nodes"], [cap_gb] * len(failed), marker="x", markersize=10, linestyle="none",
                       color=line.get_color())
        time_ax.plot(done["nodes"], done["epoch_s"], marker="o", color=line.get_color(), label=mode)
    memory_ax.axhline(cap_gb, color="black", linestyle="--", linewidth=1, label=f"cap {cap_gb:g} GiB")
    memory_ax.set(ylabel="peak resident memory (GiB); x: did not fit", title="peak memory")
    time_ax.set(ylabel="epoch time (s, median after warm-up)", title="epoch time", yscale="log")
    gib = features * 4 / 2 ** 30  # per node
    for ax in (memory_ax, time_ax):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("nodes")
        ax.grid(True, alpha=0.3)
        ax.secondary_xaxis("top", functions=(lambda n: n * gib, lambda g: g / gib)).set_xlabel(
            "float32 features (GiB)")
    memory_ax.legend(fontsize=8)
    fig.suptitle(f"Largest graph under the cap: {about}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return fig
