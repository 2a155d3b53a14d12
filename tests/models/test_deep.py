"""Deep models: GCNII (model=gcn2) and residual stacks (model.residual=true) at depth 8 and more.

Exactness in float64 (dropout 0): micro-batched exact halos equal the full graph, with stage boundaries
inside the residual chain (GCNII's ``x0`` and a residual layer's skip rows cross them); the full graph
itself equals plain library GCNII stacks (PyG's ``GCN2Conv``, DGL's ``GCN2Conv``). And a 64-layer GCNII
trains where depth alone would not need to.
"""
from __future__ import annotations

import dgl
import pytest
import torch
import torch.nn.functional as F
from dgl.nn.pytorch import GCN2Conv as DglGCN2Conv
from torch_geometric.nn import GCN2Conv

from pipegnn import run
from pipegnn.backends import FRAMEWORKS, get_backend
from pipegnn.data import Graph
from pipegnn.engines import unit_balance
from pipegnn.models import Propagate, Readout, StagedGNN, Transform, build_model, units_per_layer

from tests.helpers import assert_close, assert_grads_close, make_cfg, run_plan

DEEP = {
    "gcn2": dict(name="gcn2", hidden=8, layers=8, dropout=0.0, alpha=0.1, theta=0.5),
    "residual_gcn": dict(name="gcn", hidden=8, layers=8, dropout=0.0, residual=True),
    "residual_gat": dict(name="gat", hidden=4, heads=2, out_heads=1, layers=8, dropout=0.0, residual=True),
    "residual_sage": dict(name="sage", hidden=8, layers=8, dropout=0.0, residual=True),
}


@pytest.fixture
def graph(graph: Graph) -> Graph:
    graph.x = graph.x.double()
    return graph


def test_units_of_a_gcn2_stack(graph: Graph) -> None:
    model = build_model(DEEP["gcn2"], get_backend("pyg"), graph.x, graph.num_classes)
    assert model.unit_names[:3] == ["input", "transform0", "propagate0"] and model.unit_names[-1] == "output"
    assert len(model) == 18 and model.num_layers == 8
    assert model.units_per_layer == units_per_layer(DEEP["gcn2"]) == [3] + [2] * 6 + [3]
    assert isinstance(model[0], Transform) and model[0].reads_features and isinstance(model[-1], Readout)
    # every layer but the last hands x0 on; a GCNII transform has no dense product (its weight is after)
    assert [u.carries_initial for u in model][1:-1] == [True] * 15 + [False]
    assert all(not list(u.transform.parameters()) for u in model.transforms()[1:])


def test_residual_only_where_widths_agree(graph: Graph) -> None:
    model = build_model(DEEP["residual_gcn"], get_backend("pyg"), graph.x, graph.num_classes)
    flags = [u.spec.residual for u in model if isinstance(u, Propagate)]
    assert flags == [False] + [True] * 6 + [False]  # features -> hidden and hidden -> classes change widths
    assert model[2].width == 16  # transform1 hands on its product and its input rows (8 + 8)


@pytest.mark.usefixtures("float64")
@pytest.mark.parametrize("chunks", [1, 4])
@pytest.mark.parametrize("kind", list(DEEP))
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_deep_exact_equals_full_graph_across_stage_boundaries(graph: Graph, framework: str, kind: str,
                                                              chunks: int) -> None:
    """Depth 8, exact halos: the single engine at k chunks and a 3-stage GPipe whose boundaries fall
    inside layers of the residual chain both equal the full graph (k=1), outputs and every gradient."""
    model = build_model(DEEP[kind], get_backend(framework), graph.x, graph.num_classes)
    expected, expected_grads = run_plan(framework, model, DEEP[kind], graph, 1, "single")
    first = 6 if kind == "gcn2" else 5  # the stages end after transform2 and transform5 (the input Linear
    balance = [first, 6, len(model) - first - 6]  # is GCNII's first unit): inside layers 2 and 5
    for engine in ("single", "gpipe"):
        out, grads = run_plan(framework, model, DEEP[kind], graph, chunks, engine, balance)
        assert_close(out, expected)
        assert_grads_close(grads, expected_grads, nonzero=True)


def plain_pyg_gcn2(model: StagedGNN, graph: Graph) -> torch.Tensor:
    """The PyG GCNII of PyG's own example (``gcn2_cora.py``): GCN2Conv normalising the graph itself."""
    convs = []
    for unit in model:
        if isinstance(unit, Propagate):
            conv = GCN2Conv(unit.spec.in_dim, unit.spec.alpha, unit.spec.theta, unit.spec.index)
            conv.load_state_dict(unit.conv.state_dict())
            convs.append(conv)
    x = x0 = model[0].transform(graph.x)
    for conv in convs:
        x = F.relu(conv(x, x0, graph.edge_index))
    return model[-1].linear(x)


def plain_dgl_gcn2(model: StagedGNN, graph: Graph) -> torch.Tensor:
    """DGL's GCN2Conv stack on the whole graph made symmetric with one self-loop per node (DGL's
    GCN2Conv normalises by in-degrees on both sides, which is the symmetric norm only there)."""
    edges = torch.cat([graph.edge_index, graph.edge_index.flip(0)], 1)
    g = dgl.add_self_loop(dgl.remove_self_loop(dgl.to_simple(dgl.graph((edges[0], edges[1]),
                                                                        num_nodes=graph.num_nodes))))
    x = x0 = model[0].transform(graph.x)
    for unit in model:
        if isinstance(unit, Propagate):
            conv = DglGCN2Conv(unit.spec.in_dim, unit.spec.index, alpha=unit.spec.alpha,
                               lambda_=unit.spec.theta, bias=False).double()
            conv.load_state_dict(unit.conv.gcn2.state_dict())
            x = F.relu(conv(g, x, x0))
    return model[-1].linear(x)


@pytest.mark.usefixtures("float64")
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_gcn2_equals_the_library_stack(graph: Graph, framework: str) -> None:
    if framework == "dgl":  # DGL's layer is symmetric-only: give both the symmetric graph
        edges = torch.cat([graph.edge_index, graph.edge_index.flip(0)], 1)
        graph.edge_index = torch.unique(edges, dim=1)
    model = build_model(DEEP["gcn2"], get_backend(framework), graph.x, graph.num_classes)
    expected = (plain_pyg_gcn2 if framework == "pyg" else plain_dgl_gcn2)(model, graph)[graph.split("train")]
    out, _ = run_plan(framework, model, DEEP["gcn2"], graph, 4, "single")
    assert_close(out, expected.detach())


def test_gcn2_balance_in_layers_keeps_linears_with_their_layers(graph: Graph) -> None:
    model = build_model(DEEP["gcn2"], get_backend("pyg"), graph.x, graph.num_classes)
    assert unit_balance([4, 4], model.units_per_layer, 2) == [9, 9]


def test_64_layer_gcn2_trains() -> None:
    """GCNII at depth 64 (the paper's Cora depth, dropout 0 for a steady signal) learns the tiny
    synthetic graph's training labels within 60 epochs, without diverging; a plain 64-layer GCN is
    allowed to fail (over-smoothing), so nothing is asserted of it."""
    record = run(make_cfg("model=gcn2", "model.layers=64", "model.hidden=16", "model.dropout=0",
                          "engine=single", "chunks=1", "microbatch.halo=none", "train.epochs=60"))
    assert record["status"] == "completed", record["error"]
    losses = [e["train_loss"] for e in record["epochs"]]
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < 0.8 * losses[0]
    assert max(e["train_acc"] for e in record["epochs"]) >= 0.75


@pytest.mark.parametrize("overrides, message", [
    (["model=gcn2", "model.alpha=1.5"], "model.alpha (GCNII's initial residual) must be in [0, 1], got 1.5"),
    (["model=gcn2", "model.theta=-1"], "model.theta (GCNII's identity mapping) must be a finite number >= 0, "
                                       "got -1"),
    (["model=gcn2", "engine=gpipe", "engine.balance=[1,2]"], "or to 10 (units: a transform and a propagation "
     "per layer, and the input and output Linear)"),
])
def test_invalid_deep_config(overrides: list[str], message: str) -> None:
    record = run(make_cfg("model.layers=4", *overrides))
    assert record["status"] == "invalid" and message in record["error"], record["error"]
