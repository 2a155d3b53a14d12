"""The history caches of a ``pipelining`` pipeline across its ranks (historical halos).

[`refresh_stage_by_stage`][pipegnn.engines.refresh.refresh_stage_by_stage] is the layer-wise inference of
[`layerwise`][pipegnn.models.base.layerwise] spread over the ranks: each stage runs its units over all of a
call's micro-batches (refreshing its history caches) and sends every output to the next stage's rank in one
message per tensor, so no process holds more than its own layers.
[`gather_history_traffic`][pipegnn.engines.refresh.gather_history_traffic] collects every rank's cache
traffic.
"""
from __future__ import annotations

from typing import Any, cast

import torch
import torch.distributed as dist
from torch import Tensor

from pipegnn.engines.replicas import Replicas
from pipegnn.engines.stages import PipeStage, StaticShapes
from pipegnn.models.base import StagedGNN, layerwise
from pipegnn.models.transform import Transform
from pipegnn.models.units import Unit

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


@torch.no_grad()
def refresh_stage_by_stage(ids: Tensor, first: Transform | None, stages: dict[int, PipeStage],
                           units: list[range], shapes: StaticShapes, replicas: Replicas) -> list[Tensor]:
    """Layer-wise inference over ``ids``'s micro-batches, stage by stage, refreshing the caches of this
    rank's ``stages`` (stage s holds the units ``units[s]`` and runs on pipeline rank ``s % ranks``;
    ``first``: the model's first unit where this rank has stage 0).

    Every replica refreshes over all of ``ids`` (so all replicas' caches hold the same rows after it:
    during training each replica's caches get only its own micro-batches' pushes, one step of extra
    staleness for the others' rows, which the staleness figures count).

    Returns:
        The logits of each micro-batch where this rank holds the last stage, else nothing.
    """
    order = ids.tolist()
    if first is not None:
        first.begin_step(order)
    carried: list[tuple[Tensor, ...]] = [() for _ in order]
    num_stages, ranks, rank = len(units), replicas.ranks, replicas.rank
    for s in range(num_stages):
        if s % ranks != rank:
            continue
        stage, before, after = stages[s], (s - 1) % ranks, (s + 1) % ranks
        if s > 0 and before != rank:
            carried = _receive(shapes, units[s].start - 1, order, replicas.global_rank(before), stage)
        carried = layerwise(cast(list[Unit], list(stage.units)), ids, carried)
        if s + 1 < num_stages and after != rank:
            for tensor in zip(*carried):
                sent = torch.cat(tensor).to(stage.transport, shapes.dtype).contiguous()
                dist.send(sent, dst=replicas.global_rank(after))
    if first is not None:
        first.end_step()
    return [out[0] for out in carried] if num_stages - 1 in stages else []


def _receive(shapes: StaticShapes, unit: int, order: list[int], src: int,
             stage: PipeStage) -> list[tuple[Tensor, ...]]:
    """Unit ``unit``'s outputs for the micro-batches ``order``, sent by global rank ``src`` (one message
    per tensor, the micro-batches' rows one after another), on ``stage``'s device."""
    tensors = []
    for rows, width in zip(shapes.rows[unit], shapes.width[unit]):
        sizes = [rows[m] for m in order]
        buffer = torch.empty(sum(sizes), width, dtype=shapes.dtype, device=stage.transport)
        dist.recv(buffer, src=src)
        tensors.append(buffer.to(stage.device).split(sizes))
    return list(zip(*tensors))


def gather_history_traffic(model: StagedGNN, replicas: Replicas) -> dict[str, dict[str, float]]:
    """Every rank's cache traffic of the step (a collective: call on every rank), by unit name as in the
    record's stage units (``replica<d>:`` before it with replicas: each replica's caches are its own)."""
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, model.history_traffic())
    return {f"{replicas.prefixes[r // replicas.ranks]}{name}": t
            for r, traffic in enumerate(everyone) for name, t in traffic.items()}
