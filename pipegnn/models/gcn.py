"""GCN (Kipf & Welling): symmetric-normalised graph convolutions, ReLU between layers."""
from __future__ import annotations

from pipegnn.models.spec import LayerSpec, with_residual

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


def gcn_layers(in_dim: int, num_classes: int, *, hidden: int = 16, layers: int = 2,
               dropout: float = 0.5, residual: bool = False) -> list[LayerSpec]:
    """Layer specs of an L-layer GCN (defaults: the paper's model, 16 hidden units)."""
    dims = [in_dim] + [hidden] * (layers - 1) + [num_classes]
    specs = [LayerSpec(dims[i], dims[i + 1], 1, True, "relu" if i < layers - 1 else None, dropout)
             for i in range(layers)]
    return with_residual(specs, residual)
