"""PyTorch Geometric adapter: PyG's own GATConv/GCNConv/SAGEConv over micro-batch blocks.

``aggregation="messages"`` passes a block's local ``edge_index`` (PyG gathers one message per edge and
scatters them); ``aggregation="sparse"`` (GCN and SAGE) passes a ``torch.sparse`` CSR adjacency instead,
and GCNConv and SAGEConv then aggregate with a sparse-dense matmul (``message_and_aggregate``) without
per-edge messages.
"""
from __future__ import annotations

import warnings
from typing import cast

import torch
from torch import Tensor, nn
from torch.func import functional_call
from torch_geometric import EdgeIndex
from torch_geometric.nn import GATConv, GCN2Conv, GCNConv, SAGEConv
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import add_self_loops, remove_self_loops, to_torch_csr_tensor

from pipegnn.backends.base import NORMALISED, Adapter, TakenOut, check_aggregation, check_kind
from pipegnn.models.precision import active_autocast_dtype
from pipegnn.models.sage import SAGETransform, neighbour_and_root
from pipegnn.models.spec import LayerSpec

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


def sparse_adjacency(edge_index: Tensor, edge_weight: Tensor | None, num_src: int, num_dst: int) -> Tensor:
    """The transposed adjacency ``[num_dst, num_src]`` of local edges as a CSR tensor whose values are
    the edge weights (ones without weights): row ``d`` holds the in-edges of target ``d``."""
    with warnings.catch_warnings():  # torch's notes on CSR tensors being beta and unchecked
        warnings.filterwarnings("ignore", "Sparse (CSR tensor support is in beta|invariant checks)",
                                UserWarning)
        return to_torch_csr_tensor(edge_index.flip(0).long(), edge_weight, size=(num_dst, num_src))


class SplitSAGEConv(nn.Module):
    """PyG's SAGEConv with both linears taken out (its bias went with them, into the
    [`SAGETransform`][pipegnn.models.sage.SAGETransform]): over ``[neighbour | root]`` rows it adds the mean
    of the neighbour half over each target's in-edges to the root half of the target's own row.

    Args:
        conv: the SAGEConv whose ``lin_l`` and ``lin_r`` were taken out.
    """

    def __init__(self, conv: SAGEConv):
        super().__init__()
        self.conv = conv

    def forward(self, x: Tensor, adj: Tensor) -> Tensor:
        neighbour, root = neighbour_and_root(x)
        if isinstance(adj, EdgeIndex):  # (num_src, num_dst): the output has the targets' rows only
            root = root[:adj.sparse_size(1)]
        elif adj.layout == torch.sparse_csr:  # [num_dst, num_src]: likewise
            root = root[:adj.size(0)]
        return self.conv((neighbour, root), adj)


class PygBackend(Adapter):
    """Builds PyG convolutions and runs them on a block's local ``edge_index`` (and weights), or on its
    sparse adjacency with ``aggregation="sparse"``.

    Args:
        aggregation: ``messages`` (default) or ``sparse`` (GCN and SAGE).
    """

    name = "pyg"

    @staticmethod
    def computation_graph(kind: str, edge_index: Tensor, num_nodes: int,
                          dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor | None]:
        """Edges (and weights) the model's layers read, computed once on the full graph.

        GCN and GCNII: self-loops plus symmetric normalisation with *full-graph* degrees (``gcn_norm``), so a
        micro-batch never renormalises with its subgraph's degrees. GAT: one self-loop per node. SAGE:
        no self-loops (a node reads its own row through the root term, never as its own neighbour).

        Raises:
            ConfigError: ``kind`` is not one of the model kinds the adapters build (``base.KINDS``).
        """
        check_kind(kind)
        if kind in NORMALISED:
            return gcn_norm(edge_index, None, num_nodes, add_self_loops=True, dtype=dtype)
        edge_index, _ = remove_self_loops(edge_index)
        if kind == "sage":
            return edge_index, None
        return add_self_loops(edge_index, num_nodes=num_nodes)[0], None

    def conv(self, kind: str, spec: LayerSpec) -> nn.Module:
        """A PyG convolution for one layer; self-loops and normalisation come from the computation graph.

        SAGE: ``SAGEConv`` with the mean aggregator (its default), root weight and bias. GCNII:
        ``GCN2Conv`` with one weight shared by the rows and the initial representation (the paper's).

        Raises:
            ConfigError: unknown ``kind``, or ``sparse`` aggregation for GAT (no fused path in PyG).
        """
        check_kind(kind)
        check_aggregation(self.name, kind, self.aggregation)
        if kind == "gcn":
            return GCNConv(spec.in_dim, spec.out_dim, normalize=False, add_self_loops=False)
        if kind == "sage":
            return SAGEConv(spec.in_dim, spec.out_dim, aggr="mean")
        if kind == "gcn2":
            return GCN2Conv(spec.in_dim, alpha=spec.alpha, theta=spec.theta, layer=spec.index,
                            shared_weights=True, normalize=False, add_self_loops=False)
        return GATConv(spec.in_dim, spec.out_dim, heads=spec.heads, concat=spec.concat,
                       dropout=spec.dropout, add_self_loops=False)

    @staticmethod
    def split(conv: nn.Module) -> tuple[nn.Module, nn.Module]:
        """``(transform, rest)``: the layer's own ``lin`` (its node-wise dense transform) and the layer
        without it. GATConv and GCNConv apply ``self.lin`` to their input first and nothing else
        touches it, so the rest computes what the whole layer computes from transformed rows.

        SAGEConv: ``lin_l`` (with the bias) and ``lin_r`` become one
        [`SAGETransform`][pipegnn.models.sage.SAGETransform], the rest is a
        [`SplitSAGEConv`][pipegnn.backends.pyg.SplitSAGEConv] (exact because the mean is linear; see
        [`pipegnn.models.sage`][pipegnn.models.sage]).

        GCN2Conv applies its weight after aggregating: nothing to take out (an identity transform)."""
        if isinstance(conv, GCN2Conv):
            return nn.Identity(), conv
        if isinstance(conv, SAGEConv):
            transform: nn.Module = SAGETransform(conv.lin_l.weight, conv.lin_r.weight, conv.lin_l.bias)
            conv.lin_l, conv.lin_r = TakenOut(), TakenOut()
            return transform, SplitSAGEConv(conv)
        transform = cast(nn.Module, conv.lin)  # GATConv's or GCNConv's Linear
        conv.lin = TakenOut()
        return transform, conv

    def structure(self, edge_index: Tensor, edge_weight: Tensor | None, num_src: int,
                  num_dst: int) -> tuple[EdgeIndex, Tensor | None] | Tensor:
        """A block as PyG layers take it: the local edges as PyG's ``EdgeIndex`` of size
        ``(num_src, num_dst)`` and their weights (``messages``), so that a layer writes the block's
        ``num_dst`` target rows only (from a plain ``edge_index`` PyG sizes the output by the input rows,
        halo rows included); or the CSR adjacency ``[num_dst, num_src]`` of
        [`sparse_adjacency`][pipegnn.backends.pyg.sparse_adjacency] (``sparse``). Plans keep int32 local ids;
        PyG's scatters need int64: converted here, once."""
        if self.aggregation == "sparse":
            return sparse_adjacency(edge_index, edge_weight, num_src, num_dst)
        return EdgeIndex(edge_index.long(), sparse_size=(num_src, num_dst)), edge_weight

    @staticmethod
    def apply(conv: nn.Module, h: Tensor, block: tuple[EdgeIndex, Tensor | None] | Tensor,
              initial: Tensor | None = None) -> Tensor:
        """Run ``conv`` over one block; returns at least the block's target rows (callers slice).
        ``initial``: a GCNII layer's initial representation (at least the block's target rows).

        Under autocast (``train.precision=bf16``) the message path runs on bfloat16 rows with the
        layer's parameters (GAT's attention vectors, the bias) and the edge weights cast to bfloat16, so
        that attention, messages and aggregation stay bfloat16: PyG multiplies rows by those float32
        tensors outside any autocast rule, and type promotion would make every per-edge tensor and its
        gradient float32 (more memory than float32 training itself). The casts are differentiable: the
        gradients reach the float32 parameters, as autocast's own weight casts do. The sparse path runs
        outside autocast on rows cast to the adjacency's dtype: torch's sparse CSR matmul has no
        bfloat16 kernel on CPU and needs both operands in one dtype."""
        if isinstance(block, Tensor):  # sparse adjacency: weights are its values
            with torch.autocast(h.device.type, enabled=False):
                rows: tuple = ((h.to(block.dtype),) if initial is None
                               else (h.to(block.dtype), initial.to(block.dtype)))
                return conv(*rows, block)
        edge_index, edge_weight = block
        num_dst = edge_index.sparse_size(1)
        low = active_autocast_dtype(h.device)
        cast = low is not None and h.dtype == low
        if cast:  # h is bfloat16 already
            edge_weight = None if edge_weight is None else edge_weight.to(low)
            initial = None if initial is None else initial.to(low)
        # layers that read a target's own row (GAT's attention, SAGE's root) take (sources, targets) rows;
        # GCNII reads the initial representation of the rows it writes (the targets')
        rows = ((h, h[:num_dst]),) if isinstance(conv, (GATConv, SAGEConv)) else (h,)
        if initial is not None:
            rows = (*rows, initial)
        kwargs = {}
        if isinstance(conv, GATConv):  # plain edges and the sizes: EdgeIndex's Python dispatch costs
            # GAT about a fifth of its aten calls (benchmarks/host_overhead.py), and GATConv takes sizes
            kwargs["size"] = (edge_index.sparse_size(0), num_dst)
            edge_index = edge_index.as_tensor()
        elif edge_index.sparse_size(0) == num_dst:  # a square block (full batch): a plain edge_index sizes
            # the output as the input, the same rows, without EdgeIndex's Python dispatch of every
            # operation on it (GCNII 64 full batch: one such dispatch per edge operation and layer)
            edge_index = edge_index.as_tensor()
        args = (*rows, edge_index) if edge_weight is None else (*rows, edge_index, edge_weight)
        if not cast:
            return conv(*args, **kwargs)
        return functional_call(conv, {name: p.to(low) for name, p in conv.named_parameters()}, args, kwargs)
