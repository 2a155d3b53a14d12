"""One device, micro-batches one after another, gradients accumulated."""
from __future__ import annotations

from typing import Iterator

import torch
from torch import Tensor

from pipegnn.engines.base import Engine
from pipegnn.microbatch.current import computing
from pipegnn.models.base import StagedGNN
from pipegnn.timeline import HookProbe, PipelineInfo, Timeline

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


class SingleEngine(Engine):
    """Runs every micro-batch through the whole model on ``device`` (one stage).

    Each micro-batch is back-propagated before the next one runs, so only one micro-batch's
    activations are alive at a time.

    Args:
        model: the staged model, with its plans attached.
        device: where it runs.
        chunks: micro-batches per training step.
        timeline: record the stage timeline of every training step.
    """

    def __init__(self, model: StagedGNN, device: torch.device, chunks: int = 1, timeline: bool = True):
        self.model = model.to(device)
        self.devices = [device]
        self.first = model.first()
        self.info = PipelineInfo("single", "single", chunks, [model.unit_names], [0], [str(device)],
                                 overlap_possible=False, overlap_note="one stage")
        if timeline:
            self.timeline = Timeline(self.devices)
            HookProbe(self.timeline, [self.model])

    def outputs(self, ids: Tensor) -> Iterator[Tensor]:
        carried = self.id_tensor(ids)
        for i, m in enumerate(ids.tolist()):
            with computing(m):
                logits = self.model((carried[i:i + 1],))[0]
            yield logits
