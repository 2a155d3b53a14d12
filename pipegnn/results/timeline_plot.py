"""The figure of one traced training step: a Gantt chart of the stage timeline in a run's ``trace.json``
(see [`pipegnn.timeline.trace`][pipegnn.timeline.trace]), drawn like
[`pipegnn.results.figures`][pipegnn.results.figures]' figures (Agg canvas, a PNG when given a path,
[`NoData`][pipegnn.results.figures.NoData] when there is nothing to draw).
"""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, Mapping

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from pipegnn.results.figures import DPI, PANEL_SIZE, NoData, _finish

__all__ = ["plot_timeline"]

#: Legend label and bar style of each kind of timeline box (a trace event's ``cat``), in legend order;
#: waits are light grey, hatched and drawn thinner, behind the work.
_BOXES: dict[str, tuple[str, dict[str, Any]]] = {
    "forward": ("forward", {"color": "C0", "edgecolor": "white"}),
    "backward": ("backward", {"color": "C1", "edgecolor": "white"}),
    "recompute": ("recompute", {"color": "C2", "edgecolor": "white"}),
    "shared_forward": ("first-layer transform", {"color": "C4", "edgecolor": "white"}),
    "shared_backward": ("first-layer transform backward", {"color": "C5", "edgecolor": "white"}),
    "recv_forward": ("wait for activation", {"color": "0.88", "hatch": "///", "edgecolor": "0.6"}),
    "recv_backward": ("wait for gradient", {"color": "0.88", "hatch": "\\\\\\", "edgecolor": "0.6"})}
_WAITS = ("recv_forward", "recv_backward")


#: A stage's unit list longer than this is shown as its first and last unit and their count.
_MAX_UNITS = 6


def _stage_label(name: str) -> str:
    """``stage s (units) on device`` as ``stage s (units)`` over ``on device``, a long unit list wrapped,
    one of more than `_MAX_UNITS` units cut to ``first ... last, N units`` (a deep model's stage
    holds hundreds)."""
    head, on, device = name.rpartition(" on ") if " on " in name else (name, "", "")
    stage, paren, units = head.partition(" (")
    if paren and units.endswith(")"):
        listed = units[:-1].split()
        if len(listed) > _MAX_UNITS:
            head = f"{stage} ({listed[0]} ... {listed[-1]}, {len(listed)} units)"
    return "\non ".join(textwrap.fill(part, 36) for part in ((head, device) if on else (head,)))


def plot_timeline(trace: Mapping[str, Any] | str | Path, path: str | Path | None = None, *,
                  title: str | None = None) -> Figure:
    """Gantt chart of one traced training step: one row per stage (top to bottom; labelled with the
    trace's thread name, ``stage s (units)`` over ``on device``, else ``stage s``), one bar per box
    coloured by kind (forward, backward, recompute, the first layer's once-per-step transform and its
    backward; waits for an activation or gradient in hatched grey), the micro-batch number written in
    the bars wide enough for it; x axis in milliseconds from
    the step's first box.

    Args:
        trace: the dict of a ``trace.json``, or the file, or the run directory holding it.
        path: where to write the PNG (none when None).
        title: the figure's title (default: engine, schedule, micro-batches and epoch of the trace).

    Raises:
        NoData: the trace holds no box, or there is no trace file.
    """
    if not isinstance(trace, Mapping):
        from pipegnn.timeline import TRACE_NAME, load_trace  # imports torch: only when reading a file
        file = Path(trace) / TRACE_NAME if Path(trace).is_dir() else Path(trace)
        if not file.is_file():
            raise NoData(f"timeline: no trace at {file}")
        trace = load_trace(file)
    events = trace.get("traceEvents", [])
    boxes = [e for e in events if e.get("ph") == "X" and e.get("cat") in _BOXES]
    if not boxes:
        raise NoData("timeline: the trace has no box")
    names = {e["tid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    stages = sorted({e["tid"] for e in boxes} | set(names))
    row = {tid: i for i, tid in enumerate(stages)}
    fig = Figure(figsize=(2 * PANEL_SIZE[0], 1.6 + 0.55 * len(stages)), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    span = max(e["ts"] + e["dur"] for e in boxes) / 1e3
    for kind, (label, style) in _BOXES.items():
        of_kind = [e for e in boxes if e["cat"] == kind]
        if not of_kind:
            continue
        height = 0.4 if kind in _WAITS else 0.8
        ax.barh([row[e["tid"]] for e in of_kind], [e["dur"] / 1e3 for e in of_kind],
                left=[e["ts"] / 1e3 for e in of_kind], height=height, label=label,
                zorder=1 if kind in _WAITS else 2, **style)
        if kind in _WAITS:
            continue
        for e in of_kind:  # about 2% of the axis per character fits at this font size
            text = str(e["args"]["micro_batch"])
            if e["args"]["micro_batch"] >= 0 and e["dur"] / 1e3 >= 0.02 * span * len(text):
                ax.text((e["ts"] + e["dur"] / 2) / 1e3, row[e["tid"]], text, ha="center", va="center",
                        fontsize="small", color="white", zorder=3)
    ax.set_yticks(range(len(stages)), [_stage_label(names.get(t, f"stage {t}")) for t in stages])
    ax.set_ylim(len(stages) - 0.5, -0.5)  # stage 0 on top
    ax.set_xlim(0, span)
    ax.set_xlabel("time from the step's first box (ms)")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=5, fontsize="small", frameon=False)
    if title is None:
        info = trace.get("otherData", {})
        title = (f"Stage timeline: {info.get('engine', '?')}, schedule {info.get('schedule', '?')}, "
                 f"{info.get('chunks', '?')} micro-batches, epoch {info.get('epoch', '?')}")
    return _finish(fig, title, path)
