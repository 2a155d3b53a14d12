"""Sampled halos (``microbatch.halo=sampled``): each micro-batch's targets with a neighbourhood sampled
per layer (GraphSAGE's fan-outs), drawn anew every epoch.

A sampled micro-batch has the layout of an exact one ([`MicroBatch`][pipegnn.microbatch.halo.MicroBatch]:
nested node sets, targets first, each layer's rows a prefix of its input), built from the last layer
down: layer l computes the nodes N_l and keeps, for each of them, at most ``fanout`` of its in-edges
(uniformly, without replacement) besides its self-loop, which is always kept (PyG's convolutions add
it to a sampled subgraph as well); the kept edges' sources not yet numbered join N_(l-1). A fan-out
of ``-1`` keeps every in-edge, so the block is the exact one (``exact_block``'s edges, in its order).
A node that keeps its whole row keeps it in CSR order; a node that draws keeps its drawn neighbours,
then its self-loop. Edge weights (GCN's full-graph normalisation) of a node that kept
``kept`` of its ``degree`` neighbours are multiplied by ``degree / kept``: the aggregation stays an
unbiased estimate of the full-graph one, and is the full-graph one where nothing was dropped.

``fanouts`` are in hop order from the targets, as PyG's ``num_neighbors`` (GraphSAGE's S1, S2):
``fanouts[0]`` is the last layer's, ``fanouts[-1]`` the first layer's.

Written by hand although DGL's ``dgl.sampling.sample_neighbors`` is installed: DGL draws from a
generator per OpenMP thread (``dgl.seed``), so its draw changes with the thread count (measured: the
same seed kept different edges with 1 and 2 threads), while a pipeline's ranks must draw the same
blocks without exchanging them and a recorded seed must give the same draw on any machine. Here the
draw is a ``torch.Generator``'s, one serial stream per epoch, whatever the thread count.

The draw costs what it keeps, not the neighbourhoods it draws from: a node with more than ``fanout``
neighbours draws ``fanout`` distinct offsets into its row with Floyd's algorithm (``fanout`` rounds
over all such nodes at once, one uniform number per kept edge); nothing reads, keys or sorts the edges
it leaves out. A node with at most ``fanout`` keeps its whole row. Every micro-batch's layer is drawn
in one pass of tensor operations (no Python loop over nodes or edges), on the device the CSR is on
(``InCSR.to``): with a CUDA CSR the blocks are built on the GPU from a CUDA generator
(``SampleStream``).
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from pipegnn.microbatch.buffers import Workspace, fill, nonzero, put
from pipegnn.microbatch.halo import Column, InCSR, MicroBatch
from pipegnn.microbatch.threads import one_thread_pool

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


@dataclass(frozen=True)
class SampleStream:
    """Where a draw's random numbers come from: the device whose generator draws them and that
    generator's algorithm. The same seed and epoch give the same draw on any machine for one stream;
    CPU (Mersenne Twister) and CUDA (Philox) streams differ."""

    device: str
    generator: str

    @classmethod
    def of(cls, device: torch.device) -> "SampleStream":
        return cls(str(device), "philox4x32" if device.type == "cuda" else "mt19937")

    def as_dict(self) -> dict[str, str]:
        return {"device": self.device, "generator": self.generator}


def epoch_generator(seed: int, epoch: int, device: torch.device | str = "cpu",
                    micro_batch: int = 0) -> torch.Generator:
    """The generator of micro-batch ``micro_batch``'s draw in epoch ``epoch`` under ``seed`` on
    ``device`` (independent streams per epoch and micro-batch, numpy's ``SeedSequence`` mixing the
    three): a micro-batch's draw does not depend on which others are drawn with it, or on how many
    threads draw them."""
    state = np.random.SeedSequence([seed, epoch, micro_batch]).generate_state(2, dtype=np.uint32)
    return torch.Generator(device=device).manual_seed(int(state[0]) << 31 | int(state[1]) >> 1)


def _pointers(count: Tensor) -> Tensor:
    """Row pointers (``[N + 1]``, from 0) of rows of ``count`` entries."""
    return torch.cat([count.new_zeros(1), torch.cumsum(count, 0)])


class _Loops:
    """Each node's self-loops and other in-neighbours, found once per CSR: a node that draws draws among
    its others, then keeps its loops.

    Attributes:
        others: per node, its in-edges that are not self-loops.
        loop_pos, loop_ptr: the self-loops' CSR positions, grouped by node (row pointers).
        offset: where a node's self-loop sits in its row (its row's length when it has none), when no node
            has more than one: a drawn offset among the others skips it. None otherwise.
        others_pos, others_ptr: the other in-edges' CSR positions, grouped by node, when a node has more
            than one self-loop (a graph not from a backend's computation graph, which gives one or none);
            None otherwise.
    """

    def __init__(self, csr: InCSR, block: int = 1 << 22):
        rowptr = csr.rowptr
        degree = rowptr[1:] - rowptr[:-1]
        loops: list[Tensor] = []
        for start in range(0, csr.num_edges, block):  # bounded reads of a graph store's columns
            src, dst = csr.edges(start, min(start + block, csr.num_edges))
            loops.append(torch.nonzero(src == dst).view(-1).to(rowptr.device) + start)
        self.loop_pos = torch.cat(loops) if loops else rowptr.new_zeros(0)
        node = torch.searchsorted(rowptr, self.loop_pos, right=True) - 1
        count = torch.bincount(node, minlength=csr.num_nodes)
        self.loop_ptr = _pointers(count)
        self.others = degree - count
        self.offset: Tensor | None = None
        self.others_pos: Tensor | None = None
        self.others_ptr: Tensor | None = None
        if csr.num_nodes == 0 or int(count.max()) <= 1:
            self.offset = degree.index_copy(0, node, self.loop_pos - rowptr.index_select(0, node))
        else:
            other = torch.ones(csr.num_edges, dtype=torch.bool, device=rowptr.device)
            other[self.loop_pos] = False
            self.others_pos = torch.nonzero(other).view(-1)
            self.others_ptr = _pointers(self.others)


def _floyd(others: Tensor, fanout: int, draws: Tensor) -> Tensor:
    """``[fanout, m]`` distinct offsets in ``[0, others[i])`` for each of m nodes (``others > fanout``),
    uniform over the ``fanout``-subsets: Floyd's algorithm (round i draws from ``[0, j]``, ``j = others -
    fanout + i``, and takes ``j`` itself when the draw was taken before), each round over all nodes at
    once. ``draws``: ``[fanout, m]`` uniform int32 in ``[0, 2**31 - 1)`` (their remainder modulo ``j + 1``
    favours no offset by more than ``(j + 1) / 2**31``).

    A round compares its draws with every earlier round's in one ``[i, m]`` comparison: ``fanout`` steps of
    three operations each, not one per pair of rounds. On a CPU the rounds run on numpy views of the same
    memory, whose operations on a few thousand entries cost a fraction of torch's (3,686 nodes, fan-out
    25: 0.78 ms against 2.4 ms for torch's pairwise rounds); the values are the same either way."""
    j = (others[None, :] - fanout + torch.arange(fanout, device=others.device)[:, None]).to(draws.dtype)
    chosen = draws % (j + 1)
    cpu = chosen.device.type == "cpu"
    rows: Any = chosen.numpy() if cpu else chosen  # the same memory
    last: Any = j.numpy() if cpu else j
    where: Callable[..., Any] = np.where if cpu else torch.where
    for i in range(1, fanout):
        rows[i] = where((rows[:i] == rows[i]).any(0), last[i], rows[i])
    return chosen


def _draws(group: Tensor, fanout: int, generators: list[torch.Generator]) -> Tensor:
    """``[fanout, len(group)]`` random int32 for nodes of the micro-batches ``group`` (ascending: each
    micro-batch's nodes together), each column from its micro-batch's generator."""
    counts = torch.bincount(group, minlength=len(generators)).tolist()
    return torch.cat([torch.randint(0, 2**31 - 1, (fanout, c), generator=g, dtype=torch.int32,
                                    device=group.device) for g, c in zip(generators, counts)], 1)


def _take(column: Column, pos: Tensor) -> Tensor:
    """``column[pos]`` for a CSR column in memory or on disk (``index_select``: several times faster
    than advanced indexing on a CPU)."""
    return column.index_select(0, pos) if isinstance(column, Tensor) else column[pos]


def _layer(csr: InCSR, loops: _Loops, computed: Tensor, group: Tensor, fanout: int,
           generators: list[torch.Generator],
           work: Workspace) -> tuple[Tensor, Tensor, Tensor, tuple[Tensor, Tensor] | None]:
    """The CSR positions a layer computing ``computed`` (nodes of the micro-batches ``group``, each
    drawing from its generator) keeps, grouped by node in ``computed``'s order (a whole row in CSR order,
    a drawn one its draws, then its loop); how many each node keeps; each kept position's node (its place
    in ``computed``); and the drawn edges' places, ``[m, fanout]`` for the m nodes that drew, with those
    nodes' weight scale ``[m]`` (None: every edge kept). The positions are ``work``'s ``pos``."""
    start = csr.rowptr.index_select(0, computed)
    degree = csr.rowptr.index_select(0, computed + 1) - start
    kept = degree
    if fanout >= 0:
        others = loops.others.index_select(0, computed)
        some = nonzero(others > fanout)  # the nodes that draw
        if some.numel():
            others = others.index_select(0, some)
            loop_count = degree.index_select(0, some) - others
            kept = degree.index_copy(0, some, fanout + loop_count)
    first = torch.cumsum(kept, 0) - kept  # where each node's kept edges begin
    owner = torch.repeat_interleave(kept)
    # every node's row in CSR order; the places of the nodes that draw are written over below
    e = owner.numel()
    pos = torch.index_select(start - first, 0, owner, out=work.get("pos", e, torch.long, owner.device))
    pos.add_(work.arange(e, owner.device))
    if kept is degree:
        return pos, kept, owner, None
    device = computed.device
    drawing = computed.index_select(0, some)
    # node-major ([m, fanout]): each node's drawn places are consecutive in ``pos``
    chosen = _floyd(others, fanout, _draws(group.index_select(0, some), fanout, generators)).t()
    if loops.offset is not None:  # past the one loop
        chosen = chosen + (chosen >= loops.offset.index_select(0, drawing).to(chosen.dtype)[:, None])
        drawn = start.index_select(0, some)[:, None] + chosen
    else:
        assert loops.others_pos is not None and loops.others_ptr is not None
        at = loops.others_ptr.index_select(0, drawing)[:, None] + chosen
        drawn = loops.others_pos.index_select(0, at.reshape(-1)).view(-1, fanout)
    first_some = first.index_select(0, some)
    slot = first_some[:, None] + torch.arange(fanout, device=device)
    put(pos, slot.view(-1), drawn.reshape(-1))
    which = torch.repeat_interleave(loop_count)  # one entry per loop: its node among `some`
    within = torch.arange(which.numel(), device=device) - (torch.cumsum(loop_count, 0) - loop_count)[which]
    loop_first = loops.loop_ptr.index_select(0, drawing).index_select(0, which)
    put(pos, first_some.index_select(0, which) + fanout + within,
         loops.loop_pos.index_select(0, loop_first + within))
    return pos, kept, owner, (slot, others.double() / fanout)


def _new_nodes(scratch: Tensor, key: Tensor, numbered: Tensor, work: Workspace) -> Tensor:
    """The entries of ``scratch`` that ``key`` names and that are not numbered yet, ascending, once each;
    ``numbered``: the entries numbered so far. Marked in the scratch and read back where the scratch is
    small against ``key`` (a scan, its marks in ``work``), else ``torch.unique`` (a sort of ``key``)."""
    if scratch.numel() > 8 * key.numel():
        unique = torch.unique(key)
        return unique.masked_select(scratch.index_select(0, unique) < 0)
    kept = scratch.index_select(0, numbered)
    fill(scratch, key, -2)
    put(scratch, numbered, kept)
    marked = torch.eq(scratch, -2, out=work.get("mask", scratch.numel(), torch.bool, scratch.device))
    new = nonzero(marked)
    fill(scratch, new, -1)
    return new


#: Entries of a sampler's scratch numbering (int32: 256 MiB); micro-batches are drawn together in groups
#: whose numberings fit (``len(group) * num_nodes`` entries), all of them where the graph is small.
_SCRATCH_ENTRIES = 1 << 26


def _draw_together(csr: InCSR, loops: _Loops, groups: list[Tensor], fanouts: list[int],
                   generators: list[torch.Generator], scratch: Tensor,
                   work: Workspace) -> list[MicroBatch]:
    """Micro-batches over each of ``groups`` (targets), each drawn from its generator, drawn together:
    every layer is one pass of tensor operations over all of them (``_layer`` over their nodes, one after
    the other), each micro-batch numbering its nodes in its own part of ``scratch`` (``len(groups) *
    num_nodes`` entries, -1 each, left as they were), its temporaries in ``work``."""
    n, device, dtype = csr.num_nodes, scratch.device, scratch.dtype
    count = torch.tensor([t.numel() for t in groups], device=device)  # nodes numbered so far, per group
    everyone = torch.arange(len(groups), device=device)
    offsets = (everyone + 1) * n  # where each group's part of the scratch ends
    group = torch.repeat_interleave(everyone, count)
    node = torch.cat(groups)  # every group's nodes in its local order, one group after the other
    begin = torch.cumsum(count, 0) - count  # where each group's nodes begin
    local = torch.arange(node.numel(), device=device) - torch.repeat_interleave(begin, count)
    touched = [torch.repeat_interleave(everyone * n, count) + node]
    put(scratch, touched[0], local.to(dtype))
    sizes = [count]
    blocks: list[tuple[Tensor, Tensor | None, Tensor]] = []
    try:
        for fanout in fanouts:  # from the last layer down to the first
            pos, kept, owner, scaled = _layer(csr, loops, node, group, fanout, generators, work)
            e = pos.numel()
            key = torch.index_select(csr.src, 0, pos, out=work.get("key", e, torch.long, device)) \
                if isinstance(csr.src, Tensor) else _take(csr.src, pos)
            # (no int64 product over the edges: without AVX-512 it runs an element at a time)
            key.add_(torch.index_select(group * n, 0, owner, out=work.get("tmp", e, torch.long, device)))
            fresh = _new_nodes(scratch, key, torch.cat(touched), work)  # ascending: by group, then node
            touched.append(fresh)
            added = torch.diff(torch.searchsorted(fresh, offsets), prepend=offsets.new_zeros(1))
            fresh_group = torch.repeat_interleave(everyone, added)
            fresh_local = count.index_select(0, fresh_group) + torch.arange(fresh.numel(), device=device) - (
                torch.cumsum(added, 0) - added).index_select(0, fresh_group)
            put(scratch, fresh, fresh_local.to(dtype))
            # a kept edge's target is its node's place in its group, which is its local id
            edges = torch.empty(2, key.numel(), dtype=dtype, device=device)
            torch.index_select(scratch, 0, key, out=edges[0])
            torch.index_select(local.to(dtype), 0, owner, out=edges[1])
            weights = None if csr.weight is None else _take(csr.weight, pos)
            if weights is not None and scaled is not None:
                slot, scale = scaled[0].view(-1), scaled[1].to(weights.dtype)[:, None]
                put(weights, slot, (weights.index_select(0, slot).view_as(scaled[0]) * scale).view(-1))
            blocks.insert(0, (edges, weights, torch.zeros_like(count).index_add_(0, group, kept)))
            # each group's nodes so far, then its new ones
            count = count + added
            begin = torch.cumsum(count, 0) - count
            at = torch.cat([begin.index_select(0, group) + local,
                            begin.index_select(0, fresh_group) + fresh_local])
            fresh_node = fresh - torch.repeat_interleave(everyone * n, added)
            node = put(torch.empty_like(at), at, torch.cat([node, fresh_node]))
            group = torch.repeat_interleave(everyone, count)
            local = torch.arange(node.numel(), device=device) - torch.repeat_interleave(begin, count)
            sizes.insert(0, count)
    finally:
        fill(scratch, torch.cat(touched), -1)  # the scratch numbering back as it was
    per_group = [s.tolist() for s in sizes]
    nodes = torch.split(node, per_group[0])
    layers = [(torch.split(e, c.tolist(), 1), None if w is None else torch.split(w, c.tolist()))
              for e, w, c in blocks]
    return [MicroBatch(nodes[g], [s[g] for s in per_group], [e[g] for e, _ in layers],
                       [None if w is None else w[g] for _, w in layers]) for g in range(len(groups))]


def sampled_block(csr: InCSR, targets: Tensor, fanouts: list[int], generator: torch.Generator) -> MicroBatch:
    """The targets with a sampled neighbourhood of ``len(fanouts)`` layers (module docstring), numbered
    in ``csr``'s scratch."""
    return _draw_together(csr, _Loops(csr), [targets], fanouts, [generator], csr.local, Workspace())[0]


class NeighbourSampler:
    """Each epoch's sampled micro-batches over fixed targets (a plan's, in its order).

    The micro-batches are drawn together (``_draw_together``), as many at a time as their scratch
    numberings fit in ``_SCRATCH_ENTRIES``; each draws from its own stream, so the draw does not depend
    on how many are drawn at a time, nor on the thread count. Each share of a draw keeps its largest
    temporaries from draw to draw (``Workspace``: about 33 bytes per kept edge of its largest layer), which
    spares the heap mapping them anew every epoch.

    Args:
        csr: the computation graph's in-edges, on the device that draws (``InCSR.to``).
        targets: each micro-batch's targets, in micro-batch order.
        fanouts: in-neighbours kept per node, per hop from the targets (``-1``: all).
        seed: the draws' seed; micro-batch m of epoch e draws from
            [`epoch_generator(seed, e, device, m)`][pipegnn.microbatch.sample.epoch_generator] on the
            CSR's device.

    """

    def __init__(self, csr: InCSR, targets: list[Tensor], fanouts: list[int], seed: int):
        self.csr, self.fanouts, self.seed = csr, list(fanouts), seed
        self.device = csr.rowptr.device
        self.targets = [t.to(self.device) for t in targets]
        self.loops = _Loops(csr)
        self.stream = SampleStream.of(self.device)
        together = max(1, min(len(targets), _SCRATCH_ENTRIES // max(csr.num_nodes, 1)))
        self.batches = [range(i, min(i + together, len(targets))) for i in range(0, len(targets), together)]
        self.scratch = torch.full((together * csr.num_nodes,), -1, dtype=csr.local.dtype, device=self.device)
        self._pool: ThreadPoolExecutor | None = None
        self._workspaces: list[Workspace] = []
        self._pool_size = 0

    def to(self, device: torch.device | str) -> "NeighbourSampler":
        """This sampler drawing on ``device`` (its CSR moved there; itself when its CSR stays where it is:
        already there, or read from files)."""
        csr = self.csr.to(device)
        return self if csr is self.csr else NeighbourSampler(csr, self.targets, self.fanouts, self.seed)

    def draw(self, epoch: int, workers: int | None = None) -> list[MicroBatch]:
        """Epoch ``epoch``'s micro-batches: the same for the same seed and epoch, on any machine (for one
        ``stream``) and with any number of threads or workers.

        On a CPU, with the CSR in memory, ``workers`` threads (default: the calling thread's intra-op
        thread count; the calling thread is one of them) each draw a share of the micro-batches together,
        each with one intra-op thread (the calling thread's setting restored after; the others are
        [`one_thread_pool`][pipegnn.microbatch.threads.one_thread_pool]'s). Its operations are small and
        bound by memory: a second intra-op thread slowed them (Coauthor Physics, [10,10]: 68 ms against
        32 ms at one thread), while micro-batches drawn apart in threads of their own overlap
        (``results/benchmarks/sampler.txt``). A CUDA CSR, or one read from files, draws in the calling
        thread."""
        if workers is None:
            workers = torch.get_num_threads()
        if self.device.type != "cpu" or not isinstance(self.csr.src, Tensor):
            workers = 1
        if workers > 1 and (self._pool is None or self._pool_size < workers - 1):
            if self._pool is not None:
                self._pool.shutdown()
            self._pool, self._pool_size = one_thread_pool(workers - 1, "pipegnn-sample"), workers - 1
        threads = torch.get_num_threads()
        pin = self.device.type == "cpu" and threads != 1  # (a setting here is every later thread's default)
        if pin:
            torch.set_num_threads(1)
        try:
            return [mb for batch in self.batches for mb in self._draw_batch(epoch, batch, workers)]
        finally:
            if pin:
                torch.set_num_threads(threads)

    def _draw_batch(self, epoch: int, batch: range, workers: int) -> list[MicroBatch]:
        """The micro-batches ``batch`` (drawn together: one scratch) shared among ``workers`` threads, in
        order; every share finished before it returns, whatever happens."""
        shares = [s.tolist() for s in np.array_split(np.arange(batch.start, batch.stop), workers) if s.size]
        while len(self._workspaces) < len(shares):
            self._workspaces.append(Workspace())
        jobs = [functools.partial(self._draw_share, epoch, share, batch.start, work)
                for share, work in zip(shares, self._workspaces)]
        later = [self._pool.submit(job) for job in jobs[1:]] if self._pool is not None else []
        try:
            mine = jobs[0]()
        finally:
            wait(later)  # no share outlives the draw (the scratch and workspaces are the next draw's)
        return [mb for share in [mine, *(f.result() for f in later)] for mb in share]

    def _draw_share(self, epoch: int, share: list[int], first: int, work: Workspace) -> list[MicroBatch]:
        """The micro-batches ``share`` drawn together in this thread, numbered in their part of the scratch
        (its batch's micro-batches from ``first`` on own a part each), their temporaries in ``work`` (the
        share's own, kept from draw to draw)."""
        n = self.csr.num_nodes
        scratch = self.scratch[(share[0] - first) * n:(share[-1] + 1 - first) * n]
        generators = [epoch_generator(self.seed, epoch, self.device, m) for m in share]
        targets = [self.targets[m] for m in share]
        return _draw_together(self.csr, self.loops, targets, self.fanouts, generators, scratch, work)
