"""torchgpipe's GPipe over the staged model: layers split across devices, micro-batches pipelined."""
from __future__ import annotations

from typing import Iterator

import torch
from torch import Tensor
from torchgpipe import GPipe

from pipegnn.engines.base import Engine
from pipegnn.models.base import StagedGNN

__all__ = ["CHECKPOINT_MODES", "GPipeEngine", "even_balance"]

CHECKPOINT_MODES = ("always", "except_last", "never")


def even_balance(num_layers: int, num_devices: int) -> list[int]:
    """Layers per device, as even as possible (earlier devices take the remainder)."""
    base, extra = divmod(num_layers, num_devices)
    return [base + (1 if i < extra else 0) for i in range(num_devices)]


class GPipeEngine(Engine):
    """GPipe with one micro-batch per pipeline chunk.

    Args:
        model: the staged model, with its plans attached.
        devices: one device per partition.
        balance: layers per partition (sums to the number of layers).
        chunks: micro-batches per step; each forward passes exactly ``chunks`` ids.
        checkpoint: torchgpipe checkpoint mode (``always``, ``except_last``, ``never``).
    """

    def __init__(self, model: StagedGNN, devices: list[torch.device], balance: list[int], chunks: int,
                 checkpoint: str = "except_last"):
        self.pipe = GPipe(model, balance=balance, devices=devices, chunks=chunks, checkpoint=checkpoint)
        self.devices = list(self.pipe.devices)
        self.chunks = chunks

    def outputs(self, ids: Tensor) -> Iterator[Tensor]:
        if ids.numel() != self.chunks:
            raise ValueError(f"GPipe engine runs {self.chunks} micro-batches per call, got {ids.numel()}")
        yield self.pipe((self.id_tensor(ids),))[0]
