"""On-disk cache of micro-batch plans, so that a sweep builds each plan once.

A plan is keyed by everything it depends on: the computation graph (edges and weights), the targets,
the number of chunks and layers, the halo mode, the partitioner and its seed. Any change gives a new key.
The file stores its key and its content checksum ([`pipegnn.integrity`][pipegnn.integrity]) and is checked on
load: a file damaged in place, one that belongs to another key (renamed, copied, swapped) or whose plan does
not fit the request is rebuilt and overwritten, with a warning. A cache folder
that cannot be written still serves the plans it holds; new plans are then kept in memory only.
Files are read with ``weights_only=True``: nothing read from a cache folder can execute code.
"""
from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from pipegnn.atomic import atomic_path
from pipegnn.integrity import seal, unsealed
from pipegnn.microbatch.halo import MicroBatch
from pipegnn.microbatch.plan import ComputationGraph, MicroBatchPlan, PlanSpec, PlanStats, build_plan

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

log = logging.getLogger(__name__)

_FORMAT = 5  # bump when the stored layout or the plan semantics change (5: content checksum)


def plan_key(graph: ComputationGraph, targets: Tensor, spec: PlanSpec, part: Tensor | None = None) -> str:
    """A hex digest of the graph, the targets, the spec and the reused part ids (if any)."""
    # the key's names and values as they have always been (a change would miss every cached plan)
    params = {"num_nodes": graph.num_nodes, "chunks": spec.chunks, "num_layers": spec.num_layers,
              "halo": spec.halo, "partitioner": spec.partitioner, "seed": spec.seed,
              "part": None if part is None else hashlib.sha1(part.numpy().tobytes()).hexdigest()}
    if spec.balances_nodes and spec.partitioner == "metis" and part is None:
        params["balance"] = "nodes"  # since METIS balances the nodes there (plans before, the targets)
    h = hashlib.sha1(json.dumps({"format": _FORMAT, **params}, sort_keys=True).encode())
    if graph.csr is not None and graph.csr.key is not None:  # edges in a graph store: its content key
        h.update(f"store-{graph.csr.key}".encode())
    for t in (graph.edge_index, graph.edge_weight, torch.unique(targets)):
        h.update(b"-" if t is None else t.contiguous().numpy().tobytes())
        if t is not None:
            h.update(str(t.dtype).encode())
    return h.hexdigest()[:24]


_unwritable: set[str] = set()  # cache folders already warned about (one warning per folder)


def _to_state(plan: MicroBatchPlan, key: str) -> dict[str, Any]:
    batches = [{"nodes": mb.nodes, "sizes": mb.sizes, "edges": mb.edges, "weights": mb.weights,
                "sources": mb.sources} for mb in plan.micro_batches]
    return seal({"format": _FORMAT, "key": key, "micro_batches": batches, "targets": plan.targets,
                 "part": plan.part, "halo": plan.halo, "partition": plan.partition,
                 "stats": asdict(plan.stats)})


def _mismatch(state: Any, key: str, num_nodes: int, targets: Tensor, spec: PlanSpec) -> str | None:
    """Why a loaded state is not the plan asked for (None if it is): another key, or a plan whose
    shape does not fit the request (cheap checks, no rebuild)."""
    chunks, num_layers, halo, partitioner = spec.chunks, spec.num_layers, spec.halo, spec.partitioner
    if not isinstance(state, dict):
        return f"not a stored plan ({type(state).__name__})"
    if state.get("format") != _FORMAT or state.get("key") != key:
        return (f"stored for key {state.get('key')!r} (format {state.get('format')!r}), "
                f"expected {key!r} (format {_FORMAT})")
    batches, stats = state["micro_batches"], state["stats"]
    if not len(batches) == stats["chunks"] == chunks:
        return f"{len(batches)} micro-batches, expected chunks={chunks}"
    if (state["halo"], state["partition"]) != (halo, partitioner):
        return f"halo={state['halo']!r} partition={state['partition']!r}, expected {halo!r} {partitioner!r}"
    part = state["part"]
    if part.shape != (num_nodes,) or (num_nodes and not 0 <= int(part.min()) <= int(part.max()) < chunks):
        return f"part of shape {tuple(part.shape)} with ids outside [0, {chunks})"
    for i, mb in enumerate(batches):
        nodes, sizes = mb["nodes"], mb["sizes"]
        if (len(sizes) != num_layers + 1 or len(mb["edges"]) != num_layers
                or len(mb["weights"]) != num_layers or nodes.shape != (sizes[0],)
                or (nodes.numel() and not 0 <= int(nodes.min()) <= int(nodes.max()) < num_nodes)):
            return f"micro-batch {i} does not fit {num_layers} layers over {num_nodes} nodes"
    mb_targets = [mb["nodes"][:mb["sizes"][-1]] for mb in batches]
    if stats["targets_per_chunk"] != [t.numel() for t in mb_targets] or not torch.equal(
            state["targets"], torch.cat(mb_targets)):
        return "targets disagree with the micro-batches"
    if not torch.equal(torch.sort(state["targets"]).values, torch.unique(targets)):
        return "targets differ from the requested targets"
    return None


def _from_state(state: dict[str, Any]) -> MicroBatchPlan:
    return MicroBatchPlan([MicroBatch(**mb) for mb in state["micro_batches"]], state["targets"],
                          state["part"], state["halo"], state["partition"], PlanStats(**state["stats"]))


def cached_plan(cache_dir: str | Path | None, graph: ComputationGraph, targets: Tensor, spec: PlanSpec,
                part: Tensor | None = None) -> tuple[MicroBatchPlan, bool]:
    """[`build_plan`][pipegnn.microbatch.plan.build_plan], read from ``cache_dir`` when this exact plan was
    built before.

    Args:
        cache_dir: folder of cached plans (created when needed), or None to always build.
        graph, targets, spec, part: as for [`build_plan`][pipegnn.microbatch.plan.build_plan].

    Returns:
        The plan and whether it came from the cache (never with sampled halos: their blocks are drawn
        anew every epoch).
    """
    if cache_dir is None or spec.halo == "sampled":
        return build_plan(graph, targets, spec, part), False
    key = plan_key(graph, targets, spec, part)
    path = Path(cache_dir) / f"plan-{key}.pt"
    if path.is_file():
        try:
            state = torch.load(path, weights_only=True)
            why = _mismatch(state, key, graph.num_nodes, targets, spec) or unsealed(state)
            if why is None:
                return _from_state(state), True
            log.warning("ignoring cached plan %s (%s); rebuilding it", path, why)
        except Exception as e:  # a truncated or foreign file: rebuild and overwrite it
            log.warning("ignoring unreadable cached plan %s (%s); rebuilding it", path, e)
    plan = build_plan(graph, targets, spec, part)
    try:
        _save(_to_state(plan, key), path)
    except OSError as e:  # a read-only or unusable folder: the plan is still good, in memory
        folder = str(path.parent)
        if folder not in _unwritable:
            _unwritable.add(folder)
            log.warning("plan cache folder %s cannot be written (%s); plans are built in memory and "
                        "not cached", folder, e)
    return plan, False


def _save(state: dict[str, Any], path: Path) -> None:
    with atomic_path(path) as tmp:  # parallel jobs never read half a plan; a killed write's file goes
        torch.save(state, tmp)
