"""What every engine shares: the loss normalisation that makes micro-batched gradients exact, and the
stage timeline of each training step."""
from __future__ import annotations

from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor

from pipegnn.microbatch.traffic import per_stage
from pipegnn.models.base import StagedGNN
from pipegnn.models.transform import Transform
from pipegnn.timeline import Box, PipelineInfo, Timeline

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

#: Label of targets that are computed but not part of the loss.
IGNORE = -1


def parse_device(name: str) -> torch.device:
    """``torch.device(name)``, checked against this machine.

    Raises:
        ValueError: not a device string, or CUDA / a CUDA index that this machine does not have.
    """
    try:
        device = torch.device(str(name))
    except RuntimeError as e:
        raise ValueError(f"unknown device {name!r}; valid: cpu, cuda, cuda:N") from e
    if device.type == "cuda":
        count = torch.cuda.device_count()
        if count == 0:
            raise ValueError(f"device {name!r} requested but CUDA is not available on this machine")
        if device.index is not None and device.index >= count:
            raise ValueError(f"device {name!r} does not exist: this machine has {count} CUDA "
                             f"device(s), cuda:0..cuda:{count - 1}")
    elif device.type != "cpu":
        raise ValueError(f"unsupported device {name!r}; valid: cpu, cuda, cuda:N")
    return device


def exact_loss(logits: Tensor, labels: Tensor, num_targets: int) -> Tensor:
    """Sum of per-target cross-entropies over the global number of loss targets: summed over the
    micro-batches, its gradient is the full-batch mean-loss gradient. Logits of a lower precision
    (bfloat16 under ``train.precision=bf16``) are cast to float32 first: the loss stays float32."""
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    return F.cross_entropy(logits, labels, reduction="sum", ignore_index=IGNORE) / num_targets


class Engine:
    """Runs a StagedGNN over micro-batch ids.

    Subclasses implement `outputs`, yielding logits in micro-batch order, in as many pieces as
    the engine can back-propagate separately, and set `info` (what the pipeline is) and
    `timeline` (None when ``engine.timeline=false``).
    """

    devices: list[torch.device]
    info: PipelineInfo
    timeline: Timeline | None = None
    #: the first layer's Transform unit when this process runs it (its once-per-step transform)
    first: Transform | None = None
    #: the once-per-step first transform computes each row when a micro-batch first needs it
    #: ([`Transform.begin_step`][pipegnn.models.transform.Transform.begin_step]), not all rows before the
    #: first micro-batch
    lazy_first = False
    _id_tensors: dict[tuple, Tensor] | None = None  # id_tensor's, per set of ids and grad mode

    @property
    def input_device(self) -> torch.device:
        return self.devices[0]

    @property
    def output_device(self) -> torch.device:
        return self.devices[-1]

    def outputs(self, ids: Tensor) -> Iterator[Tensor]:
        raise NotImplementedError

    def id_tensor(self, ids: Tensor) -> Tensor:
        """Micro-batch ids as the pipe carries them: float (exact below 2**24), requiring grad while
        training, because torchgpipe back-propagates through every output of a checkpointed stage.
        Made once per set of ids and kept on the device: a copy from host memory each step would wait
        for the device (the units never read its values:
        [`pipegnn.microbatch.current`][pipegnn.microbatch.current])."""
        grad = torch.is_grad_enabled()
        key = (tuple(ids.tolist()), grad)
        if self._id_tensors is None:
            self._id_tensors = {}
        if key not in self._id_tensors:
            self._id_tensors[key] = ids.to(self.input_device, torch.float32).requires_grad_(grad)
        return self._id_tensors[key]

    def train_step(self, ids: Tensor, labels: Tensor, num_targets: int) -> float:
        """One training step ([`step_loss`][pipegnn.engines.base.Engine.step_loss]), its loss read on the
        host: the step's one wait for the device."""
        return float(self.step_loss(ids, labels, num_targets))

    def step_loss(self, ids: Tensor, labels: Tensor, num_targets: int) -> Tensor:
        """Forward and backward over all micro-batches; gradients accumulate in the parameters.

        The loss is [`exact_loss`][pipegnn.engines.base.exact_loss], so the accumulated gradient equals the
        full-batch mean-loss gradient. The step's stage timeline is recorded (read it with
        [`step_boxes`][pipegnn.engines.base.Engine.step_boxes]).

        Args:
            ids: micro-batch ids.
            labels: one label per target in micro-batch order; ``IGNORE`` (-1) for targets that are
                computed but not in the loss (e.g. ``microbatch.targets=all``).
            num_targets: number of labelled targets over all micro-batches.

        Returns:
            The mean training loss over the labelled targets, a scalar on the output device (not read
            on the host here).
        """
        if self.timeline is not None:
            self.timeline.begin()
        self.begin_first(ids)
        total = torch.zeros((), device=self.output_device)
        offset = 0
        for logits in self.outputs(ids):
            y = labels[offset:offset + logits.size(0)]
            offset += logits.size(0)
            loss = exact_loss(logits, y, num_targets)
            loss.backward()
            total += loss.detach()
        self.end_first()
        return total

    def begin_first(self, ids: Tensor) -> None:
        """Run the first layer's transform once for the step's micro-batches ``ids`` (if this process
        holds it and it runs once per step), as its own box on stage 0's timeline."""
        first = self.first
        if first is not None and first.once_per_step:
            if self.lazy_first:  # its rows are transformed inside the micro-batches' forward boxes
                first.begin_step(ids.tolist(), lazily=True)
            else:
                self._first_box("shared_forward", lambda: first.begin_step(ids.tolist()))

    def end_first(self) -> None:
        """Back-propagate the first layer's once-per-step transform (after the last micro-batch)."""
        if self.first is not None and self.first.once_per_step:
            self._first_box("shared_backward", self.first.end_step)

    def _first_box(self, kind: str, work: Callable[[], object]) -> None:
        timeline = self.timeline if self.timeline is not None and self.timeline.recording else None
        start = timeline.now(0) if timeline is not None else None
        with torch.profiler.record_function(f"first-layer transform ({kind.split('_')[1]})"):
            work()
        if timeline is not None:
            timeline.add(0, -1, kind, start, timeline.now(0))

    def redraw(self, model: StagedGNN, ids: Tensor) -> None:
        """The micro-batches ``ids`` of ``model`` were replaced (sampled halos' new draw,
        [`StagedGNN.replace`][pipegnn.models.base.StagedGNN.replace]): forget what was built for their
        shapes. A collective in a multi-process pipeline: call on every rank."""

    def step_boxes(self) -> list[Box] | None:
        """The stage timeline of the last training step (every stage's boxes), or None without a
        timeline. Call once per step, after the step's closing synchronisation."""
        return self.timeline.end() if self.timeline is not None else None

    @torch.no_grad()
    def refresh(self, model: StagedGNN, ids: Tensor) -> Tensor:
        """Layer-wise inference over ``ids``'s micro-batches, refreshing every history cache
        (historical halos; [`StagedGNN.refresh`][pipegnn.models.base.StagedGNN.refresh]); returns the logits
        in micro-batch order."""
        return model.refresh(ids)

    def history_traffic(self, model: StagedGNN) -> dict[str, dict[str, float]]:
        """Every history cache's traffic in the current step, by unit name (a collective in a
        multi-process pipeline: call on every rank)."""
        return model.history_traffic()

    def history_per_stage(self, model: StagedGNN) -> list[dict[str, Any]] | None:
        """Per pipeline stage, the current training step's historical traffic: rows and bytes pulled
        from and pushed to the stage's history caches and the mean age (steps) of the rows pulled,
        per cache then averaged; None without history caches."""
        traffic = self.history_traffic(model)
        return per_stage(traffic, self.info.stage_units) if traffic else None

    @torch.no_grad()
    def predict(self, ids: Tensor) -> Tensor:
        """Logits of all targets of ``ids``'s micro-batches, concatenated in micro-batch order."""
        self.begin_first(ids)
        logits = torch.cat(list(self.outputs(ids)))
        self.end_first()
        return logits
