"""One training step as a Chrome trace (``trace.json``): open it in https://ui.perfetto.dev or
``chrome://tracing``.

Trace Event Format: one process row per rank (``pipelining``) or one for the whole pipeline (``single``,
``gpipe``), one thread row per stage, one complete event (``"ph": "X"``) per box, named ``F3``
(forward of micro-batch 3), ``B3`` (backward), ``R3`` (recompute), ``first-layer transform`` (and its
``backward``: once per step, for every micro-batch) or ``recv F3`` / ``recv B3`` (waiting
for the activation / gradient of micro-batch 3). Times are microseconds from the step's first box.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from pipegnn.jsonfile import JSONFileError, read_json
from pipegnn.timeline.boxes import Box
from pipegnn.timeline.figures import PipelineInfo

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

TRACE_NAME = "trace.json"
_NAMES = {"forward": "F", "backward": "B", "recompute": "R", "recv_forward": "recv F",
          "recv_backward": "recv B", "shared_forward": "first-layer transform",
          "shared_backward": "first-layer transform backward"}


def chrome_trace(boxes: list[Box], info: PipelineInfo, epoch: int) -> dict[str, Any]:
    """The trace of one step's ``boxes`` (see the module doc)."""
    origin = min((b.start for b in boxes), default=0.0)
    per_rank = info.engine == "pipelining"
    events: list[dict[str, Any]] = []
    pids = sorted({info.lanes[s] if per_rank else 0 for s in range(info.num_stages)})
    for pid in pids:
        events.append({"name": "process_name", "ph": "M", "pid": pid,
                       "args": {"name": f"rank {pid}" if per_rank else info.engine}})
    for s, units in enumerate(info.stage_units):
        pid = info.lanes[s] if per_rank else 0
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": s,
                       "args": {"name": f"stage {s} ({' '.join(units)}) on {info.devices[s]}"}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": s,
                       "args": {"sort_index": s}})
    for b in boxes:
        name = _NAMES[b.kind] if b.micro_batch < 0 else f"{_NAMES[b.kind]}{b.micro_batch}"
        events.append({"name": name, "cat": b.kind,
                       "ph": "X", "ts": round((b.start - origin) * 1e6, 3),
                       "dur": round(b.seconds * 1e6, 3), "pid": info.lanes[b.stage] if per_rank else 0,
                       "tid": b.stage, "args": {"stage": b.stage, "micro_batch": b.micro_batch}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"epoch": epoch, "engine": info.engine, "schedule": info.schedule,
                          "chunks": info.chunks, "stage_units": info.stage_units}}


def load_trace(path: str | Path) -> dict[str, Any]:
    """Read a ``trace.json`` (or the run directory holding it).

    Raises:
        JSONFileError: (a ValueError) naming the file: not valid JSON, or not a Chrome trace object.
        OSError: the file cannot be read.
    """
    path = Path(path)
    if path.is_dir():
        path = path / TRACE_NAME
    trace = read_json(path)
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise JSONFileError(path, "not a Chrome trace (an object with a traceEvents array)")
    return trace
