"""Sampled halos: the draw's layout, fan-outs, self-loops, weight scaling, seeds and epochs."""
from __future__ import annotations

import threading

import pytest
import torch

from pipegnn.microbatch import ComputationGraph, PlanSpec, build_plan
from pipegnn.microbatch.draw_ahead import DrawAhead
from pipegnn.microbatch.halo import InCSR, exact_block
from pipegnn.microbatch.sample import NeighbourSampler, epoch_generator, sampled_block

from tests.helpers import random_graph


def dense_graph(num_nodes: int = 60, degree: int = 12, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A random graph where every node has ``degree`` distinct in-neighbours besides itself, plus a
    self-loop each; GCN-like weights (1 / (degree + 1))."""
    g = torch.Generator().manual_seed(seed)
    src = torch.cat([torch.randperm(num_nodes - 1, generator=g)[:degree] for _ in range(num_nodes)])
    dst = torch.arange(num_nodes).repeat_interleave(degree)
    src = src + (src >= dst)  # never the node itself
    loops = torch.arange(num_nodes)
    edge_index = torch.stack([torch.cat([src, loops]), torch.cat([dst, loops])])
    return edge_index, torch.full((edge_index.size(1),), 1.0 / (degree + 1), dtype=torch.float64)


def test_fanouts_of_minus_one_give_the_exact_block() -> None:
    graph = random_graph()
    csr = InCSR(graph.edge_index, graph.num_nodes, torch.rand(graph.edge_index.size(1), dtype=torch.float64))
    targets = torch.tensor([3, 7, 11, 20])
    exact = exact_block(csr, targets, 3)
    sampled = sampled_block(csr, targets, [-1, -1, -1], epoch_generator(0, 0))
    assert torch.equal(sampled.nodes, exact.nodes) and sampled.sizes == exact.sizes
    for s, e, sw, ew in zip(sampled.edges, exact.edges, sampled.weights, exact.weights):
        assert torch.equal(s, e) and torch.equal(sw, ew)
    assert (csr.local == -1).all()  # the scratch numbering is left as it was


@pytest.mark.parametrize("fanouts", [[3, 5], [1, 1], [5, -1]])
def test_each_node_keeps_its_fanout_and_its_self_loop(fanouts: list[int]) -> None:
    edge_index, weight = dense_graph()
    csr = InCSR(edge_index, 60, weight)
    targets = torch.tensor([0, 5, 9])
    mb = sampled_block(csr, targets, fanouts, epoch_generator(1, 0))
    assert mb.sizes[-1] == 3 and torch.equal(mb.targets, targets)
    global_edges = set(zip(edge_index[0].tolist(), edge_index[1].tolist()))
    for layer, (edges, weights) in enumerate(zip(mb.edges, mb.weights)):
        fanout = fanouts[len(fanouts) - 1 - layer]  # fanouts are in hop order: the last layer's first
        computed = mb.sizes[layer + 1]
        src, dst = mb.nodes[edges[0].long()], mb.nodes[edges[1].long()]
        assert (edges[1] < computed).all() and (edges[0] < mb.sizes[layer]).all()
        assert set(zip(src.tolist(), dst.tolist())) <= global_edges  # only the graph's edges
        per_node = torch.bincount(edges[1].long(), minlength=computed)
        kept = 12 if fanout == -1 else fanout
        assert per_node.tolist() == [kept + 1] * computed  # its fan-out plus its self-loop
        loops = src == dst
        assert int(loops.sum()) == computed
        # unbiased: a node's kept neighbours weigh what all its neighbours weigh (12 of 1/13)
        sums = torch.zeros(computed, dtype=torch.float64)
        sums.index_add_(0, edges[1][~loops].long(), weights[~loops])
        torch.testing.assert_close(sums, torch.full((computed,), 12 / 13, dtype=torch.float64))
        assert torch.all(weights[loops] == 1 / 13)


def test_draws_repeat_per_seed_and_epoch_and_differ_across_them() -> None:
    edge_index, weight = dense_graph()
    csr = InCSR(edge_index, 60, weight)
    targets = [torch.tensor([0, 1, 2]), torch.tensor([30, 31])]

    def edges(seed: int, epoch: int) -> list[torch.Tensor]:
        return [mb.nodes[e.long()] for mb in NeighbourSampler(csr, targets, [4, 4], seed).draw(epoch)
                for e in mb.edges]

    same = edges(0, 3)
    assert all(torch.equal(a, b) for a, b in zip(same, edges(0, 3)))
    for other in (edges(0, 4), edges(1, 3)):
        assert any(a.shape != b.shape or not torch.equal(a, b) for a, b in zip(same, other))


def test_uniform_over_neighbours() -> None:
    """Each of a node's 12 neighbours is kept with probability 3/12: counted over 400 draws."""
    edge_index, _ = dense_graph()
    csr = InCSR(edge_index, 60)
    target = torch.tensor([7])
    counts: dict[int, int] = {}
    for epoch in range(400):
        mb = sampled_block(csr, target, [3], epoch_generator(0, epoch))
        for s in mb.nodes[mb.edges[0][0].long()].tolist():
            counts[s] = counts.get(s, 0) + 1
    neighbours = {s: c for s, c in counts.items() if s != 7}
    assert len(neighbours) == 12 and counts[7] == 400
    # binomial(400, 1/4): mean 100, std 8.7; 6 std either side
    assert all(48 <= c <= 152 for c in neighbours.values()), neighbours


def test_sampled_plan_holds_epoch_zeros_draw() -> None:
    graph = random_graph()
    targets = torch.arange(0, 40, 3)
    spec = PlanSpec(3, 2, halo="sampled", partitioner="sequential", seed=5, fanouts=(2, 2))
    plan = build_plan(ComputationGraph(graph.edge_index, graph.num_nodes), targets, spec)
    assert plan.halo == "sampled" and plan.chunks == 3
    parts = [mb.targets for mb in plan.micro_batches]
    redrawn = NeighbourSampler(InCSR(graph.edge_index, graph.num_nodes), parts, [2, 2], 5).draw(0)
    for a, b in zip(plan.micro_batches, redrawn):
        assert torch.equal(a.nodes, b.nodes) and all(torch.equal(x, y) for x, y in zip(a.edges, b.edges))
    exact = build_plan(ComputationGraph(graph.edge_index, graph.num_nodes), targets,
                       PlanSpec(3, 2, halo="exact", partitioner="sequential"))
    assert plan.stats.reference_work == exact.stats.reference_work  # inflation against exact's full batch
    assert sum(plan.stats.edges_per_layer) < sum(exact.stats.edges_per_layer)
    with pytest.raises(ValueError, match="one fan-out per layer"):
        build_plan(ComputationGraph(graph.edge_index, graph.num_nodes), targets,
                   PlanSpec(3, 2, halo="sampled", fanouts=(2,)))


def test_a_node_with_two_self_loops_keeps_both_and_draws_among_its_others() -> None:
    edge_index, weight = dense_graph()
    extra = torch.tensor([[4], [4]])  # node 4's second self-loop, appended (last in its row)
    edge_index = torch.cat([edge_index, extra], 1)
    csr = InCSR(edge_index, 60, torch.cat([weight, torch.tensor([0.5], dtype=torch.float64)]))
    mb = sampled_block(csr, torch.tensor([4, 9]), [3], epoch_generator(2, 0))
    src, dst = mb.nodes[mb.edges[0][0].long()], mb.nodes[mb.edges[0][1].long()]
    mine = dst == 4
    assert int((src[mine] == 4).sum()) == 2 and int(mine.sum()) == 3 + 2
    assert sorted(mb.weights[0][mine & (src == 4)].tolist()) == [1 / 13, 0.5]  # loops: unscaled
    others = mb.weights[0][mine & (src != 4)]
    torch.testing.assert_close(others.sum(), torch.tensor(12 / 13, dtype=torch.float64))


def test_only_the_calling_thread_sets_a_thread_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """``torch.set_num_threads`` in any thread sets the count every thread started later begins with: a
    draw's worker (or the background draw's thread) setting its own left later threads, torchgpipe's
    workers among them, on one intra-op thread. Workers of a shared draw and the draw ahead set none;
    the calling thread sets its own and restores it, and a thread started after them gets it."""
    graph = random_graph(num_nodes=300, num_edges=3000)
    csr = InCSR(graph.edge_index, graph.num_nodes)
    targets = [torch.arange(0, 300, 7), torch.arange(1, 300, 5), torch.arange(3, 300, 11)]
    setters: list[str] = []
    real = torch.set_num_threads
    monkeypatch.setattr(torch, "set_num_threads",
                        lambda n: (setters.append(threading.current_thread().name), real(n))[1])
    threads = torch.get_num_threads()
    real(2)
    try:
        sampler = NeighbourSampler(csr, targets, [4, 3], seed=9)
        sampler.draw(6, workers=3)
        ahead = DrawAhead(sampler)
        ahead.start(7)
        ahead.take(7)
        ahead.close()
        later: list[int] = []
        thread = threading.Thread(target=lambda: later.append(torch.get_num_threads()))
        thread.start()
        thread.join()
        assert set(setters) == {threading.current_thread().name} and later == [2]
    finally:
        real(threads)


def test_a_draw_is_each_micro_batchs_own_whatever_the_threads_and_the_batching() -> None:
    """Micro-batches drawn together (one scratch, one pass per layer) equal each drawn alone from its own
    stream, with 1 and 2 threads, and shared among 1, 2 or 3 workers drawing at once."""
    graph = random_graph(num_nodes=300, num_edges=3000)
    csr = InCSR(graph.edge_index, graph.num_nodes, torch.rand(graph.edge_index.size(1), dtype=torch.float64))
    targets = [torch.arange(0, 300, 7), torch.arange(1, 300, 5), torch.arange(3, 300, 11)]
    threads = torch.get_num_threads()
    draws = []
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            sampler = NeighbourSampler(csr, targets, [4, 3], seed=9)
            draws.extend([sampler.draw(6), sampler.draw(6, workers=2), sampler.draw(6, workers=3)])
            assert torch.get_num_threads() == n  # the caller's setting kept
    finally:
        torch.set_num_threads(threads)
    alone = [sampled_block(csr, t, [4, 3], epoch_generator(9, 6, "cpu", m)) for m, t in enumerate(targets)]
    for drawn in draws:
        for a, b in zip(drawn, alone, strict=True):
            assert torch.equal(a.nodes, b.nodes) and a.sizes == b.sizes
            assert all(torch.equal(x, y) for x, y in zip(a.edges, b.edges))
            assert all(torch.equal(x, y) for x, y in zip(a.weights, b.weights))
    assert any(mb.nodes.numel() > t.numel() for mb, t in zip(alone, targets))  # halos were drawn

