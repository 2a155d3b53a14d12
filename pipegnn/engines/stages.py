"""The pipeline stages of the ``pipelining`` engine: consecutive units with static shapes, and torch's
``PipelineStage`` with a timeline and the micro-batch each call computes.

What crosses a stage boundary is floating point and nothing else: the rows a unit hands on (and a
GCNII stack's ``x0``), padded to the largest micro-batch of the call. The micro-batch id never travels
with them: the schedule knows which micro-batch a call computes (its chunk index in the step's order),
so [`TimedStage`][pipegnn.engines.stages.TimedStage] tells its stage on the host (`PipeStage.micro_batch`).
This matters beyond the host read it saves: torch 2.11's ``PipelineStage`` marks every tensor it receives as
requiring grad, which an integer id tensor cannot (pytorch issue 183024, fixed in a later release).

Where two ranks share a CUDA device, NCCL refuses them and gloo cannot send CUDA tensors point to
point (it sends a tensor's raw memory), so such a pipeline's traffic goes through host memory: the
stage's *transport* device is the CPU; it moves what it receives to its device and what it sends back
to the host (both differentiable, so gradients take the same way back). See
[`transport_device`][pipegnn.engines.stages.transport_device].

[`StaticShapes`][pipegnn.engines.stages.StaticShapes] keeps every boundary tensor's shape (its lists are the
ones the stages read) and [`own_stages`][pipegnn.engines.stages.own_stages] builds a rank's stages.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn
from torch.distributed.pipelining import PipelineStage

from pipegnn.microbatch.current import computing
from pipegnn.models.base import StagedGNN, Unit
from pipegnn.timeline import Timeline

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


def transport_device(device: torch.device, group: Any = None) -> torch.device:
    """Where tensors between this rank's stages and its peers' live: ``device`` itself, except a CUDA
    device under gloo (two ranks sharing one GPU), whose point-to-point traffic goes through the host."""
    if device.type == "cuda" and dist.get_backend(group) == "gloo":
        return torch.device("cpu")
    return device


class StaticShapes:
    """Every unit's output tensors (rows, [x0]) as they cross a stage boundary: torch fixes every
    inter-stage tensor's shape once, so each stage pads its output rows to the largest micro-batch of the
    call and the next stage slices the real rows back out.

    Attributes:
        rows: per unit and output tensor, the real rows of each micro-batch id.
        pad: per unit and output tensor, the padded rows of each micro-batch id in the current call (the
            lists the [`PipeStage`][pipegnn.engines.stages.PipeStage] modules hold:
            [`pad_to_largest`][pipegnn.engines.stages.StaticShapes.pad_to_largest] updates them in place).
        width: per unit and output tensor, its width.
        dtype: the tensors' dtype (the features').
    """

    def __init__(self, model: StagedGNN):
        self.rows = [[list(rows) for rows, _ in unit.outputs()] for unit in model]
        self.pad = [[[0] * len(r) for r in unit] for unit in self.rows]
        self.width = [[width for _, width in unit.outputs()] for unit in model]
        self.dtype = model.feature_dtype

    def logit_rows(self, m: int) -> int:
        """The real rows of micro-batch ``m``'s logits (the last unit's output)."""
        return self.rows[-1][0][m]

    def pad_to_largest(self, ids: list[int]) -> None:
        """Pad every output of the micro-batches ``ids`` to the rows of the largest among them."""
        for unit_rows, unit_pad in zip(self.rows, self.pad):
            for rows, pad in zip(unit_rows, unit_pad):
                largest = max(rows[m] for m in ids)
                for m in ids:
                    pad[m] = largest

    def meta(self, unit: int, m: int, train: bool) -> tuple[Tensor, ...]:
        """Unit ``unit``'s outputs as meta tensors of micro-batch ``m``'s padded shape."""
        return tuple(torch.empty(pad[m], width, dtype=self.dtype, device="meta", requires_grad=train)
                     for pad, width in zip(self.pad[unit], self.width[unit]))


class PipeStage(nn.Module):
    """Consecutive units of the staged model as one pipeline stage with static shapes.

    Receives nothing but its input rows (``(ids,)`` on the first stage, a root argument that is never
    sent; ``(h padded, [x0 padded])`` after it), computes micro-batch `micro_batch` (set by
    [`TimedStage`][pipegnn.engines.stages.TimedStage] before each call): slices the real rows out of each
    tensor (``rows_in``: per tensor, per micro-batch), runs its units and pads each output tensor's rows to
    ``pad`` (per tensor, per micro-batch). The last stage returns only the padded logits (what the loss and
    the merged output take).

    Args:
        units: the stage's units (on ``device``).
        rows_in: real rows of each input tensor per micro-batch (None on the first stage).
        pad: padded rows of each output tensor per micro-batch (updated by the engine per call).
        last: the last stage of the pipeline.
        device: where the units compute.
        transport: where received and sent tensors live
            ([`transport_device`][pipegnn.engines.stages.transport_device]).
    """

    def __init__(self, units: list[Unit], rows_in: list[list[int]] | None, pad: list[list[int]], last: bool,
                 device: torch.device, transport: torch.device):
        super().__init__()
        self.units = nn.ModuleList(units)
        self.rows_in, self.pad, self.last = rows_in, pad, last
        self.device, self.transport = device, transport
        self.micro_batch = 0
        self._ids: dict[int, Tensor] = {}

    def _id(self, m: int) -> Tensor:
        """Micro-batch ``m``'s id tensor as the units read it (on the units' device, made once)."""
        if m not in self._ids:
            self._ids[m] = torch.tensor([float(m)], device=self.device)
        return self._ids[m]

    def forward(self, *inputs: Tensor) -> Tensor | tuple[Tensor, ...]:
        m = self.micro_batch
        rows: tuple[Tensor, ...] = () if self.rows_in is None else tuple(
            t[:n[m]].to(self.device) for t, n in zip(inputs, self.rows_in))
        x = (*rows, self._id(m))
        with computing(m):
            for unit in self.units:
                x = unit(x)
        out = [F.pad(h, (0, 0, 0, pad[m] - h.size(0))) for h, pad in zip(x[:-1], self.pad)]
        return out[0] if self.last else tuple(h.to(self.transport) for h in out)


class TimedStage(PipelineStage):
    """torch's ``PipelineStage`` that tells its [`PipeStage`][pipegnn.engines.stages.PipeStage] which
    micro-batch each call computes (``order[chunk]``: the schedule runs chunk ``i`` of the step's
    micro-batches ``order``) and puts its computations and its waits for receives on the timeline (the
    schedules call these methods; torch reports no timings of its own).

    A wait is the time from when the schedule asks for a receive to when the computation that needs it
    starts, clipped to this rank's previous box (a schedule may post receives early)."""

    submod: PipeStage  # the module it is made with

    def __init__(self, *args: Any, order: list[int], timeline: Timeline | None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.order, self.timeline = order, timeline
        self._asked: dict[tuple[str, int], float] = {}

    def _recording(self) -> Timeline | None:
        """The timeline while it records (else None)."""
        return self.timeline if self.timeline is not None and self.timeline.recording else None

    def _asked_for(self, kind: str, chunk: int, ops: list) -> list:
        if ops and (timeline := self._recording()) is not None:
            self._asked[kind, chunk] = timeline.now(self.stage_index)
        return ops

    def get_fwd_recv_ops(self, fwd_chunk_id: int) -> list:
        return self._asked_for("forward", fwd_chunk_id, super().get_fwd_recv_ops(fwd_chunk_id))

    def get_bwd_recv_ops(self, bwd_chunk_id: int) -> list:
        return self._asked_for("backward", bwd_chunk_id, super().get_bwd_recv_ops(bwd_chunk_id))

    def _timed(self, kind: str, chunk: int, run: Any) -> Any:
        timeline = self._recording()
        if timeline is None:
            return run()
        s = self.stage_index
        start = timeline.now(s)
        asked = self._asked.pop((kind, chunk), None)
        if asked is not None:
            timeline.add_wait(s, chunk, f"recv_{kind}", asked, start)
        out = run()
        timeline.add(s, chunk, kind, start, timeline.now(s))
        return out

    def forward_one_chunk(self, fwd_chunk_id: int, *args: Any, **kwargs: Any) -> Any:
        self.submod.micro_batch = self.order[fwd_chunk_id]
        return self._timed("forward", fwd_chunk_id,
                           lambda: super(TimedStage, self).forward_one_chunk(fwd_chunk_id, *args, **kwargs))

    def backward_one_chunk(self, bwd_chunk_id: int, *args: Any, **kwargs: Any) -> Any:
        return self._timed("backward", bwd_chunk_id,
                           lambda: super(TimedStage, self).backward_one_chunk(bwd_chunk_id, *args, **kwargs))


def own_stages(model: StagedGNN, units: list[range], local: list[int], shapes: StaticShapes,
               device: torch.device, transport: torch.device) -> dict[int, PipeStage]:
    """This rank's stages ``local`` (stage s holds the units ``units[s]``) as
    [`PipeStage`][pipegnn.engines.stages.PipeStage] modules on ``device``; the other ranks' units are removed
    from ``model`` (so that its parameters are this rank's)."""
    every = list(model)
    last = len(units) - 1
    modules = {s: PipeStage(every[units[s].start:units[s].stop],
                            None if s == 0 else shapes.rows[units[s].start - 1],
                            shapes.pad[units[s].stop - 1], s == last, device, transport).to(device)
               for s in local}
    own = {unit for s in local for unit in units[s]}
    for i in reversed(range(len(model))):
        if i not in own:
            del model[i]
    return modules
