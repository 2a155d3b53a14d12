"""The process-group backend of a ``pipelining`` run (``engine.backend``), chosen from its devices.

Kept apart from [`pipegnn.training.processes.group`][pipegnn.training.processes.group] so that the launcher
can name it without importing the engines (and through them PyG), which the forkserver it starts from must
never import (`pipegnn.training.processes.spawn.FORKSERVER_PRELOAD`).
"""
from __future__ import annotations

import os

import torch

from pipegnn.config.choices import DistBackend, Launcher
from pipegnn.config.schema import PipeliningEngineConfig

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


def ranks_per_node(engine: PipeliningEngineConfig) -> int:
    """How many consecutive ranks run on one machine: all of them when the run spawns its workers;
    under torchrun its ``LOCAL_WORLD_SIZE`` (every node runs as many processes)."""
    if engine.launcher is Launcher.external and "LOCAL_WORLD_SIZE" in os.environ:
        return int(os.environ["LOCAL_WORLD_SIZE"])
    return len(engine.devices)


def shared_devices(engine: PipeliningEngineConfig) -> list[str]:
    """The CUDA devices that two ranks of one machine would share (named twice among one node's
    entries of ``engine.devices``; ``cuda`` is ``cuda:0``), sorted; empty when every rank has its own."""
    names = [torch.device(d) for d in engine.devices]
    devices = [f"cuda:{d.index or 0}" if d.type == "cuda" else str(d) for d in names]
    per_node, shared = max(1, ranks_per_node(engine)), set()
    for start in range(0, len(devices), per_node):
        node = devices[start:start + per_node]
        shared |= {d for d in node if d.startswith("cuda") and node.count(d) > 1}
    return sorted(shared)


def dist_backend(engine: PipeliningEngineConfig) -> str:
    """The process-group backend: ``engine.backend``, or for ``auto`` gloo on CPU, nccl where every
    rank has a GPU of its own, and gloo where ranks share a GPU (NCCL refuses a device shared by two
    ranks; the pipeline's traffic then goes through host memory, see
    [`pipegnn.engines.stages`][pipegnn.engines.stages])."""
    if engine.backend is DistBackend.auto:
        cuda = engine.devices[0].startswith("cuda")
        return "nccl" if cuda and not shared_devices(engine) else "gloo"
    return str(engine.backend)
