"""``engine.launcher=spawn``: a run starts its pipeline's worker processes on this machine.

The parent process (the *launcher*: a normal ``run``, e.g. one job of a Hydra sweep) starts one worker
per entry of ``engine.devices`` (``engine.start_method``: from a forkserver or as fresh interpreters).
Each worker gets torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1, a free MASTER_PORT)
and calls the per-rank function the caller passes in (``pipegnn.training.launch.run_rank``; passed, not
imported, so that this module does not depend on the trainer) with the run's typed config: it runs
what a process started by ``torchrun`` with ``engine.launcher=external`` runs for its rank.

What goes between the launcher and its workers goes through pipes, not files: a pipe is a kernel object
that goes away with the last process holding it, so a launcher killed at any moment (kill -9, OOM
killer) leaves no temporary folder behind, and there is nothing for a later run to clean up:

- results: each worker sends its result (rank 0: its record) through its own pipe, and rank 0 also
  every epoch as soon as it is finished, so a run that fails later keeps the epochs it trained;
- a lifeline: a pipe whose only writing end the launcher holds and never writes to. The workers watch
  its reading end; the end of file there means the launcher has exited (however it died), and the
  worker exits at once. ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (Linux) adds the kernel's guarantee where
  the launcher is the worker's parent (``start_method=spawn``); under ``forkserver`` the parent is the
  forkserver, which outlives the launcher as long as any worker lives, so the lifeline is what ends
  the workers there.

Deadline: ``engine.timeout_s`` bounds the time without progress, not the run: the launcher terminates
the workers and fails when rank 0 has finished no epoch within ``engine.timeout_s`` of the run's start
(set-up included) or of its last epoch, so a run of any length finishes while a stuck one (a hung worker,
a collective that never returns) fails. Each worker also stops itself (with a clear error) when it has
finished no epoch of its own within ``engine.timeout_s`` plus ``GRACE_S``, so a launcher that cannot act
(stopped, hung) does not leave them running, while one that can acts first.

Failure: when a worker exits non-zero, the others get a grace period to exit by themselves (they usually
fail at once with a lost connection to the dead peer), then are terminated; which rank's failure the
run's record names: [`pipegnn.training.processes.outcome`][pipegnn.training.processes.outcome].

Hand-written rather than ``torch.distributed.launcher.api.elastic_launch``: elastic's agent hands the
workers' return values back only when all of them have finished (a failed run would lose the epochs rank
0 trained unless they went through files, which a killed launcher leaves behind), runs the workers in its
own process tree without a lifeline to a launcher that is one job of a Hydra sweep, and restarts or tears
down by its own rendezvous rules, where a run here must fail once, with one record naming the rank.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any, Callable, cast

import torch
import torch.multiprocessing as mp

from pipegnn.config.schema import Config, PipeliningEngineConfig
from pipegnn.measure import peak_rss_bytes
from pipegnn.run_record import RunRecord
from pipegnn.training.preemption import Interrupted
from pipegnn.training.processes.backend import dist_backend
from pipegnn.training.processes.outcome import WorkerFailed, failure, merge
from pipegnn.training.processes.watch import GRACE_S, Deadline, Outbox, guard

if TYPE_CHECKING:
    from multiprocessing.context import ForkServerContext, SpawnContext

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

log = logging.getLogger(__name__)

_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"
#: What the forkserver imports before it forks the workers on a machine with CUDA devices: only what
#: leaves CUDA untouched. Measured on a CUDA machine (torch 2.11): importing PyG, or calling
#: ``torch.cuda.is_available()``, in a process makes CUDA unusable in every process forked from it later
#: ("CUDA error: initialization error"), CPU stages included (their record names the GPU); importing
#: torch, torch.distributed.pipelining or this module does not. Each worker imports the trainer (PyG,
#: DGL) itself, after the fork.
FORKSERVER_PRELOAD = ("torch", "torch.distributed.pipelining", __name__)


def forkserver_preload(target_module: str) -> list[str]:
    """What the forkserver imports: `FORKSERVER_PRELOAD` and, where this machine has no CUDA
    device (nothing to make unusable), the trainer's module too, so that a worker starts without
    importing PyG (``results/benchmarks/start_method.txt``). The forkserver is a fresh interpreter, not
    a fork of this process: what this process did with CUDA does not reach it."""
    return [*FORKSERVER_PRELOAD, *([target_module] if torch.cuda.device_count() == 0 else [])]

#: ``target(cfg, on_epoch=callback, state_dir=...) -> record``: one rank's part of the run
#: (``pipegnn.training.launch.run_rank``);
#: every rank calls ``on_epoch(entry)`` with each finished epoch's entry of ``record["epochs"]`` (which
#: moves its deadline; rank 0's also hands the entry to the launcher).
Target = Callable[..., RunRecord]


def _noop() -> None:
    """A child that does nothing: forking it waits for the forkserver's imports."""


def _forkserver_ready(context: ForkServerContext | SpawnContext) -> float:
    """Start the forkserver if it is not running and wait for its imports (a child forked from it and
    joined); returns the seconds that took. Its start happens once per process (2-3 s on two cores:
    ``import torch`` and PyG), for the first pipelined job of a sweep only, as a single-process job's
    imports happen once before the sweep's first job: outside every run's clock (set-up and time to
    accuracy), so that jobs compare whatever their place in a sweep. ``ensure_running`` alone returns
    before the server has imported its preload."""
    began = time.perf_counter()
    child = context.Process(target=_noop, name="pipegnn-forkserver-ready")
    child.start()
    child.join()
    return time.perf_counter() - began


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
    handlers: list[logging.Handler] = [logging.FileHandler(f, mode="a", errors="backslashreplace")
                                       for f in targets["files"]]
    handlers.append(logging.StreamHandler(sys.stdout if targets["console"] == "stdout" else sys.stderr))
    for h in handlers:
        h.setFormatter(logging.Formatter(targets["format"]))
        root.addHandler(h)
    root.setLevel(targets["level"])


@dataclass(frozen=True)
class _Launch:
    """What every worker of one run shares; pickled to each worker (forkserver, spawn): plain fields."""

    world: int  # the number of workers (WORLD_SIZE)
    port: int  # the rendezvous port on 127.0.0.1 (MASTER_PORT)
    cfg: Config  # the run's typed configuration
    target: Target  # what each worker runs: a picklable module-level function
    parent: int | None  # the launcher's pid where it is the workers' parent (start_method=spawn)
    start: float  # the run's start, on time.monotonic's clock
    log_targets: dict[str, Any]  # where the launcher logs (_log_targets)
    state_dir: str | os.PathLike | None  # where each rank keeps its checkpoints, if anywhere


def _worker(rank: int, launch: _Launch, out: Connection, lifeline: Connection) -> None:
    cfg, world, port = launch.cfg, launch.world, launch.port
    outbox, code = Outbox(out), 1
    deadline = Deadline(cfg.engine.timeout_s + GRACE_S, start=launch.start)
    guard(rank, launch.parent, lifeline, deadline, cfg.engine.timeout_s, outbox)
    try:
        os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                          LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        _configure_logging(launch.log_targets)

        def on_epoch(entry: dict[str, Any]) -> None:  # progress; rank 0 hands its epochs on
            deadline.progress()
            if rank == 0:
                outbox.send("epoch", entry)

        try:
            record = launch.target(cfg, on_epoch=on_epoch, state_dir=launch.state_dir)
        except Interrupted as e:  # the run recorded it: report the record, exit as the signal asks
            assert e.record is not None  # run attaches it
            record, code = e.record, e.exit_code
        keys = ("status", "error", "traceback", "interrupted")
        result = record.to_dict() if rank == 0 else {k: record.get(k) for k in keys}
    except Exception as e:  # outside the run (which records its own failures)
        result = {"status": "failed", "error": f"{type(e).__name__}: {e}",
                  "traceback": traceback.format_exc()}
    outbox.send("result", result)
    out.close()
    if result["status"] != "completed":
        sys.exit(code)  # the launcher then ends the other ranks


class _Inbox(threading.Thread):
    """The launcher's reader of the workers' pipes (while they run, so no worker waits on a full pipe):
    rank 0's finished epochs (each one moves ``deadline``) and every rank's result. A pipe ends when its
    worker has exited."""

    def __init__(self, conns: list[Connection], on_epoch: Callable[[dict[str, Any]], Any] | None,
                 deadline: Deadline):
        super().__init__(name="pipegnn-launcher-inbox", daemon=True)
        self.conns, self.on_epoch, self.deadline = conns, on_epoch, deadline
        self.epochs: list[dict[str, Any]] = []
        self.results: dict[int, dict[str, Any]] = {}

    def run(self) -> None:
        open_ = {conn: rank for rank, conn in enumerate(self.conns)}
        while open_:
            for conn in cast(list[Connection], wait(list(open_))):  # the ready ones of those given
                try:
                    kind, payload = json.loads(conn.recv_bytes())
                except (EOFError, OSError, ValueError):  # closed (or cut off by the worker's death)
                    del open_[conn]
                    continue
                if kind == "epoch":
                    self.deadline.progress()
                    self.epochs.append(payload)
                    if self.on_epoch is not None:
                        try:
                            self.on_epoch(payload)
                        except Exception:  # a progress callback must not stop the reading of pipes
                            log.exception("on_epoch callback failed")
                else:
                    self.results[open_[conn]] = payload


def _wait(processes: list[Any], deadline: Deadline, timeout: float) -> list[tuple[int, int]]:
    """Wait for the workers; returns ``(rank, exit code)`` of the exits in the order they were seen.
    After the first failed exit the others get ``GRACE_S`` to exit too; those still running then are
    left to ``_stop``.

    Raises:
        TimeoutError: the deadline passed before every worker exited (and none had failed).
    """
    pending = {p.sentinel: rank for rank, p in enumerate(processes)}
    exits: list[tuple[int, int]] = []
    grace_end: float | None = None  # after a failure: when the others' grace is over
    while pending:
        until = deadline.at if grace_end is None else grace_end
        ready = wait(list(pending), timeout=max(0.0, until - time.monotonic()))
        # A worker that stopped itself at its deadline is seen after this one, so it is reported as the
        # timeout.
        if grace_end is None and deadline.left() == 0:
            raise TimeoutError(f"pipeline workers finished no epoch within engine.timeout_s={timeout:g}s of "
                               "the last one or of the run's start; they were terminated")
        if not ready and grace_end is not None:
            break  # the grace after a failure is over
        for sentinel in ready:
            rank = pending.pop(sentinel)
            processes[rank].join()
            exits.append((rank, processes[rank].exitcode))
        if grace_end is None and any(code != 0 for _, code in exits):
            grace_end = time.monotonic() + GRACE_S
    return exits


def _stop(processes: list[Any], grace: float = GRACE_S) -> None:
    for p in processes:
        if p.is_alive():
            p.terminate()
    end = time.monotonic() + grace
    for p in processes:
        p.join(max(0.0, end - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()


def spawn(cfg: Config, record: RunRecord, target: Target,
          on_epoch: Callable[[dict[str, Any]], Any] | None = None,
          state_dir: str | os.PathLike | None = None) -> list[torch.device]:
    """Run the pipeline in ``len(engine.devices)`` worker processes and merge rank 0's record into
    ``record``; returns the parent's devices (none).

    Args:
        cfg: the run's configuration (``engine.launcher=spawn``).
        record: the parent's record; on failure it still gets the epochs rank 0 finished.
        target: what each worker runs, ``target(cfg, on_epoch=...)`` returning its record (a picklable
            module-level function: ``pipegnn.training.launch.run_rank``); its module is preloaded by the
            forkserver where no CUDA device is visible
            ([`forkserver_preload`][pipegnn.training.processes.spawn.forkserver_preload]), else imported by
            each worker.
        on_epoch: called in this process with each epoch rank 0 finished (from a reader thread).
        state_dir: where each rank keeps its checkpoints (``train.checkpoint_every``), if anywhere.

    Raises:
        ConfigError: a worker found the configuration invalid (e.g. chunks > targets).
        MemoryError: a worker ran out of memory.
        WorkerFailed: a worker failed, crashed or was killed.
        Interrupted: a worker was stopped by SIGTERM or SIGINT (and recorded it), or this process was.
        TimeoutError: the workers finished no epoch within ``engine.timeout_s`` of the run's start or
            of the last one.
    """
    engine = cfg.engine
    assert isinstance(engine, PipeliningEngineConfig), engine.name
    world, timeout, method = len(engine.devices), engine.timeout_s, str(engine.start_method)
    # engine.start_method's context (its two choices) by name: one named by a plain str is typed as the
    # base context, which has no Process
    context: ForkServerContext | SpawnContext = (
        mp.get_context("forkserver") if method == "forkserver" else mp.get_context("spawn"))
    if mp.get_start_method(allow_none=True) not in (None, *mp.get_all_start_methods()):
        # A worker of joblib's loky backend (hydra/launcher=joblib) has 'loky' as the default start
        # method, which a new interpreter is told to set and cannot ('cannot find context for loky'):
        # the workers are this process's, so the default becomes their method.
        mp.set_start_method(method, force=True)
    if method == "forkserver":  # workers fork from a server that imported torch once (PyG without CUDA)
        context.set_forkserver_preload(forkserver_preload(target.__module__))
        record.timing["forkserver_ready_s"] = _forkserver_ready(context)
    start = time.perf_counter()
    deadline = Deadline(timeout)
    lifeline, alive = context.Pipe(duplex=False)  # alive: the only writing end; never written to
    pipes = [context.Pipe(duplex=False) for _ in range(world)]
    inbox = _Inbox([reader for reader, _ in pipes], on_epoch, deadline)
    inbox.start()
    launch = _Launch(world=world, port=_free_port(), cfg=cfg, target=target,
                     parent=os.getpid() if method == "spawn" else None, start=deadline.at - timeout,
                     log_targets=_log_targets(), state_dir=state_dir)
    processes: list[Any] = []
    exits: list[tuple[int, int]] = []
    finished = False
    try:
        for rank, (_, out) in enumerate(pipes):
            p = context.Process(target=_worker, name=f"pipegnn-rank{rank}",
                                args=(rank, launch, out, lifeline))
            p.start()
            processes.append(p)
            out.close()  # the worker holds its writing end now: its exit ends the pipe
        lifeline.close()
        log.info("started %d pipeline workers (%s, schedule %s): pids %s", world, method,
                 engine.schedule, [p.pid for p in processes])
        exits = _wait(processes, deadline, timeout)
        finished = True
    finally:
        _stop(processes)
        for conn in (lifeline, alive, *(out for _, out in pipes)):
            conn.close()  # a worker still there exits; the pipes of workers never started end
        inbox.join(GRACE_S)  # the workers are gone: their pipes end once their messages are read
        error = failure(exits, inbox.results) if finished else None
        merge(record, inbox.results.get(0), list(inbox.epochs), completed=finished and error is None)
        if not inbox.is_alive():  # (else a process that outlived its worker holds a pipe: left open)
            for reader, _ in pipes:
                reader.close()
    if error is not None:
        raise error
    if 0 not in inbox.results:
        raise WorkerFailed("pipeline worker rank 0 exited without a result")
    timing = dict(inbox.results[0].get("timing") or {})
    timing["workers_total_s"] = timing.pop("total_s", None)
    timing["launch_s"] = time.perf_counter() - start
    record.timing.update(timing)
    record.memory["launcher_peak_rss_bytes"] = peak_rss_bytes()
    record.workers = {"world_size": world, "start_method": method, "backend": dist_backend(engine)}
    return []
