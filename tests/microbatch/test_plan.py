"""Plan statistics, checked against values computed by hand on a path graph, and block invariants."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pipegnn.data import Graph, SyntheticSpec, make_synthetic
from pipegnn.microbatch import ComputationGraph, PlanSpec, build_plan, partition

# Undirected path 0-1-2-3-4-5 (both directions), no self-loops: 10 directed edges.
PATH = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4, 4, 5],
                     [1, 0, 2, 1, 3, 2, 4, 3, 5, 4]])


def path_plan(targets: list[int], layers: int, halo: str = "exact", chunks: int = 2):
    return build_plan(ComputationGraph(PATH, 6), torch.tensor(targets),
                      PlanSpec(chunks, layers, halo=halo, partitioner="sequential"))


def test_exact_one_layer_stats() -> None:
    plan = path_plan([0, 1, 2, 3, 4, 5], layers=1)
    # parts {0,1,2} and {3,4,5}; each needs one neighbour of the other part.
    assert [mb.sizes for mb in plan.micro_batches] == [[4, 3], [4, 3]]
    assert [mb.edges[0].size(1) for mb in plan.micro_batches] == [5, 5]
    s = plan.stats
    assert s.nodes_per_chunk == [4, 4] and s.targets_per_chunk == [3, 3]
    assert s.replication == pytest.approx(8 / 6)
    # Every micro-batch transforming its own 4 rows, or the 6 distinct rows once per step.
    assert s.inflation_per_micro_batch == pytest.approx((4 + 5) * 2 / (6 + 10))
    assert s.inflation == pytest.approx((6 + 5 * 2) / (6 + 10)) == 1.0
    assert (s.rows_per_layer, s.distinct_rows_per_layer, s.edges_per_layer, s.outputs_per_layer,
            s.reference_work) == ([8], [6], [10], [6], 16)
    assert s.cut_edge_fraction == pytest.approx(2 / 10)
    assert s.padding_fraction == 0.0


def test_exact_two_layer_stats() -> None:
    plan = path_plan([0, 1, 2, 3, 4, 5], layers=2)
    first, second = plan.micro_batches
    assert first.sizes == [5, 4, 3] and second.sizes == [5, 4, 3]
    assert sorted(first.nodes.tolist()) == [0, 1, 2, 3, 4]
    assert [e.size(1) for e in first.edges] == [7, 5]
    assert plan.stats.replication_per_layer == pytest.approx([10 / 6, 8 / 6])
    s = plan.stats
    assert s.inflation_per_micro_batch == pytest.approx(2 * ((5 + 7) + (4 + 5)) / (2 * (6 + 10)))
    assert s.inflation == pytest.approx((6 + 2 * 7 + 2 * (4 + 5)) / (2 * (6 + 10)))
    assert s.work("per_micro_batch") == {"first_transform": "per_micro_batch", "transform_rows": [10, 8],
                                         "propagate_edges": [14, 10], "propagate_rows": [8, 6],
                                         "inflation": s.inflation_per_micro_batch}
    assert s.work()["transform_rows"] == [6, 8] and s.work()["inflation"] == s.inflation


def test_naive_stats_and_lost_edges() -> None:
    plan = path_plan([0, 1, 2, 3, 4, 5], layers=1, halo="none")
    assert [mb.sizes for mb in plan.micro_batches] == [[3, 3], [3, 3]]
    assert [mb.edges[0].size(1) for mb in plan.micro_batches] == [4, 4]  # 2-3 and 3-2 are lost
    assert plan.stats.replication == 1.0
    assert plan.stats.inflation == pytest.approx(14 / 16)


def test_padding_with_unequal_micro_batches() -> None:
    plan = path_plan([0, 1, 2, 3, 4], layers=1)
    # targets {0,1} and {2,3,4}: halos give 3 and 5 input nodes.
    assert plan.stats.nodes_per_chunk == [3, 5]
    assert plan.stats.padding_fraction == pytest.approx(1 - 8 / 10)


@pytest.mark.parametrize("halo", ["exact", "none"])
def test_blocks_are_nested_prefixes(graph: Graph, halo: str) -> None:
    targets = graph.split("train")
    plan = build_plan(ComputationGraph(graph.edge_index, graph.num_nodes), targets,
                      PlanSpec(3, 3, halo=halo, partitioner="metis"))
    assert torch.equal(torch.sort(plan.targets).values, targets)
    for mb in plan.micro_batches:
        assert mb.nodes.unique().numel() == mb.nodes.numel() == mb.sizes[0]
        assert all(a >= b for a, b in zip(mb.sizes, mb.sizes[1:]))
        for layer, edges in enumerate(mb.edges):
            if edges.numel():
                assert int(edges[0].max()) < mb.sizes[layer]
                assert int(edges[1].max()) < mb.sizes[layer + 1]


def test_exact_block_has_every_in_edge(graph: Graph) -> None:
    plan = build_plan(ComputationGraph(graph.edge_index, graph.num_nodes), graph.split("train"),
                      PlanSpec(4, 2))
    in_degree = torch.bincount(graph.edge_index[1], minlength=graph.num_nodes)
    for mb in plan.micro_batches:
        for layer, edges in enumerate(mb.edges):
            computed = mb.nodes[:mb.sizes[layer + 1]]
            got = torch.bincount(edges[1], minlength=mb.sizes[layer + 1])
            assert torch.equal(got, in_degree[computed])


def test_edge_weights_travel_with_their_edges(graph: Graph) -> None:
    weight = torch.arange(graph.num_edges, dtype=torch.float)
    plan = build_plan(ComputationGraph(graph.edge_index, graph.num_nodes, weight), graph.split("train"),
                      PlanSpec(3, 2))
    for mb in plan.micro_batches:
        for edges, w in zip(mb.edges, mb.weights):
            src, dst = mb.nodes[edges[0]], mb.nodes[edges[1]]
            assert torch.equal(graph.edge_index[:, w.long()], torch.stack([src, dst]))


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="halo"):
        path_plan([0, 1], layers=1, halo="fancy")
    with pytest.raises(ValueError, match="number of targets=2"):
        path_plan([0, 1], layers=1, chunks=3)


def test_historical_two_layer_stats() -> None:
    plan = path_plan([0, 1, 2, 3, 4, 5], layers=2, halo="historical")
    first, second = plan.micro_batches
    # {0,1,2} reads halo node 3 at both layers: layer 1 from features, layer 2 from the cache.
    assert first.sizes == [4, 3, 3] and first.sources == [4, 4]
    assert first.nodes.tolist() == [0, 1, 2, 3] and second.nodes.tolist() == [3, 4, 5, 2]
    assert [e.size(1) for e in first.edges] == [5, 5]
    s = plan.stats
    assert s.replication_per_layer == pytest.approx([8 / 6, 8 / 6])
    assert s.inflation_per_micro_batch == pytest.approx(2 * 2 * (4 + 5) / (2 * (6 + 10)))
    assert s.inflation == pytest.approx((6 + 2 * 5 + 2 * (4 + 5)) / (2 * (6 + 10)))


def test_balance_statistics() -> None:
    plan = path_plan([0, 1, 2, 3, 4], layers=1)
    # targets {0,1} and {2,3,4}; inputs 3 and 5 rows.
    assert plan.stats.target_balance == pytest.approx(3 / 2.5)
    assert plan.stats.node_balance == pytest.approx(5 / 4)


def test_stats_command_matches_build_plan(data_root, capsys, tmp_path) -> None:
    """benchmarks/partitions.py: the partition statistics tool."""
    import importlib.util

    from tests.helpers import ROOT

    spec = importlib.util.spec_from_file_location("partitions", ROOT / "benchmarks" / "partitions.py")
    partitions = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(partitions)
    main = partitions.main

    assert main(["dataset=cora", f"data.root={data_root}", f"data.cache={tmp_path}", "chunks=2,8",
                 "microbatch.targets=all", "microbatch.halo=exact,historical",
                 "--csv", str(tmp_path / "t.csv")]) == 0
    import pandas as pd

    from pipegnn.backends import get_backend
    from pipegnn.data.planetoid import load_planetoid

    table = pd.read_csv(tmp_path / "t.csv")
    assert len(table) == 4 * 2 * 2  # partitioners x chunks x halos
    row = table[(table.partition == "metis") & (table.chunks == 8) & (table.halo == "exact")].iloc[0]
    graph = load_planetoid("cora", data_root, tmp_path)
    edges, _ = get_backend("pyg").computation_graph("gat", graph.edge_index, graph.num_nodes)
    expected = build_plan(ComputationGraph(edges, graph.num_nodes), graph.split("all"),
                          PlanSpec(8, 2, partitioner="metis")).stats
    assert row.inflation == pytest.approx(expected.inflation)
    assert row.replication == pytest.approx(expected.replication)
    assert "metis" in capsys.readouterr().out
    assert main(["dataset=cora", f"data.root={data_root}", "microbatch.partition=kmeans"]) == 2


@pytest.mark.parametrize("halo", ["none", "exact", "historical"])
@pytest.mark.parametrize("layers", [1, 2, 3])
def test_single_chunk_work_is_counted_without_blocks(graph: Graph, halo: str, layers: int) -> None:
    """Inflation's denominator, counted with node masks, equals the work of the one-chunk plan."""
    from pipegnn.microbatch.halo import InCSR
    from pipegnn.microbatch.plan import _single_chunk_work

    targets = graph.split("train")
    csr = InCSR(graph.edge_index, graph.num_nodes)
    one = build_plan(ComputationGraph(graph.edge_index, graph.num_nodes), targets,
                     PlanSpec(1, layers, halo=halo, partitioner="sequential"))
    assert one.stats.inflation == pytest.approx(1.0)
    work = sum(mb.sources[layer] + mb.edges[layer].size(1)
               for mb in one.micro_batches for layer in range(layers))
    assert _single_chunk_work(csr, targets, halo, layers) == work == one.stats.reference_work


def test_local_edges_are_int32(graph: Graph) -> None:
    for halo in ("exact", "historical", "none"):
        plan = build_plan(ComputationGraph(graph.edge_index, graph.num_nodes), graph.split("train"),
                          PlanSpec(2, 2, halo=halo))
        assert {e.dtype for mb in plan.micro_batches for e in mb.edges} == {torch.int32}
        assert plan.micro_batches[0].nodes.dtype == torch.int64


def test_reused_partition_gives_the_same_plan(graph: Graph) -> None:
    targets = graph.split("val")
    computation = ComputationGraph(graph.edge_index, graph.num_nodes)
    fresh = build_plan(computation, targets, PlanSpec(3, 2))
    again = build_plan(computation, targets, PlanSpec(3, 2), part=fresh.part)
    assert torch.equal(again.part, fresh.part) and torch.equal(again.targets, fresh.targets)
    for a, b in zip(again.micro_batches, fresh.micro_batches):
        assert torch.equal(a.nodes, b.nodes) and all(torch.equal(x, y) for x, y in zip(a.edges, b.edges))


def test_an_exact_plan_that_cannot_fit_is_refused_before_the_model_is_built(
        monkeypatch: pytest.MonkeyPatch, data_root: Path) -> None:
    """model.layers=4096 (the most a model may have) with exact halos: once a micro-batch's halo stops
    growing, the plan's size is known (every layer left needs the same edges), and one larger than the free
    memory (256 MiB here, pretended, so that the test means the same on every machine) is an `oom` record
    before the model is built (100,000 layers used to build for two minutes, then die with
    std::bad_alloc)."""
    from types import SimpleNamespace

    from pipegnn import run
    from pipegnn.microbatch import halo

    from tests.helpers import make_cfg

    monkeypatch.setattr(halo.psutil, "virtual_memory", lambda: SimpleNamespace(available=256 << 20))
    record = run(make_cfg("dataset=cora", f"data.root={data_root}", "model.layers=4096", "train.epochs=1"))
    assert record["status"] == "oom" and record["epochs"] == [] and "model" not in record, record["error"]
    assert "exact halos of 4096 layers" in record["error"]
    assert "GiB of edges, more than the 0.2 GiB free" in record["error"]


def test_naive_metis_parts_hold_balanced_nodes_and_halo_ones_balanced_targets() -> None:
    """Without a halo a micro-batch computes every node of its part: METIS balances the nodes; with a
    halo the work grows from the targets, and METIS balances the targets."""
    g = make_synthetic(SyntheticSpec(num_nodes=3000, num_features=8, num_communities=8, homophily=0.9,
                                     num_val=100, num_test=100))
    cg = ComputationGraph(g.edge_index, g.num_nodes)
    targets = torch.arange(0, g.num_nodes, 50)
    few = partition(g.edge_index, g.num_nodes, targets, 8, "metis")
    naive = build_plan(cg, targets, PlanSpec(8, 2, halo="none", partitioner="metis"))
    assert torch.equal(naive.part,
                       partition(g.edge_index, g.num_nodes, targets, 8, "metis", balance_nodes=True))
    nodes = torch.bincount(naive.part, minlength=8).float()
    assert nodes.max() <= 1.25 * nodes.mean() and not torch.equal(naive.part, few)
    for halo in ("exact", "historical"):
        assert torch.equal(build_plan(cg, targets, PlanSpec(8, 2, halo=halo, partitioner="metis")).part, few)
