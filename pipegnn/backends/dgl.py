"""DGL adapter: DGL's own GATConv/GraphConv/SAGEConv over micro-batch blocks (``dgl.create_block``).

A micro-batch layer's local numbering (the rows it computes are a prefix of the rows it reads) is
DGL's block convention (dst nodes are a prefix of src nodes), so a block is built directly from the
local edges.

Aggregation: DGL's GraphConv, SAGEConv and GATConv aggregate with DGL's fused kernels (g-SpMM for the
weighted sum and the mean, g-SDDMM for GAT's attention scores), so no ``[E, F]`` message tensor is ever
materialised; GAT keeps only its per-edge attention scores ``[E, heads]``. DGL offers no
per-edge-message path for these layers, so ``model.aggregation=messages`` and ``sparse`` run the same
code (and give the same numbers).
"""
from __future__ import annotations

import os
from typing import cast

os.environ.setdefault("DGLBACKEND", "pytorch")  # before importing dgl: no backend warning

import dgl  # noqa: E402
import torch  # noqa: E402
from dgl.nn.pytorch import EdgeWeightNorm, GATConv, GCN2Conv, GraphConv, SAGEConv  # noqa: E402
from torch import Tensor, nn  # noqa: E402

from pipegnn.backends.base import NORMALISED, Adapter, TakenOut, check_aggregation, check_kind  # noqa: E402
from pipegnn.models.sage import SAGETransform, neighbour_and_root  # noqa: E402
from pipegnn.models.spec import LayerSpec  # noqa: E402

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

WEIGHT = "w"  # edata key of a block's edge weights


class HeadReducedGATConv(nn.Module):
    """DGL's GATConv with its heads concatenated (``[N, heads*out]``) or averaged (``[N, out]``).

    Args:
        spec: the layer; ``spec.dropout`` is the attention dropout (the Transform unit drops input features).
    """

    def __init__(self, spec: LayerSpec):
        super().__init__()
        self.gat = GATConv(spec.in_dim, spec.out_dim, num_heads=spec.heads, feat_drop=0.0,
                           attn_drop=spec.dropout, allow_zero_in_degree=True)
        self.concat = spec.concat

    def forward(self, graph: dgl.DGLGraph, feat: Tensor, edge_weight: Tensor | None = None) -> Tensor:
        out = self.gat(graph, feat, edge_weight=edge_weight)  # [N, heads, out]
        return out.flatten(1) if self.concat else out.mean(1)


class WeightTransform(nn.Module):
    """GraphConv's own ``[in, out]`` weight applied as GraphConv applies it (``feat @ weight``)."""

    def __init__(self, weight: nn.Parameter):
        super().__init__()
        self.weight = weight

    def forward(self, h: Tensor) -> Tensor:
        return torch.matmul(h, self.weight)


class SplitSAGEConv(nn.Module):
    """DGL's SAGEConv (mean aggregator) with ``fc_neigh`` and ``fc_self`` taken out (the bias of
    ``fc_self`` went with them, into the [`SAGETransform`][pipegnn.models.sage.SAGETransform]): over
    ``[neighbour | root]`` rows it adds the mean of the neighbour half over each target's in-edges to the
    root half of the target's own row (a block's first ``num_dst`` rows).

    Args:
        sage: the SAGEConv whose ``fc_neigh`` and ``fc_self`` were taken out.
    """

    def __init__(self, sage: SAGEConv):
        super().__init__()
        self.sage = sage

    def forward(self, graph: dgl.DGLGraph, feat: Tensor, edge_weight: Tensor | None = None) -> Tensor:
        neighbour, root = neighbour_and_root(feat)
        return self.sage(graph, (neighbour, root[:graph.num_dst_nodes()]), edge_weight=edge_weight)


class BlockGCN2Conv(nn.Module):
    """DGL's GCN2Conv over a block, with the edge weights of the computation graph as they are.

    DGL's own ``forward`` cannot run on a micro-batch: without edge weights it normalises by the
    degrees of the graph it is given, with them it renormalises them (``EdgeWeightNorm("both")``)
    by the block's own degrees, and it reads ``graph.ndata``, which a block splits into source and
    destination nodes. So the aggregation here is DGL's fused weighted sum (``dgl.ops.u_mul_e_sum``)
    with the full-graph weights, and the rest is GCN2Conv's own formula (initial residual, identity
    mapping, bias) with the layer's own parameters and ``alpha`` / ``beta``, written out here in
    the library's order of operations.

    Args:
        gcn2: the DGL GCN2Conv (one shared weight, ``project_initial_features=True``).
    """

    def __init__(self, gcn2: GCN2Conv):
        super().__init__()
        self.gcn2 = gcn2

    def forward(self, graph: dgl.DGLGraph, feat: Tensor, feat_0: Tensor, edge_weight: Tensor) -> Tensor:
        conv = self.gcn2  # the computation graph of GCNII always carries its normalised weights
        h = dgl.ops.u_mul_e_sum(graph, feat, edge_weight.view(-1, 1).to(feat.dtype))
        h = h * (1 - conv.alpha) + feat_0[:h.size(0)] * conv.alpha
        out = (1 - conv.beta) * h + conv.beta * (h @ conv.weight1)
        return out + conv.bias if conv._bias else out


class DglBackend(Adapter):
    """Builds DGL convolutions and runs them on DGL blocks of a micro-batch's local edges.

    Args:
        aggregation: ``messages`` or ``sparse``; both run DGL's fused kernels (see the module doc).
    """

    name = "dgl"

    @staticmethod
    def computation_graph(kind: str, edge_index: Tensor, num_nodes: int,
                          dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor | None]:
        """Edges (and weights) the model's layers read, computed once on the full graph.

        GAT and GCN: existing self-loops replaced by one self-loop per node. GCN also gets DGL's
        symmetric normalisation (``EdgeWeightNorm(norm='both')``: ``1/sqrt(out_deg(src) * in_deg(dst))``)
        with *full-graph* degrees, so a micro-batch never renormalises with its subgraph's degrees.
        SAGE: existing self-loops removed (a node reads its own row through the root term, never as its
        own neighbour).

        Raises:
            ConfigError: ``kind`` is not one of the model kinds the adapters build (``base.KINDS``).
        """
        check_kind(kind)
        g = dgl.graph((edge_index[0], edge_index[1]), num_nodes=num_nodes)
        g = dgl.remove_self_loop(g)
        if kind == "sage":
            return torch.stack(g.edges()), None
        g = dgl.add_self_loop(g)
        edges = torch.stack(g.edges())
        if kind not in NORMALISED:
            return edges, None
        ones = torch.ones(g.num_edges(), dtype=dtype, device=edges.device)
        return edges, EdgeWeightNorm(norm="both")(g, ones)

    def conv(self, kind: str, spec: LayerSpec) -> nn.Module:
        """A DGL convolution for one layer (normalisation comes from the computation graph).

        Cast to the default dtype: DGL creates some parameters (GATConv's attention vectors and bias)
        as float32 whatever the default dtype is.

        Raises:
            ConfigError: unknown ``kind`` or aggregation.
        """
        check_kind(kind)
        check_aggregation(self.name, kind, self.aggregation)
        if kind == "gcn":
            conv = GraphConv(spec.in_dim, spec.out_dim, norm="none", weight=True, bias=True,
                             allow_zero_in_degree=True)
        elif kind == "sage":
            conv = SAGEConv(spec.in_dim, spec.out_dim, aggregator_type="mean")
        elif kind == "gcn2":  # no bias, as PyG's GCN2Conv and the paper's layer
            conv = BlockGCN2Conv(GCN2Conv(spec.in_dim, spec.index, alpha=spec.alpha, lambda_=spec.theta,
                                          project_initial_features=True, allow_zero_in_degree=True,
                                          bias=False))
        else:
            conv = HeadReducedGATConv(spec)
        return conv.to(torch.get_default_dtype())

    @staticmethod
    def split(conv: nn.Module) -> tuple[nn.Module, nn.Module]:
        """``(transform, rest)``: the layer's own dense transform and the layer without it.

        GATConv: its ``fc`` Linear (applied to the input first, nothing else reads it). GraphConv: its
        ``weight`` parameter, moved into a [`WeightTransform`][pipegnn.backends.dgl.WeightTransform]; a
        GraphConv without a weight only normalises and aggregates (DGL applies the weight before or after
        aggregating, which gives the same result; with the weight taken out it is always applied before).
        SAGEConv: ``fc_neigh`` and ``fc_self`` (with the bias) become one
        [`SAGETransform`][pipegnn.models.sage.SAGETransform], the rest is a
        [`SplitSAGEConv`][pipegnn.backends.dgl.SplitSAGEConv] (exact because the mean is linear; see
        [`pipegnn.models.sage`][pipegnn.models.sage]).
        """
        if isinstance(conv, BlockGCN2Conv):  # its weight comes after aggregating: nothing to take out
            return nn.Identity(), conv
        if isinstance(conv, SAGEConv):
            transform: nn.Module = SAGETransform(conv.fc_neigh.weight, conv.fc_self.weight, conv.fc_self.bias)
            conv.fc_neigh, conv.fc_self = TakenOut(), TakenOut()
            return transform, SplitSAGEConv(conv)
        if isinstance(conv, HeadReducedGATConv):
            transform = conv.gat.fc
            conv.gat.fc = TakenOut()
            return transform, conv
        graph_conv = cast(GraphConv, conv)  # the one kind left
        transform = WeightTransform(graph_conv.weight)
        graph_conv.weight = None
        return transform, graph_conv

    @staticmethod
    def structure(edge_index: Tensor, edge_weight: Tensor | None, num_src: int,
                  num_dst: int) -> dgl.DGLGraph:
        """A DGL block on ``edge_index``'s device, with the edge weights (if any) as edata."""
        block = dgl.create_block((edge_index[0], edge_index[1]), num_src_nodes=num_src,
                                 num_dst_nodes=num_dst, device=edge_index.device)
        if edge_weight is not None:
            block.edata[WEIGHT] = edge_weight
        return block

    @staticmethod
    def apply(conv: nn.Module, h: Tensor, block: dgl.DGLGraph, initial: Tensor | None = None) -> Tensor:
        """Run ``conv`` over one block; returns exactly the block's ``num_dst`` rows. ``initial``: a
        GCNII layer's initial representation (at least the block's ``num_dst`` rows).

        bfloat16 rows (``train.precision=bf16``) are cast to float32 first: DGL 1.1's kernels need node
        and edge data (GCN's weights, GAT's attention scores from float32 parameters) of one dtype and
        cast them under autocast only on CUDA, and on CPU the backward of its bfloat16 mean is far
        less precise (SAGE's gradients 4e-2 off float32's instead of 5e-3). So DGL's propagation runs
        in float32 on CPU; on CUDA DGL's own autocast support casts its kernels' operands to
        bfloat16 again."""
        weight = block.edata[WEIGHT] if WEIGHT in block.edata else None
        dtype = torch.promote_types(h.dtype, torch.float32)
        rows = (h.to(dtype),) if initial is None else (h.to(dtype), initial.to(dtype))
        return conv(block, *rows, edge_weight=weight)
