"""torchgpipe's GPipe over the staged model: units split across devices, micro-batches pipelined."""
from __future__ import annotations

from typing import Iterator

import torch
from torch import Tensor
from torchgpipe import GPipe
from torchgpipe.checkpoint import is_recomputing
from torchgpipe.skip.tracker import current_skip_tracker

from pipegnn.engines.base import Engine
from pipegnn.microbatch.current import resolving
from pipegnn.models.base import StagedGNN
from pipegnn.timeline import HookProbe, PipelineInfo, Timeline

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

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
        self.first = model.first()
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
        # installed until the step's backward is done: checkpointed partitions recompute in it
        with resolving(_StepIds(ids.tolist())):
            yield self.pipe((self.id_tensor(ids),))[0]


class _StepIds:
    """The micro-batch a unit computes in a GPipe step, from host metadata only.

    torchgpipe runs each micro-batch's every partition, and its recomputation, under the micro-batch's
    own skip tracker (a thread-local it sets in its worker threads). The first unit of a micro-batch to
    ask runs in the first partition, whose input is the micro-batch's chunk of the step's id tensor
    (``torch.chunk``: a view whose storage offset is its position in the step); the answer is kept by
    tracker for the micro-batch's later partitions, whose ids may have been copied to another device.

    Args:
        order: the step's micro-batch ids, in the order the pipe's input holds them.
    """

    def __init__(self, order: list[int]):
        self.order = order
        self.by_tracker: dict[object, int] = {}

    def __call__(self, ids: Tensor) -> int:
        tracker = current_skip_tracker()
        m = self.by_tracker.get(tracker)
        if m is None:
            m = self.by_tracker[tracker] = self.order[ids.storage_offset()]
        return m
