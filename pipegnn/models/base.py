"""Staging: a GNN as an ``nn.Sequential`` of layer stages that pass one tuple of tensors.

The pipe carries ``(micro_batch_ids,)`` into the first stage and ``(h, micro_batch_ids)`` between
stages: dim 0 of the id tensor is the micro-batch axis, so torchgpipe's ``torch.chunk`` hands each
micro-batch its own id, and ``h`` only ever holds that micro-batch's rows. ``h`` comes first because
torchgpipe's checkpointing hooks recomputation onto the first tensor of a stage's output, and it
back-propagates through *every* output tensor of a checkpointed stage, so all of them must require
grad: the ids therefore travel as a float tensor that requires grad (see ``Engine.id_tensor``); its
gradient is never used. Graph structure never travels
through the pipe: each stage keeps its layer's blocks (and the first stage the node features) as
non-persistent buffers, which move to the stage's device with the stage, once.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pipegnn.microbatch.halo import MicroBatch
from pipegnn.microbatch.history import History
from pipegnn.microbatch.plan import MicroBatchPlan
from pipegnn.models.spec import LayerSpec

__all__ = ["Stage", "StagedGNN", "TensorList"]

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


class Stage(nn.Module):
    """One message-passing layer with its micro-batch blocks.

    Args:
        layer: index of the layer (0-based).
        spec: the layer's specification.
        backend: framework adapter that builds and applies the convolution.
        kind: model kind passed to the adapter (``gat``, ``gcn``).
    """

    def __init__(self, layer: int, spec: LayerSpec, backend: Any, kind: str):
        super().__init__()
        self.layer, self.spec, self.backend = layer, spec, backend
        self.conv = backend.conv(kind, spec)
        self.activation = _ACTIVATIONS[spec.activation] if spec.activation else None
        self.edges, self.weights, self.nodes = TensorList(), TensorList(), TensorList()
        self.received, self.pulled = TensorList(), TensorList()  # global ids, historical mode only
        self.shapes: list[tuple[int, int]] = []  # (source rows read, output rows) of each micro-batch
        self.register_buffer("features", None, persistent=False)
        self.history: History | None = None
        self._structures: dict[int, Any] = {}  # framework structure per micro-batch, on this device

    def add_features(self, x: Tensor) -> None:
        """Keep the node features on this (first) stage."""
        self.features = x

    def add_history(self, num_nodes: int, dtype: torch.dtype) -> None:
        """Keep a cache of this layer's input embeddings for halo rows (historical mode)."""
        self.history = History(num_nodes, self.spec.in_dim, dtype)

    def add_micro_batch(self, mb: MicroBatch) -> None:
        layer = self.layer
        self.edges.append(mb.edges[layer])
        self.weights.append(mb.weights[layer])
        self.shapes.append((mb.sources[layer], mb.sizes[layer + 1]))
        if self.features is not None:
            self.nodes.append(mb.nodes)
        if self.history is not None:
            self.received.append(mb.nodes[:mb.sizes[layer]])
            self.pulled.append(mb.nodes[mb.sizes[layer]:mb.sources[layer]])

    @property
    def conv_device(self) -> torch.device:
        """The device this stage's parameters are on."""
        return next(self.conv.parameters()).device

    def _apply(self, fn: Any, *args: Any, **kwargs: Any) -> "Stage":
        self._structures.clear()  # buffers are moving: rebuild structures on the new device
        return super()._apply(fn, *args, **kwargs)

    def structure(self, m: int) -> Any:
        """The framework's structure of micro-batch ``m`` for this layer, built once on this device."""
        if m not in self._structures:
            self._structures[m] = self.backend.structure(self.edges[m], self.weights[m], *self.shapes[m])
        return self._structures[m]

    def forward(self, inputs: tuple[Tensor, ...]) -> tuple[Tensor, Tensor]:
        ids = inputs[-1]
        m = int(ids[0])  # host read of the micro-batch id (a sync on CUDA) selects this layer's block
        h = self.features[self.nodes[m]] if self.features is not None else inputs[0]
        if self.history is not None:
            self.history.push(self.received[m], h)
            if self.pulled[m].numel():
                h = torch.cat([h, self.history.pull(self.pulled[m], m if self.training else None)])
        h = F.dropout(h, self.spec.dropout, self.training)
        h = self.backend.apply(self.conv, h, self.structure(m))[:self.shapes[m][1]]
        if self.activation is not None:
            h = self.activation(h)
        return h, ids


class StagedGNN(nn.Sequential):
    """An L-layer GNN as L stages; ``model((ids,))`` returns ``(logits of the targets, ids)``.

    Args:
        specs: one LayerSpec per layer.
        backend: framework adapter.
        kind: model kind (``gat`` or ``gcn``).
        features: node features ``[N, F]`` (kept on the first stage).
        history: give layers 2..L a history cache (for ``historical`` plans).
    """

    def __init__(self, specs: list[LayerSpec], backend: Any, kind: str, features: Tensor,
                 history: bool = False):
        super().__init__(*[Stage(i, s, backend, kind) for i, s in enumerate(specs)])
        self[0].add_features(features)
        if history:
            for stage in list(self)[1:]:
                stage.add_history(features.size(0), features.dtype)
        self.kind = kind
        self.num_micro_batches = 0

    def histories(self) -> list[History]:
        return [s.history for s in self if s.history is not None]

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
        return len(self)

    @torch.no_grad()
    def refresh(self, ids: Tensor) -> Tensor:
        """Layer-wise inference over the micro-batches ``ids``, filling every history cache.

        Each layer runs over all micro-batches before the next one starts, and every cache first
        receives all the fresh rows of its layer's input, so with a plan whose targets cover the graph
        the halo rows read are current: the outputs equal full-graph outputs (GNNAutoScale's layer-wise
        inference). Stages run on the devices they were placed on.

        Returns:
            Logits of the targets of ``ids``'s micro-batches, concatenated in micro-batch order.
        """
        hs: list[Tensor | None] = [None] * ids.numel()
        for stage in self:
            device = stage.conv_device
            moved = [None if h is None else h.to(device) for h in hs]
            if stage.history is not None:
                for m, h in zip(ids.tolist(), moved):
                    stage.history.push(stage.received[m], h)
            mb_ids = ids.to(device, torch.float32)
            hs = [stage((mb_ids[i:i + 1],) if h is None else (h, mb_ids[i:i + 1]))[0]
                  for i, h in enumerate(moved)]
        return torch.cat(hs)

    def attach(self, plan: MicroBatchPlan) -> Tensor:
        """Give every stage its blocks of ``plan``; returns the ids that select them (call before
        placing the model on devices)."""
        if plan.micro_batches[0].num_layers != self.num_layers:
            raise ValueError(f"plan built for {plan.micro_batches[0].num_layers} layers, "
                             f"model has {self.num_layers}")
        for mb in plan.micro_batches:
            for stage in self:
                stage.add_micro_batch(mb)
        first = self.num_micro_batches
        self.num_micro_batches += plan.chunks
        return torch.arange(first, self.num_micro_batches)
