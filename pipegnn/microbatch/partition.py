"""Partitioners: assign every node to one of k parts so that each part holds a share of the targets.

``sequential`` is GPipe's contiguous order (node ids cut into k ranges), ``random`` the same over a
random permutation, ``bfs`` the same over a breadth-first (reverse Cuthill-McKee, from scipy) order that
keeps neighbours close (a cheap locality-aware order), ``metis`` a min-cut partition from pymetis. All
of them balance the number of *targets* per part (targets drive the work of a micro-batch with a halo);
the other nodes follow. Where a part computes every node it holds (``balance_nodes``: halo ``none``),
METIS balances the nodes instead (each part then receives at least one target): weighing the targets
alone, it is free to put the other nodes anywhere, and where targets are few (the GNN benchmark study's
20 per class: 1.5% of Amazon Computers) it did (one part of 83% of the nodes at k=16, 91% of the edges
cut at k=32).
"""
from __future__ import annotations

import numpy as np
import pymetis
import scipy.sparse
import torch
from scipy.sparse.csgraph import reverse_cuthill_mckee
from torch import Tensor

from pipegnn.config.choices import Partitioner, names
from pipegnn.edges import undirected_csr

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

PARTITIONERS = names(Partitioner)

#: How pymetis reports a METIS error. The CSR built here is valid by construction, so the one error left
#: is a failed allocation (METIS prints "***Memory allocation failed for ..." to stdout).
_PYMETIS_FAILURE = "Caught an unknown exception!"


def partition(edge_index: Tensor, num_nodes: int, targets: Tensor, k: int, method: str,
              seed: int = 0, balance_nodes: bool = False) -> Tensor:
    """Assign each node to a part in ``[0, k)``.

    Args:
        edge_index: graph edges ``[2, E]``.
        num_nodes: number of nodes.
        targets: node ids whose outputs are needed; every part receives at least one.
        k: number of parts (1 <= k <= len(targets)).
        method: one of `PARTITIONERS`.
        seed: seed of ``random`` and of METIS.
        balance_nodes: METIS balances the nodes per part instead of the targets (for parts that compute
            every node they hold); the contiguous partitioners cut by targets either way.

    Returns:
        ``[num_nodes]`` int64 part id of each node.
    """
    _check_parts(k, targets)
    if method == "sequential":
        return _contiguous(torch.arange(num_nodes), targets, k)
    if method == "random":
        position = torch.empty(num_nodes, dtype=torch.long)
        position[torch.randperm(num_nodes, generator=torch.Generator().manual_seed(seed))] = \
            torch.arange(num_nodes)
        return _contiguous(position, targets, k)
    if method == "bfs":
        return _contiguous(_bfs_position(edge_index, num_nodes), targets, k)
    if method == "metis":
        return _metis(edge_index, num_nodes, targets, k, seed, balance_nodes)
    raise ValueError(f"unknown partitioner {method!r}; valid: {', '.join(PARTITIONERS)}")


def reuse_partition(part: Tensor, targets: Tensor, k: int) -> Tensor:
    """A copy of ``part`` (k parts) in which every part holds at least one of ``targets``.

    A partition balanced for a set of targets is balanced in expectation for a random subset of them
    (e.g. the evaluation nodes among ``microbatch.targets=all``), without partitioning again.
    """
    _check_parts(k, targets)
    if part.max() >= k:
        raise ValueError(f"partition has {int(part.max()) + 1} parts, expected {k}")
    return _fill_empty(part.clone(), targets, k)


def _check_parts(k: int, targets: Tensor) -> None:
    if not 1 <= k <= targets.numel():
        raise ValueError(f"k must be in [1, number of targets={targets.numel()}], got {k}")


def _contiguous(position: Tensor, targets: Tensor, k: int) -> Tensor:
    """Cut the node order ``position`` into k ranges holding equal shares of the targets."""
    target_pos = torch.sort(position[targets]).values
    first = torch.div(torch.arange(1, k) * target_pos.numel(), k, rounding_mode="floor")
    return torch.searchsorted(target_pos[first], position, right=True)


def _bfs_position(edge_index: Tensor, num_nodes: int) -> Tensor:
    """Position of every node in the reverse Cuthill-McKee order of the undirected graph."""
    xadj, adjncy = undirected_csr(edge_index, num_nodes)
    adjacency = scipy.sparse.csr_matrix((np.ones(adjncy.size, dtype=np.int8), adjncy, xadj),
                                        shape=(num_nodes, num_nodes))
    order = torch.from_numpy(reverse_cuthill_mckee(adjacency, symmetric_mode=True).astype(np.int64))
    position = torch.empty(num_nodes, dtype=torch.long)
    position[order] = torch.arange(num_nodes)
    return position


def _metis(edge_index: Tensor, num_nodes: int, targets: Tensor, k: int, seed: int,
           balance_nodes: bool) -> Tensor:
    if k == 1:  # METIS mishandles nparts=1
        return torch.zeros(num_nodes, dtype=torch.long)
    xadj, adjncy = undirected_csr(edge_index, num_nodes)
    if balance_nodes:
        weights = np.ones(num_nodes, dtype=np.int64)
    else:
        weights = np.zeros(num_nodes, dtype=np.int64)
        weights[targets.numpy()] = 1
    options = pymetis.Options(seed=seed)
    try:
        _, parts = pymetis.part_graph(k, adjacency=pymetis.CSRAdjacency(xadj, adjncy), vweights=weights,
                                      options=options)
    except RuntimeError as e:
        if str(e) != _PYMETIS_FAILURE:
            raise
        raise MemoryError(f"METIS could not allocate the memory to partition {num_nodes} nodes "
                          f"({adjncy.size} adjacency entries) into {k} parts") from e
    part = torch.as_tensor(np.asarray(parts), dtype=torch.long)
    return _fill_empty(part, targets, k)


def _fill_empty(part: Tensor, targets: Tensor, k: int) -> Tensor:
    """Move one target from the fullest part into each part that received none."""
    for p in range(k):
        counts = torch.bincount(part[targets], minlength=k)
        if counts[p] == 0:
            donor = int(counts.argmax())
            part[targets[part[targets] == donor][-1]] = p
    return part
