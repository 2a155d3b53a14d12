"""The node-wise unit of a layer ([`Transform`][pipegnn.models.transform.Transform]): its input rows (the node
features on layer 0; with a history cache, the received rows plus cached halo rows), input dropout and the
layer's own dense transform; on the first layer optionally once per step for all micro-batches. See
[`pipegnn.models.units`][pipegnn.models.units] for what units pass and keep."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from pipegnn.dropout import dropout
from pipegnn.microbatch.current import current
from pipegnn.microbatch.halo import MicroBatch
from pipegnn.microbatch.history import History
from pipegnn.models.feature_source import FeatureSource
from pipegnn.models.halo_history import HaloHistory
from pipegnn.models.precision import autocast
from pipegnn.models.spec import LayerSpec
from pipegnn.models.step_transform import StepTransform
from pipegnn.models.units import Unit, put
from pipegnn.sparse import is_csr, sparse_dropout

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


class Transform(Unit):
    """The node-wise part of a layer: input rows, input dropout, the layer's dense transform.

    Each of its other jobs is a child module of its own (their buffers move with the unit):

    - ``source`` ([`FeatureSource`][pipegnn.models.feature_source.FeatureSource], the first unit only): the
      node features it reads ([`add_features`][pipegnn.models.transform.Transform.add_features]);
    - ``step`` ([`StepTransform`][pipegnn.models.step_transform.StepTransform], the first unit only, with
      ``once_per_step``): its transform once per step for all micro-batches
      ([`begin_step`][pipegnn.models.transform.Transform.begin_step],
      [`end_step`][pipegnn.models.transform.Transform.end_step]), lazily in a pipeline;
    - ``halo`` ([`HaloHistory`][pipegnn.models.halo_history.HaloHistory], historical mode): the push of the
      rows it receives to its layer's history cache and the pull of the halo rows
      ([`add_history`][pipegnn.models.transform.Transform.add_history]).

    With ``spec.residual`` the unit emits its input rows beside the product (the propagation adds them
    back); in a GCNII layer (``spec.initial``) it also hands on ``x0`` (the first layer's input rows,
    later layers' received ``x0``).

    The input unit of a stack with a dense input Linear (GCNII) is a Transform too (``kind="input"``):
    it reads the features, and its ``transform`` is the Linear and its activation.

    Args:
        layer: index of the layer (0-based).
        spec: the layer's specification.
        transform: the layer's own transform module (from the adapter's ``split``).
        kind: ``transform`` (a layer's) or ``input`` (a stack's input Linear).
    """

    kind = "transform"

    def __init__(self, layer: int, spec: LayerSpec, transform: nn.Module, kind: str = "transform"):
        super().__init__(layer, spec, spec.transform_width)
        self.kind = kind
        self.carries_initial = spec.initial
        self.transform = transform
        self.source: FeatureSource | None = None
        self.step: StepTransform | None = None
        self.halo: HaloHistory | None = None

    @property
    def name(self) -> str:
        return self.kind if self.kind == "input" else super().name

    @property
    def reads_features(self) -> bool:
        """The first layer's unit: its input rows are the features."""
        return self.source is not None

    @property
    def features(self) -> Tensor | None:
        """The features it reads, when in memory (`FeatureSource.features`), else None."""
        return None if self.source is None else self.source.features

    @property
    def once_per_step(self) -> bool:
        """Its transform runs once per step
        ([`begin_step`][pipegnn.models.transform.Transform.begin_step])."""
        return self.step is not None

    @property
    def history(self) -> History | None:
        """The cache of the layer's input rows that training reads (historical mode), else None (a
        ``refresh_only`` cache is layer-wise evaluation's alone: no ages, masks, traffic or checkpoint)."""
        return None if self.halo is None or self.halo.refresh_only else self.halo.history

    def add_features(self, x: Any, once_per_step: bool = False) -> None:
        """Make this the first unit, reading the node features ``x`` (a Tensor, a source of rows out of
        core, or only their description:
        [`FeatureSource.set`][pipegnn.models.feature_source.FeatureSource.set]); with ``once_per_step`` its
        transform runs once per step ([`StepTransform`][pipegnn.models.step_transform.StepTransform]). Called
        again, the features change and the micro-batches stay."""
        if self.source is None:
            self.source = FeatureSource(x, self.name)
        else:
            self.source.set(x)
        if not once_per_step:
            self.step = None
        elif self.step is None:
            self.step = StepTransform()

    def add_history(self, num_nodes: int, dtype: torch.dtype, node_dropout: bool = False,
                    refresh_only: bool = False) -> None:
        """Keep a cache of this layer's input embeddings for halo rows (historical mode, or with
        ``refresh_only`` layer-wise evaluation's alone); with ``node_dropout`` its input dropout draws one
        mask per node and step ([`History.dropout`][pipegnn.microbatch.history.History.dropout])."""
        self.halo = HaloHistory(self.layer, num_nodes, self.spec.in_dim, dtype,
                                self.spec.dropout if node_dropout else 0.0, refresh_only)

    def set_micro_batch(self, m: int, mb: MicroBatch) -> None:
        layer = self.layer
        if self.halo is not None:
            self.halo.set_micro_batch(m, mb)
        put(self.rows, m, mb.sources[layer])
        put(self.initial_rows, m, mb.sizes[layer])
        if self.source is not None:
            self.source.set_micro_batch(m, mb)
        if self.step is not None:
            self.step.forget()

    def begin_step(self, ids: list[int], lazily: bool = False) -> int:
        """Start a step of micro-batches ``ids`` whose first-layer transform runs once (no-op unless
        ``once_per_step``): transform every row they read now or, ``lazily``, each row when the first
        micro-batch that reads it runs (so that a pipeline's first stage need not transform them all
        before its first micro-batch leaves); while training with gradients, keep the graph for
        [`end_step`][pipegnn.models.transform.Transform.end_step]. Returns the rows the step transforms."""
        if self.step is None:
            return 0
        assert self.source is not None  # add_features made the step
        return self.step.begin(self.source.nodes, ids, self._transformed, lazily)

    def end_step(self) -> None:
        """Back-propagate the gradient the micro-batches accumulated in the shared rows through the
        transform (once per row), and forget the step's rows."""
        if self.step is not None:
            self.step.end()

    def _transformed(self, nodes: Tensor) -> Tensor:
        """The transformed feature rows of distinct node ids ``nodes`` (the step's rows)."""
        assert self.source is not None  # the first unit
        # Distinct rows in ascending order as many as the nodes are all of them: no copy of the features.
        x = self.source.rows(nodes, distinct=True)
        with autocast(x.device, self.compute_dtype):
            return self.lower(self.product(x))

    def product(self, h: Tensor, nodes: Tensor | None = None) -> Tensor:
        """Input dropout and the dense transform of rows ``h``; with ``spec.residual`` the rows
        themselves beside the product. Given the rows' ``nodes`` (historical halos, ``node_dropout``,
        while training), the dropout mask is the cache's, one per node and step
        ([`History.dropout`][pipegnn.microbatch.history.History.dropout])."""
        if is_csr(h) and (self.spec.residual or nodes is not None):
            h = h.to_dense()  # sparse rows only where they go straight into the transform
        if nodes is not None and self.halo is not None and self.halo.history.node_dropout and self.training:
            dropped = self.halo.history.dropout(nodes, h)
        elif is_csr(h):
            dropped = sparse_dropout(h, self.spec.dropout, self.training)
        else:
            dropped = dropout(h, self.spec.dropout, self.training)
        out = self.transform(dropped)
        return torch.cat([out, h.to(out.dtype)], 1) if self.spec.residual else out

    def compute(self, inputs: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        ids = inputs[-1]
        m = current(ids)
        if self.step is not None:
            return self.step.rows(m, self._transformed), ids
        source = self.source
        h = source.rows(source.nodes[m]) if source is not None else inputs[0]
        initial = (inputs[1] if len(inputs) == 3 else h,) if self.carries_initial else ()
        if self.halo is not None:
            h, read = self.halo.rows(m, h, self.training)
            return self.product(h, read), *initial, ids
        return self.product(h), *initial, ids
