"""The process group of a ``pipelining`` run: joining it from torchrun's environment, the rank-prefixed
logging of its processes, the folder rank 0 claimed, and the per-rank peak memory gathered at the end."""
from __future__ import annotations

import logging
import os
import socket
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, Iterator

import torch
import torch.distributed as dist

from pipegnn.config.choices import DistBackend, Launcher
from pipegnn.config.schema import Config, PipeliningEngineConfig
from pipegnn.engines.base import parse_device
from pipegnn.errors import ConfigError
from pipegnn.measure import peak_device_bytes, peak_rss_bytes
from pipegnn.training.processes.backend import dist_backend, shared_devices

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


def check_launch(engine: PipeliningEngineConfig) -> None:
    """``engine=pipelining``'s processes, checked before any starts
    ([`pipegnn.engines.checks`][pipegnn.engines.checks] checks the rest of the pipeline): a backend that can
    join them on their devices.

    Raises:
        ConfigError: naming the bad value and what would be valid.
    """
    devices = list(engine.devices)
    kinds = {d.split(":")[0] for d in devices}
    nccl = engine.backend is DistBackend.nccl
    if nccl and kinds != {"cuda"}:
        raise ConfigError(f"engine.backend=nccl needs CUDA devices, got engine.devices={devices}; use "
                          "backend=gloo (or auto) on CPU")
    shared = shared_devices(engine) if nccl else []
    if shared:
        raise ConfigError(f"engine.backend=nccl cannot run two ranks on one GPU (NCCL refuses a shared "
                          f"device), but engine.devices={devices} gives {shared[0]} to several ranks of one "
                          "machine; use engine.backend=auto or gloo (their traffic then goes through host "
                          "memory), or one GPU per rank")


def is_secondary_rank(cfg: Config | None) -> bool:
    """True in a process of an externally launched pipeline other than rank 0 (which writes no record);
    for a config that could not be read (None), in any process whose torchrun ``RANK`` is not 0."""
    external = cfg is None or (isinstance(cfg.engine, PipeliningEngineConfig)
                               and cfg.engine.launcher is Launcher.external)
    return external and int(os.environ.get("RANK", "0")) != 0


@contextmanager
def process_group(engine: PipeliningEngineConfig) -> Iterator[tuple[int, int]]:
    """Join the process group described by torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT) for the duration of the block; yields ``(rank, world_size)``. Log records of this
    process are prefixed with its rank, and ranks other than 0 log warnings and errors only.

    Raises:
        ConfigError: the environment is missing or its world size is not ``len(engine.devices)``.
    """
    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise ConfigError(f"engine.launcher=external needs torchrun's environment ({', '.join(missing)} "
                          "not set): start it with `torchrun --nproc-per-node N experiments/train.py "
                          "engine=pipelining engine.launcher=external ...`, or use engine.launcher=spawn")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    devices = list(engine.devices)
    if world != len(devices):
        raise ConfigError(f"torchrun started {world} process(es) but engine.devices={devices} has "
                          f"{len(devices)} entries; one process per entry: make --nnodes x "
                          f"--nproc-per-node equal {len(devices)}, or change engine.devices")
    device = parse_device(devices[rank])
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = dist_backend(engine)
    dist.init_process_group(backend, rank=rank, world_size=world,
                            timeout=timedelta(seconds=engine.timeout_s),
                            device_id=device if backend == "nccl" else None)
    factory = logging.getLogRecordFactory()

    def prefixed(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        record.msg = f"[rank {rank}] {record.msg}"
        return record

    logging.setLogRecordFactory(prefixed)
    package = logging.getLogger("pipegnn")
    level = package.level
    if rank != 0:
        package.setLevel(logging.WARNING)
    try:
        yield rank, world
    finally:
        logging.setLogRecordFactory(factory)
        package.setLevel(level)
        dist.destroy_process_group()


def rank0_folder(state_dir: str | Path | None) -> str | Path | None:
    """Where this rank of a torchrun pipeline keeps its checkpoints (a collective: call on all ranks):
    rank 0's folder when this rank runs on rank 0's host, else its own ``state_dir``. Rank 0 claims the
    run's folder, and a timestamped one another run holds moves to ``<dir>-2`` (a ``flock`` on this
    host), which the other ranks' Hydra does not know: their checkpoints went into the other run's
    folder. A rank on another host has its own disk, and its own ``hydra.run.dir`` there."""
    sent: list[Any] = [socket.gethostname(), None if state_dir is None else str(state_dir)]
    dist.broadcast_object_list(sent, src=0)
    host, folder = sent
    return folder if host == socket.gethostname() else state_dir


def gather_memory(devices: list[torch.device]) -> dict[str, Any]:
    """Peak memory of every rank (a collective: call on all ranks): the largest peak RSS, the peak of
    each rank, and the peak of each rank's CUDA device."""
    mine = (peak_rss_bytes(), peak_device_bytes(devices))
    ranks: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, mine)
    rss = [r[0] for r in ranks]
    return {"peak_rss_bytes": max((r for r in rss if r is not None), default=None),
            "peak_rss_bytes_per_rank": rss,
            "peak_device_bytes": {f"rank{i}:{d}": b for i, r in enumerate(ranks) for d, b in r[1].items()}}
