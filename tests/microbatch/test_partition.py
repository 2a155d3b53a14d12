"""Partitioners: every part gets targets, balance, contiguity, and METIS cuts fewer edges."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from pipegnn.data import SyntheticSpec, make_synthetic
from pipegnn.microbatch import PARTITIONERS, partition
from pipegnn.microbatch.partition import reuse_partition

from tests.helpers import ROOT


@pytest.mark.parametrize("method", PARTITIONERS)
@pytest.mark.parametrize("k", [1, 3, 7])
def test_every_part_has_targets(graph, method: str, k: int) -> None:
    targets = graph.split("train")
    part = partition(graph.edge_index, graph.num_nodes, targets, k, method)
    assert part.shape == (graph.num_nodes,) and int(part.min()) >= 0 and int(part.max()) < k
    counts = torch.bincount(part[targets], minlength=k)
    assert int(counts.min()) >= 1
    if method != "metis":
        assert int(counts.max()) - int(counts.min()) <= 1


def test_sequential_is_contiguous(graph) -> None:
    part = partition(graph.edge_index, graph.num_nodes, graph.split("train"), 4, "sequential")
    assert torch.all(part[1:] >= part[:-1])


def test_random_depends_on_seed(graph) -> None:
    targets = graph.split("all")
    a, b = (partition(graph.edge_index, graph.num_nodes, targets, 4, "random", seed=s) for s in (0, 1))
    assert not torch.equal(a, b)
    assert torch.equal(a, partition(graph.edge_index, graph.num_nodes, targets, 4, "random", seed=0))


def test_metis_cuts_fewer_edges_than_random() -> None:
    g = make_synthetic(SyntheticSpec(num_nodes=2000, num_features=8, num_communities=8,
                                     homophily=0.9, num_val=100, num_test=100))
    src, dst = g.edge_index

    def cut(method: str) -> float:
        part = partition(g.edge_index, g.num_nodes, g.split("all"), 8, method)
        return (part[src] != part[dst]).float().mean().item()

    assert cut("metis") < 0.5 * cut("random")


def test_metis_balances_nodes_as_well_where_parts_compute_every_node() -> None:
    """Few targets (2% of the nodes): weighing them alone, METIS may put the other nodes anywhere; with
    ``balance_nodes`` (halo none: a part computes every node it holds) every part holds about n/k nodes
    and at least one target, and the cut stays well below a random partition's."""
    g = make_synthetic(SyntheticSpec(num_nodes=3000, num_features=8, num_communities=8,
                                     homophily=0.9, num_val=100, num_test=100))
    targets = torch.arange(0, g.num_nodes, 50)  # 60 targets
    src, dst = g.edge_index
    random_cut = (lambda p: (p[src] != p[dst]).float().mean().item())(
        partition(g.edge_index, g.num_nodes, targets, 8, "random"))
    for k in (4, 8, 16):
        part = partition(g.edge_index, g.num_nodes, targets, k, "metis", balance_nodes=True)
        nodes = torch.bincount(part, minlength=k).float()
        assert nodes.max() <= 1.25 * nodes.mean() and nodes.min() >= 0.75 * nodes.mean(), (k, nodes)
        assert int(torch.bincount(part[targets], minlength=k).min()) >= 1
        assert (part[src] != part[dst]).float().mean().item() < 0.7 * random_cut
    # every node a target: balancing the nodes is balancing the targets
    every = torch.arange(g.num_nodes)
    assert torch.equal(partition(g.edge_index, g.num_nodes, every, 8, "metis", balance_nodes=True),
                       partition(g.edge_index, g.num_nodes, every, 8, "metis"))


def test_bad_arguments(graph) -> None:
    targets = graph.split("train")
    with pytest.raises(ValueError, match="unknown partitioner 'fancy'"):
        partition(graph.edge_index, graph.num_nodes, targets, 2, "fancy")
    with pytest.raises(ValueError, match="got 0"):
        partition(graph.edge_index, graph.num_nodes, targets, 0, "metis")


def test_bfs_keeps_neighbours_together() -> None:
    """On a 30x30 grid with shuffled node ids, the breadth-first order cuts few edges, a random order
    most of them."""
    side = 30
    n = side * side
    ids = torch.arange(n).view(side, side)
    pairs = torch.cat([torch.stack([ids[:, :-1].reshape(-1), ids[:, 1:].reshape(-1)]),
                       torch.stack([ids[:-1].reshape(-1), ids[1:].reshape(-1)])], 1)
    shuffle = torch.randperm(n, generator=torch.Generator().manual_seed(7))
    edge_index = shuffle[torch.cat([pairs, pairs.flip(0)], 1)]
    src, dst = edge_index

    def cut(method: str) -> float:
        part = partition(edge_index, n, torch.arange(n), 4, method)
        assert torch.equal(torch.bincount(part), torch.full((4,), n // 4))
        return (part[src] != part[dst]).float().mean().item()

    assert cut("bfs") < 0.1 < 0.5 < cut("random")


def test_reuse_partition_fills_empty_parts_without_touching_the_input(graph) -> None:
    part = partition(graph.edge_index, graph.num_nodes, graph.split("all"), 4, "metis")
    before = part.clone()
    few = graph.split("train")[:4]
    part[few] = 0  # every one of these targets in part 0: parts 1-3 have none of them
    reused = reuse_partition(part, few, 4)
    assert torch.equal(torch.bincount(reused[few], minlength=4), torch.ones(4, dtype=torch.long))
    assert int((reused != part).sum()) == 3 and int(part[few].max()) == 0  # input unchanged
    assert torch.equal(reuse_partition(before, graph.split("all"), 4), before)
    with pytest.raises(ValueError, match="5 parts, expected 4"):
        reuse_partition(torch.full((graph.num_nodes,), 4), few, 4)


def test_metis_out_of_memory_is_a_memory_error() -> None:
    """pymetis reports METIS's failed allocation as an unknown exception; it becomes a MemoryError (and
    so a record with status oom). In a fresh process: freed heap of earlier tests would hide the cap."""
    script = """
import torch
from pipegnn.microbatch import partition
from pipegnn.measure import address_space_bytes, memory_limit
n = 50_000
edge_index = torch.randint(n, (2, 10 * n), generator=torch.Generator().manual_seed(0))
with memory_limit(address_space_bytes() + 60 * 2**20):  # room for the CSR, not for METIS
    try:
        partition(edge_index, n, torch.arange(n), 8, "metis")
    except MemoryError as e:
        print("MemoryError:", e)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert "MemoryError: METIS could not allocate the memory to partition 50000 nodes" in out.stdout, \
        out.stdout[-500:] + out.stderr[-2000:]
