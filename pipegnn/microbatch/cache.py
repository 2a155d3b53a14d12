"""On-disk cache of micro-batch plans, so that a sweep builds each plan once.

A plan is keyed by everything it depends on: the computation graph (edges and weights), the targets,
the number of chunks and layers, the halo mode, the partitioner and its seed. Any change gives a new key.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from pipegnn.microbatch.halo import MicroBatch
from pipegnn.microbatch.plan import MicroBatchPlan, PlanStats, build_plan

__all__ = ["cached_plan", "plan_key"]

log = logging.getLogger(__name__)

_FORMAT = 3  # bump when the stored layout or the plan semantics change


def plan_key(edge_index: Tensor, edge_weight: Tensor | None, targets: Tensor, **params: Any) -> str:
    """A hex digest of the graph, the targets and the build parameters (``num_nodes``, ``chunks``...)."""
    h = hashlib.sha1(json.dumps({"format": _FORMAT, **params}, sort_keys=True).encode())
    for t in (edge_index, edge_weight, torch.unique(targets)):
        h.update(b"-" if t is None else t.contiguous().numpy().tobytes())
        if t is not None:
            h.update(str(t.dtype).encode())
    return h.hexdigest()[:24]


def _to_state(plan: MicroBatchPlan) -> dict[str, Any]:
    batches = [{"nodes": mb.nodes, "sizes": mb.sizes, "edges": mb.edges, "weights": mb.weights,
                "sources": mb.sources} for mb in plan.micro_batches]
    return {"micro_batches": batches, "targets": plan.targets, "part": plan.part, "halo": plan.halo,
            "partition": plan.partition, "stats": asdict(plan.stats)}


def _from_state(state: dict[str, Any]) -> MicroBatchPlan:
    return MicroBatchPlan([MicroBatch(**mb) for mb in state["micro_batches"]], state["targets"],
                          state["part"], state["halo"], state["partition"], PlanStats(**state["stats"]))


def cached_plan(cache_dir: str | Path | None, edge_index: Tensor, num_nodes: int, targets: Tensor,
                chunks: int, *, num_layers: int, halo: str, partitioner: str,
                edge_weight: Tensor | None = None, seed: int = 0,
                part: Tensor | None = None) -> tuple[MicroBatchPlan, bool]:
    """:func:`build_plan`, read from ``cache_dir`` when this exact plan was built before.

    Args:
        cache_dir: folder of cached plans (created when needed), or None to always build.
        edge_index, num_nodes, targets, chunks, num_layers, halo, partitioner, edge_weight, seed, part:
            as for :func:`build_plan`.

    Returns:
        The plan and whether it came from the cache.
    """
    def build() -> MicroBatchPlan:
        return build_plan(edge_index, num_nodes, targets, chunks, num_layers=num_layers, halo=halo,
                          partitioner=partitioner, edge_weight=edge_weight, seed=seed, part=part)

    if cache_dir is None:
        return build(), False
    key = plan_key(edge_index, edge_weight, targets, num_nodes=num_nodes, chunks=chunks,
                   num_layers=num_layers, halo=halo, partitioner=partitioner, seed=seed,
                   part=None if part is None else hashlib.sha1(part.numpy().tobytes()).hexdigest())
    path = Path(cache_dir) / f"plan-{key}.pt"
    if path.is_file():
        try:
            return _from_state(torch.load(path, weights_only=True)), True
        except Exception as e:  # a truncated or foreign file: rebuild and overwrite it
            log.warning("ignoring unreadable cached plan %s (%s)", path, e)
    plan = build()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".plan.", suffix=".pt", dir=path.parent)
    os.close(fd)
    try:
        torch.save(_to_state(plan), tmp)
        os.replace(tmp, path)  # atomic: parallel jobs never read half a plan
    finally:
        Path(tmp).unlink(missing_ok=True)
    return plan, False
