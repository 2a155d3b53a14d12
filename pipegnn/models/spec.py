"""Layer specifications: what each model file declares and each framework adapter builds."""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LayerSpec"]


@dataclass(frozen=True)
class LayerSpec:
    """One message-passing layer.

    Attributes:
        in_dim: input features per node.
        out_dim: output features per head.
        heads: attention heads (1 for non-attention layers).
        concat: concatenate heads (True) or average them (False).
        activation: ``elu``, ``relu`` or None (applied after the layer).
        dropout: dropout on the layer's input features and, for attention layers, on attention weights.
        root: the layer also applies a weight of its own to each target's own row (GraphSAGE's root
            term): its transform then emits the neighbour and the root products side by side.
    """

    in_dim: int
    out_dim: int
    heads: int = 1
    concat: bool = True
    activation: str | None = None
    dropout: float = 0.0
    root: bool = False

    @property
    def out_features(self) -> int:
        return self.out_dim * self.heads if self.concat else self.out_dim

    @property
    def transform_width(self) -> int:
        """Features per row out of the layer's transform: ``out_dim x heads``, twice that with ``root``."""
        return self.out_dim * self.heads * (2 if self.root else 1)
