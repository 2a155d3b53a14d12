"""The Transform unit composes its jobs (features, the once-per-step transform, historical halos) as
child modules: a built model's state_dict keys are those a checkpoint saved before they were split
(only the layers' parameters: every buffer of the unit is non-persistent), and what the unit reads
moves with it."""
from __future__ import annotations

import pytest
import torch

from pipegnn.backends import get_backend
from pipegnn.data import Graph
from pipegnn.data.features import FeatureMeta
from pipegnn.microbatch import ComputationGraph, PlanSpec, build_plan
from pipegnn.models import StagedGNN, build_model

GAT = dict(name="gat", hidden=4, heads=2, out_heads=1, layers=2, dropout=0.5)
GCN2 = dict(name="gcn2", hidden=8, layers=3, alpha=0.1, theta=0.5, dropout=0.5)
SAGE = dict(name="sage", hidden=8, layers=3, dropout=0.5, residual=True)

#: The keys of model.state_dict() (what pipegnn.training.checkpoints saves), in their order,
#: as they were before the unit's jobs were split into child modules.
STATE_KEYS = {
    "gat": ["0.transform.weight", "1.conv.att_src", "1.conv.att_dst", "1.conv.bias", "2.transform.weight",
            "3.conv.att_src", "3.conv.att_dst", "3.conv.bias"],
    "gcn2": ["0.transform.0.weight", "0.transform.0.bias", "2.conv.weight1", "4.conv.weight1",
             "6.conv.weight1", "7.linear.weight", "7.linear.bias"],
    "sage": [f"{i}.transform.{name}" for i in (0, 2, 4) for name in ("neighbour", "root", "bias")],
}


def attached(cfg: dict, graph: Graph, features: object = None, **kwargs) -> StagedGNN:
    """A model of ``graph`` (built with ``features``, else its features) with a plan attached."""
    backend = get_backend("pyg")
    model = build_model(cfg, backend, graph.x if features is None else features, graph.num_classes, **kwargs)
    edges, weight = backend.computation_graph(model.kind, graph.edge_index, graph.num_nodes)
    halo = "historical" if kwargs.get("history") else "exact"
    model.attach(build_plan(ComputationGraph(edges, graph.num_nodes, weight), torch.arange(graph.num_nodes),
                            PlanSpec(4, model.num_layers, halo=halo, partitioner="random")))
    return model


@pytest.mark.parametrize("first", ["once_per_step", "per_micro_batch"])
@pytest.mark.parametrize("history", [False, True])
@pytest.mark.parametrize("kind, cfg", [("gat", GAT), ("gcn2", GCN2), ("sage", SAGE)])
def test_state_dict_keys_are_unchanged(graph: Graph, kind: str, cfg: dict, history: bool, first: str) -> None:
    model = attached(cfg, graph, history=history, first_transform=first, halo_dropout="node")
    assert list(model.state_dict()) == STATE_KEYS[kind]


def test_the_units_jobs(graph: Graph) -> None:
    model = attached(GAT, graph, history=True)
    first, second = model.transforms()
    assert first.reads_features and first.once_per_step and first.history is None
    assert not second.reads_features and not second.once_per_step and second.history is not None
    assert model.histories() == [second.history]
    assert first.begin_step([0, 1]) > 0 and second.begin_step([0, 1]) == 0
    first.end_step()
    second.end_step()  # no-op


def test_what_the_unit_reads_moves_with_it(graph: Graph) -> None:
    model = attached(GAT, graph, history=True)
    model.to(torch.float64)
    first, second = model.transforms()
    assert first.source is not None and first.source.features is not None
    assert first.source.features.dtype == torch.float64
    assert second.history is not None and second.history.rows.dtype == torch.float64


@pytest.mark.parametrize("first", ["once_per_step", "per_micro_batch"])
def test_features_given_later_keep_the_micro_batches(graph: Graph, first: str) -> None:
    """A model sized from the features' description gets their rows after its plan (as a pipeline rank
    does once the feature file ordered by the partition exists): same outputs as built with them."""
    model = attached(GAT, graph, first_transform=first)
    late = attached(GAT, graph, FeatureMeta(*graph.x.shape, graph.x.dtype), first_transform=first)
    late.load_state_dict(model.state_dict())
    with pytest.raises(RuntimeError, match="transform0 holds no features here"):
        late.refresh(torch.arange(4))
    late.set_features(graph.x)
    assert late.first().once_per_step == (first == "once_per_step")
    model.eval()
    late.eval()
    assert torch.equal(late.refresh(torch.arange(4)), model.refresh(torch.arange(4)))
