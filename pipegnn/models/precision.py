"""Training precision (``train.precision``): ``fp32`` or ``bf16`` mixed precision.

``bf16`` keeps the node features in bfloat16 (half the memory of the feature matrix) and runs every
pipeline unit's forward under ``torch.autocast(device_type, dtype=torch.bfloat16)``: matmuls (the
layers' dense transforms) compute in bfloat16, and each unit hands its output rows on in bfloat16, so
the activations between units, the tensors pipeline stages send each other and the history caches of
historical halos are bfloat16 too. Parameters, their gradients, the optimiser's state and the loss
stay float32 (the logits are cast up before the cross-entropy): torch's automatic mixed precision
recipe, which for bfloat16 needs no loss scaling (bfloat16 has float32's exponent range).

Autocast is entered inside each unit ([`pipegnn.models.base.Unit`][pipegnn.models.base.Unit]), not around an
engine's loop: autocast state is thread-local, and torchgpipe runs units in its own worker threads (and
re-runs them there for checkpoint recomputation), so a context around the engine call would not
reach them; inside the unit it covers every engine, evaluation, the layer-wise refresh of historical
halos and the unit timing of ``engine.balance=auto``.

``fp32`` changes nothing: no autocast, everything in the parameters' dtype (float64 in the exactness
tests).
"""
from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch

from pipegnn.config.choices import Precision, names
from pipegnn.errors import check_choice

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

#: ``train.precision`` values.
PRECISIONS = names(Precision)
#: The autocast dtype of each precision (None: no autocast).
_AUTOCAST: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16}


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The dtype ``precision`` computes in under autocast, and stores features and activations in
    (None for ``fp32``: no autocast, the parameters' dtype)."""
    check_choice(precision, PRECISIONS, "train.precision")
    return _AUTOCAST[precision]


def autocast(device: torch.device, dtype: torch.dtype | None) -> AbstractContextManager:
    """``torch.autocast`` to ``dtype`` for ``device``'s type (cpu, cuda), or no context when ``dtype``
    is None."""
    if dtype is None:
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def active_autocast_dtype(device: torch.device) -> torch.dtype | None:
    """The dtype autocast computes in on ``device``'s type in this thread now, or None outside autocast."""
    return torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else None


def dtype_name(dtype: torch.dtype) -> str:
    """``bfloat16`` for ``torch.bfloat16`` (for records)."""
    return str(dtype).removeprefix("torch.")
