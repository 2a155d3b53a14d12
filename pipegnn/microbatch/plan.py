"""Micro-batch plans: k micro-batches built once from a partition, plus the statistics that explain them."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import Tensor

from pipegnn.config.choices import Halo, Partitioner
from pipegnn.microbatch.halo import HALOS, InCSR, MicroBatch, exact_block, historical_block, none_block
from pipegnn.microbatch.partition import partition, reuse_partition
from pipegnn.microbatch.sample import NeighbourSampler

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


@dataclass(frozen=True, eq=False)  # eq=False: tensors have no truth value (compared by identity)
class ComputationGraph:
    """The graph a plan partitions: the edges the model's layers read.

    Attributes:
        edge_index: ``[2, E]`` (source, target), self-loops included if the model uses them; ``[2, 0]``
            when ``csr`` holds the edges.
        num_nodes: number of nodes.
        edge_weight: ``[E]`` weights that travel with their edges (e.g. GCN's full-graph
            normalisation), or None.
        csr: the edges grouped by target when they are not in ``edge_index`` (``data.edges=disk``: read
            from a graph store, keyed by its ``key``), else None.
    """

    edge_index: Tensor
    num_nodes: int
    edge_weight: Tensor | None = None
    csr: InCSR | None = None


@dataclass(frozen=True)
class PlanSpec:
    """What a plan is made of, besides its graph and targets.

    Attributes:
        chunks: number of micro-batches k.
        num_layers: number of message-passing layers L.
        halo: ``exact`` (L-hop halo: outputs equal the full graph's), ``historical`` (1-hop halo, deeper
            layers read cached embeddings), ``none`` (induced subgraph of each part: edges between
            parts are lost, as in the poster) or ``sampled`` (a sampled L-hop halo per ``fanouts``; the
            plan holds epoch 0's draw, [`NeighbourSampler`][pipegnn.microbatch.sample.NeighbourSampler]).
        partitioner: see `pipegnn.microbatch.PARTITIONERS`.
        seed: partitioner seed (and the sampled halos' draws').
        fanouts: sampled halos' in-neighbours per node, per hop from the targets (``-1``: all).
    """

    chunks: int
    num_layers: int
    halo: Halo | str = Halo.exact
    partitioner: Partitioner | str = Partitioner.metis
    seed: int = 0
    fanouts: tuple[int, ...] | None = None

    @property
    def balances_nodes(self) -> bool:
        """Whether a part computes every node it holds (no halo), so that METIS balances the nodes per
        part rather than the targets."""
        return self.halo == "none"


@dataclass
class PlanStats:
    """Cost statistics of a plan.

    Attributes:
        chunks: number of micro-batches k.
        nodes_per_chunk: input rows ``|N_0|`` of each micro-batch.
        targets_per_chunk: number of targets of each micro-batch.
        replication: rows read by the first layer, summed over micro-batches, over the distinct nodes
            among them (1 = no node is read twice); ``replication_per_layer[l]`` is the same for layer l.
        inflation: work (rows transformed + edges propagated, summed over layers and micro-batches)
            relative to the same halo mode with one micro-batch, the first layer's transform running
            once per step over the distinct rows (see [`work`][pipegnn.microbatch.plan.PlanStats.work]).
        inflation_per_micro_batch: the same with every micro-batch transforming its own first-layer rows.
        rows_per_layer: input rows of each layer (what its transform reads), summed over micro-batches.
        distinct_rows_per_layer: the distinct nodes among them.
        edges_per_layer: edges each layer propagates over, summed over micro-batches.
        outputs_per_layer: rows each layer computes, summed over micro-batches.
        reference_work: the work of the same halo mode with one micro-batch.
        cut_edge_fraction: fraction of edges (self-loops excluded) joining different parts.
        target_balance, node_balance: max / mean targets and input rows per micro-batch (1 = even).
        padding_fraction: share of padding rows a static-shape layout (every micro-batch padded to the
            largest) would carry: ``1 - sum(nodes) / (k * max(nodes))``.
    """

    chunks: int
    nodes_per_chunk: list[int]
    targets_per_chunk: list[int]
    replication: float
    replication_per_layer: list[float]
    inflation: float
    cut_edge_fraction: float
    target_balance: float
    node_balance: float
    padding_fraction: float
    inflation_per_micro_batch: float
    rows_per_layer: list[int]
    distinct_rows_per_layer: list[int]
    edges_per_layer: list[int]
    outputs_per_layer: list[int]
    reference_work: int

    def as_dict(self) -> dict:
        return asdict(self)

    def work(self, first_transform: str = "once_per_step") -> dict:
        """What one pass over the plan computes, per layer: ``transform_rows`` (the first layer's
        distinct rows with ``first_transform=once_per_step``, else every micro-batch's input rows),
        ``propagate_edges``, ``propagate_rows``, and the ``inflation`` they amount to."""
        rows = list(self.rows_per_layer)
        if first_transform == "once_per_step":
            rows[0] = self.distinct_rows_per_layer[0]
        return {"first_transform": first_transform, "transform_rows": rows,
                "propagate_edges": list(self.edges_per_layer), "propagate_rows": list(self.outputs_per_layer),
                "inflation": (sum(rows) + sum(self.edges_per_layer)) / max(self.reference_work, 1)}


@dataclass
class MicroBatchPlan:
    """k micro-batches over a set of targets.

    Attributes:
        micro_batches: the k micro-batches, in pipeline order.
        targets: all targets, concatenated in micro-batch order (the order of the engine's output rows).
        part: ``[N]`` part id of every node.
        halo, partition: how the plan was built.
        stats: cost statistics.
    """

    micro_batches: list[MicroBatch]
    targets: Tensor
    part: Tensor
    halo: str
    partition: str
    stats: PlanStats

    @property
    def chunks(self) -> int:
        return len(self.micro_batches)


def build_plan(graph: ComputationGraph, targets: Tensor, spec: PlanSpec, part: Tensor | None = None, *,
               csr: InCSR | None = None) -> MicroBatchPlan:
    """Split ``targets`` into ``spec.chunks`` micro-batches over ``graph``.

    Args:
        graph: the computation graph, self-loops included if the model uses them.
        targets: node ids whose outputs are needed.
        spec: chunks, layers, halo mode, partitioner and its seed.
        part: ``[N]`` part ids to reuse instead of running ``spec.partitioner`` (e.g. the training
            plan's, for evaluation targets among its targets); parts without targets receive one.
        csr: the graph's [`InCSR`][pipegnn.microbatch.halo.InCSR] if already built (plans over the same graph
            can share it).

    Raises:
        ValueError: unknown halo or partitioner, chunks outside ``[1, len(targets)]``, or sampled halos
            without one fan-out per layer.
    """
    halo, chunks, num_layers = spec.halo, spec.chunks, spec.num_layers
    if halo not in HALOS:
        raise ValueError(f"unknown halo mode {halo!r}; valid: {', '.join(HALOS)}")
    if halo == "sampled" and (spec.fanouts is None or len(spec.fanouts) != num_layers):
        raise ValueError(f"sampled halos need one fan-out per layer ({num_layers}), got {spec.fanouts!r}")
    targets = torch.unique(targets)
    csr = csr or graph.csr or InCSR(graph.edge_index, graph.num_nodes, graph.edge_weight)
    if part is None:
        part = partition(_partition_edges(graph, spec), graph.num_nodes, targets, chunks, spec.partitioner,
                         spec.seed, balance_nodes=spec.balances_nodes)
    else:
        part = reuse_partition(part, targets, chunks)
    batches = _blocks(csr, part, targets, spec)
    stats = _stats(batches, _single_chunk_work(csr, targets, halo, num_layers), part, csr)
    # plain strings (a choice's enum member would make the cached plan unreadable with weights_only)
    return MicroBatchPlan(batches, torch.cat([mb.targets for mb in batches]), part, str(halo),
                          str(spec.partitioner), stats)


def _partition_edges(graph: ComputationGraph, spec: PlanSpec) -> Tensor:
    """The edges the partitioner reads: none for ``sequential`` and ``random`` (and one part); METIS and
    BFS read every edge, from the graph store too when ``edge_index`` is not in memory (once, for the
    partition: the only time a plan holds them all)."""
    if graph.csr is None or spec.chunks == 1 or spec.partitioner in ("sequential", "random"):
        return graph.edge_index
    return torch.stack(graph.csr.edges(0, graph.csr.num_edges))


def _blocks(csr: InCSR, part: Tensor, targets: Tensor, spec: PlanSpec) -> list[MicroBatch]:
    halo, chunks, num_layers = spec.halo, spec.chunks, spec.num_layers
    target_part = part[targets]
    if halo == "exact":
        return [exact_block(csr, targets[target_part == p], num_layers) for p in range(chunks)]
    if halo == "sampled":
        assert spec.fanouts is not None  # build_plan checked
        parts = [targets[target_part == p] for p in range(chunks)]
        return NeighbourSampler(csr, parts, list(spec.fanouts), spec.seed).draw(0)
    if halo == "historical":
        return [historical_block(csr, targets[target_part == p], num_layers) for p in range(chunks)]
    is_target = torch.zeros(part.numel(), dtype=torch.bool)
    is_target[targets] = True
    order = torch.argsort(part, stable=True)
    bounds = torch.bincount(part, minlength=chunks).cumsum(0).tolist()
    out = []
    for p in range(chunks):
        members = order[(bounds[p - 1] if p else 0):bounds[p]]
        out.append(none_block(csr, members[is_target[members]], members[~is_target[members]],
                               num_layers))
    return out


def _single_chunk_work(csr: InCSR, targets: Tensor, halo: str, num_layers: int) -> int:
    """The work (rows transformed + edges propagated, over layers) of the same halo mode with one
    micro-batch (sampled halos: exact ones, so that their inflation shows what sampling saves), counted
    with node masks instead of building its blocks (which would hold the whole graph's edges once more
    per layer)."""
    in_degree = csr.rowptr[1:] - csr.rowptr[:-1]
    computed = torch.zeros(csr.num_nodes, dtype=torch.bool)
    computed[targets] = True
    if halo == "none":  # the induced subgraph of all nodes: every edge, the last layer's into targets
        return (num_layers * csr.num_nodes + (num_layers - 1) * csr.num_edges
                + int(in_degree[targets].sum()))
    work = 0
    for _ in range(1 if halo == "historical" else num_layers):  # from the last layer down
        edges = int(in_degree[computed].sum())
        computed[csr.src[csr.in_edges(computed.nonzero().view(-1))]] = True  # the rows this layer reads
        work += int(computed.sum()) + edges
    return work * (num_layers if halo == "historical" else 1)


#: CSR positions read at a time when counting cut edges (bounds what a plan's statistics hold).
_CHUNK = 1 << 20


def _cut_edge_fraction(csr: InCSR, part: Tensor) -> float:
    """Fraction of the edges (self-loops excluded) whose ends lie in different parts."""
    cut = proper = 0
    for start in range(0, csr.num_edges, _CHUNK):
        src, dst = csr.edges(start, min(start + _CHUNK, csr.num_edges))
        keep = src != dst
        proper += int(keep.sum())
        cut += int((part[src[keep]] != part[dst[keep]]).sum())
    return cut / proper if proper else 0.0


def _stats(batches: list[MicroBatch], reference_work: int, part: Tensor, csr: InCSR) -> PlanStats:
    k, num_layers = len(batches), batches[0].num_layers
    rows = [sum(mb.sources[layer] for mb in batches) for layer in range(num_layers)]
    distinct = [torch.unique(torch.cat([mb.nodes[:mb.sources[layer]] for mb in batches])).numel()
                for layer in range(num_layers)]
    edges = [sum(mb.edges[layer].size(1) for mb in batches) for layer in range(num_layers)]
    work = sum(rows) + sum(edges)
    nodes = [mb.sizes[0] for mb in batches]
    targets = [mb.sizes[-1] for mb in batches]
    return PlanStats(
        chunks=k,
        nodes_per_chunk=nodes,
        targets_per_chunk=targets,
        replication=rows[0] / max(distinct[0], 1),
        replication_per_layer=[r / max(d, 1) for r, d in zip(rows, distinct)],
        inflation=(work - rows[0] + distinct[0]) / max(reference_work, 1),
        cut_edge_fraction=_cut_edge_fraction(csr, part),
        target_balance=max(targets) * k / max(sum(targets), 1),
        node_balance=max(nodes) * k / max(sum(nodes), 1),
        padding_fraction=1.0 - sum(nodes) / (k * max(nodes)),
        inflation_per_micro_batch=work / max(reference_work, 1),
        rows_per_layer=rows,
        distinct_rows_per_layer=distinct,
        edges_per_layer=edges,
        outputs_per_layer=[sum(mb.sizes[layer + 1] for mb in batches) for layer in range(num_layers)],
        reference_work=reference_work,
    )
