"""A training step waits for the device once (its loss), whatever the micro-batches and the depth: no
unit reads a device value on the host (counted on the CPU with torch.profiler, pipegnn.hostcalls)."""
from __future__ import annotations

import pytest
import torch

from pipegnn.backends import get_backend
from pipegnn.engines import GPipeEngine, SingleEngine
from pipegnn.hostcalls import HOST_READ, HostCalls, count_calls, read_on_host
from pipegnn.microbatch import ComputationGraph, PlanSpec, build_plan
from pipegnn.models import build_model

from tests.helpers import random_graph

MODELS = {
    "gat 2": dict(name="gat", hidden=4, heads=2, out_heads=1, layers=2, dropout=0.0),
    "gcn2 2": dict(name="gcn2", hidden=8, layers=2, alpha=0.1, theta=0.5, dropout=0.0),
    "gcn2 16": dict(name="gcn2", hidden=8, layers=16, alpha=0.1, theta=0.5, dropout=0.0),
}


def step_calls(model_cfg: dict, halo: str, chunks: int, engine: str) -> tuple[HostCalls, HostCalls | None]:
    """Calls of the third training step (the first two warm up: structures, caches' first checks) and,
    with history caches, of reading their traffic."""
    graph = random_graph(num_nodes=80, num_edges=300)
    backend = get_backend("pyg")
    model = build_model(model_cfg, backend, graph.x, graph.num_classes, history=halo == "historical")
    edges, weight = backend.computation_graph(model.kind, graph.edge_index, graph.num_nodes)
    targets = torch.arange(graph.num_nodes)
    plan = build_plan(ComputationGraph(edges, graph.num_nodes, weight), targets,
                      PlanSpec(chunks, model.num_layers, halo=halo, partitioner="random"))
    ids = model.attach(plan)
    units = len(model)
    runner = (SingleEngine(model, torch.device("cpu"), chunks, timeline=False) if engine == "single" else
              GPipeEngine(model, [torch.device("cpu")] * 2, [units // 2, units - units // 2], chunks,
                          timeline=False))
    labels = torch.where(graph.train_mask, graph.y, -1)[plan.targets]
    labelled = int(graph.train_mask.sum())
    if halo == "historical":
        runner.refresh(model, ids)  # fills the caches
    for _ in range(2):
        model.tick()
        runner.train_step(ids, labels, labelled)
    model.tick()
    step = count_calls(lambda: runner.train_step(ids, labels, labelled))
    traffic = count_calls(lambda: runner.history_traffic(model)) if halo == "historical" else None
    return step, traffic


@pytest.mark.parametrize("engine", ["single", "gpipe"])
@pytest.mark.parametrize("halo", ["exact", "historical"])
def test_one_wait_per_step_at_any_k_and_depth(engine: str, halo: str) -> None:
    for name, cfg in MODELS.items():
        if name == "gcn2 16" and halo == "exact":
            continue  # exact 16-hop halos are the whole graph: the same code as 2 layers, slower
        for chunks in (1, 8):
            step, traffic = step_calls(cfg, halo, chunks, engine)
            assert step.syncs == 1, (name, chunks, {k: v for k, v in step.ops.items() if "scalar" in k})
            assert step.ops.get("aten::_local_scalar_dense") == 1  # the loss, read by train_step
            if traffic is not None:  # every cache's ages at once
                assert traffic.syncs == 1 and traffic.ops[HOST_READ] == 1, (name, chunks)


def test_counts_see_waits() -> None:
    """The proxy counts what it claims: item(), boolean masks, and pipegnn's labelled reads."""
    x = torch.arange(10.0)
    calls = count_calls(lambda: (x.sum().item(), x[x > 3], read_on_host(x)))
    assert calls.syncs == 3
    assert calls.aten > calls.syncs
    assert count_calls(lambda: x * 2).syncs == 0
