"""GraphSAGE (Hamilton et al.) with the mean aggregator, ReLU between layers.

A layer computes ``out_i = W_n mean_{j -> i} x_j + W_r x_i + b`` over the in-neighbours j of i (no
self-loops: the root term is how a node reads its own row). PyG's ``SAGEConv`` holds ``W_n`` and ``b`` in
``lin_l`` and ``W_r`` in ``lin_r``; DGL's ``SAGEConv(aggregator_type="mean")`` holds ``W_n`` in ``fc_neigh``
and ``W_r`` and ``b`` in ``fc_self``.

Split into units (the adapters' ``split``), exactly: the mean is linear, so ``W_n mean_j x_j =
mean_j W_n x_j``, and both products can be taken node-wise before the aggregation. The transform
([`SAGETransform`][pipegnn.models.sage.SAGETransform]) emits ``[x W_n^T | x W_r^T + b]`` for every row it is
given (one matmul, ``2 x out`` columns); the propagation is the library's ``SAGEConv`` with both linears taken
out, fed the first half as the neighbours' rows and the second half as the targets' own rows, so it adds the
mean of the first half over each target's in-edges to the second half of the target's own row. A block lists
its targets first among the rows it reads, so a target's own row is always there. The bias sits in the
root half because every target has its own row, while a target without in-edges aggregates nothing
(the library layers give it ``W_r x_i + b`` too).

The other exact split (transform = dropout only, propagation = the whole ``SAGEConv``) would leave the
transform without parameters and move the dense products into every micro-batch's propagation; this
one keeps them node-wise like GAT's and GCN's (for the first layer once per step,
``microbatch.first_transform=once_per_step``), and whenever ``out < in``, the usual case, it
aggregates ``out`` instead of ``in`` features per edge and passes ``2 x out`` instead of ``in`` features
per row between the units (DGL's own ``SAGEConv`` applies ``fc_neigh`` before aggregating for the same
reason when ``in > out``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pipegnn.models.spec import LayerSpec, with_residual

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


def sage_layers(in_dim: int, num_classes: int, *, hidden: int = 16, layers: int = 2,
                dropout: float = 0.5, residual: bool = False) -> list[LayerSpec]:
    """Layer specs of an L-layer GraphSAGE-mean (defaults: GCN's Cora settings, 16 hidden units)."""
    dims = [in_dim] + [hidden] * (layers - 1) + [num_classes]
    specs = [LayerSpec(dims[i], dims[i + 1], 1, True, "relu" if i < layers - 1 else None, dropout, root=True)
             for i in range(layers)]
    return with_residual(specs, residual)


class SAGETransform(nn.Module):
    """Both dense transforms of a SAGE layer, node-wise, side by side: ``[x W_n^T | x W_r^T + b]``.

    Holds the library layer's own parameters (taken out of it by the adapter's ``split``), so they are
    initialised as the library initialises them.

    Args:
        neighbour: ``W_n`` ``[out, in]``, applied to the rows the targets aggregate.
        root: ``W_r`` ``[out, in]``, applied to the targets' own rows.
        bias: ``b`` ``[out]`` (None: no bias), added to the root half.
    """

    bias: nn.Parameter | None

    def __init__(self, neighbour: nn.Parameter, root: nn.Parameter, bias: nn.Parameter | None):
        super().__init__()
        if neighbour.shape != root.shape:
            raise ValueError(f"neighbour and root weights differ in shape: {tuple(neighbour.shape)} vs "
                             f"{tuple(root.shape)}")
        self.neighbour, self.root = neighbour, root
        self.register_parameter("bias", bias)

    def forward(self, x: Tensor) -> Tensor:
        weight = torch.cat([self.neighbour, self.root])
        bias = None if self.bias is None else torch.cat([torch.zeros_like(self.bias), self.bias])
        return F.linear(x, weight, bias)


def neighbour_and_root(h: Tensor) -> tuple[Tensor, Tensor]:
    """The two halves of [`SAGETransform`][pipegnn.models.sage.SAGETransform]'s output: the rows to aggregate
    and the root rows."""
    return h.chunk(2, dim=1)  # type: ignore[return-value]
