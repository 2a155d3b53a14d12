"""One device, micro-batches one after another, gradients accumulated."""
from __future__ import annotations

from typing import Iterator

import torch
from torch import Tensor

from pipegnn.engines.base import Engine
from pipegnn.models.base import StagedGNN

__all__ = ["SingleEngine"]


class SingleEngine(Engine):
    """Runs every micro-batch through the whole model on ``device``.

    Each micro-batch is back-propagated before the next one runs, so only one micro-batch's
    activations are alive at a time.
    """

    def __init__(self, model: StagedGNN, device: torch.device):
        self.model = model.to(device)
        self.devices = [device]

    def outputs(self, ids: Tensor) -> Iterator[Tensor]:
        ids = self.id_tensor(ids)
        for i in range(ids.numel()):
            yield self.model((ids[i:i + 1],))[0]
