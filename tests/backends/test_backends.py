"""Framework adapters: PyG and DGL layers compute the same function on the same block, a layer split
into transform and propagation computes what the library layer computes; DGL trains."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import Tensor
from torch_geometric.utils import to_undirected

from pipegnn import run
from pipegnn.backends import FRAMEWORKS, KINDS, Backend, get_backend
from pipegnn.errors import ConfigError
from pipegnn.microbatch.halo import InCSR, MicroBatch, exact_block
from pipegnn.models import MODELS, LayerSpec

from tests.helpers import make_cfg, random_graph

PYG, DGL = get_backend("pyg"), get_backend("dgl")


def first_layer_block(kind: str, targets: Tensor | None = None) -> tuple[MicroBatch, Tensor]:
    """Layer 1 of a 2-layer exact micro-batch of the random graph (by default it reads a halo beyond its
    targets), and float64 input rows for it."""
    graph = random_graph()
    edge_index, weight = PYG.computation_graph(kind, graph.edge_index, graph.num_nodes, torch.float64)
    targets = torch.arange(0, 50, 3) if targets is None else targets
    mb = exact_block(InCSR(edge_index, graph.num_nodes, weight), targets, num_layers=2)
    return mb, graph.x[mb.nodes].double()


def outputs(backend: Backend, conv: torch.nn.Module, mb: MicroBatch, h: Tensor) -> Tensor:
    """``conv``'s output rows of the block's targets, run by ``backend``."""
    block = backend.structure(mb.edges[0], mb.weights[0], mb.sizes[0], mb.sizes[1])
    return backend.apply(conv, h, block)[:mb.sizes[1]]


@pytest.mark.usefixtures("float64")
def test_gcn_layer_is_the_same_in_pyg_and_dgl() -> None:
    mb, h = first_layer_block("gcn")
    assert mb.sizes[0] > mb.sizes[1]  # the block's sources extend beyond its targets
    spec = LayerSpec(h.size(1), 4)
    pyg, dgl = PYG.conv("gcn", spec), DGL.conv("gcn", spec)
    with torch.no_grad():
        pyg.bias.normal_()  # non-zero, so the bias mapping is checked too
        dgl.weight.copy_(pyg.lin.weight.T)  # DGL's weight is [in, out], PyG's lin.weight [out, in]
        dgl.bias.copy_(pyg.bias)
    expected = outputs(PYG, pyg, mb, h)
    assert expected.shape == (mb.sizes[1], 4) and expected.dtype == torch.float64
    torch.testing.assert_close(outputs(DGL, dgl, mb, h), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.usefixtures("float64")
@pytest.mark.parametrize("concat", [True, False])
def test_gat_layer_is_the_same_in_pyg_and_dgl(concat: bool) -> None:
    mb, h = first_layer_block("gat")
    assert mb.sizes[0] > mb.sizes[1]
    spec = LayerSpec(h.size(1), 4, heads=3, concat=concat)
    pyg, dgl = PYG.conv("gat", spec), DGL.conv("gat", spec)
    with torch.no_grad():
        pyg.bias.normal_()
        dgl.gat.fc.weight.copy_(pyg.lin.weight)  # both [heads*out, in]
        dgl.gat.attn_l.copy_(pyg.att_src)  # both [1, heads, out]
        dgl.gat.attn_r.copy_(pyg.att_dst)
        # DGL adds its [heads*out] bias before reducing the heads, PyG after (its bias is [out]
        # when averaging): the same bias on every head averages to PyG's.
        dgl.gat.bias.copy_(pyg.bias if concat else pyg.bias.repeat(spec.heads))
    expected = outputs(PYG, pyg, mb, h)
    assert expected.shape == (mb.sizes[1], spec.out_features)
    torch.testing.assert_close(outputs(DGL, dgl, mb, h), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.usefixtures("float64")
def test_sage_layer_is_the_same_in_pyg_and_dgl() -> None:
    mb, h = first_layer_block("sage")
    assert mb.sizes[0] > mb.sizes[1]
    spec = LayerSpec(h.size(1), 4, root=True)
    pyg, dgl = PYG.conv("sage", spec), DGL.conv("sage", spec)
    with torch.no_grad():  # PyG: lin_l (neighbours, with the bias), lin_r (root); DGL: fc_neigh, fc_self
        dgl.fc_neigh.weight.copy_(pyg.lin_l.weight)
        dgl.fc_self.weight.copy_(pyg.lin_r.weight)
        dgl.fc_self.bias.copy_(pyg.lin_l.bias)
    expected = outputs(PYG, pyg, mb, h)
    assert expected.shape == (mb.sizes[1], 4)
    torch.testing.assert_close(outputs(DGL, dgl, mb, h), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.usefixtures("float64")
@pytest.mark.parametrize("out_dim", [4, 9])  # below and above the 6 input features (DGL's two paths)
@pytest.mark.parametrize("isolated", [False, True], ids=["halo", "no_in_edges"])
@pytest.mark.parametrize("backend", [PYG, get_backend("pyg", "sparse"), DGL],
                         ids=["pyg", "pyg_sparse", "dgl"])
def test_split_sage_layer_computes_the_library_layer(backend: Backend, isolated: bool, out_dim: int) -> None:
    """The SAGE transform (both linears, node-wise) followed by the propagation (the mean of the
    neighbour half plus the target's own root half) equals the unsplit library layer with the same
    weights, on a block with a halo and on one whose targets have no in-edges (bias only from the
    root half)."""
    mb, h = first_layer_block("sage", torch.arange(45, 50) if isolated else None)
    assert (mb.edges[0].size(1) == 0) == isolated
    spec = LayerSpec(h.size(1), out_dim, root=True)
    conv = backend.conv("sage", spec)
    with torch.no_grad():
        for p in conv.parameters():
            p.normal_()  # a non-zero bias too
    expected = outputs(PYG if backend.name == "pyg" else DGL, copy.deepcopy(conv), mb, h)
    transform, rest = backend.split(conv)
    assert [p.shape for p in transform.parameters()] == [(out_dim, h.size(1))] * 2 + [(out_dim,)]
    assert not list(rest.parameters())
    x = transform(h)
    assert x.shape == (mb.sizes[0], spec.transform_width) == (mb.sizes[0], 2 * out_dim)
    torch.testing.assert_close(outputs(backend, rest, mb, x), expected, rtol=1e-12, atol=1e-12)


def test_sage_reads_no_self_loops() -> None:
    """SAGE's computation graph is the graph's edges without its self-loops, in both adapters (the root
    weight reads a node's own row), and without weights."""
    graph = random_graph()
    loops = graph.edge_index[0] == graph.edge_index[1]
    assert loops.any()
    expected = sorted_edges(graph.edge_index[:, ~loops], None)[0]
    for backend in (PYG, DGL):
        edges, weight = backend.computation_graph("sage", graph.edge_index, graph.num_nodes)
        assert weight is None
        assert torch.equal(sorted_edges(edges, None)[0], expected)


def sorted_edges(edge_index: Tensor, weight: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """Edges (and weights) in (target, source) order."""
    order = torch.argsort(edge_index[1] * (int(edge_index.max()) + 1) + edge_index[0])
    return edge_index[:, order], None if weight is None else weight[order]


def test_computation_graphs_agree_on_undirected_graphs() -> None:
    """Both give one self-loop per node; GCN weights agree when in- and out-degrees coincide, but DGL
    normalises by the source's out-degree (PyG by its in-degree), so they differ on directed graphs."""
    graph = random_graph()
    undirected = to_undirected(graph.edge_index, num_nodes=graph.num_nodes)
    for kind in ("gat", "gcn"):
        pyg = sorted_edges(*PYG.computation_graph(kind, undirected, graph.num_nodes))
        dgl = sorted_edges(*DGL.computation_graph(kind, undirected, graph.num_nodes))
        assert torch.equal(pyg[0], dgl[0])
        assert (pyg[0][0] == pyg[0][1]).sum() == graph.num_nodes
        if kind == "gcn":
            assert dgl[1].dtype == torch.float32
            torch.testing.assert_close(dgl[1], pyg[1])
        else:
            assert pyg[1] is None and dgl[1] is None
    pyg = sorted_edges(*PYG.computation_graph("gcn", graph.edge_index, graph.num_nodes))
    dgl = sorted_edges(*DGL.computation_graph("gcn", graph.edge_index, graph.num_nodes))
    assert torch.equal(pyg[0], dgl[0]) and not torch.allclose(pyg[1], dgl[1])


def test_unknown_framework_is_named() -> None:
    assert FRAMEWORKS == ("pyg", "dgl")
    with pytest.raises(ConfigError, match=r"'jax'.*valid: pyg, dgl"):
        get_backend("jax")


@pytest.mark.parametrize("backend", [PYG, DGL], ids=["pyg", "dgl"])
def test_unknown_model_kind_is_named(backend: Backend) -> None:
    """An adapter builds layers and computation graphs for its known kinds only, and names an unknown
    kind instead of treating it as GAT."""
    assert set(KINDS) == set(MODELS)
    graph = random_graph()
    match = r"model.name='gin' is not valid; valid: gat, gcn, sage"
    with pytest.raises(ConfigError, match=match):
        backend.conv("gin", LayerSpec(graph.num_features, 4))
    with pytest.raises(ConfigError, match=match):
        backend.computation_graph("gin", graph.edge_index, graph.num_nodes)


def _losses(*overrides: str) -> list[float]:
    record = run(make_cfg("framework=dgl", "model.dropout=0", "train.epochs=4", *overrides))
    assert record["status"] == "completed", record["error"]
    assert record["config"]["framework"]["name"] == "dgl"
    return [e["train_loss"] for e in record["epochs"]]


@pytest.mark.parametrize("model", MODELS)
def test_dgl_training_is_transparent(model: str) -> None:
    """DGL runs complete; with dropout 0, full-batch, single-engine and GPipe micro-batches train the
    same model (per-epoch losses agree) and the model learns."""
    full = _losses(f"model={model}", "engine=single", "chunks=1", "microbatch.halo=none")
    single = _losses(f"model={model}", "engine=single", "chunks=4")
    gpipe = _losses(f"model={model}", "engine=gpipe", "chunks=4")
    assert full == pytest.approx(single, rel=1e-5)
    assert full == pytest.approx(gpipe, rel=1e-5)
    assert full[-1] < full[0]


@pytest.mark.parametrize("model", MODELS)
def test_dgl_historical_halo_trains_like_the_single_engine(model: str) -> None:
    """Historical blocks read more source rows than they receive (the cached halo); DGL blocks take
    them. The cache is filled before training, so the first step's loss is the full graph's; GPipe and
    the single engine run the same computation every step."""
    full = _losses(f"model={model}", "engine=single", "chunks=1", "microbatch.halo=none")
    single = _losses(f"model={model}", "microbatch.halo=historical", "chunks=3", "engine=single")
    gpipe = _losses(f"model={model}", "microbatch.halo=historical", "chunks=3", "engine=gpipe")
    assert gpipe == pytest.approx(single, rel=1e-5)
    assert single[0] == pytest.approx(full[0], rel=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["gat", "gcn"])
def test_pyg_and_dgl_reach_the_same_cora_accuracy(data_root, tmp_path, model: str) -> None:
    """Same settings (GPipe, 8 exact chunks, METIS, 200 epochs), different kernels: mean test accuracy
    over 3 seeds within 1.5 points."""
    import statistics

    def accuracy(framework: str) -> float:
        accs = []
        for seed in range(3):
            record = run(make_cfg("dataset=cora", f"model={model}", f"framework={framework}", "chunks=8",
                                  "train.epochs=200", f"train.seed={seed}", f"data.root={data_root}",
                                  f"data.cache={tmp_path}"))
            assert record["status"] == "completed", record["error"]
            accs.append(record["final"]["test_acc_at_best_val"])
        return statistics.mean(accs)

    pyg, dgl = accuracy("pyg"), accuracy("dgl")
    assert abs(pyg - dgl) <= 0.015, (pyg, dgl)
