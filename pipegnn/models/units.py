"""Pipeline units: the pieces a staged GNN is cut into, each passing one tuple of tensors.

Every message-passing layer is two units, so that a pipeline can cut inside a layer:

- [`Transform`][pipegnn.models.transform.Transform] (node-wise, its own module): the layer's input rows (the
  node features on layer 0; with a history cache, the received rows plus cached halo rows), input
  dropout, and the layer's own dense transform
  (the Linear the framework's layer was built with, taken out of it by the adapter's ``split``; both of
  GraphSAGE's, side by side, see [`pipegnn.models.sage`][pipegnn.models.sage]);
- [`Propagate`][pipegnn.models.units.Propagate]: the framework's layer without its transform (attention or
  normalisation, and aggregation) over the micro-batch's block, the rows the layer computes, and the
  activation.

A stack with dense input and output Linear (GCNII) has them as units of their own: a Transform of kind
``input`` (it reads the features) and a [`Readout`][pipegnn.models.units.Readout]; this module holds what
every unit shares ([`Unit`][pipegnn.models.units.Unit]) and the graph and output units.

The pipe carries ``(micro_batch_ids,)`` into the first unit and ``(h, micro_batch_ids)`` between units:
dim 0 of the id tensor is the micro-batch axis, so torchgpipe's ``torch.chunk`` hands each micro-batch
its own id, and ``h`` only ever holds that micro-batch's rows. A unit never reads the id's value (a
device-to-host copy): whoever runs it says which micro-batch it computes
([`pipegnn.microbatch.current`][pipegnn.microbatch.current]). ``h`` comes first because torchgpipe's
checkpointing hooks recomputation onto the first tensor of a stage's output, and it back-propagates
through *every* output tensor of a checkpointed stage, so all of them must require grad: the ids
therefore travel as a float tensor that requires grad (see ``Engine.id_tensor``); its gradient is never
used. Graph structure never travels through the pipe: each unit keeps what it reads per micro-batch
(blocks, the first unit the node features) as non-persistent buffers, which move with the unit, once.
The first unit's features may instead live out of core (``data.features=disk``): it then reads the
rows it needs from a feature source ([`pipegnn.data.features.FeatureRows`][pipegnn.data.features.FeatureRows],
a CPU tensor per read) and moves them to its device.

Precision (``train.precision``, [`pipegnn.models.precision`][pipegnn.models.precision]): with ``bf16`` every
unit runs its forward under ``torch.autocast`` and hands its output rows on in bfloat16; the first unit keeps
the features in bfloat16. Entering autocast in the unit itself is what makes it reach torchgpipe's worker
threads and its recomputations.
"""
from __future__ import annotations

from typing import Any, Callable, Generic, TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pipegnn.dropout import dropout
from pipegnn.microbatch.current import current
from pipegnn.microbatch.halo import MicroBatch
from pipegnn.models.precision import autocast
from pipegnn.models.spec import LayerSpec

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"elu": F.elu, "relu": F.relu}


_T = TypeVar("_T", bound="Tensor | None")


class TensorList(nn.Module, Generic[_T]):
    """A list of tensors (``TensorList[Tensor | None]``: or Nones) held as non-persistent buffers (moved by
    ``.to``; not in ``state_dict``)."""

    def __init__(self) -> None:
        super().__init__()
        self._count = 0

    def append(self, tensor: _T) -> None:
        self.register_buffer(f"t{self._count}", tensor, persistent=False)
        self._count += 1

    def __getitem__(self, i: int) -> _T:
        return getattr(self, f"t{i}")

    def __setitem__(self, i: int, tensor: _T) -> None:
        """Replace tensor ``i`` (moved to the device of the one it replaces), or append at ``len``."""
        if i == self._count:
            self.append(tensor)
            return
        old = self[i]
        if tensor is not None and old is not None:
            tensor = tensor.to(old.device)  # type: ignore[assignment]
        self._buffers[f"t{i}"] = tensor

    def __len__(self) -> int:
        return self._count


class Unit(nn.Module):
    """One pipeline unit of layer ``layer``: what every unit knows about its micro-batches.

    Subclasses implement [`compute`][pipegnn.models.units.Unit.compute]; `forward` runs it under autocast when
    `compute_dtype` is set (``train.precision=bf16``) and returns its rows in that dtype, so that
    units, pipeline stages and history caches exchange one activation dtype.

    A unit hands on ``(h, ids)`` or, inside a GCNII stack, ``(h, x0, ids)``: the initial representation
    ``x0`` travels beside the rows (`carries_initial`), cut to the rows the next layers compute.

    Attributes:
        rows: output rows of each micro-batch (by micro-batch id).
        width: output features per row.
        carries_initial: the output carries ``x0`` after ``h``.
        initial_rows: rows of ``x0`` in the output, per micro-batch (when it carries it).
        compute_dtype: autocast dtype (None: no autocast, the parameters' dtype).
    """

    kind = ""
    compute_dtype: torch.dtype | None = None

    def __init__(self, layer: int, spec: LayerSpec, width: int):
        super().__init__()
        self.layer, self.spec, self.width = layer, spec, width
        self.rows: list[int] = []
        self.carries_initial = False
        self.initial_rows: list[int] = []

    @property
    def name(self) -> str:
        """``transform<l>`` or ``propagate<l>`` (layers counted from 0)."""
        return f"{self.kind}{self.layer}"

    def outputs(self) -> list[tuple[list[int], int]]:
        """Every tensor the unit hands on, the ids aside: its rows per micro-batch and its width."""
        shapes = [(self.rows, self.width)]
        if self.carries_initial:
            shapes.append((self.initial_rows, self.spec.in_dim))
        return shapes

    @property
    def device(self) -> torch.device:
        """The device this unit's parameters (or buffers) are on."""
        tensor: Tensor | None = next(self.parameters(), None)
        if tensor is None:
            tensor = next(self.buffers(), None)
        return torch.device("cpu") if tensor is None else tensor.device

    def add_micro_batch(self, mb: MicroBatch) -> None:
        """Append micro-batch ``mb`` (its id: the number of micro-batches before it)."""
        self.set_micro_batch(len(self.rows), mb)

    def set_micro_batch(self, m: int, mb: MicroBatch) -> None:
        """Make ``mb`` micro-batch ``m``: replace it, or append it when ``m`` is the next id (sampled
        halos draw new micro-batches for the same ids every epoch)."""
        raise NotImplementedError

    def compute(self, inputs: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        """``(output rows, [x0,] ids)`` of the micro-batch whose id ``inputs`` ends with."""
        raise NotImplementedError

    def forward(self, inputs: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        # Entered here, in the thread that runs the unit: autocast state is thread-local.
        with autocast(inputs[-1].device, self.compute_dtype):
            *rows, ids = self.compute(inputs)
        return (*(self.lower(h) for h in rows), ids)

    def lower(self, h: Tensor) -> Tensor:
        """``h`` in the activation dtype (unchanged without autocast)."""
        return h if self.compute_dtype is None else h.to(self.compute_dtype)


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
        self.carries_initial = spec.initial  # the last layer of a stack does not (StagedGNN sets it)
        self.conv, self.backend = conv, backend
        self.activation = _ACTIVATIONS[spec.activation] if spec.activation else None
        self.edges: TensorList[Tensor] = TensorList()
        self.weights: TensorList[Tensor | None] = TensorList()
        self.sources: list[int] = []  # source rows each micro-batch reads
        self._structures: dict[int, Any] = {}  # framework structure per micro-batch, on this device

    def set_micro_batch(self, m: int, mb: MicroBatch) -> None:
        layer = self.layer
        self.edges[m] = mb.edges[layer]
        self.weights[m] = mb.weights[layer]
        put(self.sources, m, mb.sources[layer])
        put(self.rows, m, mb.sizes[layer + 1])
        put(self.initial_rows, m, mb.sizes[layer + 1])
        self._structures.pop(m, None)

    def _apply(self, fn: Any, *args: Any, **kwargs: Any) -> "Propagate":
        self._structures.clear()  # buffers are moving: rebuild structures on the new device
        return super()._apply(fn, *args, **kwargs)

    def structure(self, m: int) -> Any:
        """The framework's structure of micro-batch ``m`` for this layer, built once on this device."""
        if m not in self._structures:
            self._structures[m] = self.backend.structure(self.edges[m], self.weights[m], self.sources[m],
                                                         self.rows[m])
        return self._structures[m]

    def compute(self, inputs: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        h, ids = inputs[0], inputs[-1]
        m, spec = current(ids), self.spec
        rows = self.rows[m]
        skip = None
        if spec.residual:
            h, skip = h.split([spec.product_width, spec.in_dim], 1)
        if spec.initial:
            x0 = inputs[1]
            out = _first(self.backend.apply(self.conv, h, self.structure(m), initial=x0), rows)
        else:
            out = _first(self.backend.apply(self.conv, h, self.structure(m)), rows)
        if self.activation is not None:
            out = self.activation(out)
        if skip is not None:
            out = out + _first(skip, rows)
        return (out, _first(x0, rows), ids) if self.carries_initial else (out, ids)


def put(values: list[Any], i: int, value: Any) -> None:
    """``values[i] = value``, or append it when ``i`` is ``len(values)``."""
    if i == len(values):
        values.append(value)
    else:
        values[i] = value


def _first(h: Tensor, rows: int) -> Tensor:
    """The first ``rows`` rows of ``h``: ``h`` itself when it has no more (a slice and its backward are
    aten calls of their own, per layer and micro-batch)."""
    return h if h.size(0) == rows else h[:rows]


class Readout(Unit):
    """A stack's output Linear (GCNII's) as its own unit: dropout and the Linear over the last layer's
    rows (the targets); it hands on ``(logits, ids)``.

    Args:
        layer: index of the last layer.
        spec: the Linear's specification (``in_dim`` -> ``out_dim``, ``dropout``).
        linear: the Linear.
    """

    kind = "output"

    def __init__(self, layer: int, spec: LayerSpec, linear: nn.Module):
        super().__init__(layer, spec, spec.out_dim)
        self.linear = linear

    @property
    def name(self) -> str:
        return self.kind

    def set_micro_batch(self, m: int, mb: MicroBatch) -> None:
        put(self.rows, m, mb.sizes[-1])

    def compute(self, inputs: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        return self.linear(dropout(inputs[0], self.spec.dropout, self.training)), inputs[-1]
