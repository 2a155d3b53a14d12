"""The node-wise unit of a layer (:class:`Transform`): its input rows (the node features on layer 0;
with a history cache, the received rows plus cached halo rows), input dropout and the layer's own dense
transform; on the first layer optionally once per step for all micro-batches. See
:mod:`pipegnn.models.units` for what units pass and keep."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from pipegnn.data.features import FeatureMeta
from pipegnn.dropout import dropout
from pipegnn.microbatch.current import current
from pipegnn.microbatch.halo import MicroBatch
from pipegnn.microbatch.history import History
from pipegnn.models.precision import autocast
from pipegnn.models.spec import LayerSpec
from pipegnn.models.units import TensorList, Unit

__all__ = ["Transform"]


class Transform(Unit):
    """The node-wise part of a layer: input rows, input dropout, the layer's dense transform.

    The first layer's transform can run once per step (:meth:`begin_step`) instead of once per
    micro-batch: its input (the features) does not depend on the micro-batch, so every row any of the
    step's micro-batches reads is dropped out and transformed once (one dropout mask per node and step,
    as in full-graph training), the micro-batches gather their rows from a detached copy of the result,
    and the gradient they accumulate there flows back through the transform once (:meth:`end_step`).
    In a pipeline the rows are transformed lazily, each when the first micro-batch that reads it runs,
    so that the first stage's other micro-batches need not wait for them all.

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
        # global ids of each micro-batch's input rows (first layer only)
        self.nodes: TensorList[Tensor] = TensorList()
        # historical: global ids of the rows received, then of those pulled
        self.read: TensorList[Tensor] = TensorList()
        self.register_buffer("features", None, persistent=False)
        self.stored: Any = None  # the features' rows out of core (FeatureRows), when not a buffer
        self.reads_features = False  # the first layer's unit: its input rows are the features
        self.history: History | None = None
        self.once_per_step = False
        self._gathers: dict[tuple, tuple[Tensor, dict[int, Tensor], list[int]]] = {}
        self._order: Tensor | None = None  # this step's rows (global ids) in the order they are transformed
        self._shared: Tensor | None = None  # their transformed rows (a leaf while training)
        self._pieces: list[tuple[Tensor, int, int]] = []  # rows transformed at once, with their graph
        self._index: dict[int, Tensor] = {}  # micro-batch id -> its rows in _shared
        self._ends: dict[int, int] = {}  # micro-batch id -> rows transformed once it has run
        self._done = 0

    def add_features(self, x: Any, once_per_step: bool = False) -> None:
        """Make this the first unit, reading the node features ``x``: a Tensor ``[N, F]`` (kept as a
        buffer, moved with the unit), a source of rows out of core (``x[ids]`` returns a CPU tensor,
        e.g. :class:`pipegnn.data.features.FeatureRows`), or only their description
        (:class:`pipegnn.data.features.FeatureMeta`: rows given later, or never, on a pipeline rank
        without this unit). With ``once_per_step`` the transform runs once per step (see the class doc)."""
        self.features = x if isinstance(x, Tensor) else None
        self.stored = None if isinstance(x, (Tensor, FeatureMeta)) else x
        self.reads_features = True
        self.once_per_step = once_per_step

    def _rows(self, index: Tensor, everything: bool = False) -> Tensor:
        """The feature rows of node ids ``index`` on this unit's device (``everything``: ``index`` is
        every node in order, which in memory needs no copy)."""
        if self.features is not None:
            return self.features if everything else self.features[index]
        if self.stored is None:
            raise RuntimeError(f"{self.name} holds no features here (only their shape): give it rows with "
                               "add_features first")
        return self.stored[index.cpu()].to(self.device)

    @property
    def name(self) -> str:
        return self.kind if self.kind == "input" else super().name

    def add_history(self, num_nodes: int, dtype: torch.dtype, node_dropout: bool = False) -> None:
        """Keep a cache of this layer's input embeddings for halo rows (historical mode); with
        ``node_dropout`` its input dropout draws one mask per node and step (:meth:`History.dropout`)."""
        self.history = History(num_nodes, self.spec.in_dim, dtype, self.spec.dropout if node_dropout else 0.0)

    def add_micro_batch(self, mb: MicroBatch) -> None:
        layer = self.layer
        self.rows.append(mb.sources[layer])
        self.initial_rows.append(mb.sizes[layer])
        if self.reads_features:
            self.nodes.append(mb.nodes)
        if self.history is not None:
            self.read.append(mb.nodes[:mb.sources[layer]])

    def _apply(self, fn: Any, *args: Any, **kwargs: Any) -> "Transform":
        self._gathers.clear()  # index tensors live on the old device
        return super()._apply(fn, *args, **kwargs)

    def _gather(self, ids: list[int], by_first_use: bool) -> tuple[Tensor, dict[int, Tensor], list[int]]:
        """The distinct rows micro-batches ``ids`` read, per micro-batch where its rows are among them,
        and per micro-batch (in ``ids``' order) how many of the rows it and those before it need
        (built once per set of micro-batches). The rows are in ascending order or, ``by_first_use``,
        grouped by the first micro-batch that reads them (ascending within a group)."""
        key = (tuple(ids), by_first_use)
        if key not in self._gathers:
            read = [self.nodes[m] for m in ids]
            sizes = [r.numel() for r in read]
            rows, inverse = torch.unique(torch.cat(read), return_inverse=True)
            first = torch.zeros_like(rows)
            if by_first_use:
                reader = torch.repeat_interleave(torch.arange(len(ids), device=rows.device),
                                                 torch.tensor(sizes, device=rows.device))
                first.fill_(len(ids)).scatter_reduce_(0, inverse, reader, "amin")
            first, order = torch.sort(first, stable=True)
            position = torch.empty_like(order).scatter_(0, order,
                                                        torch.arange(order.numel(), device=order.device))
            ends = torch.bincount(first, minlength=len(ids)).cumsum(0).tolist()
            self._gathers[key] = rows[order], dict(zip(ids, position[inverse].split(sizes))), ends
        return self._gathers[key]

    def begin_step(self, ids: list[int], lazily: bool = False) -> int:
        """Start a step of micro-batches ``ids`` whose first-layer transform runs once (no-op unless
        ``once_per_step``): transform every row they read now or, ``lazily``, each row when the first
        micro-batch that reads it runs (so that a pipeline's first stage need not transform them all
        before its first micro-batch leaves); while training with gradients, keep the graph for
        :meth:`end_step`. Returns the rows the step transforms."""
        if not self.once_per_step:
            return 0
        self._order, self._index, ends = self._gather(ids, by_first_use=lazily)
        self._ends = dict(zip(ids, ends))
        self._done, self._pieces, self._shared = 0, [], None
        if not lazily:
            self._transform(self._order.numel())
        return self._order.numel()

    def _transform(self, end: int) -> None:
        """Transform the step's rows up to ``end`` (in :meth:`_gather`'s order) not yet transformed."""
        if end <= self._done:
            return
        assert self._order is not None  # begin_step
        rows = self._order[self._done:end]
        # Distinct rows in ascending order as many as the nodes are all of them: no copy of the features.
        x = self._rows(rows, everything=self.features is not None and rows.numel() == self.features.size(0))
        with autocast(x.device, self.compute_dtype):
            h = self.lower(self.product(x))
        if self._shared is None:  # a leaf the micro-batches gather from; their gradients accumulate in it
            self._shared = h.new_empty(self._order.numel(), h.size(1)).requires_grad_(h.requires_grad)
        with torch.no_grad():
            self._shared[self._done:end] = h
        if h.requires_grad:
            self._pieces.append((h, self._done, end))
        self._done = end

    def end_step(self) -> None:
        """Back-propagate the gradient the micro-batches accumulated in the shared rows through the
        transform (once per row), and forget the step's rows."""
        if self._pieces and self._shared is not None and self._shared.grad is not None:
            grad = self._shared.grad
            torch.autograd.backward([h for h, _, _ in self._pieces], [grad[a:b] for _, a, b in self._pieces])
        self._shared, self._order, self._pieces, self._index, self._ends = None, None, [], {}, {}

    def product(self, h: Tensor, nodes: Tensor | None = None) -> Tensor:
        """Input dropout and the dense transform of rows ``h``; with ``spec.residual`` the rows
        themselves beside the product. Given the rows' ``nodes`` (historical halos, ``node_dropout``,
        while training), the dropout mask is the cache's, one per node and step (:meth:`History.dropout`)."""
        if nodes is not None and self.history is not None and self.history.node_dropout and self.training:
            dropped = self.history.dropout(nodes, h)
        else:
            dropped = dropout(h, self.spec.dropout, self.training)
        out = self.transform(dropped)
        return torch.cat([out, h.to(out.dtype)], 1) if self.spec.residual else out

    def compute(self, inputs: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        ids = inputs[-1]
        m = current(ids)
        if self.once_per_step:
            if self._order is None:
                raise RuntimeError("first-layer transform once per step: call begin_step(ids) before "
                                   "running the micro-batches")
            self._transform(self._ends[m])
            assert self._shared is not None  # made by the step's first transform
            return self._shared.index_select(0, self._index[m]), ids
        h = self._rows(self.nodes[m]) if self.reads_features else inputs[0]
        initial = (inputs[1] if len(inputs) == 3 else h,) if self.carries_initial else ()
        if self.history is not None:
            read, own, step = self.read[m], self.initial_rows[m], m if self.training else None
            self.history.push(read[:own], h, step)
            if read.numel() > own:
                h = torch.cat([h, self.history.pull(read[own:], step)])
            return self.product(h, read), *initial, ids
        return self.product(h), *initial, ids
