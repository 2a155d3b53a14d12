"""Transparency: micro-batched exact mode computes what full-graph training computes (dropout 0).

Run in float64 so that the comparison is tight (1e-9 relative): in float32, summing the same gradient
in a different order (per micro-batch, then across micro-batches) leaves differences of up to ~1e-4
relative in parameters whose gradient is a sum with heavy cancellation (e.g. attention vectors).
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn import GATConv, GCNConv

from pipegnn.backends import get_backend
from pipegnn.data import Graph
from pipegnn.data.planetoid import load_planetoid
from pipegnn.engines import GPipeEngine, SingleEngine
from pipegnn.microbatch import build_plan
from pipegnn.models import StagedGNN, build_model

CPU = torch.device("cpu")
MODELS = {
    "gat": dict(name="gat", hidden=4, heads=3, out_heads=2, layers=2, dropout=0.0),
    "gcn": dict(name="gcn", hidden=8, layers=3, dropout=0.0),
}


def reference(model: StagedGNN, graph: Graph, targets: torch.Tensor) -> tuple[torch.Tensor, list]:
    """Outputs of ``targets`` and parameter gradients of plain full-graph PyG layers (their own
    self-loop and normalisation handling) carrying the staged model's weights."""
    h = graph.x
    params = []
    for stage in model:
        s = stage.spec
        conv = (GATConv(s.in_dim, s.out_dim, heads=s.heads, concat=s.concat) if model.kind == "gat"
                else GCNConv(s.in_dim, s.out_dim))
        conv.load_state_dict(stage.conv.state_dict())
        params += list(conv.parameters())
        h = conv(h, graph.edge_index)
        h = stage.activation(h) if stage.activation else h
    out = h[targets]
    F.cross_entropy(out, graph.y[targets], reduction="sum").div(targets.numel()).backward()
    return out.detach(), [p.grad for p in params]


def micro_batched(model: StagedGNN, graph: Graph, targets: torch.Tensor, chunks: int, partitioner: str,
                  engine: str, halo: str = "exact") -> tuple[torch.Tensor, list]:
    """Outputs (in ``targets`` order) and gradients of the staged model run by ``engine``."""
    model = copy.deepcopy(model)
    backend = get_backend("pyg")
    edge_index, weight = backend.computation_graph(model.kind, graph.edge_index, graph.num_nodes,
                                                   graph.x.dtype)
    plan = build_plan(edge_index, graph.num_nodes, targets, chunks, num_layers=model.num_layers,
                      halo=halo, partitioner=partitioner, edge_weight=weight)
    ids = model.attach(plan)
    run = (SingleEngine(model, CPU) if engine == "single"
           else GPipeEngine(model, [CPU, CPU], [1, model.num_layers - 1], chunks, "except_last"))
    out = run.predict(ids)
    run.train_step(ids, graph.y[plan.targets], targets.numel())
    order = torch.argsort(plan.targets)  # plan order -> ascending node id (targets are sorted)
    return out[order], [p.grad for p in model.parameters()]


@pytest.fixture(autouse=True)
def _float64():
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(torch.float32)


@pytest.fixture
def graph(graph: Graph) -> Graph:
    graph.x = graph.x.double()
    return graph


def assert_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Equal to 1e-9 relative to the tensor's scale."""
    assert actual.dtype == expected.dtype == torch.float64
    torch.testing.assert_close(actual, expected, rtol=1e-9, atol=1e-9 * expected.abs().max().item())


@pytest.mark.parametrize("engine", ["single", "gpipe"])
@pytest.mark.parametrize("partitioner", ["sequential", "metis"])
@pytest.mark.parametrize("chunks", [1, 2, 3, 8])
@pytest.mark.parametrize("kind", ["gat", "gcn"])
def test_exact_equals_full_graph(graph: Graph, kind: str, chunks: int, partitioner: str,
                                 engine: str) -> None:
    model = build_model(MODELS[kind], get_backend("pyg"), graph.x, graph.num_classes)
    targets = graph.split("train")
    expected, expected_grads = reference(copy.deepcopy(model), graph, targets)
    out, grads = micro_batched(model, graph, targets, chunks, partitioner, engine)
    assert_close(out, expected)
    assert len(grads) == len(expected_grads)
    for g, e in zip(grads, expected_grads):
        assert_close(g, e)


@pytest.mark.parametrize("kind", ["gat", "gcn"])
def test_naive_mode_loses_cut_edges(graph: Graph, kind: str) -> None:
    model = build_model(MODELS[kind], get_backend("pyg"), graph.x, graph.num_classes)
    targets = graph.split("all")
    expected, _ = reference(copy.deepcopy(model), graph, targets)
    same, _ = micro_batched(model, graph, targets, 1, "sequential", "single", halo="none")
    assert_close(same, expected)  # one chunk: the naive mode is the full graph
    lossy, _ = micro_batched(model, graph, targets, 4, "sequential", "single", halo="none")
    wrong = (lossy - expected).abs().amax(1) > 1e-4
    assert wrong.float().mean() > 0.3  # most nodes have an in-neighbour in another chunk


@pytest.mark.parametrize("engine", ["single", "gpipe"])
@pytest.mark.parametrize("kind", ["gat", "gcn"])
def test_exact_on_cora(data_root, cache_dir, kind: str, engine: str) -> None:
    graph = load_planetoid("cora", data_root, cache_dir)
    graph.x = graph.x.double()
    cfg = dict(MODELS[kind], hidden=8)
    model = build_model(cfg, get_backend("pyg"), graph.x, graph.num_classes)
    targets = graph.split("train")
    expected, expected_grads = reference(copy.deepcopy(model), graph, targets)
    out, grads = micro_batched(model, graph, targets, 8, "metis", engine)
    assert_close(out, expected)
    for g, e in zip(grads, expected_grads):
        assert_close(g, e)
