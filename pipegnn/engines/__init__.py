"""Engines that run a staged model over micro-batches: ``single``, ``gpipe`` and ``pipelining``."""
from __future__ import annotations

from typing import Any, Mapping

import torch.distributed as dist

from pipegnn.engines.base import IGNORE, Engine, parse_device
from pipegnn.engines.gpipe import CHECKPOINT_MODES, GPipeEngine, even_balance
from pipegnn.engines.pipelining import (DIST_BACKENDS, LAUNCHERS, SCHEDULES, START_METHODS,
                                        PipeliningEngine, stage_layers)
from pipegnn.engines.single import SingleEngine
from pipegnn.models.base import StagedGNN

__all__ = ["CHECKPOINT_MODES", "DIST_BACKENDS", "ENGINES", "IGNORE", "LAUNCHERS", "SCHEDULES",
           "START_METHODS", "Engine", "GPipeEngine", "PipeliningEngine", "SingleEngine", "build_engine",
           "even_balance", "parse_device", "stage_layers"]

ENGINES = ("single", "gpipe", "pipelining")


def build_engine(engine: Mapping[str, Any], model: StagedGNN, chunks: int) -> Engine:
    """The engine an (already validated) ``engine`` config describes (``pipelining``: this process's
    rank, inside :func:`pipegnn.engines.pipelining.process_group`)."""
    if engine["name"] == "single":
        return SingleEngine(model, parse_device(engine["device"]))
    if engine["name"] == "pipelining":
        return PipeliningEngine(model, parse_device(engine["devices"][dist.get_rank()]), chunks,
                                engine["schedule"], engine["balance"], int(engine["virtual_stages"]))
    devices = [parse_device(d) for d in engine["devices"]]
    balance = list(engine["balance"] or even_balance(model.num_layers, len(devices)))
    return GPipeEngine(model, devices, balance, chunks, engine["checkpoint"])
