"""Layer specifications: what each model file declares and each framework adapter builds."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

#: Units of every message-passing layer: transform, propagate.
UNITS_PER_LAYER = 2


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
        residual: add the layer's input rows to its output (``h + act(conv(h))``, a residual stack);
            only where the input and output widths agree. The transform then emits its input rows
            beside its product, so that the propagation, wherever a stage boundary falls, has them.
        alpha: GCNII's initial-residual weight; set (not None) for a GCNII layer, which reads the
            initial representation ``x0`` that travels through the pipe beside the rows and applies no
            dense transform before aggregating (its weight comes after, in the identity mapping).
        theta: GCNII's identity-mapping strength (``beta = log(theta / index + 1)``).
        index: the layer's 1-based position in the stack (GCNII's ``l`` in ``beta``).
    """

    in_dim: int
    out_dim: int
    heads: int = 1
    concat: bool = True
    activation: str | None = None
    dropout: float = 0.0
    root: bool = False
    residual: bool = False
    alpha: float | None = None
    theta: float = 0.0
    index: int = 1

    @property
    def out_features(self) -> int:
        return self.out_dim * self.heads if self.concat else self.out_dim

    @property
    def initial(self) -> bool:
        """Whether the layer reads the initial representation (a GCNII layer)."""
        return self.alpha is not None

    @property
    def product_width(self) -> int:
        """Features per row of the layer's dense transform: ``out_dim x heads``, twice that with
        ``root``; a GCNII layer has none before aggregating (its rows pass as they are)."""
        if self.initial:
            return self.in_dim
        return self.out_dim * self.heads * (2 if self.root else 1)

    @property
    def transform_width(self) -> int:
        """Features per row out of the layer's transform unit: the product, and with ``residual`` the
        input rows beside it."""
        return self.product_width + (self.in_dim if self.residual else 0)


@dataclass
class Stack:
    """A model's message-passing layers and the node-wise dense units around them.

    Attributes:
        layers: one LayerSpec per message-passing layer.
        input: a Linear (and ``activation``) applied to the features before the first layer, as its own
            unit (GCNII's input Linear, whose output is the initial representation), or None.
        output: a Linear applied to the last layer's rows, as its own unit (GCNII's output Linear), or
            None.
    """

    layers: list[LayerSpec] = field(default_factory=list)
    input: LayerSpec | None = None
    output: LayerSpec | None = None

    @property
    def units_per_layer(self) -> list[int]:
        """Pipeline units of every layer: a transform and a propagation each, the input Linear counted
        with the first layer and the output Linear with the last (what a balance in whole layers puts
        on a stage)."""
        counts = [UNITS_PER_LAYER] * len(self.layers)
        counts[0] += int(self.input is not None)
        counts[-1] += int(self.output is not None)
        return counts


def with_residual(specs: list[LayerSpec], residual: bool) -> list[LayerSpec]:
    """``specs`` with ``residual`` set on every layer whose input and output widths agree (a residual
    connection needs equal widths; the first and last layers of a stack usually change them)."""
    return [replace(s, residual=residual and s.in_dim == s.out_features) for s in specs]
