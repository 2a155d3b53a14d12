"""Stage boundaries: engine.balance in layers or units, and balance=auto from measured unit costs."""
from __future__ import annotations

import pytest
import torch

from pipegnn import ConfigError, run
from pipegnn.backends import get_backend
from pipegnn.data import Graph
from pipegnn.engines import auto_balance, even_balance, unit_balance
from pipegnn.engines.balance import mask_draw_costs, measure_unit_costs
from pipegnn.models import build_model

from tests.helpers import build_on, make_cfg, model_keys


def test_balance_in_layers_or_units() -> None:
    assert unit_balance(None, [2, 2], 2) is None and unit_balance("auto", [2, 2], 2) is None
    assert unit_balance([1, 1], [2, 2], 2) == [2, 2]  # whole layers
    assert unit_balance([1, 3], [2, 2], 2) == [1, 3]  # units: the first stage holds transform0 only
    assert unit_balance([2, 2, 1, 1], [2, 2, 2], 4) == [2, 2, 1, 1]  # 6 units of 3 layers
    for bad in ([1, 2], [2, 2, 0], [0, 4], "even", [1.5, 2.5]):
        with pytest.raises(ConfigError, match="summing to model.layers=2 .whole layers. or to 4 .units"):
            unit_balance(bad, [2, 2], 2 if isinstance(bad, str) or len(bad) == 2 else 3)


def test_balance_in_layers_keeps_the_input_and_output_linear_with_their_layers() -> None:
    """GCNII's input Linear goes with the first layer and its output Linear with the last."""
    layers = [3, 2, 2, 3]  # input + 2 units, 2, 2, 2 units + output
    assert unit_balance([2, 2], layers, 2) == [5, 5]
    assert unit_balance([1, 3], layers, 2) == [3, 7]
    assert unit_balance([1, 9], layers, 2) == [1, 9]  # units: the input Linear alone
    with pytest.raises(ConfigError, match="or to 10 .units: a transform and a propagation per layer, and "
                                          "the input and output Linear"):
        unit_balance([2, 3], layers, 2)
    assert even_balance(4, 3) == [2, 1, 1]


def test_auto_balance_minimises_the_busiest_stage() -> None:
    assert auto_balance([10, 1, 1, 1], 2) == [1, 3]  # torchgpipe's solver says [2, 2]
    assert auto_balance([1, 1, 1, 1], 2) == [2, 2]
    assert auto_balance([1, 2, 3, 4, 5], 3) == [3, 1, 1]  # max(6, 4, 5)
    assert auto_balance([5, 1], 2) == [1, 1]
    with pytest.raises(ConfigError, match="3 pipeline stages but the model has only 2 units"):
        auto_balance([1, 1], 3)
    # units of the first part cost more (the per-node masks the pipeline's first stage draws)
    assert auto_balance([1, 1, 1, 1], 2, extra=[1, 1, 1, 1]) == [1, 3]  # max(2, 3), not max(4, 2)
    assert auto_balance([1, 1, 1, 1], 2, extra=[1, 1, 1, 1], extra_parts=(1,)) == [3, 1]
    assert auto_balance([1] * 6, 3, extra=[2] * 6, extra_parts=(0, 2)) == [1, 4, 1]  # max(3, 4, 3)


def test_measuring_units_leaves_training_unchanged(graph: Graph) -> None:
    group, keys = model_keys(dict(name="gat", hidden=4, heads=2, out_heads=1, layers=2, dropout=0.5))
    trainee = build_on(graph, ["framework=pyg", *group, "engine=single"],
                       {**keys, "chunks": 3, "microbatch.halo": "exact", "microbatch.targets": "train"})
    model, ids = trainee.model, trainee.training.ids
    state = torch.get_rng_state()
    costs = measure_unit_costs(model, ids, torch.device("cpu"))
    assert len(costs) == 4 and all(c > 0 for c in costs)
    assert torch.equal(torch.get_rng_state(), state)  # the same dropout masks as without measuring
    assert all(p.grad is None for p in model.parameters())


def test_mask_draw_costs_are_the_node_mask_caches_and_leave_training_unchanged(graph: Graph) -> None:
    backend = get_backend("pyg")
    gcn = dict(name="gcn", hidden=8, layers=3, dropout=0.5)
    model = build_model(gcn, backend, graph.x, graph.num_classes, history=True, halo_dropout="node")
    state = torch.get_rng_state()
    costs = mask_draw_costs(model, micro_batches=4)
    assert [c > 0 for c in costs] == [False, False, True, False, True, False]  # layers 2 and 3's caches
    assert torch.equal(torch.get_rng_state(), state)
    # per-read masks: drawn in the micro-batches of every stage alike
    plain = build_model(gcn, backend, graph.x, graph.num_classes, history=True)
    assert mask_draw_costs(plain, micro_batches=4) == [0.0] * 6


@pytest.mark.parametrize("halo", ["exact", "historical"])
def test_auto_balance_trains_as_its_chosen_balance(halo: str) -> None:
    """balance=auto records its measured unit costs and chosen boundaries, and trains exactly as the
    same balance given explicitly (dropout on: the measurement draws no random numbers of the run's)."""
    common = ("engine=gpipe", "chunks=3", f"microbatch.halo={halo}", "model.dropout=0.5")
    auto = run(make_cfg(*common, "engine.balance=auto"))
    assert auto["status"] == "completed", auto["error"]
    p = auto["pipeline"]
    assert p["balance_source"] == "auto" and sum(p["balance"]) == 4 and len(p["balance"]) == 2
    assert list(p["unit_costs_s"]) == ["transform0", "propagate0", "transform1", "propagate1"]
    assert all(c > 0 for c in p["unit_costs_s"].values())
    explicit = run(make_cfg(*common, f"engine.balance=[{p['balance'][0]},{p['balance'][1]}]"))
    assert explicit["pipeline"]["balance_source"] == "config"
    assert [e["train_loss"] for e in auto["epochs"]] == [e["train_loss"] for e in explicit["epochs"]]
