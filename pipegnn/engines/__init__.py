"""Engines that run a staged model over micro-batches: ``single`` and ``gpipe``."""
from __future__ import annotations

from typing import Any, Mapping

from pipegnn.engines.base import IGNORE, Engine, parse_device
from pipegnn.engines.gpipe import CHECKPOINT_MODES, GPipeEngine, even_balance
from pipegnn.engines.single import SingleEngine
from pipegnn.models.base import StagedGNN

__all__ = ["CHECKPOINT_MODES", "ENGINES", "IGNORE", "Engine", "GPipeEngine", "SingleEngine", "build_engine",
           "even_balance", "parse_device"]

ENGINES = ("single", "gpipe")


def build_engine(engine: Mapping[str, Any], model: StagedGNN, chunks: int) -> Engine:
    """The engine an (already validated) ``engine`` config describes."""
    if engine["name"] == "single":
        return SingleEngine(model, parse_device(engine["device"]))
    devices = [parse_device(d) for d in engine["devices"]]
    balance = list(engine["balance"] or even_balance(model.num_layers, len(devices)))
    return GPipeEngine(model, devices, balance, chunks, engine["checkpoint"])
