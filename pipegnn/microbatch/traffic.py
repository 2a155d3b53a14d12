"""The record's figures of the history caches' traffic: per pipeline stage, per epoch, and their medians
over epochs (the caches themselves: [`pipegnn.microbatch.history`][pipegnn.microbatch.history])."""
from __future__ import annotations

import statistics
from typing import Any

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

_COUNTS = ("pulled_rows", "pushed_rows", "pulled_bytes", "pushed_bytes")


def per_stage(traffic: dict[str, dict[str, float]], stage_units: list[list[str]]) -> list[dict[str, Any]]:
    """Per pipeline stage (its units' names in ``stage_units``), the
    [`History.traffic`][pipegnn.microbatch.history.History.traffic] of its caches (``traffic``: by unit name)
    summed, and their ages averaged (None without caches)."""
    stages = []
    for s, names in enumerate(stage_units):
        mine = [traffic[n] for n in names if n in traffic]
        stage: dict[str, Any] = {"stage": s, "caches": len(mine),
                                 **{k: sum(t[k] for t in mine) for k in _COUNTS}}
        stage["staleness"] = sum(t["staleness"] for t in mine) / len(mine) if mine else None
        stages.append(stage)
    return stages


def epoch_figures(stages: list[dict[str, Any]]) -> dict[str, Any]:
    """An epoch's historical figures: the mean age of the rows pulled (over the caches) and, per
    stage, the rows and bytes pulled and pushed and their age."""
    ages = [s["staleness"] for s in stages for _ in range(s["caches"])]
    return {"staleness": sum(ages) / len(ages) if ages else 0.0, "history": stages}


def stage_medians(epochs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per stage, the median over ``epochs`` (each with
    [`epoch_figures`][pipegnn.microbatch.traffic.epoch_figures]' ``history``) of each step's traffic and age
    (a stage without caches keeps None as its age)."""
    stages = []
    for s, stage in enumerate(epochs[0]["history"]):
        entry = dict(stage)
        for key, value in stage.items():
            if key not in ("stage", "caches") and value is not None:
                entry[key] = statistics.median(e["history"][s][key] for e in epochs)
        stages.append(entry)
    return stages
