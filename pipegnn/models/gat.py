"""GAT (Velickovic et al.): multi-head attention, ELU between layers, averaged output heads."""
from __future__ import annotations

from pipegnn.models.spec import LayerSpec, with_residual

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


def gat_layers(in_dim: int, num_classes: int, *, hidden: int = 8, heads: int = 8, out_heads: int = 1,
               layers: int = 2, dropout: float = 0.6, residual: bool = False) -> list[LayerSpec]:
    """Layer specs of an L-layer GAT (defaults: the paper's Cora model, 8 heads x 8 hidden)."""
    specs = []
    dim = in_dim
    for _ in range(layers - 1):
        specs.append(LayerSpec(dim, hidden, heads, True, "elu", dropout))
        dim = hidden * heads
    specs.append(LayerSpec(dim, num_classes, out_heads, False, None, dropout))
    return with_residual(specs, residual)
