"""torchgpipe's GPipe over the staged model: units split across devices, micro-batches pipelined."""
from __future__ import annotations

from typing import Iterator

import torch
from torch import Tensor
from torchgpipe import GPipe
from torchgpipe.checkpoint import is_recomputing

from pipegnn.engines.base import Engine
from pipegnn.models.base import StagedGNN
from pipegnn.timeline import HookProbe, PipelineInfo, Timeline

__all__ = ["CHECKPOINT_MODES", "GPipeEngine", "SAME_DEVICE_NOTE"]

CHECKPOINT_MODES = ("always", "except_last", "never")
SAME_DEVICE_NOTE = ("torchgpipe runs all partitions on one device in one worker thread, one after "
                    "another: stages on the same device never overlap (on CPU, use engine=pipelining: "
                    "one process per stage)")


class GPipeEngine(Engine):
    """GPipe with one micro-batch per pipeline chunk.

    Args:
        model: the staged model, with its plans attached.
        devices: one device per partition.
        balance: units per partition (sums to the number of units, two per layer).
        chunks: micro-batches per step; each forward passes exactly ``chunks`` ids.
        checkpoint: torchgpipe checkpoint mode (``always``, ``except_last``, ``never``).
        timeline: record the stage timeline of every training step.
        balance_source, unit_costs: how the balance was chosen, for the record.
    """

    def __init__(self, model: StagedGNN, devices: list[torch.device], balance: list[int], chunks: int,
                 checkpoint: str = "except_last", timeline: bool = True, balance_source: str = "config",
                 unit_costs: dict[str, float] | None = None):
        names = model.unit_names
        self.first = model[0]
        self.pipe = GPipe(model, balance=balance, devices=devices, chunks=chunks, checkpoint=checkpoint)
        self.devices = list(self.pipe.devices)
        self.chunks = chunks
        overlap = len(set(self.devices)) > 1
        bounds = [sum(balance[:i]) for i in range(len(balance) + 1)]
        self.info = PipelineInfo("gpipe", "gpipe", chunks, [names[a:b] for a, b in zip(bounds, bounds[1:])],
                                 list(range(len(balance))), [str(d) for d in self.devices], overlap,
                                 None if overlap else SAME_DEVICE_NOTE, balance_source, unit_costs)
        if timeline:
            self.timeline = Timeline(self.devices)
            HookProbe(self.timeline, list(self.pipe.partitions), recomputing=is_recomputing)

    def outputs(self, ids: Tensor) -> Iterator[Tensor]:
        if ids.numel() != self.chunks:
            raise ValueError(f"GPipe engine runs {self.chunks} micro-batches per call, got {ids.numel()}")
        yield self.pipe((self.id_tensor(ids),))[0]
