"""``engine.launcher=spawn``: a run starts its pipeline's worker processes on this machine.

The parent process (a normal ``run``, e.g. one job of a Hydra sweep) starts one worker per entry of
``engine.devices`` with ``torch.multiprocessing.start_processes``. Each worker gets torchrun's
environment (RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1, a free MASTER_PORT), so it runs exactly what a
process started by ``torchrun`` with ``engine.launcher=external`` runs: the whole ``run`` for its rank.
Workers write their result (rank 0: its record) into a temporary folder; the parent waits with a
deadline (``engine.timeout_s``), and a worker that fails, crashes or outlives the deadline ends the
others and becomes the parent's error. torch provides the process start and the failure detection
(``ProcessContext.join`` terminates the rest when one exits non-zero); the environment, the result
hand-over, the deadline and the logging set-up are written here.
"""
from __future__ import annotations

import copy
import json
import logging
import os
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing as mp
from torch.multiprocessing.spawn import ProcessException, ProcessRaisedException

from pipegnn.errors import ConfigError
from pipegnn.measure import peak_rss_bytes

__all__ = ["WorkerFailed", "spawn"]

log = logging.getLogger(__name__)

_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"
#: Record fields the parent takes from rank 0's record.
_MERGED = ("dataset", "model", "epochs", "final", "microbatch", "memory", "pipeline", "trace")


class WorkerFailed(RuntimeError):
    """A pipeline worker failed; ``worker_traceback`` is the worker's traceback (for the record)."""

    def __init__(self, message: str, worker_traceback: str | None = None):
        super().__init__(message)
        self.worker_traceback = worker_traceback


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _log_targets() -> dict[str, Any]:
    """Where the parent logs (its root logger's files, its level and format), for the workers."""
    root = logging.getLogger()
    files = [h for h in root.handlers if isinstance(h, logging.FileHandler)]
    fmt = next((h.formatter._fmt for h in files if h.formatter is not None and h.formatter._fmt), _FORMAT)
    streams = {getattr(h, "stream", None) for h in root.handlers if not isinstance(h, logging.FileHandler)}
    console = "stdout" if streams & {sys.stdout, sys.__stdout__} else "stderr"  # Hydra logs to stdout
    return {"files": [h.baseFilename for h in files], "level": root.level, "format": fmt,
            "console": console}


def _configure_logging(targets: dict[str, Any]) -> None:
    """Workers append to the parent's log files and write to its console stream (stdout under
    Hydra, else stderr); messages carry the rank (see ``process_group``)."""
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    handlers: list[logging.Handler] = [logging.FileHandler(f, mode="a") for f in targets["files"]]
    handlers.append(logging.StreamHandler(sys.stdout if targets["console"] == "stdout" else sys.stderr))
    for h in handlers:
        h.setFormatter(logging.Formatter(targets["format"]))
        root.addHandler(h)
    root.setLevel(targets["level"])


def _worker(rank: int, world: int, port: int, cfg: dict[str, Any], folder: str,
            targets: dict[str, Any]) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    _configure_logging(targets)
    from pipegnn.train import run

    cfg = copy.deepcopy(cfg)
    cfg["engine"]["launcher"] = "external"  # this process is one rank, as under torchrun
    record = run(cfg)
    result = record if rank == 0 else {k: record.get(k) for k in ("status", "error", "traceback")}
    path = Path(folder) / f"rank{rank}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, default=str))
    os.replace(tmp, path)
    if record["status"] != "completed":
        sys.exit(1)  # the parent's join then ends the other ranks at once


def _results(folder: Path, world: int) -> dict[int, dict[str, Any]]:
    results = {}
    for rank in range(world):
        path = folder / f"rank{rank}.json"
        if path.is_file():
            results[rank] = json.loads(path.read_text())
    return results


def _stop(processes: list[Any], grace: float = 5.0) -> None:
    for p in processes:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + grace
    for p in processes:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()


def _failure(e: ProcessException, results: dict[int, dict[str, Any]]) -> Exception:
    """The parent's exception for a failed worker: the worker's invalid configuration or out-of-memory
    error as such, else ``WorkerFailed`` with the worker's message and traceback."""
    failed = {r: res for r, res in results.items() if res.get("status") != "completed"}
    # A rank that found an invalid configuration or ran out of memory is the cause; the others may only
    # have lost their peer. Otherwise the rank that exited first.
    rank = next((r for r, res in failed.items() if res["status"] in ("invalid", "oom")),
                e.error_index if e.error_index in failed else next(iter(failed), e.error_index))
    res = failed.get(rank)
    if res is None:  # no result written: the worker crashed or raised outside the run
        trace = str(e).strip() if isinstance(e, ProcessRaisedException) else None
        last = trace.splitlines()[-1] if trace else str(e)
        return WorkerFailed(f"pipeline worker rank {e.error_index} failed: {last}", trace)
    if res["status"] == "invalid":
        return ConfigError(res["error"])
    if res["status"] == "oom":
        return MemoryError(f"pipeline worker rank {rank}: {res['error']}")
    return WorkerFailed(f"pipeline worker rank {rank} failed: {res['error']}", res.get("traceback"))


def spawn(cfg: dict[str, Any], record: dict[str, Any]) -> list[torch.device]:
    """Run the pipeline in ``len(engine.devices)`` worker processes and merge rank 0's record into
    ``record``; returns the parent's devices (none).

    Raises:
        ConfigError: a worker found the configuration invalid (e.g. chunks > targets).
        MemoryError: a worker ran out of memory.
        WorkerFailed: a worker failed or crashed.
        TimeoutError: the workers did not finish within ``engine.timeout_s``.
    """
    engine = cfg["engine"]
    world, timeout = len(engine["devices"]), float(engine["timeout_s"])
    method = engine.get("start_method", "spawn")
    if method == "forkserver":  # workers fork from a server that imported pipegnn once
        mp.get_context("forkserver").set_forkserver_preload(["pipegnn.train"])
    start = time.perf_counter()
    deadline = time.monotonic() + timeout
    with tempfile.TemporaryDirectory(prefix="pipegnn-pipeline-") as folder:
        log.info("starting %d pipeline workers (%s, schedule %s)", world, method, engine["schedule"])
        context = mp.start_processes(_worker, args=(world, _free_port(), cfg, folder, _log_targets()),
                                     nprocs=world, join=False, start_method=method)
        try:
            while not context.join(timeout=min(1.0, max(0.0, deadline - time.monotonic())),
                                   grace_period=5.0):
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"pipeline workers did not finish within engine.timeout_s="
                                       f"{timeout:g}s; they were terminated")
        except ProcessException as e:
            raise _failure(e, _results(Path(folder), world)) from None
        finally:
            _stop(context.processes)
        results = _results(Path(folder), world)
    if 0 not in results:
        raise WorkerFailed("pipeline worker rank 0 exited without a result")
    worker = results[0]
    for key in _MERGED:
        record[key] = worker.get(key, record.get(key))
    timing = dict(worker.get("timing") or {})
    timing["workers_total_s"] = timing.pop("total_s", None)
    timing["launch_s"] = time.perf_counter() - start
    record["timing"].update(timing)
    record["memory"]["launcher_peak_rss_bytes"] = peak_rss_bytes()
    record["workers"] = {"world_size": world, "start_method": method}
    return []
