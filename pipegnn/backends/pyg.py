"""PyTorch Geometric adapter: PyG's own GATConv/GCNConv over micro-batch blocks."""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric.nn import GATConv, GCNConv
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import add_self_loops, remove_self_loops

from pipegnn.models.spec import LayerSpec

__all__ = ["PygBackend"]


class PygBackend:
    """Builds PyG convolutions and runs them on a block's local ``edge_index`` (and weights)."""

    name = "pyg"

    @staticmethod
    def computation_graph(kind: str, edge_index: Tensor, num_nodes: int,
                          dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor | None]:
        """Edges (and weights) the model's layers read, computed once on the full graph.

        GCN: self-loops plus symmetric normalisation with *full-graph* degrees (``gcn_norm``), so a
        micro-batch never renormalises with its subgraph's degrees. GAT: one self-loop per node.
        """
        if kind == "gcn":
            return gcn_norm(edge_index, None, num_nodes, add_self_loops=True, dtype=dtype)
        edge_index, _ = remove_self_loops(edge_index)
        return add_self_loops(edge_index, num_nodes=num_nodes)[0], None

    @staticmethod
    def conv(kind: str, spec: LayerSpec) -> nn.Module:
        """A PyG convolution for one layer; self-loops and normalisation come from the computation graph."""
        if kind == "gcn":
            return GCNConv(spec.in_dim, spec.out_dim, normalize=False, add_self_loops=False)
        return GATConv(spec.in_dim, spec.out_dim, heads=spec.heads, concat=spec.concat,
                       dropout=spec.dropout, add_self_loops=False)

    @staticmethod
    def structure(edge_index: Tensor, edge_weight: Tensor | None, num_src: int,
                  num_dst: int) -> tuple[Tensor, Tensor | None]:
        """A block as PyG layers take it: the local ``edge_index`` and its weights, unchanged."""
        return edge_index, edge_weight

    @staticmethod
    def apply(conv: nn.Module, h: Tensor, block: tuple[Tensor, Tensor | None]) -> Tensor:
        """Run ``conv`` over one block; returns at least the block's target rows (callers slice)."""
        edge_index, edge_weight = block
        if edge_weight is None:
            return conv(h, edge_index)
        return conv(h, edge_index, edge_weight)
