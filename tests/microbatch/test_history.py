"""Historical halo mode: layer-wise refresh equals the full graph; with a filled cache and frozen
parameters micro-batches equal the full graph; ages of cached rows are counted in steps."""
from __future__ import annotations

import copy

import pytest
import torch

from pipegnn import run
from pipegnn.data import Graph
from pipegnn.microbatch import History
from pipegnn.models import StagedGNN

from tests.helpers import build_on, make_cfg, model_keys
from tests.test_exactness import MODELS, reference


def historical_model(framework: str, kind: str, graph: Graph, chunks: int,
                     engine: str) -> tuple[StagedGNN, object, torch.Tensor, torch.Tensor, list]:
    """The run's pieces as ``pipegnn.build`` makes them with historical halos over the training nodes:
    the model with its history caches, the engine, the ids of the layer-wise evaluation's plan over every
    node (for refresh) and of the training plan, and [the two plans, the full graph's outputs]."""
    graph.x = graph.x.double()
    group, keys = model_keys(MODELS[kind])
    stages = {"engine.balance": [1, 2 * MODELS[kind]["layers"] - 1]} if engine == "gpipe" else {}
    trainee = build_on(graph, [f"framework={framework}", *group, f"engine={engine}"],
                       {**keys, **stages, "chunks": chunks, "microbatch.halo": "historical",
                        "microbatch.targets": "train", "microbatch.partition": "metis",
                        "microbatch.evaluation": "layerwise"})
    model, evaluation, training = trainee.model, trainee.evaluation, trainee.training
    expected, _ = reference(framework, copy.deepcopy(model), graph, graph.split("all"))
    return model, trainee.engine, evaluation.ids, training.ids, [[evaluation.plan, training.plan], expected]


@pytest.mark.usefixtures("float64")
@pytest.mark.parametrize("engine", ["single", "gpipe"])
@pytest.mark.parametrize("chunks", [1, 3])
@pytest.mark.parametrize("kind", ["gat", "gcn"])
@pytest.mark.parametrize("framework", ["pyg", "dgl"])
def test_filled_cache_gives_full_graph_outputs(graph: Graph, framework: str, kind: str, chunks: int,
                                               engine: str) -> None:
    model, runner, all_ids, target_ids, (plans, expected) = historical_model(framework, kind, graph, chunks,
                                                                             engine)
    model.eval()
    refreshed = model.refresh(all_ids)  # layer-wise: exact, and fills every cache row
    torch.testing.assert_close(refreshed[torch.argsort(plans[0].targets)], expected, rtol=1e-9, atol=1e-9)
    out = runner.predict(target_ids)  # 1-hop halos, deeper layers read the filled caches
    torch.testing.assert_close(out, expected[plans[1].targets], rtol=1e-9, atol=1e-9)


@pytest.mark.usefixtures("float64")
def test_without_refresh_the_cache_is_stale(graph: Graph) -> None:
    """Changing the parameters after the refresh makes the cached rows stale: outputs differ."""
    model, runner, all_ids, target_ids, (plans, _) = historical_model("pyg", "gcn", graph, 3, "single")
    model.eval()
    model.refresh(all_ids)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)
    stale = runner.predict(target_ids)
    fresh = model.refresh(all_ids)[torch.argsort(plans[0].targets)][plans[1].targets]
    assert not torch.allclose(stale, fresh, rtol=1e-3)


@pytest.mark.usefixtures("float64")
def test_staleness_counts_steps_since_refresh(graph: Graph) -> None:
    """One micro-batch over the training nodes: its halo rows are refreshed only by the layer-wise
    pass, so their age is the number of steps since that pass."""
    targets = graph.split("train")
    model, runner, all_ids, target_ids, (plans, _) = historical_model("pyg", "gat", graph, 1, "single")
    assert plans[1].micro_batches[0].sources[1] > plans[1].micro_batches[0].sizes[1]  # has halo rows
    labels = graph.y[plans[1].targets]
    model.eval()
    model.refresh(all_ids)
    model.train()
    ages = []
    for _ in range(2):
        model.tick()
        runner.train_step(target_ids, labels, targets.numel())
        ages.append(model.staleness())
    model.eval()
    model.refresh(all_ids)
    model.train()
    model.tick()
    runner.train_step(target_ids, labels, targets.numel())
    ages.append(model.staleness())
    assert ages == [1.0, 2.0, 1.0]


def test_a_steps_writes_and_ages_read_the_devices_step_counter() -> None:
    """What a recorded step (a CUDA graph replays its operations, not the Python around them) needs of a
    cache: its writes and the ages of its reads use the step counter on the cache's device, which `tick`
    sets outside the step, not a host value taken when the step ran; the ages are summed on the device
    (one read when reported), and the pulled rows are counted once per micro-batch and step."""
    cache = History(6, 2)
    cache.push(torch.arange(6), torch.zeros(6, 2))  # filled at step 0
    cache.tick()
    nodes = torch.tensor([0, 1, 2])
    cache.push(nodes, torch.ones(3, 2), micro_batch=0)
    assert cache.written.tolist() == [1, 1, 1, 0, 0, 0]
    cache.steps.fill_(5)  # as the device's counter stands at a replay five steps on
    cache.push(nodes, torch.ones(3, 2), micro_batch=0)
    cache.pull(torch.tensor([3, 4, 5]), micro_batch=0)
    cache.pull(torch.tensor([3, 4, 5]), micro_batch=0)  # read again (a recomputation): counted once
    assert cache.written.tolist() == [5, 5, 5, 0, 0, 0] and int(cache.age_sum()) == 15
    assert cache.traffic(15.0)["staleness"] == 5.0 and cache.traffic(15.0)["pulled_rows"] == 3
    cache.tick()  # a new step: its counter on the device, its ages summed anew
    assert int(cache.steps) == 2 and int(cache.age_sum()) == 0


@pytest.mark.usefixtures("float64")
def test_history_rejects_unfilled_rows() -> None:
    h = History(5, 2, torch.float64)
    h.push(torch.tensor([0, 1]), torch.ones(2, 2))
    torch.testing.assert_close(h.pull(torch.tensor([1, 0])), torch.ones(2, 2))
    with pytest.raises(RuntimeError, match="before it was filled"):
        h.pull(torch.tensor([1, 4]))


def test_dropout_mask_is_one_per_node_and_step() -> None:
    """A node's features are dropped alike wherever it is read in a step (its own micro-batch, or
    another's halo), scaled as torch's dropout scales them; the next step draws a new mask."""
    torch.manual_seed(0)
    p = 0.5
    h = History(50, 16, node_dropout=p)
    rows = torch.rand(50, 16) + 1  # no zeros of their own: a zero is a dropped entry
    own, halo = torch.arange(0, 30), torch.tensor([29, 3, 40, 7])
    a, b = h.dropout(own, rows[own]), h.dropout(halo, rows[halo])
    torch.testing.assert_close(b[:2], a[[29, 3]])  # the same nodes, the same mask, in another call
    # a node first read by a later call (40, in the halo) is drawn there and keeps that mask in the step
    torch.testing.assert_close(h.dropout(torch.tensor([7, 40]), rows[[7, 40]]), b[[3, 2]])
    kept = a != 0
    torch.testing.assert_close(a[kept], rows[own][kept] / (1 - p))
    assert 0.4 < kept.float().mean() < 0.6
    h.tick()
    assert not torch.equal(h.dropout(own, rows[own]) != 0, kept)
    none = History(50, 16)  # node_dropout 0: rows unchanged
    assert none.dropout(own, rows[own]) is not None and torch.equal(none.dropout(own, rows[own]), rows[own])


def test_dropout_mask_is_drawn_at_tick_or_at_first_read() -> None:
    """tick(draw=True) draws every node's mask at the step's start (what a pipeline stage does while it
    waits for its first micro-batch): later random numbers do not change it; without it a node's mask is
    drawn at its first read."""
    rows, nodes = torch.rand(40, 8) + 1, torch.tensor([3, 17, 30])

    def read(draw: bool, seed_after_tick: int) -> torch.Tensor:
        h = History(40, 8, node_dropout=0.5)
        torch.manual_seed(0)
        h.tick(draw=draw)
        torch.manual_seed(seed_after_tick)
        return h.dropout(nodes, rows[nodes])

    assert torch.equal(read(True, 1), read(True, 2))
    assert not torch.equal(read(False, 1), read(False, 2))
    assert torch.equal(read(False, 1), read(False, 1))


def test_halo_dropout_reaches_every_cache_and_is_checked() -> None:
    """microbatch.halo_dropout=node gives every cache the per-node masks (without dropout it trains as
    read does; with dropout it draws other masks); it is refused without historical halos, as is an
    unknown value (at composition: ``test_config.BAD_CHOICES``), before training."""
    common = ("microbatch.halo=historical", "chunks=4", "microbatch.targets=all", "engine=single")
    losses = {}
    for dropout in (0.0, 0.5):
        for mode in ("read", "node"):
            record = run(make_cfg(*common, f"model.dropout={dropout}", f"microbatch.halo_dropout={mode}"))
            assert record["status"] == "completed", record["error"]
            losses[dropout, mode] = [e["train_loss"] for e in record["epochs"]]
    assert losses[0.0, "node"] == pytest.approx(losses[0.0, "read"], rel=1e-6)
    assert losses[0.5, "node"][1:] != pytest.approx(losses[0.5, "read"][1:], rel=1e-3)
    record = run(make_cfg("microbatch.halo=exact", "microbatch.halo_dropout=node"))
    assert record["status"] == "invalid", record["error"]
    assert record["error"].startswith("microbatch.halo_dropout=node draws historical")


def test_historical_training_run_records_staleness() -> None:
    record = run(make_cfg("microbatch.halo=historical", "chunks=4", "train.epochs=3"))
    assert record["status"] == "completed", record["error"]
    assert [e["staleness"] for e in record["epochs"]] == pytest.approx([1.0, 1.0, 1.0], abs=0.5)
    assert all(0.0 < e["staleness"] <= 1.0 for e in record["epochs"])
    assert record["timing"]["history_fill_s"] > 0
    assert record["microbatch"]["halo"] == "historical"
    assert record["microbatch"]["eval"]["targets_per_chunk"] and \
        sum(record["microbatch"]["eval"]["targets_per_chunk"]) == 400  # evaluation covers every node


@pytest.mark.slow
def test_cora_gat_historical_accuracy_near_exact(data_root, tmp_path) -> None:
    """Historical halos (GPipe, 8 chunks, METIS) reach exact mode's Cora test accuracy within 2
    points (mean of 3 seeds), with every micro-batch transforming its own first-layer rows: with the
    first-layer transform once per step (the default) the gap is wider and this claim does not hold (see
    results/README.md), so the test keeps the setting the claim holds in."""
    import statistics

    def accuracy(halo: str) -> float:
        accs = []
        for seed in range(3):
            cfg = make_cfg("dataset=cora", "model=gat", "chunks=8", f"microbatch.halo={halo}",
                           "train.epochs=200", f"train.seed={seed}", f"data.root={data_root}",
                           f"data.cache={tmp_path}", "microbatch.first_transform=per_micro_batch")
            record = run(cfg)
            assert record["status"] == "completed", record["error"]
            accs.append(record["final"]["test_acc_at_best_val"])
        return statistics.mean(accs)

    exact, historical = accuracy("exact"), accuracy("historical")
    assert abs(historical - exact) <= 0.02, (exact, historical)


def test_one_historical_chunk_over_every_node_is_full_batch() -> None:
    """k=1 with targets=all: the one micro-batch computes every node, so no halo row is read from a
    cache and historical training is full-batch training (losses and accuracies alike)."""
    common = ("model=gcn", "model.layers=4", "model.dropout=0", "chunks=1", "microbatch.targets=all",
              "engine=single", "train.epochs=4")
    full = run(make_cfg(*common, "microbatch.halo=none"))
    historical = run(make_cfg(*common, "microbatch.halo=historical"))
    assert historical["status"] == full["status"] == "completed", historical["error"]
    assert [e["train_loss"] for e in historical["epochs"]] == pytest.approx(
        [e["train_loss"] for e in full["epochs"]], rel=1e-6)
    assert [e["val_acc"] for e in historical["epochs"]] == [e["val_acc"] for e in full["epochs"]]
    assert all(s["pulled_rows"] == 0 for e in historical["epochs"] for s in e["history"])


def test_pipelined_historical_run_records_each_stage() -> None:
    """engine=pipelining with historical halos (2 processes, 1F1B, a 6-layer residual GCN): the same
    losses as the single engine, and per stage the caches, the rows and bytes pulled and pushed per
    step and their age."""
    common = ("model=gcn", "model.layers=6", "model.residual=true", "model.dropout=0", "chunks=4",
              "microbatch.halo=historical")
    single = run(make_cfg(*common, "engine=single"))
    piped = run(make_cfg(*common, "engine=pipelining", "engine.schedule=1f1b", "engine.balance=[3,3]"))
    assert single["status"] == piped["status"] == "completed", piped["error"]
    assert [e["train_loss"] for e in piped["epochs"]] == pytest.approx(
        [e["train_loss"] for e in single["epochs"]], rel=1e-5)
    stages = piped["microbatch"]["history_per_stage"]
    # caches: layers 1-2, 3-5
    assert [s["stage"] for s in stages] == [0, 1] and [s["caches"] for s in stages] == [2, 3]
    width = 4 * 16  # float32 rows of 16 hidden features
    for stage in stages:
        assert stage["pulled_rows"] > 0 and stage["pushed_rows"] > 0
        assert stage["pulled_bytes"] == stage["pulled_rows"] * width
        assert 0.0 < stage["staleness"] <= 1.0
    # per step, each cache pushes its layer's fresh rows: the training targets' (train split)
    assert stages[1]["pushed_rows"] == 3 * sum(single["microbatch"]["targets_per_chunk"])
    assert piped["epochs"][-1]["staleness"] == pytest.approx(single["epochs"][-1]["staleness"])
