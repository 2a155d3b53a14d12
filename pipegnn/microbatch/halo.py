"""Per-micro-batch computation structure: which nodes each layer computes and the edges it needs.

A micro-batch for an L-layer GNN is described by nested node sets N_0 ⊇ N_1 ⊇ ... ⊇ N_L: layer l
receives the rows of N_(l-1) and writes the rows of N_l, using edges whose target lies in N_l. Nodes are
numbered locally so that each N_l is a prefix of N_(l-1) (targets first), which lets a layer's output be
a slice. A layer may read more source rows than it receives (``sources[l] > sizes[l]``, historical
mode): the extra rows are the halo, read from that layer's cache of embeddings of earlier steps.

Written by hand because the library samplers that build such blocks (PyG's NeighborLoader with
``num_neighbors=[-1]*L``) need pyg-lib or torch-sparse, which have no wheels here; this is a vectorised
CSR gather (no Python loop over nodes or edges).

An [`InCSR`][pipegnn.microbatch.halo.InCSR] holds its edge arrays in memory, or reads them from files on
demand ([`InCSR.from_columns`][pipegnn.microbatch.halo.InCSR.from_columns], ``data.edges=disk``: a graph
store's columns); the block builders read only the positions they gather, and build the same blocks either
way.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import psutil
import torch
from torch import Tensor

from pipegnn.config.choices import Halo, names

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

HALOS = names(Halo)


@dataclass
class MicroBatch:
    """One micro-batch's structure.

    Attributes:
        nodes: global ids of N_0 in local order (targets first, then each layer's new halo).
        sizes: ``[|N_0|, |N_1|, ..., |N_L|]``, the rows each layer receives and (last) the targets.
        edges: per layer l = 1..L, local ``[2, E_l]`` (source, target) edges, targets ``< sizes[l]``;
            int32 (local ids of graphs below 2**31 nodes: half the memory of int64 in large plans).
        weights: per layer, edge weights ``[E_l]`` aligned with ``edges`` (None when unweighted).
        sources: per layer, the source rows it reads (``nodes[:sources[l]]``); rows beyond the
            ``sizes[l]`` it receives come from the layer's history cache. Left out (or None): ``sizes[:-1]``.
    """

    nodes: Tensor
    sizes: list[int]
    edges: list[Tensor]
    weights: list[Tensor | None]
    sources: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.sources:  # left out or None (an empty list fits no layers only, as sizes[:-1] does)
            self.sources = list(self.sizes[:-1])

    @property
    def targets(self) -> Tensor:
        return self.nodes[:self.sizes[-1]]

    @property
    def num_layers(self) -> int:
        return len(self.edges)


class Column(Protocol):
    """An edge array read by CSR positions: a Tensor, or a file read on demand."""

    def __getitem__(self, pos: Tensor) -> Tensor: ...

    def numel(self) -> int: ...


class _Targets:
    """The target of every CSR position, found in the row pointers (the ``dst`` of a CSR whose edges are
    not in memory: nothing stored)."""

    def __init__(self, rowptr: Tensor):
        self.rowptr = rowptr

    def __getitem__(self, pos: Tensor) -> Tensor:
        return torch.searchsorted(self.rowptr, pos, right=True) - 1

    def numel(self) -> int:
        return int(self.rowptr[-1])


class InCSR:
    """In-edges grouped by target node (CSR over targets) of one graph.

    Args:
        edge_index: ``[2, E]`` (source, target).
        num_nodes: number of nodes.
        edge_weight: optional ``[E]`` weights carried along.

    Attributes:
        src, dst, weight: source, target and weight of every CSR position (weight None: unweighted).
        rowptr: ``[N + 1]`` first position of every target's in-edges.
        key: a content key of edges read from files (keys cached plans in place of the edges), else None.
    """

    def __init__(self, edge_index: Tensor, num_nodes: int, edge_weight: Tensor | None = None):
        perm = torch.argsort(edge_index[1], stable=True)
        self.src: Column = edge_index[0, perm]
        self.dst: Column = edge_index[1, perm]
        self.weight: Column | None = None if edge_weight is None else edge_weight[perm]
        self.rowptr = torch.zeros(num_nodes + 1, dtype=torch.long)
        torch.cumsum(torch.bincount(edge_index[1], minlength=num_nodes), 0, out=self.rowptr[1:])
        self._scratch(num_nodes)
        self.key: str | None = None

    def _scratch(self, num_nodes: int) -> None:
        self.num_nodes = num_nodes
        #: Scratch map global id -> local id (-1 = absent) that the block builders fill for one
        #: micro-batch and reset after it; its dtype is that of the blocks' local edges.
        self.local = torch.full((num_nodes,), -1, dtype=torch.int32 if num_nodes < 2**31 else torch.long)

    @classmethod
    def from_columns(cls, rowptr: Tensor, src: Column, weight: Column | None, key: str) -> "InCSR":
        """A CSR whose row pointers are in memory and whose sources and weights are ``Column``s (e.g. a
        graph store's files); targets come from the row pointers."""
        csr = cls.__new__(cls)
        csr.rowptr, csr.src, csr.dst, csr.weight, csr.key = rowptr, src, _Targets(rowptr), weight, key
        csr._scratch(rowptr.numel() - 1)
        return csr

    def to(self, device: torch.device | str) -> "InCSR":
        """This CSR with its arrays on ``device`` (itself when they are there already, or when its edges
        are read from files: a graph store's columns stay on the host)."""
        device = torch.device(device)
        src, dst, weight = self.src, self.dst, self.weight
        if self.rowptr.device == device or not (isinstance(src, Tensor) and isinstance(dst, Tensor)
                                                and (weight is None or isinstance(weight, Tensor))):
            return self
        csr = InCSR.__new__(InCSR)
        csr.src, csr.dst = src.to(device), dst.to(device)
        csr.weight = None if weight is None else weight.to(device)
        csr.rowptr, csr.local, csr.num_nodes, csr.key = self.rowptr.to(device), self.local.to(device), \
            self.num_nodes, self.key
        return csr

    @property
    def num_edges(self) -> int:
        return int(self.rowptr[-1])

    def edges(self, start: int, stop: int) -> tuple[Tensor, Tensor]:
        """Sources and targets of the positions ``[start, stop)``."""
        pos = torch.arange(start, stop, device=self.rowptr.device)
        return self.src[pos], self.dst[pos]

    def in_edges(self, nodes: Tensor) -> Tensor:
        """Positions (in CSR order) of all edges whose target is in ``nodes``."""
        start = self.rowptr[nodes]
        count = self.rowptr[nodes + 1] - start
        offset = torch.repeat_interleave(start - (torch.cumsum(count, 0) - count), count)
        return offset + torch.arange(offset.numel(), device=offset.device)

    def block(self, pos: Tensor, num_dst: int, src: Tensor | None = None,
              dst: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """Local edges (and weights) at CSR positions ``pos`` whose local target is below ``num_dst``,
        local ids read from `local` (filled by the caller for the micro-batch); ``src`` and ``dst``: the
        positions' global sources and targets when the caller read them already (a graph store reads each
        position from disk)."""
        local = self.local
        src = local[self.src[pos] if src is None else src]
        dst = local[self.dst[pos] if dst is None else dst]
        keep = dst < num_dst
        w = None if self.weight is None else self.weight[pos][keep]
        return torch.stack([src[keep], dst[keep]]), w


#: Bytes a block holds per edge: its position in the CSR while it is built (int64), its local edge
#: (2 x int32) and its weight (float32).
_EDGE_BYTES = 8 + 8 + 4


def _check_room(layers_done: int, num_layers: int, edges: int, per_layer: int, nodes: int) -> None:
    """Once a halo has stopped growing, every layer left needs as many edges as the last: refuse a plan
    whose edges cannot fit in the memory this machine has free, before building it (a 100000-layer model
    used to build for minutes, then fail with std::bad_alloc).

    Raises:
        MemoryError: naming the layers, the projected size and what would fit.
    """
    projected = (edges + (num_layers - layers_done) * per_layer) * _EDGE_BYTES
    free = psutil.virtual_memory().available
    if projected > free:
        raise MemoryError(f"exact halos of {num_layers} layers: after {layers_done} hops a micro-batch's "
                          f"halo holds all {nodes} nodes it can reach, so each of the "
                          f"{num_layers - layers_done} layers left needs their {per_layer} in-edges again: "
                          "its plan would hold "
                          f"{projected / 2**30:.1f} GiB of edges, more than the {free / 2**30:.1f} GiB free; "
                          "use fewer layers or microbatch.halo=historical (one hop per layer)")


def exact_block(csr: InCSR, targets: Tensor, num_layers: int) -> MicroBatch:
    """The targets plus their L-hop in-neighbourhood, with all in-edges of every computed node.

    Raises:
        MemoryError: the plan's edges cannot fit in the free memory (`_check_room`).
    """
    local = csr.local
    nodes = [targets]
    count = targets.numel()
    local[targets] = torch.arange(count, dtype=local.dtype)
    sizes = [count]
    positions: list[Tensor] = []
    edges, saturated = 0, False
    for done in range(1, num_layers + 1):  # from the last layer down to the first
        pos = csr.in_edges(torch.cat(nodes))  # all in-edges of the nodes this layer computes
        src = csr.src[pos]
        new = torch.unique(src[local[src] < 0])
        if new.numel() == 0 and done < num_layers and not saturated:  # every layer left is this one again
            saturated = True
            try:
                _check_room(done, num_layers, edges, pos.numel(), count)
            except MemoryError:
                local[torch.cat(nodes)] = -1  # the scratch numbering back as it was
                raise
        local[new] = torch.arange(count, count + new.numel(), dtype=local.dtype)
        nodes.append(new)
        count += new.numel()
        edges += pos.numel()
        positions.insert(0, pos)
        sizes.insert(0, count)
    all_nodes = torch.cat(nodes)
    blocks = [csr.block(pos, sizes[layer + 1]) for layer, pos in enumerate(positions)]
    local[all_nodes] = -1
    return MicroBatch(all_nodes, sizes, [b[0] for b in blocks], [b[1] for b in blocks])


def historical_block(csr: InCSR, targets: Tensor, num_layers: int) -> MicroBatch:
    """Targets plus their 1-hop in-neighbours; deeper layers read the neighbours from history caches.

    Layer 1 reads the halo's features (exact); layer l > 1 receives fresh rows of the targets only and
    reads the halo's layer-(l-1) embeddings from the cache (as in GNNAutoScale).
    """
    local = csr.local
    t = targets.numel()
    local[targets] = torch.arange(t, dtype=local.dtype)
    pos = csr.in_edges(targets)
    src = csr.src[pos]
    halo = torch.unique(src[local[src] < 0])
    local[halo] = torch.arange(t, t + halo.numel(), dtype=local.dtype)
    all_nodes = torch.cat([targets, halo])
    edges, weights = csr.block(pos, t)
    local[all_nodes] = -1
    n = all_nodes.numel()
    return MicroBatch(all_nodes, [n] + [t] * num_layers, [edges] * num_layers, [weights] * num_layers,
                      sources=[n] * num_layers)


def none_block(csr: InCSR, targets: Tensor, others: Tensor, num_layers: int) -> MicroBatch:
    """A micro-batch of ``microbatch.halo=none`` (the poster's): the subgraph induced by one part; edges
    from other parts are lost."""
    local = csr.local
    all_nodes = torch.cat([targets, others])
    local[all_nodes] = torch.arange(all_nodes.numel(), dtype=local.dtype)
    pos = csr.in_edges(all_nodes)
    pos = pos[local[csr.src[pos]] >= 0]
    m, t = all_nodes.numel(), targets.numel()
    sizes = [m] * num_layers + [t]
    blocks = [csr.block(pos, sizes[layer + 1]) for layer in range(num_layers)]
    local[all_nodes] = -1
    return MicroBatch(all_nodes, sizes, [b[0] for b in blocks], [b[1] for b in blocks])
