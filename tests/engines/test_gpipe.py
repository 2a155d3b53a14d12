"""GPipe's partitions are told their micro-batch from host metadata (torchgpipe's per-micro-batch skip
tracker and the chunk's position in the step): in every checkpoint mode, recomputations included, two
partitions compute the single engine's outputs and gradients (float64, dropout 0)."""
from __future__ import annotations

import copy

import pytest
import torch

from pipegnn.backends import get_backend
from pipegnn.engines import IGNORE, GPipeEngine, SingleEngine
from pipegnn.microbatch import ComputationGraph, PlanSpec, build_plan
from pipegnn.models import build_model

from tests.helpers import assert_close, assert_grads_close, random_graph

CPU = torch.device("cpu")


@pytest.mark.usefixtures("float64")
@pytest.mark.parametrize("checkpoint", ["always", "except_last", "never"])
@pytest.mark.parametrize("kind", [dict(name="gat", hidden=4, heads=2, out_heads=1, layers=2, dropout=0.0),
                                  dict(name="gcn2", hidden=8, layers=3, alpha=0.1, theta=0.5, dropout=0.0)],
                         ids=["gat", "gcn2"])
def test_every_checkpoint_mode_computes_the_single_engines_step(kind: dict, checkpoint: str) -> None:
    graph = random_graph(num_nodes=80, num_edges=300)
    graph.x = graph.x.double()
    backend = get_backend("pyg")
    model = build_model(kind, backend, graph.x, graph.num_classes)
    edges, weight = backend.computation_graph(model.kind, graph.edge_index, graph.num_nodes, torch.float64)
    plan = build_plan(ComputationGraph(edges, graph.num_nodes, weight), torch.arange(graph.num_nodes),
                      PlanSpec(4, model.num_layers, partitioner="random"))
    ids = model.attach(plan)
    labels = torch.where(graph.train_mask, graph.y, IGNORE)[plan.targets]
    labelled = int(graph.train_mask.sum())
    results = []
    for engine in ("single", "gpipe"):
        staged = copy.deepcopy(model)
        runner = (SingleEngine(staged, CPU, 4, timeline=False) if engine == "single" else
                  GPipeEngine(staged, [CPU, CPU], [3, len(staged) - 3], 4, checkpoint, timeline=False))
        logits = runner.predict(ids)
        loss = runner.train_step(ids, labels, labelled)
        results.append((logits, loss, [p.grad for p in staged.parameters()]))
    (single, single_loss, single_grads), (piped, piped_loss, piped_grads) = results
    assert_close(piped, single)
    assert piped_loss == pytest.approx(single_loss, rel=1e-12)
    assert_grads_close(piped_grads, single_grads)
