"""Staging: a GNN as an ``nn.Sequential`` of pipeline units ([`pipegnn.models.units`][pipegnn.models.units]),
and its layer-wise inference.

Every message-passing layer is two units, a transform and a propagation, so that a pipeline can cut
inside a layer; a stack's dense input and output Linear (GCNII's) are units of their own. The pipe
carries ``(micro_batch_ids,)`` into the first unit and ``(h, [x0,] micro_batch_ids)`` between units
(see [`pipegnn.models.units`][pipegnn.models.units] for why, and for what travels and what stays on a unit).

Precision (``train.precision``, [`pipegnn.models.precision`][pipegnn.models.precision]): with ``bf16`` every
unit runs its forward under ``torch.autocast`` and hands its output rows on in bfloat16; the first unit keeps
the features in bfloat16.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator, overload

import torch
from torch import Tensor, nn

from pipegnn.config.choices import FirstTransform, names
from pipegnn.hostcalls import read_on_host
from pipegnn.microbatch.current import computing
from pipegnn.microbatch.halo import MicroBatch
from pipegnn.microbatch.history import History
from pipegnn.microbatch.plan import MicroBatchPlan
from pipegnn.models.precision import autocast_dtype
from pipegnn.models.spec import LayerSpec, Stack
from pipegnn.models.transform import Transform
from pipegnn.models.units import Propagate, Readout, Unit

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

#: ``microbatch.first_transform``: ``once_per_step`` (the first layer's transform runs once per step
#: over every row the step's micro-batches read, each micro-batch gathers its rows) or
#: ``per_micro_batch`` (every micro-batch transforms its own input rows, halo rows again and again).
FIRST_TRANSFORMS = names(FirstTransform)


class StagedGNN(nn.Sequential):
    """An L-layer GNN as 2L units (transform, propagate per layer), with a stack's input and output
    Linear as units of their own when it has them (GCNII); ``model((ids,))`` returns
    ``(logits of the targets, ids)``.

    Args:
        specs: the model's layers (a [`Stack`][pipegnn.models.spec.Stack], or one LayerSpec per layer).
        backend: framework adapter.
        kind: model kind (one of ``pipegnn.models.MODELS``).
        features: node features ``[N, F]`` (kept on the first unit), a source of their rows out of
            core, or only their description (shape and dtype; see
            [`Transform.add_features`][pipegnn.models.transform.Transform.add_features] and
            [`set_features`][pipegnn.models.base.StagedGNN.set_features]).
        history: give layers 2..L a history cache (for ``historical`` plans), in the features' dtype.
        halo_dropout: one of `HALO_DROPOUTS` (with ``history``).
        refresh_only: with ``history``, the caches serve layer-wise evaluation alone
            (``microbatch.evaluation=layerwise`` with exact or sampled halos: training reads none of them).
        first_transform: one of `FIRST_TRANSFORMS`.
        precision: one of `PRECISIONS`; ``bf16`` keeps the features
            in bfloat16 (converted here unless they already are) and runs every unit under autocast.
    """

    if TYPE_CHECKING:  # what nn.Sequential holds here: units
        def __iter__(self) -> Iterator[Unit]: ...

        @overload
        def __getitem__(self, idx: int) -> Unit: ...

        @overload
        def __getitem__(self, idx: slice) -> nn.Sequential: ...

        def __getitem__(self, idx: int | slice) -> Unit | nn.Sequential: ...

    def __init__(self, specs: Stack | list[LayerSpec], backend: Any, kind: str, features: Any,
                 history: bool = False, first_transform: str = "once_per_step", precision: str = "fp32",
                 halo_dropout: str = "read", refresh_only: bool = False):
        if first_transform not in FIRST_TRANSFORMS:
            raise ValueError(f"first_transform={first_transform!r}; valid: {', '.join(FIRST_TRANSFORMS)}")
        stack = specs if isinstance(specs, Stack) else Stack(list(specs))
        dtype = autocast_dtype(precision)
        units: list[Unit] = []
        if stack.input is not None:
            units.append(Transform(0, stack.input, _dense(stack.input), kind="input"))
        for i, spec in enumerate(stack.layers):
            transform, conv = backend.split(backend.conv(kind, spec))
            units += [Transform(i, spec, transform), Propagate(i, spec, conv, backend)]
        units[-1].carries_initial = False  # nothing after the last layer reads x0
        if stack.output is not None:
            units.append(Readout(len(stack.layers) - 1, stack.output, _dense(stack.output)))
        super().__init__(*units)
        if dtype is not None:
            features = features.to(dtype)
            for unit in units:
                unit.compute_dtype = dtype
        self.precision = precision
        self.first().add_features(features, once_per_step=first_transform == "once_per_step")
        self.feature_dtype: torch.dtype = features.dtype
        if history:
            for unit in self.transforms():
                if unit.kind == "transform" and unit.layer > 0:
                    unit.add_history(features.shape[0], features.dtype, node_dropout=halo_dropout == "node",
                                     refresh_only=refresh_only)
        self.kind, self.stack = kind, stack
        self.num_micro_batches = 0

    def set_features(self, features: Any) -> None:
        """Give the first unit the features' rows (a Tensor or a source of rows out of core, read in
        `feature_dtype`), e.g. once the feature file ordered by the plan's partition exists."""
        first = self.first()
        if features.shape[1] != first.spec.in_dim:
            raise ValueError(f"features of width {features.shape[1]} for a model built for "
                             f"{first.spec.in_dim}")
        first.add_features(features.to(self.feature_dtype), once_per_step=first.once_per_step)

    def first(self) -> Transform:
        """The first unit: a transform (the stack's input Linear's or the first layer's), the one that
        reads the features (not on a pipeline rank whose stages do not hold it)."""
        first = self[0]
        assert isinstance(first, Transform), type(first).__name__
        return first

    def transforms(self) -> list[Transform]:
        return [u for u in self if isinstance(u, Transform)]

    def histories(self) -> list[History]:
        return [u.history for u in self.transforms() if u.history is not None]

    def tick(self) -> None:
        """Mark the start of a training step (ages of historical embeddings count steps) and draw the
        per-node dropout masks anew: now, except on a pipeline rank that holds the first unit and not
        the last (others wait for its micro-batches): it draws each node's at its first read, so that
        its first micro-batch leaves without waiting for every layer's mask."""
        first = len(self) > 0 and getattr(self[0], "reads_features", False)
        last = len(self) > 0 and (isinstance(self[-1], Readout) or (
            isinstance(self[-1], Propagate) and self[-1].layer == len(self.stack.layers) - 1))
        now = not first or last
        for h in self.histories():
            h.tick(draw=now)

    def staleness(self) -> float | None:
        """Mean age (steps) of the historical rows read in the current step, None without history."""
        ages = [t["staleness"] for t in self.history_traffic().values()]  # one read for every cache
        return sum(ages) / len(ages) if ages else None

    def history_traffic(self) -> dict[str, dict[str, float]]:
        """Per unit with a history cache (by name), the current step's
        [`History.traffic`][pipegnn.microbatch.history.History.traffic]; every cache's ages read on the host
        at once (one wait for the device, however many caches)."""
        caches = {u.name: u.history for u in self.transforms() if u.history is not None}
        if not caches:
            return {}
        device = next(iter(caches.values())).rows.device
        sums = read_on_host(torch.stack([h.age_sum().to(device) for h in caches.values()]))
        return {name: h.traffic(float(s)) for (name, h), s in zip(caches.items(), sums)}

    @property
    def num_layers(self) -> int:
        return sum(isinstance(u, Propagate) for u in self)

    @property
    def units_per_layer(self) -> list[int]:
        """Units of every layer ([`Stack.units_per_layer`][pipegnn.models.spec.Stack.units_per_layer])."""
        return self.stack.units_per_layer

    @property
    def unit_names(self) -> list[str]:
        return [u.name for u in self]

    @torch.no_grad()
    def refresh(self, ids: Tensor) -> Tensor:
        """Layer-wise inference over the micro-batches ``ids``, filling every history cache
        ([`layerwise`][pipegnn.models.base.layerwise] over all units).

        Returns:
            Logits of the targets of ``ids``'s micro-batches, concatenated in micro-batch order.
        """
        self.first().begin_step(ids.tolist())
        outputs = layerwise(list(self), ids, [() for _ in range(ids.numel())])
        self.first().end_step()
        return torch.cat([out[0] for out in outputs])

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

    def replace(self, ids: Tensor, micro_batches: list[MicroBatch]) -> None:
        """Make ``micro_batches`` the micro-batches ``ids`` (sampled halos: an epoch's draw, over the same
        targets), on the units' devices."""
        for m, mb in zip(ids.tolist(), micro_batches, strict=True):
            for unit in self:
                unit.set_micro_batch(m, mb)


@torch.no_grad()
def layerwise(units: list[Unit], ids: Tensor, inputs: list[tuple[Tensor, ...]]) -> list[tuple[Tensor, ...]]:
    """Run consecutive ``units`` layer-wise over the micro-batches ``ids``: each unit over all
    micro-batches before the next one starts, a cache first receiving all the fresh rows of its layer's
    input. So with a plan whose targets cover the graph the halo rows read are current and the outputs
    equal full-graph outputs (GNNAutoScale's layer-wise inference). Units run on their own devices.

    Args:
        units: consecutive units of a staged model (all of them, or one pipeline stage's).
        ids: micro-batch ids.
        inputs: per micro-batch, what the pipe hands the first of ``units`` without the id (``()`` for
            the model's first unit).

    Returns:
        Per micro-batch, what the last of ``units`` hands on, without the id.
    """
    outs, order = inputs, ids.tolist()
    carried: dict[torch.device, Tensor] = {}  # the ids on each unit's device (autocast reads it), copied once
    for unit in units:
        device = unit.device
        moved = [tuple(t.to(device) for t in out) for out in outs]
        if isinstance(unit, Transform) and unit.halo is not None:  # only transforms have caches
            for m, out in zip(order, moved):
                unit.halo.push(m, out[0])
        if device not in carried:
            carried[device] = ids.to(device, torch.float32)
        mb_ids = carried[device]
        outs = []
        for i, (m, out) in enumerate(zip(order, moved)):
            with computing(m):
                outs.append(unit((*out, mb_ids[i:i + 1]))[:-1])
    return outs


def _dense(spec: LayerSpec) -> nn.Module:
    """A stack's input or output Linear (with its activation): torch's own, initialised as torch does
    (PyG's GCNII example and GNNAutoScale use ``torch.nn.Linear`` for both)."""
    linear = nn.Linear(spec.in_dim, spec.out_dim)
    return nn.Sequential(linear, nn.ReLU()) if spec.activation == "relu" else linear
