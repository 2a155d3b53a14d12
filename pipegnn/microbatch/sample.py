"""Sampled halos (``microbatch.halo=sampled``): each micro-batch's targets with a neighbourhood sampled
per layer (GraphSAGE's fan-outs), drawn anew every epoch.

A sampled micro-batch has the layout of an exact one ([`MicroBatch`][pipegnn.microbatch.halo.MicroBatch]:
nested node sets, targets first, each layer's rows a prefix of its input), built from the last layer
down: layer l computes the nodes N_l and keeps, for each of them, at most ``fanout`` of its in-edges
(uniformly, without replacement) besides its self-loop, which is always kept (PyG's convolutions add
it to a sampled subgraph as well); the kept edges' sources not yet numbered join N_(l-1). A fan-out
of ``-1`` keeps every in-edge, so the block is the exact one (``exact_block``'s edges, in its order).
Edge weights (GCN's full-graph normalisation) of a node that kept ``kept`` of its ``degree``
neighbours are multiplied by ``degree / kept``: the aggregation stays an unbiased estimate of the
full-graph one, and is the full-graph one where nothing was dropped.

``fanouts`` are in hop order from the targets, as PyG's ``num_neighbors`` (GraphSAGE's S1, S2):
``fanouts[0]`` is the last layer's, ``fanouts[-1]`` the first layer's.

Written by hand although DGL's ``dgl.sampling.sample_neighbors`` is installed: DGL draws from a
generator per OpenMP thread (``dgl.seed``), so its draw changes with the thread count (measured: the
same seed kept different edges with 1 and 2 threads), while a pipeline's ranks must draw the same
blocks without exchanging them and a recorded seed must give the same draw on any machine. Here the
draw is a ``torch.Generator``'s: a random key per edge of a node with more than ``fanout`` neighbours,
each such node keeping its ``fanout`` smallest (vectorised: one sort per layer over those edges, no Python
loop over nodes or edges).
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from pipegnn.microbatch.halo import InCSR, MicroBatch

__all__ = ["NeighbourSampler", "epoch_generator", "sampled_block"]


def epoch_generator(seed: int, epoch: int) -> torch.Generator:
    """The generator of epoch ``epoch``'s draw under ``seed`` (independent streams per epoch, numpy's
    ``SeedSequence`` mixing the two)."""
    state = np.random.SeedSequence([seed, epoch]).generate_state(2, dtype=np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 31 | int(state[1]) >> 1)


def _keep(src: Tensor, dst: Tensor, degree: Tensor, fanout: int,
          generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Which of the in-edges ``(src, dst)`` (grouped by target, ``degree`` each) to keep, and each
    kept edge's weight scale (degree over kept, self-loops excluded from both)."""
    loop = src == dst
    segment = torch.repeat_interleave(torch.arange(degree.numel()), degree)
    others = torch.bincount(segment[~loop], minlength=degree.numel())  # in-neighbours besides itself
    over = others > fanout
    if fanout < 0 or not bool(over.any()):
        return torch.ones(src.numel(), dtype=torch.bool), torch.ones(src.numel(), dtype=torch.float64)
    # Only the edges of nodes with more than `fanout` neighbours compete: a random key each, sorted by
    # (node, key); an edge's rank among its node's competitors decides.
    competing = torch.nonzero(~loop & over[segment]).view(-1)
    node = segment[competing]
    key = torch.rand(competing.numel(), generator=generator, dtype=torch.float64)
    order = torch.argsort(node.double() + key)
    counts = torch.bincount(node, minlength=degree.numel())
    rank = torch.arange(competing.numel()) - (torch.cumsum(counts, 0) - counts)[node[order]]
    keep = torch.ones(src.numel(), dtype=torch.bool)
    keep[competing[order]] = rank < fanout
    kept = torch.clamp(others, max=fanout)
    scale = torch.where(loop, 1.0, (others.double() / kept.clamp(min=1).double())[segment])
    return keep, scale


def sampled_block(csr: InCSR, targets: Tensor, fanouts: list[int], generator: torch.Generator) -> MicroBatch:
    """The targets with a sampled neighbourhood of ``len(fanouts)`` layers (module docstring)."""
    local = csr.local
    nodes = [targets]
    count = targets.numel()
    local[targets] = torch.arange(count, dtype=local.dtype)
    sizes = [count]
    blocks: list[tuple[Tensor, Tensor | None]] = []
    try:
        for fanout in fanouts:  # from the last layer down to the first
            computed = torch.cat(nodes)
            pos = csr.in_edges(computed)
            degree = csr.rowptr[computed + 1] - csr.rowptr[computed]
            src, dst = csr.src[pos], csr.dst[pos]  # read once (from disk with a graph store)
            keep, scale = _keep(src, dst, degree, fanout, generator)
            pos, src, dst, scale = pos[keep], src[keep], dst[keep], scale[keep]
            new = torch.unique(src[local[src] < 0])
            local[new] = torch.arange(count, count + new.numel(), dtype=local.dtype)
            nodes.append(new)
            count += new.numel()
            edges, weights = csr.block(pos, sizes[0], src, dst)
            blocks.insert(0, (edges, None if weights is None else weights * scale.to(weights.dtype)))
            sizes.insert(0, count)
        all_nodes = torch.cat(nodes)
    finally:
        local[torch.cat(nodes)] = -1  # the scratch numbering back as it was
    return MicroBatch(all_nodes, sizes, [b[0] for b in blocks], [b[1] for b in blocks])


class NeighbourSampler:
    """Each epoch's sampled micro-batches over fixed targets (a plan's, in its order).

    Args:
        csr: the computation graph's in-edges.
        targets: each micro-batch's targets, in micro-batch order.
        fanouts: in-neighbours kept per node, per hop from the targets (``-1``: all).
        seed: the draws' seed; epoch e draws from
            [`epoch_generator(seed, e)`][pipegnn.microbatch.sample.epoch_generator].
    """

    def __init__(self, csr: InCSR, targets: list[Tensor], fanouts: list[int], seed: int):
        self.csr, self.targets, self.fanouts, self.seed = csr, targets, list(fanouts), seed

    def draw(self, epoch: int) -> list[MicroBatch]:
        """Epoch ``epoch``'s micro-batches: the same for the same seed and epoch, on any machine."""
        generator = epoch_generator(self.seed, epoch)
        return [sampled_block(self.csr, t, self.fanouts, generator) for t in self.targets]
