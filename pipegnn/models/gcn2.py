"""GCNII (Chen et al. 2020): deep GCN with an initial residual and identity mapping.

``x0 = relu(W_in dropout(x))``; layer l computes ``h <- relu(((1 - alpha) P h + alpha x0)((1 - beta_l) I +
beta_l W_l))`` over the normalised adjacency ``P`` (GCN's, with self-loops and full-graph degrees),
with ``beta_l = log(theta / l + 1)``; the logits are ``W_out dropout(h)``. Dropout precedes every layer,
as in PyG's ``gcn2_cora.py`` example and the paper's code.

Units: the input Linear (reading the features, once per step by default), a transform (input dropout,
no dense product: GCNII's weight comes after the aggregation) and a propagation (the library's
``GCN2Conv``) per layer, and the output Linear. ``x0`` is an activation of the first stage: it travels
through the pipe beside the rows, each layer reads the rows of it that it computes, and its gradient
flows back to the input Linear.
"""
from __future__ import annotations

from pipegnn.models.spec import LayerSpec, Stack

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


def gcn2_stack(in_dim: int, num_classes: int, *, hidden: int = 64, layers: int = 64, dropout: float = 0.6,
               alpha: float = 0.1, theta: float = 0.5) -> Stack:
    """An L-layer GCNII (defaults: the paper's 64-layer Cora model)."""
    convs = [LayerSpec(hidden, hidden, activation="relu", dropout=dropout, alpha=alpha, theta=theta,
                       index=i + 1) for i in range(layers)]
    return Stack(convs, input=LayerSpec(in_dim, hidden, activation="relu", dropout=dropout),
                 output=LayerSpec(hidden, num_classes, dropout=dropout))
