"""Staging: a GNN as an ``nn.Sequential`` of pipeline units that pass one tuple of tensors.

Every message-passing layer is two units, so that a pipeline can cut inside a layer:

- :class:`Transform` (node-wise): the layer's input rows (the node features on layer 0; with a history
  cache, the received rows plus cached halo rows), input dropout, and the layer's own dense transform
  (the Linear the framework's layer was built with, taken out of it by the adapter's ``split``; both of
  GraphSAGE's, side by side, see :mod:`pipegnn.models.sage`);
- :class:`Propagate`: the framework's layer without its transform (attention or normalisation, and
  aggregation) over the micro-batch's block, the rows the layer computes, and the activation.

The pipe carries ``(micro_batch_ids,)`` into the first unit and ``(h, micro_batch_ids)`` between units:
dim 0 of the id tensor is the micro-batch axis, so torchgpipe's ``torch.chunk`` hands each micro-batch
its own id, and ``h`` only ever holds that micro-batch's rows. ``h`` comes first because torchgpipe's
checkpointing hooks recomputation onto the first tensor of a stage's output, and it back-propagates
through *every* output tensor of a checkpointed stage, so all of them must require grad: the ids
therefore travel as a float tensor that requires grad (see ``Engine.id_tensor``); its gradient is never
used. Graph structure never travels through the pipe: each unit keeps what it reads per micro-batch
(blocks, the first unit the node features) as non-persistent buffers, which move with the unit, once.
The first unit's features may instead live out of core (``data.features=disk``): it then reads the
rows it needs from a feature source (:class:`pipegnn.data.features.FeatureRows`, a CPU tensor per
read) and moves them to its device.

Precision (``train.precision``, :mod:`pipegnn.models.precision`): with ``bf16`` every unit runs its
forward under ``torch.autocast`` and hands its output rows on in bfloat16; the first unit keeps the
features in bfloat16. Entering autocast in the unit itself is what makes it reach torchgpipe's worker
threads and its recomputations.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pipegnn.data.features import FeatureMeta
from pipegnn.microbatch.halo import MicroBatch
from pipegnn.microbatch.history import History
from pipegnn.microbatch.plan import MicroBatchPlan
from pipegnn.models.precision import autocast, autocast_dtype
from pipegnn.models.spec import LayerSpec

__all__ = ["FIRST_TRANSFORMS", "UNITS_PER_LAYER", "Propagate", "StagedGNN", "TensorList", "Transform", "Unit"]

#: ``microbatch.first_transform``: ``once_per_step`` (the first layer's transform runs once per step
#: over every row the step's micro-batches read, each micro-batch gathers its rows) or
#: ``per_micro_batch`` (every micro-batch transforms its own input rows, halo rows again and again).
FIRST_TRANSFORMS = ("once_per_step", "per_micro_batch")

#: Units of every layer: transform, propagate.
UNITS_PER_LAYER = 2

_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"elu": F.elu, "relu": F.relu}


class TensorList(nn.Module):
    """A list of tensors held as non-persistent buffers (moved by ``.to``; not in ``state_dict``)."""

    def __init__(self) -> None:
        super().__init__()
        self._count = 0

    def append(self, tensor: Tensor | None) -> None:
        self.register_buffer(f"t{self._count}", tensor, persistent=False)
        self._count += 1

    def __getitem__(self, i: int) -> Tensor | None:
        return getattr(self, f"t{i}")

    def __len__(self) -> int:
        return self._count


class Unit(nn.Module):
    """One pipeline unit of layer ``layer``: what every unit knows about its micro-batches.

    Subclasses implement :meth:`compute`; :meth:`forward` runs it under autocast when
    :attr:`compute_dtype` is set (``train.precision=bf16``) and returns its rows in that dtype, so that
    units, pipeline stages and history caches exchange one activation dtype.

    Attributes:
        rows: output rows of each micro-batch (by micro-batch id).
        width: output features per row.
        compute_dtype: autocast dtype (None: no autocast, the parameters' dtype).
    """

    kind = ""
    compute_dtype: torch.dtype | None = None

    def __init__(self, layer: int, spec: LayerSpec, width: int):
        super().__init__()
        self.layer, self.spec, self.width = layer, spec, width
        self.rows: list[int] = []

    @property
    def name(self) -> str:
        """``transform<l>`` or ``propagate<l>`` (layers counted from 0)."""
        return f"{self.kind}{self.layer}"

    @property
    def device(self) -> torch.device:
        """The device this unit's parameters (or buffers) are on."""
        tensor = next(self.parameters(), None)
        if tensor is None:
            tensor = next(self.buffers(), None)
        return torch.device("cpu") if tensor is None else tensor.device

    def add_micro_batch(self, mb: MicroBatch) -> None:
        raise NotImplementedError

    def compute(self, inputs: tuple[Tensor, ...]) -> tuple[Tensor, Tensor]:
        """``(output rows, ids)`` of the micro-batch whose id ``inputs`` ends with."""
        raise NotImplementedError

    def forward(self, inputs: tuple[Tensor, ...]) -> tuple[Tensor, Tensor]:
        # Entered here, in the thread that runs the unit: autocast state is thread-local.
        with autocast(inputs[-1].device, self.compute_dtype):
            h, ids = self.compute(inputs)
        return self.lower(h), ids

    def lower(self, h: Tensor) -> Tensor:
        """``h`` in the activation dtype (unchanged without autocast)."""
        return h if self.compute_dtype is None else h.to(self.compute_dtype)


class Transform(Unit):
    """The node-wise part of a layer: input rows, input dropout, the layer's dense transform.

    The first layer's transform can run once per step (:meth:`begin_step`) instead of once per
    micro-batch: its input (the features) does not depend on the micro-batch, so every row any of the
    step's micro-batches reads is dropped out and transformed once (one dropout mask per node and step,
    as in full-graph training), the micro-batches gather their rows from a detached copy of the result,
    and the gradient they accumulate there flows back through the transform once (:meth:`end_step`).

    Args:
        layer: index of the layer (0-based).
        spec: the layer's specification.
        transform: the layer's own transform module (from the adapter's ``split``).
    """

    kind = "transform"

    def __init__(self, layer: int, spec: LayerSpec, transform: nn.Module):
        super().__init__(layer, spec, spec.transform_width)
        self.transform = transform
        self.nodes = TensorList()  # global ids of each micro-batch's input rows (first layer only)
        self.received, self.pulled = TensorList(), TensorList()  # global ids, historical mode only
        self.register_buffer("features", None, persistent=False)
        self.stored: Any = None  # the features' rows out of core (FeatureRows), when not a buffer
        self.reads_features = False  # the first layer's unit: its input rows are the features
        self.history: History | None = None
        self.once_per_step = False
        self._gathers: dict[tuple[int, ...], tuple[Tensor, dict[int, Tensor]]] = {}
        self._shared: Tensor | None = None  # this step's transformed rows (a leaf while training)
        self._graph: Tensor | None = None  # the same rows with their autograd graph
        self._index: dict[int, Tensor] = {}  # micro-batch id -> its rows in _shared

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

    def add_history(self, num_nodes: int, dtype: torch.dtype) -> None:
        """Keep a cache of this layer's input embeddings for halo rows (historical mode)."""
        self.history = History(num_nodes, self.spec.in_dim, dtype)

    def add_micro_batch(self, mb: MicroBatch) -> None:
        layer = self.layer
        self.rows.append(mb.sources[layer])
        if self.reads_features:
            self.nodes.append(mb.nodes)
        if self.history is not None:
            self.received.append(mb.nodes[:mb.sizes[layer]])
            self.pulled.append(mb.nodes[mb.sizes[layer]:mb.sources[layer]])

    def _apply(self, fn: Any, *args: Any, **kwargs: Any) -> "Transform":
        self._gathers.clear()  # index tensors live on the old device
        return super()._apply(fn, *args, **kwargs)

    def _gather(self, ids: list[int]) -> tuple[Tensor, dict[int, Tensor]]:
        """The distinct rows micro-batches ``ids`` read and, per micro-batch, where its rows are among
        them (built once per set of micro-batches)."""
        key = tuple(ids)
        if key not in self._gathers:
            rows, inverse = torch.unique(torch.cat([self.nodes[m] for m in ids]), return_inverse=True)
            parts = inverse.split([self.nodes[m].numel() for m in ids])
            self._gathers[key] = rows, dict(zip(ids, parts))
        return self._gathers[key]

    def begin_step(self, ids: list[int]) -> int:
        """Transform every row micro-batches ``ids`` read, once (no-op unless ``once_per_step``);
        while training with gradients, keep the graph for :meth:`end_step`. Returns the rows
        transformed."""
        if not self.once_per_step:
            return 0
        rows, self._index = self._gather(ids)
        # Sorted distinct rows as many as the nodes are all of them, in order: no copy of the features.
        x = self._rows(rows, everything=self.features is not None and rows.numel() == self.features.size(0))
        with autocast(x.device, self.compute_dtype):
            h = self.lower(self.transform(F.dropout(x, self.spec.dropout, self.training)))
        if h.requires_grad:
            self._graph, self._shared = h, h.detach().requires_grad_()
        else:
            self._graph, self._shared = None, h
        return rows.numel()

    def end_step(self) -> None:
        """Back-propagate the gradient the micro-batches accumulated in the shared rows through the
        transform (once), and forget the step's rows."""
        if self._graph is not None and self._shared is not None and self._shared.grad is not None:
            self._graph.backward(self._shared.grad)
        self._graph = self._shared = None
        self._index = {}

    def compute(self, inputs: tuple[Tensor, ...]) -> tuple[Tensor, Tensor]:
        ids = inputs[-1]
        m = int(ids[0])  # host read of the micro-batch id (a sync on CUDA) selects its rows
        if self.once_per_step:
            if self._shared is None:
                raise RuntimeError("first-layer transform once per step: call begin_step(ids) before "
                                   "running the micro-batches")
            return self._shared[self._index[m]], ids
        h = self._rows(self.nodes[m]) if self.reads_features else inputs[0]
        if self.history is not None:
            self.history.push(self.received[m], h)
            if self.pulled[m].numel():
                h = torch.cat([h, self.history.pull(self.pulled[m], m if self.training else None)])
        h = F.dropout(h, self.spec.dropout, self.training)
        return self.transform(h), ids


class Propagate(Unit):
    """The graph part of a layer: the framework's layer without its transform, over a block.

    Args:
        layer: index of the layer (0-based).
        spec: the layer's specification.
        conv: the framework's layer with its transform taken out (the adapter's ``split``).
        backend: framework adapter that builds blocks and applies ``conv``.
    """

    kind = "propagate"

    def __init__(self, layer: int, spec: LayerSpec, conv: nn.Module, backend: Any):
        super().__init__(layer, spec, spec.out_features)
        self.conv, self.backend = conv, backend
        self.activation = _ACTIVATIONS[spec.activation] if spec.activation else None
        self.edges, self.weights = TensorList(), TensorList()
        self.sources: list[int] = []  # source rows each micro-batch reads
        self._structures: dict[int, Any] = {}  # framework structure per micro-batch, on this device

    def add_micro_batch(self, mb: MicroBatch) -> None:
        layer = self.layer
        self.edges.append(mb.edges[layer])
        self.weights.append(mb.weights[layer])
        self.sources.append(mb.sources[layer])
        self.rows.append(mb.sizes[layer + 1])

    def _apply(self, fn: Any, *args: Any, **kwargs: Any) -> "Propagate":
        self._structures.clear()  # buffers are moving: rebuild structures on the new device
        return super()._apply(fn, *args, **kwargs)

    def structure(self, m: int) -> Any:
        """The framework's structure of micro-batch ``m`` for this layer, built once on this device."""
        if m not in self._structures:
            self._structures[m] = self.backend.structure(self.edges[m], self.weights[m], self.sources[m],
                                                         self.rows[m])
        return self._structures[m]

    def compute(self, inputs: tuple[Tensor, ...]) -> tuple[Tensor, Tensor]:
        h, ids = inputs
        m = int(ids[0])
        h = self.backend.apply(self.conv, h, self.structure(m))[:self.rows[m]]
        if self.activation is not None:
            h = self.activation(h)
        return h, ids


class StagedGNN(nn.Sequential):
    """An L-layer GNN as 2L units (transform, propagate per layer); ``model((ids,))`` returns
    ``(logits of the targets, ids)``.

    Args:
        specs: one LayerSpec per layer.
        backend: framework adapter.
        kind: model kind (one of ``pipegnn.models.MODELS``).
        features: node features ``[N, F]`` (kept on the first unit), a source of their rows out of
            core, or only their description (shape and dtype; see :meth:`Transform.add_features` and
            :meth:`set_features`).
        history: give layers 2..L a history cache (for ``historical`` plans), in the features' dtype.
        first_transform: one of :data:`FIRST_TRANSFORMS`.
        precision: one of :data:`~pipegnn.models.precision.PRECISIONS`; ``bf16`` keeps the features
            in bfloat16 (converted here unless they already are) and runs every unit under autocast.
    """

    def __init__(self, specs: list[LayerSpec], backend: Any, kind: str, features: Any,
                 history: bool = False, first_transform: str = "once_per_step", precision: str = "fp32"):
        if first_transform not in FIRST_TRANSFORMS:
            raise ValueError(f"first_transform={first_transform!r}; valid: {', '.join(FIRST_TRANSFORMS)}")
        dtype = autocast_dtype(precision)
        units: list[Unit] = []
        for i, spec in enumerate(specs):
            transform, conv = backend.split(backend.conv(kind, spec))
            units += [Transform(i, spec, transform), Propagate(i, spec, conv, backend)]
        super().__init__(*units)
        if dtype is not None:
            features = features.to(dtype)
            for unit in units:
                unit.compute_dtype = dtype
        self.precision = precision
        self[0].add_features(features, once_per_step=first_transform == "once_per_step")
        self.feature_dtype: torch.dtype = features.dtype
        if history:
            for unit in self.transforms()[1:]:
                unit.add_history(features.shape[0], features.dtype)
        self.kind = kind
        self.num_micro_batches = 0

    def set_features(self, features: Any) -> None:
        """Give the first unit the features' rows (a Tensor or a source of rows out of core, read in
        :attr:`feature_dtype`), e.g. once the feature file ordered by the plan's partition exists."""
        first = self[0]
        if features.shape[1] != first.spec.in_dim:
            raise ValueError(f"features of width {features.shape[1]} for a model built for {first.spec.in_dim}")
        first.add_features(features.to(self.feature_dtype), once_per_step=first.once_per_step)

    def transforms(self) -> list[Transform]:
        return [u for u in self if isinstance(u, Transform)]

    def histories(self) -> list[History]:
        return [u.history for u in self.transforms() if u.history is not None]

    def tick(self) -> None:
        """Mark the start of a training step (ages of historical embeddings count steps)."""
        for h in self.histories():
            h.tick()

    def staleness(self) -> float | None:
        """Mean age (steps) of the historical rows read in the current step, None without history."""
        histories = self.histories()
        return sum(h.staleness() for h in histories) / len(histories) if histories else None

    @property
    def num_layers(self) -> int:
        return len(self) // UNITS_PER_LAYER

    @property
    def unit_names(self) -> list[str]:
        return [u.name for u in self]

    @torch.no_grad()
    def refresh(self, ids: Tensor) -> Tensor:
        """Layer-wise inference over the micro-batches ``ids``, filling every history cache.

        Each unit runs over all micro-batches before the next one starts, and every cache first
        receives all the fresh rows of its layer's input, so with a plan whose targets cover the graph
        the halo rows read are current: the outputs equal full-graph outputs (GNNAutoScale's layer-wise
        inference). Units run on the devices they were placed on.

        Returns:
            Logits of the targets of ``ids``'s micro-batches, concatenated in micro-batch order.
        """
        hs: list[Tensor | None] = [None] * ids.numel()
        self[0].begin_step(ids.tolist())
        for unit in self:
            device = unit.device
            moved = [None if h is None else h.to(device) for h in hs]
            history = getattr(unit, "history", None)
            if history is not None:
                for m, h in zip(ids.tolist(), moved):
                    history.push(unit.received[m], h)
            mb_ids = ids.to(device, torch.float32)
            hs = [unit((mb_ids[i:i + 1],) if h is None else (h, mb_ids[i:i + 1]))[0]
                  for i, h in enumerate(moved)]
        self[0].end_step()
        return torch.cat(hs)

    def attach(self, plan: MicroBatchPlan) -> Tensor:
        """Give every unit its part of ``plan``; returns the ids that select its micro-batches (call
        before placing the model on devices)."""
        if plan.micro_batches[0].num_layers != self.num_layers:
            raise ValueError(f"plan built for {plan.micro_batches[0].num_layers} layers, "
                             f"model has {self.num_layers}")
        for mb in plan.micro_batches:
            for unit in self:
                unit.add_micro_batch(mb)
        first = self.num_micro_batches
        self.num_micro_batches += plan.chunks
        return torch.arange(first, self.num_micro_batches)
