"""Pipeline figures of a training step, from its timeline boxes, and the schedules' theory.

Per step (one value per epoch in the record, medians in its ``pipeline`` section):

- ``stages``: per stage, seconds of ``forward``, ``backward``, ``recompute``, ``shared_forward`` and
  ``shared_backward`` (the first layer's once-per-step transform), their sum ``busy`` and
  ``communication`` (waiting on receives);
- ``makespan_s``: from the first box's start to the last box's end;
- ``bubble``: the measured idle share ``1 - sum(busy) / (lanes x makespan)``, where a lane is what runs
  stages in parallel (a ``pipelining`` rank; a stage otherwise);
- ``imbalance``: max / mean busy time over stages (1 = balanced);
- ``ideal_makespan_s`` and ``ideal_speedup``: what the schedule would take with the measured busy times
  and nothing else (no communication, no overhead, every micro-batch alike): with ``c_l`` the busy time
  of lane ``l`` per micro-batch and ``v`` stages per lane, ``(sum_l c_l + (v k - 1) max_l c_l) / v``
  (a linear pipeline fills with every lane once and then runs at the pace of the busiest), against
  running all the work one stage after another (``sum(busy)``); 1 when the stages cannot overlap.
  With balanced lanes the ideal's idle share is the schedule's theoretical bubble;
- ``bubble_ideal``: the idle share of that ideal, ``1 - sum(busy) / (lanes x ideal_makespan)``: the
  schedule's bubble plus what the measured imbalance of the stages adds to it (the rest of the measured
  bubble is communication and overhead).
"""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any, Iterable

from pipegnn.timeline.boxes import BUSY, COMMUNICATION, Box

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


def theoretical_bubble(schedule: str, lanes: int, chunks: int, per_lane: int = 1) -> float:
    """Idle share of a perfectly balanced pipeline of ``lanes`` workers with ``chunks`` micro-batches.

    GPipe and 1F1B: ``(p - 1) / (k + p - 1)`` (1F1B reorders the same work: same bubble, fewer live
    activations). Interleaved 1F1B with ``v`` stages per worker: ``(p - 1) / (v k + p - 1)``. One lane
    (``single``): 0.
    """
    if lanes <= 1:
        return 0.0
    v = per_lane if schedule == "interleaved1f1b" else 1
    return (lanes - 1) / (v * chunks + lanes - 1)


@dataclass
class PipelineInfo:
    """What a run's pipeline is (the static part of the record's ``pipeline`` section).

    Attributes:
        engine: ``single``, ``gpipe`` or ``pipelining``.
        schedule: ``single``, ``gpipe``, ``1f1b`` or ``interleaved1f1b``.
        chunks: micro-batches per step.
        stage_units: the units (``transform0``, ``propagate0``, ...) of every stage.
        lanes: the lane (rank, or stage) of every stage.
        devices: the device of every stage.
        overlap_possible: whether two stages can run at the same time at all.
        overlap_note: why not, when they cannot.
        balance_source: ``auto`` (measured), ``config`` or ``even``.
        unit_costs_s: with ``balance=auto``, the measured forward + backward seconds of every unit per
            micro-batch.
        per_lane: stages per lane (``interleaved1f1b``'s virtual stages; 1 otherwise).
        replicas: pipeline replicas (``engine.data_parallel``): the stages and lanes are every
            replica's, replica after replica, and each replica runs ``chunks / replicas`` micro-batches.
    """

    engine: str
    schedule: str
    chunks: int
    stage_units: list[list[str]]
    lanes: list[int]
    devices: list[str]
    overlap_possible: bool
    overlap_note: str | None = None
    balance_source: str = "even"
    unit_costs_s: dict[str, float] | None = None
    per_lane: int = 1
    replicas: int = 1

    @property
    def num_stages(self) -> int:
        return len(self.stage_units)

    @property
    def num_lanes(self) -> int:
        return len(set(self.lanes))

    @property
    def balance(self) -> list[int]:
        """Units per stage."""
        return [len(u) for u in self.stage_units]

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "num_stages": self.num_stages, "num_lanes": self.num_lanes,
                "balance": self.balance,
                "bubble_theoretical": theoretical_bubble(self.schedule, self.num_lanes // self.replicas,
                                                         self.chunks // self.replicas, self.per_lane)}


def step_figures(boxes: list[Box], info: PipelineInfo) -> dict[str, Any]:
    """The figures of one training step (see the module doc)."""
    stages = [{f"{kind}_s": 0.0 for kind in (*BUSY, "communication")} for _ in range(info.num_stages)]
    lanes: dict[int, float] = {lane: 0.0 for lane in info.lanes}
    for b in boxes:
        key = "communication_s" if b.kind in COMMUNICATION else f"{b.kind}_s"
        stages[b.stage][key] += b.seconds
        if b.kind in BUSY:
            lanes[b.lane] += b.seconds
    for s in stages:
        s["busy_s"] = sum(s[f"{kind}_s"] for kind in BUSY)
    makespan = max(b.end for b in boxes) - min(b.start for b in boxes) if boxes else 0.0
    busy = [s["busy_s"] for s in stages]
    total = sum(busy)
    if info.overlap_possible:  # the slowest replica's ideal pipeline
        v = info.per_lane if info.schedule == "interleaved1f1b" else 1
        chunks, per_replica = info.chunks // info.replicas, len(lanes) // info.replicas
        ideal = 0.0
        for d in range(info.replicas):
            per_mb = [busy_l / chunks for i, busy_l in enumerate(lanes.values()) if i // per_replica == d]
            ideal = max(ideal, (sum(per_mb) + (v * chunks - 1) * max(per_mb)) / v)
    else:
        ideal = total
    return {
        "makespan_s": makespan,
        "busy_s": total,
        "communication_s": sum(s["communication_s"] for s in stages),
        "bubble": 1.0 - total / (len(lanes) * makespan) if makespan > 0 else 0.0,
        "imbalance": max(busy) / (total / len(busy)) if total > 0 else 1.0,
        "ideal_makespan_s": ideal,
        "ideal_speedup": total / ideal if ideal > 0 else 1.0,
        "bubble_ideal": 1.0 - total / (len(lanes) * ideal) if ideal > 0 else 0.0,
        "stages": stages,
    }


def medians(steps: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Median of every figure of [`step_figures`][pipegnn.timeline.figures.step_figures] over ``steps``
    (per-stage figures per stage)."""
    steps = list(steps)
    if not steps:
        return {}
    out: dict[str, Any] = {k: statistics.median(s[k] for s in steps) for k in steps[0] if k != "stages"}
    out["stages"] = [{k: statistics.median(s["stages"][i][k] for s in steps) for k in stage}
                     for i, stage in enumerate(steps[0]["stages"])]
    return out
