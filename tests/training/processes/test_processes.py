"""pipegnn.training.processes: what the workers of a pipelining run are forked from, and the process-group
backend for each layout of devices (CPU only here: the choices are pure functions of the config, and the
forkserver's imports are read in a fresh interpreter)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from pipegnn.config.schema import PipeliningEngineConfig
from pipegnn.config.typed import group_config, run_config
from pipegnn.errors import ConfigError
from pipegnn.training.launch import check_run
from pipegnn.training.processes.backend import dist_backend, shared_devices
from pipegnn.training.processes.group import check_launch

from tests.helpers import ROOT, make_cfg

#: Modules whose import makes CUDA unusable in processes forked afterwards (measured for PyG on a CUDA
#: machine; DGL and torchgpipe load CUDA libraries of their own at import), and the trainer, which
#: imports them. (Not triton: a CUDA build's torch.distributed.pipelining imports it, and was measured
#: to leave forked children able to use CUDA.)
_POISON = ("torch_geometric", "dgl", "torchgpipe", "pipegnn.training.launch", "pipegnn.models",
           "pipegnn.backends")

#: Functions that initialise CUDA in the calling process.
_CUDA_CALLS = ("is_available", "init", "_lazy_init", "current_device", "set_device", "get_device_name",
               "get_device_properties", "get_device_capability", "synchronize", "mem_get_info")


def test_forkserver_preload_touches_neither_cuda_nor_the_graph_libraries() -> None:
    """What the forkserver imports (engine.start_method=forkserver) on a machine with a CUDA device must
    leave CUDA untouched, or every worker forked from it fails there with "CUDA error: initialization
    error" (measured with a preload of pipegnn.training.launch, which imports PyG). In a fresh interpreter
    that sees one CUDA device (its count pretended, as NVML would give it): import torch, watch the calls that
    initialise CUDA, import the preload; none of the poisoning modules is loaded and nothing called into
    CUDA."""
    code = f"""
import importlib, json, sys
import torch
torch.cuda.device_count = lambda: 1
calls = []
for name in {_CUDA_CALLS!r}:
    def spy(*args, _call=getattr(torch.cuda, name), _name=name, **kwargs):
        calls.append(_name)
        return _call(*args, **kwargs)
    setattr(torch.cuda, name, spy)
from pipegnn.training.processes.spawn import forkserver_preload
preload = forkserver_preload("pipegnn.training.launch")
for module in preload:
    importlib.import_module(module)
print(json.dumps({{"preload": preload, "modules": sorted(sys.modules), "calls": calls,
                  "initialized": torch.cuda.is_initialized()}}))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert "torch" in found["preload"] and "pipegnn.training.processes.spawn" in found["preload"]
    loaded = [m for m in found["modules"] if m.split(".")[0] in _POISON or m.startswith(_POISON)]
    assert loaded == [], loaded
    assert found["calls"] == [] and not found["initialized"]


def test_without_cuda_devices_the_forkserver_preloads_the_trainer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no CUDA device is visible there is nothing to make unusable: the trainer is preloaded, and a
    worker starts without importing PyG (results/benchmarks/start_method.txt)."""
    from pipegnn.training.processes.spawn import FORKSERVER_PRELOAD, forkserver_preload

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert forkserver_preload("pipegnn.training.launch") == [*FORKSERVER_PRELOAD, "pipegnn.training.launch"]
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert forkserver_preload("pipegnn.training.launch") == list(FORKSERVER_PRELOAD)


def _engine(devices: list[str], backend: str = "auto", launcher: str = "spawn") -> PipeliningEngineConfig:
    return group_config("engine", {"name": "pipelining", "devices": devices, "backend": backend,
                                   "launcher": launcher})


@pytest.mark.parametrize("devices, local_world, backend, shared", [
    (["cpu", "cpu"], None, "gloo", []),
    (["cuda:0", "cuda:1"], None, "nccl", []),
    (["cuda:0", "cuda:0"], None, "gloo", ["cuda:0"]),
    (["cuda", "cuda:0"], None, "gloo", ["cuda:0"]),  # "cuda" is the current device, cuda:0
    (["cuda:0", "cuda:1", "cuda:1", "cuda:2"], None, "gloo", ["cuda:1"]),
    # torchrun on two nodes, one process each: cuda:0 of each node
    (["cuda:0", "cuda:0"], "1", "nccl", []),
    (["cuda:0", "cuda:1", "cuda:0", "cuda:1"], "2", "nccl", []),
    (["cuda:0", "cuda:0", "cuda:0", "cuda:1"], "2", "gloo", ["cuda:0"]),
])
def test_auto_backend_takes_nccl_only_where_every_rank_has_its_own_gpu(
        monkeypatch: pytest.MonkeyPatch, devices: list[str], local_world: str | None, backend: str,
        shared: list[str]) -> None:
    """NCCL refuses two ranks on one GPU ("Duplicate GPU detected", measured on an H200): auto chooses
    gloo there; ranks on different machines (torchrun's LOCAL_WORLD_SIZE per node) may name the same
    index."""
    launcher = "spawn" if local_world is None else "external"
    if local_world is not None:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", local_world)
    engine = _engine(devices, launcher=launcher)
    assert shared_devices(engine) == shared
    assert dist_backend(engine) == backend
    assert dist_backend(_engine(devices, "gloo", launcher)) == "gloo"


def test_explicit_nccl_on_a_shared_gpu_is_invalid_before_training(monkeypatch: pytest.MonkeyPatch) -> None:
    """engine.backend=nccl with two ranks on cuda:0 is refused by the processes' check (before any worker
    starts), naming the device and what would work; one GPU per rank passes. (Two CUDA devices are
    pretended here: the check reads only their count.)"""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    shared = make_cfg("engine=pipelining", "engine.backend=nccl", "engine.devices=[cuda:0,cuda:0]")
    with pytest.raises(ConfigError, match=r"cuda:0 to several ranks.*engine.backend=auto or gloo"):
        check_launch(run_config(shared).engine)
    with pytest.raises(ConfigError, match=r"cuda:0 to several ranks"):
        check_run(shared)  # the run's checks reach it
    apart = make_cfg("engine=pipelining", "engine.backend=nccl", "engine.devices=[cuda:0,cuda:1]")
    check_launch(run_config(apart).engine)
    check_run(apart)
