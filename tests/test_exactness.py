"""Transparency: micro-batched exact mode computes what full-graph training computes (dropout 0).

For each framework adapter (PyG, DGL) the reference is that framework's plain full-graph layers.
SAGE's plain layers run on the graph without self-loops (a node reads its own row through the root
weight), GAT's and GCN's with one self-loop per node, as each framework's users add them.

Run in float64 so that the comparison is tight (1e-9 relative): in float32, summing the same gradient
in a different order (per micro-batch, then across micro-batches) leaves differences of up to ~1e-4
relative in parameters whose gradient is a sum with heavy cancellation (e.g. attention vectors).
"""
from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Callable

os.environ.setdefault("DGLBACKEND", "pytorch")  # before importing dgl: no backend warning

import dgl  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from dgl.nn.pytorch import GATConv as DglGATConv  # noqa: E402
from dgl.nn.pytorch import GraphConv  # noqa: E402
from dgl.nn.pytorch import SAGEConv as DglSAGEConv  # noqa: E402
from torch import Tensor, nn  # noqa: E402
from torch_geometric.nn import GATConv, GCNConv, SAGEConv  # noqa: E402
from torch_geometric.utils import remove_self_loops  # noqa: E402

from pipegnn.backends import FRAMEWORKS, get_backend  # noqa: E402
from pipegnn.data import Graph  # noqa: E402
from pipegnn.data.planetoid import load_planetoid  # noqa: E402
from pipegnn.models import FIRST_TRANSFORMS, Propagate, StagedGNN, Transform, build_model  # noqa: E402
from pipegnn.training.epochs import Trainee  # noqa: E402

from tests.helpers import assert_close, assert_grads_close, build_on, model_keys  # noqa: E402

pytestmark = pytest.mark.usefixtures("float64")
MODELS = {
    "gat": dict(name="gat", hidden=4, heads=3, out_heads=2, layers=2, dropout=0.0),
    "gcn": dict(name="gcn", hidden=8, layers=3, dropout=0.0),
    "sage": dict(name="sage", hidden=8, layers=3, dropout=0.0),
}
#: Names of the transform unit's parameters in each plain layer, in the transform's order.
TRANSFORM_PARAMETERS = {
    ("pyg", "gat"): ["lin.weight"], ("pyg", "gcn"): ["lin.weight"],
    ("pyg", "sage"): ["lin_l.weight", "lin_r.weight", "lin_l.bias"],
    ("dgl", "gat"): ["fc.weight"], ("dgl", "gcn"): ["weight"],
    ("dgl", "sage"): ["fc_neigh.weight", "fc_self.weight", "fc_self.bias"],
}


def layers(model: StagedGNN) -> list[tuple[Transform, Propagate]]:
    """The (transform, propagate) units of every layer."""
    units = list(model)
    return list(zip(units[0::2], units[1::2]))


def pyg_layer(transform: Transform, propagate: Propagate, kind: str) -> nn.Module:
    """A plain PyG layer (its own self-loop and normalisation handling) with the units' weights."""
    s = propagate.spec
    if kind == "sage":
        conv = SAGEConv(s.in_dim, s.out_dim, aggr="mean")
        t = transform.transform
        conv.load_state_dict({"lin_l.weight": t.neighbour, "lin_r.weight": t.root, "lin_l.bias": t.bias})
        return conv
    conv = (GATConv(s.in_dim, s.out_dim, heads=s.heads, concat=s.concat) if kind == "gat"
            else GCNConv(s.in_dim, s.out_dim))
    conv.load_state_dict({**propagate.conv.state_dict(), "lin.weight": transform.transform.weight})
    return conv


def dgl_layer(transform: Transform, propagate: Propagate, kind: str) -> nn.Module:
    """A plain DGL layer (``norm='both'`` for GCN, the mean aggregator for SAGE) with the units' weights,
    in float64."""
    s = propagate.spec
    if kind == "sage":
        conv = DglSAGEConv(s.in_dim, s.out_dim, "mean")
        t = transform.transform
        state = {"fc_neigh.weight": t.neighbour, "fc_self.weight": t.root, "fc_self.bias": t.bias}
    elif kind == "gat":
        conv = DglGATConv(s.in_dim, s.out_dim, num_heads=s.heads)
        state = {**propagate.conv.gat.state_dict(), "fc.weight": transform.transform.weight}
    else:
        conv = GraphConv(s.in_dim, s.out_dim, norm="both")
        state = {**propagate.conv.state_dict(), "weight": transform.transform.weight}
    conv = conv.to(torch.float64)  # DGL makes GATConv's attention vectors and bias float32
    conv.load_state_dict(state)
    return conv


def full_graph_forward(framework: str, convs: list[nn.Module], model: StagedGNN, graph: Graph) -> Tensor:
    """All nodes' outputs of ``convs`` on the full graph, self-loops handled as each framework's
    users do (PyG's GAT and GCN layers add them; DGL users replace them with one per node; SAGE reads
    the graph without them)."""
    h = graph.x
    edge_index = remove_self_loops(graph.edge_index)[0] if model.kind == "sage" else graph.edge_index
    if framework == "dgl":
        g = dgl.remove_self_loop(dgl.graph((edge_index[0], edge_index[1]), num_nodes=graph.num_nodes))
        g = g if model.kind == "sage" else dgl.add_self_loop(g)
    for (_, stage), conv in zip(layers(model), convs):
        if framework == "pyg":
            h = conv(h, edge_index)
        else:
            h = conv(g, h)
            if model.kind == "gat":
                h = h.flatten(1) if stage.spec.concat else h.mean(1)
        h = stage.activation(h) if stage.activation else h
    return h


def reference(framework: str, model: StagedGNN, graph: Graph, targets: Tensor) -> tuple[Tensor, list]:
    """Outputs of ``targets`` and parameter gradients of plain full-graph layers of ``framework``
    carrying the staged model's weights, in the staged model's parameter order (per layer: the
    transform's parameters, then the layer's other parameters)."""
    layer = pyg_layer if framework == "pyg" else dgl_layer
    convs = [layer(t, p, model.kind) for t, p in layers(model)]
    out = full_graph_forward(framework, convs, model, graph)[targets]
    F.cross_entropy(out, graph.y[targets], reduction="sum").div(targets.numel()).backward()
    transform = TRANSFORM_PARAMETERS[framework, model.kind]
    grads = []
    for conv in convs:
        named = dict(conv.named_parameters())
        grads += [*(named.pop(name).grad for name in transform), *(p.grad for p in named.values())]
    return out.detach(), grads


def micro_batched(framework: str, model: StagedGNN, keys: dict, graph: Graph, targets: str, chunks: int,
                  partitioner: str, engine: str, halo: str = "exact", disk: Path | None = None,
                  sparse: bool = False, fanouts: tuple[int, ...] | None = None,
                  first: str = "once_per_step") -> tuple[Tensor, list]:
    """Outputs (in the ``targets`` split's node order) and gradients after one step of ``engine`` (GPipe:
    2 stages, the first holding only the first layer's transform: the boundary cuts a layer), the run's
    pieces built by ``pipegnn.build`` over ``graph`` with the model config ``keys`` and ``model``'s weights
    (with ``disk``, the features read from a file there ordered by the plan's partition:
    ``data.features=disk``; with ``sparse``, from a CSR matrix: ``data.features=sparse``)."""
    group, values = model_keys(keys)
    stages = {"engine.balance": [1, len(model) - 1]} if engine == "gpipe" else {}
    storage = {"data.features": "disk", "data.cache": str(disk)} if disk is not None else \
        {"data.features": "sparse"} if sparse else {}
    trainee = build_on(graph, [f"framework={framework}", *group, f"engine={engine}"],
                       {**values, **stages, **storage, "chunks": chunks, "microbatch.partition": partitioner,
                        "microbatch.halo": halo, "microbatch.targets": targets,
                        "microbatch.fanouts": None if fanouts is None else list(fanouts),
                        "microbatch.first_transform": first})
    trainee.model.load_state_dict(model.state_dict())
    run, ids, plan = trainee.engine, trainee.training.ids, trainee.training.plan
    out = run.predict(ids)
    run.train_step(ids, *trainee.train_labels())
    order = torch.argsort(plan.targets)  # plan order -> ascending node id (targets are sorted)
    return out[order], [p.grad for p in trainee.model.parameters()]


@pytest.fixture
def graph(graph: Graph) -> Graph:
    graph.x = graph.x.double()
    return graph


@pytest.fixture
def built_with(graph: Graph) -> Callable[..., Trainee]:
    """``pipegnn.build`` over the test's graph: ``built_with(framework, kind, engine, chunks=k, ...)``,
    with exact halos over the training nodes, METIS parts and the plan's evaluation unless given (GPipe: 2
    stages, the first holding only the first layer's transform), the run's seed (the same weights on every
    call)."""
    def built(framework: str, kind: str, engine: str, *, chunks: int, halo: str = "exact",
              targets: str = "train", fanouts: list[int] | None = None, evaluation: str = "plan",
              first: str = "once_per_step") -> Trainee:
        group, keys = model_keys(MODELS[kind])
        stages = {"engine.balance": [1, 2 * MODELS[kind]["layers"] - 1]} if engine == "gpipe" else {}
        return build_on(graph, [f"framework={framework}", *group, f"engine={engine}"],
                        {**keys, **stages, "chunks": chunks, "microbatch.halo": halo,
                         "microbatch.targets": targets, "microbatch.partition": "metis",
                         "microbatch.fanouts": fanouts, "microbatch.evaluation": evaluation,
                         "microbatch.first_transform": first})
    return built


@pytest.mark.parametrize("first", FIRST_TRANSFORMS)
@pytest.mark.parametrize("engine", ["single", "gpipe"])
@pytest.mark.parametrize("partitioner", ["sequential", "metis"])
@pytest.mark.parametrize("chunks", [1, 2, 3, 8])
@pytest.mark.parametrize("kind", list(MODELS))
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_exact_equals_full_graph(graph: Graph, framework: str, kind: str, chunks: int, partitioner: str,
                                 engine: str, first: str) -> None:
    model = build_model(MODELS[kind], get_backend(framework), graph.x, graph.num_classes,
                        first_transform=first)
    targets = graph.split("train")
    expected, expected_grads = reference(framework, copy.deepcopy(model), graph, targets)
    out, grads = micro_batched(framework, model, MODELS[kind], graph, "train", chunks, partitioner, engine,
                               first=first)
    assert_close(out, expected)
    assert_grads_close(grads, expected_grads)


@pytest.mark.parametrize("first", FIRST_TRANSFORMS)
@pytest.mark.parametrize("engine", ["single", "gpipe"])
def test_exact_with_features_on_disk(graph: Graph, tmp_path: Path, engine: str, first: str) -> None:
    """Features read per step from a file ordered by the partition (``data.features=disk``): outputs and
    gradients equal full-graph training, and equal the same run with the features in memory."""
    model = build_model(MODELS["gat"], get_backend("pyg"), graph.x, graph.num_classes, first_transform=first)
    targets = graph.split("train")
    expected, expected_grads = reference("pyg", copy.deepcopy(model), graph, targets)
    out, grads = micro_batched("pyg", model, MODELS["gat"], graph, "train", 3, "metis", engine, disk=tmp_path,
                               first=first)
    assert_close(out, expected)
    assert_grads_close(grads, expected_grads)
    in_memory, memory_grads = micro_batched("pyg", model, MODELS["gat"], graph, "train", 3, "metis", engine,
                                           first=first)
    assert torch.equal(out, in_memory)
    assert all(torch.equal(g, m) for g, m in zip(grads, memory_grads))


@pytest.mark.parametrize("first", FIRST_TRANSFORMS)
@pytest.mark.parametrize("engine", ["single", "gpipe"])
@pytest.mark.parametrize("kind", list(MODELS))
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_exact_with_sparse_features(graph: Graph, framework: str, kind: str, engine: str, first: str) -> None:
    """Features as a CSR matrix (``data.features=sparse``; half the entries zero here): outputs and
    gradients equal full-graph training with the dense features."""
    x = graph.x.clone()
    x[torch.rand(x.shape, generator=torch.Generator().manual_seed(1)) < 0.5] = 0
    graph = Graph(graph.name, x, graph.y, graph.edge_index, graph.train_mask, graph.val_mask, graph.test_mask,
                  graph.num_classes)
    model = build_model(MODELS[kind], get_backend(framework), graph.x, graph.num_classes,
                        first_transform=first)
    targets = graph.split("train")
    expected, expected_grads = reference(framework, copy.deepcopy(model), graph, targets)
    out, grads = micro_batched(framework, model, MODELS[kind], graph, "train", 3, "metis", engine,
                               sparse=True, first=first)
    assert_close(out, expected)
    assert_grads_close(grads, expected_grads, nonzero=True)


@pytest.mark.parametrize("kind", list(MODELS))
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_naive_mode_loses_cut_edges(graph: Graph, framework: str, kind: str) -> None:
    model = build_model(MODELS[kind], get_backend(framework), graph.x, graph.num_classes)
    targets = graph.split("all")
    expected, _ = reference(framework, copy.deepcopy(model), graph, targets)
    same, _ = micro_batched(framework, model, MODELS[kind], graph, "all", 1, "sequential", "single",
                            halo="none")
    assert_close(same, expected)  # one chunk: the naive mode is the full graph
    lossy, _ = micro_batched(framework, model, MODELS[kind], graph, "all", 4, "sequential", "single",
                             halo="none")
    wrong = (lossy - expected).abs().amax(1) > 1e-4
    assert wrong.float().mean() > 0.3  # most nodes have an in-neighbour in another chunk


@pytest.mark.parametrize("engine", ["single", "gpipe"])
@pytest.mark.parametrize("kind", list(MODELS))
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_sampled_with_every_neighbour_equals_full_graph(graph: Graph, framework: str, kind: str,
                                                         engine: str) -> None:
    """Sampled halos with fan-outs of -1 keep every in-edge: outputs and gradients equal full-graph
    training (float64), as exact halos' do."""
    model = build_model(MODELS[kind], get_backend(framework), graph.x, graph.num_classes)
    targets = graph.split("train")
    expected, expected_grads = reference(framework, copy.deepcopy(model), graph, targets)
    out, grads = micro_batched(framework, model, MODELS[kind], graph, "train", 3, "metis", engine,
                               halo="sampled", fanouts=(-1,) * model.num_layers)
    assert_close(out, expected)
    assert_grads_close(grads, expected_grads)


@pytest.mark.parametrize("engine", ["single", "gpipe"])
@pytest.mark.parametrize("kind", ["gat", "gcn"])
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_redrawn_epoch_trains_as_a_model_built_on_it(built_with, graph: Graph, framework: str, kind: str,
                                                       engine: str) -> None:
    """An epoch's new draw given to a model that already trained on another (``StagedGNN.replace``:
    blocks, rows, the framework's structures and the first transform's gathers renewed) trains exactly
    as a model given that draw from the start."""
    def built() -> Trainee:  # the same seed: the same weights, plan and sampler
        return built_with(framework, kind, engine, chunks=3, halo="sampled", targets="all",
                          fanouts=[2] * MODELS[kind]["layers"])

    trainee, other = built(), built()
    model, run, ids, plan = trainee.model, trainee.engine, trainee.training.ids, trainee.training.plan
    assert trainee.sampler is not None
    later = trainee.sampler.draw(1)
    assert any(a.nodes.numel() != b.nodes.numel() or not torch.equal(a.nodes, b.nodes)
               for a, b in zip(plan.micro_batches, later))
    labels = graph.y[plan.targets]
    run.train_step(ids, labels, labels.numel())  # builds structures and gathers for epoch 0's draw
    model.zero_grad()
    model.replace(ids, later)
    run.redraw(model, ids)
    loss = run.train_step(ids, labels, labels.numel())
    out = run.predict(ids)
    fresh, other_run, other_ids = other.model, other.engine, other.training.ids
    fresh.replace(other_ids, later)
    assert loss == other_run.train_step(other_ids, labels, labels.numel())
    assert torch.equal(out, other_run.predict(other_ids))
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(model.parameters(), fresh.parameters()))


@pytest.mark.parametrize("halo", ["exact", "sampled"])
@pytest.mark.parametrize("engine", ["single", "gpipe"])
@pytest.mark.parametrize("kind", list(MODELS))
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_layerwise_evaluation_equals_full_graph(built_with, graph: Graph, framework: str, kind: str,
                                                engine: str, halo: str) -> None:
    """``microbatch.evaluation=layerwise``: a model trained with exact or sampled micro-batches keeps
    caches for layer-wise evaluation alone. Its training step is that of the same model without them
    (outputs, loss and gradients bit for bit: training neither reads nor writes them), and after the
    weights change, layer-wise evaluation over historical 1-hop blocks of every node gives the full
    graph's outputs (float64)."""
    fanouts = [2] * MODELS[kind]["layers"] if halo == "sampled" else None
    trainee, plain = (built_with(framework, kind, engine, chunks=3, halo=halo, fanouts=fanouts,
                                 evaluation=evaluation) for evaluation in ("layerwise", "plan"))
    model, train, every = trainee.model, trainee.training.plan, trainee.evaluation.plan
    assert not model.histories()  # none that training reads, counts or checkpoints
    assert every.halo == "historical" and every.targets.numel() == graph.num_nodes
    plain.model.load_state_dict(model.state_dict())  # the caches are not in it: the same weights
    labels = graph.y[train.targets]
    runs = []
    for built in (trainee, plain):
        run, ids = built.engine, built.training.ids
        runs.append((run, run.predict(ids), run.train_step(ids, labels, labels.numel())))
    (run, out, loss), (_, plain_out, plain_loss) = runs
    assert torch.equal(out, plain_out) and loss == plain_loss
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(model.parameters(), plain.model.parameters()))
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.5 * p.grad
    model.eval()
    logits = run.refresh(model, trainee.evaluation.ids)[torch.argsort(every.targets)]
    expected, _ = reference(framework, copy.deepcopy(model), graph, graph.split("all"))
    assert_close(logits, expected)


@pytest.mark.parametrize("engine", ["single", "gpipe"])
@pytest.mark.parametrize("kind", list(MODELS))
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_exact_on_cora(data_root, cache_dir, framework: str, kind: str, engine: str) -> None:
    graph = load_planetoid("cora", data_root, cache_dir)
    graph.x = graph.x.double()
    cfg = dict(MODELS[kind], hidden=8)
    model = build_model(cfg, get_backend(framework), graph.x, graph.num_classes)
    targets = graph.split("train")
    expected, expected_grads = reference(framework, copy.deepcopy(model), graph, targets)
    out, grads = micro_batched(framework, model, cfg, graph, "train", 8, "metis", engine)
    assert_close(out, expected)
    assert_grads_close(grads, expected_grads)


@pytest.mark.parametrize("first, once", [("once_per_step", True), ("per_micro_batch", False)])
def test_first_layer_transform_runs_over_each_row_once_per_step(built_with, graph: Graph, first: str,
                                                                once: bool) -> None:
    """With the first transform once per step, a training step (and an evaluation) transforms every row
    the micro-batches read exactly once; per micro-batch, halo rows are transformed again in each."""
    trainee = built_with("pyg", "gat", "single", chunks=4, targets="all", first=first)
    model, engine, ids, plan = trainee.model, trainee.engine, trainee.training.ids, trainee.training.plan
    seen: list[Tensor] = []
    model[0].transform.register_forward_hook(lambda module, args, out: seen.append(args[0].shape[0]))
    distinct = torch.unique(torch.cat([mb.nodes for mb in plan.micro_batches])).numel()
    read = sum(mb.nodes.numel() for mb in plan.micro_batches)
    assert read > distinct  # the halos overlap
    engine.train_step(ids, graph.y[plan.targets], plan.targets.numel())
    assert seen == ([distinct] if once else [mb.nodes.numel() for mb in plan.micro_batches])
    seen.clear()
    engine.predict(ids)
    assert sum(seen) == (distinct if once else read)


@pytest.mark.usefixtures("float64")
def test_lazy_first_transform_equals_eager(built_with, graph: Graph) -> None:
    """Transformed lazily (as the pipelining engine does: each row when the first micro-batch that reads
    it runs), the first layer gives the same loss and gradients as transformed all at once, still each
    row once per step: micro-batch 0 transforms all its rows, each later one only rows no earlier one read."""
    eager, lazy = (built_with("pyg", "gat", "single", chunks=4, targets="all") for _ in range(2))
    plan = eager.training.plan
    seen: list[int] = []
    lazy.model[0].transform.register_forward_hook(lambda module, args, out: seen.append(args[0].shape[0]))
    losses, grads = [], []
    for built, lazily in ((eager, False), (lazy, True)):
        engine = built.engine
        engine.lazy_first = lazily
        losses.append(engine.train_step(built.training.ids, graph.y[plan.targets], plan.targets.numel()))
        grads.append([p.grad for p in built.model.parameters()])
    assert losses[1] == pytest.approx(losses[0], rel=1e-12)
    assert_grads_close(grads[1], grads[0])
    read = [set(mb.nodes.tolist()) for mb in plan.micro_batches]
    new = [len(r - set().union(*read[:i])) for i, r in enumerate(read)]
    assert seen == [n for n in new if n]  # a micro-batch reading no new row transforms nothing
    assert seen[0] == plan.micro_batches[0].nodes.numel() and sum(seen) == len(set().union(*read))


def test_gradient_tolerance_is_relative_to_the_model_not_to_rounding_noise() -> None:
    """The exactness tests compare every gradient against the model's largest one: a parameter whose
    gradient is ~1e-15 everywhere may differ by its own size (rounding noise, as another CPU's SIMD
    width gives), but a real mismatch, 1e-6 of the scale in one element of any tensor, still fails."""
    expected = [torch.full((3, 4), 0.25, dtype=torch.float64), torch.full((5,), 1e-15, dtype=torch.float64)]
    noisy = [expected[0].clone(), expected[1] * 1.5]  # the tiny tensor 50% off: noise on the model's scale
    assert_grads_close(noisy, expected)
    with pytest.raises(AssertionError):  # judged on its own scale, the same noise would fail
        assert_close(noisy[1], expected[1])
    for i in range(2):
        wrong = [g.clone() for g in expected]
        wrong[i].view(-1)[0] += 1e-6 * 0.25
        with pytest.raises(AssertionError):
            assert_grads_close(wrong, expected)
