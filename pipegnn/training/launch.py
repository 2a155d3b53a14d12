"""One run: its checks, then this process's part ([`pipegnn.training.rank`][pipegnn.training.rank]) or one
worker per pipeline rank, signals, and the record written."""
from __future__ import annotations

import logging
import os
import stat
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, cast
from urllib.parse import unquote, urlparse

import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from pipegnn.backends.base import check_aggregation
from pipegnn.config.checks import check_config, memory_limit_bytes
from pipegnn.config.choices import Launcher
from pipegnn.config.schema import Config, LoaderEngineConfig, PipeliningEngineConfig
from pipegnn.config.typed import config_container, run_config
from pipegnn.data import Graph
from pipegnn.data.features import files_opened
from pipegnn.engines import check_engine
from pipegnn.errors import ConfigError
from pipegnn.measure import (
    allocation_failure,
    env_info,
    intra_op_threads,
    memory_limit,
    peak_device_bytes,
    peak_rss_bytes,
    reset_peaks,
)
from pipegnn.models import check_model
from pipegnn.run_record import RECORD_NAME, RunRecord, Status
from pipegnn.runs.record_writes import probe_record_folder, record_place_taken, write_record
from pipegnn.timeline import TRACE_NAME
from pipegnn.training.checkpoints import checkpoint_path, previous_path
from pipegnn.training.dgl_loader import check_loader, train_loader
from pipegnn.training.epochs import RUN_LOG, Trainee
from pipegnn.training.loggers import Loggers
from pipegnn.training.preemption import Interrupted, interruptible
from pipegnn.training.processes.group import (
    check_launch,
    gather_memory,
    is_secondary_rank,
    process_group,
    rank0_folder,
)
from pipegnn.training.processes.spawn import spawn
from pipegnn.training.rank import build_trainee, train_rank
from pipegnn.training.run_figures import wall_times

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

log = logging.getLogger(RUN_LOG)


def run(cfg: DictConfig | Mapping[str, Any], output_dir: str | Path | None = None,
        choices: Mapping[str, Any] | None = None,
        on_epoch: Callable[[dict[str, Any]], Any] | None = None,
        state_dir: str | Path | None = None, overrides: Sequence[str] | None = None) -> RunRecord:
    """Train and evaluate one configuration and return its result record
    ([`RunRecord`][pipegnn.run_record.RunRecord]).

    Never raises for a failing run: an invalid configuration, an out-of-memory error or any other
    exception becomes the record's ``status`` (``invalid``, ``oom``, ``failed``) and ``error``. A
    SIGTERM or SIGINT ends the run with status ``interrupted`` (the epochs finished so far, the signal
    under ``interrupted``); the record is written, then
    [`Interrupted`][pipegnn.training.preemption.Interrupted] is raised with it attached, so that the process
    (or sweep) stops as the signal asked.

    Args:
        cfg: the resolved run configuration (see ``conf/config.yaml``).
        output_dir: where ``result.json`` (and ``trace.json``, the timeline of ``engine.trace_epoch``)
            are written; when None nothing is written and the record keeps the trace under ``trace``.
        choices: Hydra's runtime choices of the config groups, stored in the record.
        overrides: the job's Hydra overrides (``hydra.overrides.task``), stored in the record.
        on_epoch: called with each finished epoch's entry of the record's ``epochs`` (a spawned
            pipeline's rank 0 sends it to the launcher, which keeps it if the run fails later).
        state_dir: where the training state is saved every ``train.checkpoint_every`` epochs and, with
            ``resume=true``, read back (default: ``output_dir``; none: no checkpoints).
    """
    return _run(cfg, output_dir, choices, on_epoch, state_dir, overrides=overrides)


def run_rank(cfg: Config, on_epoch: Callable[[dict[str, Any]], Any] | None = None,
             state_dir: str | Path | None = None) -> RunRecord:
    """One rank of a pipeline whose launcher (a [`run`][pipegnn.training.launch.run] with
    ``engine.launcher=spawn``) started this process with torchrun's environment: this rank's part of the run;
    its record is returned, not written (the launcher combines rank 0's into the run's). Fails as
    [`run`][pipegnn.training.launch.run] does."""
    return _run(cfg, None, None, on_epoch, state_dir, one_rank=True)


def _run(cfg: Config | DictConfig | Mapping[str, Any], output_dir: str | Path | None,
         choices: Mapping[str, Any] | None, on_epoch: Callable[[dict[str, Any]], Any] | None,
         state_dir: str | Path | None, one_rank: bool = False,
         overrides: Sequence[str] | None = None) -> RunRecord:
    start, started_at = time.perf_counter(), time.time()
    reset_peaks()
    unresolved: Exception | None = None
    try:
        container = config_container(cfg)
    except OmegaConfBaseException as e:  # an interpolation that does not resolve: an invalid run, below
        container, unresolved = cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=False)), e
    record = RunRecord(status=Status.FAILED, config=container, choices=dict(choices or {}), env=env_info(),
                       overrides=None if overrides is None else [str(o) for o in overrides])
    devices: list[torch.device] = []
    interrupted: Interrupted | None = None
    loggers: Loggers | None = None
    config: Config | None = None
    with interruptible() as guard:
        try:
            if unresolved is not None:  # (its first line: OmegaConf's message; the key from its fields)
                key, why = getattr(unresolved, "full_key", None), str(unresolved).splitlines()[0]
                raise ConfigError(f"{key or 'the config'} does not resolve: {why}")
            config = run_config(cfg)
            if output_dir is not None and not is_secondary_rank(config):
                _probe(output_dir, config)  # before anything trains: the record must have a place to go
                if config.logger:  # the trackers (logger=...), fed every finished epoch
                    loggers = Loggers(output_dir, config, container)
                    on_epoch = _then(loggers.epoch, on_epoch)
            with memory_limit(memory_limit_bytes(config)):  # train.memory_limit_gb, restored on exit
                devices = _train(config, record, on_epoch, state_dir if state_dir is not None else output_dir,
                                 one_rank)
            record.status = Status.COMPLETED
        except Interrupted as e:
            interrupted = e
            record.status, record.error = Status.INTERRUPTED, str(e)
            record.interrupted = {"signal": e.name, "epochs_finished": len(record.epochs)}
            log.warning("%s after %d finished epochs", e, len(record.epochs))
        except ConfigError as e:
            record.status, record.error = Status.INVALID, str(e)
            log.error("invalid configuration: %s", e)
        except Exception as e:  # the record must survive any failure of the run
            failure = allocation_failure(e)
            if failure is not None:
                record.status, record.error = Status.OOM, f"{type(failure).__name__}: {failure}"
                record.traceback = traceback.format_exc()
                log.error("out of memory: %s", failure)
            else:
                record.status, record.error = Status.FAILED, f"{type(e).__name__}: {e}"
                # A pipeline worker's failure carries the worker's traceback.
                record.traceback = getattr(e, "worker_traceback", None) or traceback.format_exc()
                log.exception("run failed")
        guard.hold()  # a signal from here on waits for the record
        record.timing["total_s"] = time.perf_counter() - start
        record.timing["started_at"] = started_at  # wall clock: an epoch's ended_at minus it is its wall time
        wall_times(record.epochs, record.final, started_at)
        # A pipeline's peaks of every rank (set during training) take precedence over this process's.
        record.memory = {"peak_rss_bytes": peak_rss_bytes(), "peak_device_bytes": peak_device_bytes(devices),
                         **record.memory}
        # Under torchrun (engine.launcher=external) only rank 0 writes the record (and the trace).
        if output_dir is not None and not is_secondary_rank(config):
            _write(output_dir, record, loggers)
    if interrupted is None and guard.signum is not None:  # the signal came while the record was written
        interrupted = Interrupted(guard.signum)
    if interrupted is not None:
        interrupted.record = record
        raise interrupted
    return record


def _probe(output_dir: str | Path, config: Config) -> None:
    """The record's folder takes a record, and no folder the run makes takes the record's place
    ([`probe_record_folder`][pipegnn.runs.record_writes.probe_record_folder]), or the run is invalid before it
    trains."""
    caches = {"microbatch.cache": config.microbatch.cache, "data.cache": config.data.cache,
              "cache_root": config.cache_root}
    # a setting's key -> (its value, the folder it makes)
    places: dict[str, tuple[str, str | Path]] = {k: (v, v) for k, v in caches.items() if v is not None}
    for name in ("csv", "tensorboard", "mlflow"):  # the trackers' folders, under the run's
        tracker = getattr(config.logger, name, None) if config.logger else None
        if tracker is not None:
            places[f"logger.{name}.dir"] = (tracker.dir, Path(output_dir) / tracker.dir)
    uri = config.logger.mlflow.tracking_uri if config.logger and config.logger.mlflow else None
    store = _local_store(uri) if uri else None
    if uri and store is not None:  # an MLflow store on this machine: a folder (file:) or a file (sqlite:)
        places["logger.mlflow.tracking_uri"] = (uri, store)
    taken = record_place_taken(output_dir, {key: place for key, (_, place) in places.items()})
    if taken is not None:
        raise ConfigError(f"{taken}={places[taken][0]} would make a folder where the run's record goes "
                          f"({Path(output_dir) / RECORD_NAME}): name another folder")
    try:
        probe_record_folder(output_dir)
    except OSError as e:
        raise ConfigError(f"the run's output folder cannot take its record: {e}; free some space, or point "
                          "hydra.run.dir (hydra.sweep.dir) elsewhere") from e


def _local_store(uri: str) -> Path | None:
    """The local path an MLflow ``tracking_uri`` writes (``file:``, ``sqlite:``, or a plain path), None for
    a server's."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return Path(unquote(parsed.path))
    if parsed.scheme == "sqlite":  # sqlite:///relative.db, sqlite:////absolute.db
        return Path(unquote(uri[len("sqlite:///"):])) if uri.startswith("sqlite:///") else None
    return None


def _write(output_dir: str | Path, record: RunRecord, loggers: Loggers | None) -> None:
    """Write the record into ``output_dir`` first and alone; then what goes beside it: the trace it
    carries and the trackers' last files; then the record again, naming the trace (``pipeline.trace``)
    and each of those that could not be written (``unwritten``: file or tracker -> error). A file beside
    the record never costs it. A record that cannot be written is logged naming the file and the cause,
    and a completed run becomes ``failed``."""
    trace, record.trace = record.trace, None
    try:
        path = write_record(output_dir, record)
    except OSError as e:
        if record.status is Status.COMPLETED:
            record.status, record.error = Status.FAILED, f"OSError: the record was not written: {e}"
        log.error("the record was not written: %s", e)
        return
    unwritten: dict[str, str] = {}
    traced = ""
    if trace is not None:
        try:
            write_record(output_dir, trace, TRACE_NAME)
            record.pipeline = {**(record.pipeline or {}), "trace": TRACE_NAME}
            traced = f"; trace (Perfetto, chrome://tracing): {Path(output_dir) / TRACE_NAME}"
        except OSError as e:
            unwritten[TRACE_NAME] = f"{type(e).__name__}: {e}"
            log.error("the trace was not written (the record says so): %s", e)
    if loggers is not None:
        loggers.finish(record)
        unwritten.update({f"logger {name}": error for name, error in loggers.failures.items()})
    if trace is not None or unwritten:
        record.unwritten = {**(record.unwritten or {}), **unwritten} or None
        try:
            write_record(output_dir, record)
        except OSError as e:  # the record written first stands
            log.error("the record could not be completed with what was written beside it: %s", e)
    log.info("record: %s%s", path, traced)


def _then(first: Callable[[dict[str, Any]], Any],
          then: Callable[[dict[str, Any]], Any] | None) -> Callable[[dict[str, Any]], Any]:
    """An ``on_epoch`` callback calling ``first``, then ``then`` (if any)."""
    def both(entry: dict[str, Any]) -> None:
        first(entry)
        if then is not None:
            then(entry)
    return both


def build(cfg: Config | DictConfig | Mapping[str, Any], graph: Graph | None = None) -> Trainee:
    """A run's pieces from its config, built as [`run`][pipegnn.training.launch.run] builds them before
    its first epoch: the graph, the training and evaluation plans, the staged model with them attached and
    the engine (a [`Trainee`][pipegnn.training.epochs.Trainee]). One training step of it is
    ``trainee.engine.train_step(trainee.training.ids, *trainee.train_labels())``; benchmarks and tests
    build from it rather than by hand. The config is checked first, as a run checks it; an engine of
    several processes (``engine=pipelining``) is built only inside its process group (one rank's pieces).
    ``graph``: a [`Graph`][pipegnn.data.graph.Graph] (features and edges in memory) to build on in place of
    the config's dataset, kept as ``data.features`` and ``data.edges`` say; its features' dtype is the
    model's (float64 for the exactness tests).

    Raises:
        ConfigError: naming the bad key, its value and what would be valid.
    """
    config = check_run(cfg)
    scratch = RunRecord(status=Status.INVALID, config={}, choices={}, env={})  # set-up figures, not kept
    return build_trainee(config, scratch, graph)


def check_run(cfg: Config | DictConfig | Mapping[str, Any]) -> Config:
    """Everything about ``cfg`` that can be checked before the graph is loaded: types and choices
    ([`pipegnn.config.typed.run_config`][pipegnn.config.typed.run_config]), the model
    ([`pipegnn.models.check_model`][pipegnn.models.check_model]), the general keys
    ([`pipegnn.config.checks.check_config`][pipegnn.config.checks.check_config]) and the framework's
    aggregation for the model, the engine ([`pipegnn.engines.check_engine`][pipegnn.engines.check_engine])
    and a pipelining run's processes ([`check_launch`][pipegnn.training.processes.group.check_launch]).
    Returns the typed config.

    Raises:
        ConfigError: the first problem found, naming the bad key, its value and what would be valid.
    """
    config = run_config(cfg)
    check_model(config.model)  # first: the general checks read model.layers
    check_config(config)
    check_aggregation(config.framework.name, config.model.name, config.model.aggregation)
    check_engine(config)
    if isinstance(config.engine, PipeliningEngineConfig):
        check_launch(config.engine)
    if isinstance(config.engine, LoaderEngineConfig):
        check_loader(config)
    return config


def _train(cfg: Config, record: RunRecord, on_epoch: Callable[[dict[str, Any]], Any] | None,
           state_dir: str | Path | None, one_rank: bool) -> list[torch.device]:
    check_run(cfg)
    if cfg.train.checkpoint_every is not None and state_dir is None:
        raise ConfigError("train.checkpoint_every is set but the run has no output directory to keep "
                          "checkpoints in; give run() an output_dir (or state_dir), or set it to null")
    engine = cfg.engine
    pipelining = isinstance(engine, PipeliningEngineConfig)
    checks = cfg.train.checkpoint_every is not None
    if checks and state_dir is not None and not is_secondary_rank(cfg):  # (another rank's: below)
        _check_checkpoint_paths(state_dir, len(engine.devices) if pipelining else 1)
    if pipelining and engine.launcher is Launcher.spawn and not one_rank:
        # this process starts one worker per rank, each running run_rank, and waits for them
        return spawn(cfg, record, target=run_rank, on_epoch=on_epoch, state_dir=state_dir)
    with intra_op_threads(engine.threads):
        record.env["torch_threads"] = torch.get_num_threads()  # this process's, as it trains
        if isinstance(engine, LoaderEngineConfig):
            return train_loader(cfg, record, on_epoch)
        if not pipelining:
            return train_rank(cfg, record, on_epoch, state_dir)
        with process_group(engine):  # this process is one rank (a spawned worker or under torchrun)
            if engine.launcher is Launcher.external:
                state_dir = rank0_folder(state_dir)
                if checks and is_secondary_rank(cfg) and state_dir is not None:  # its own, on another host
                    _check_checkpoint_paths(state_dir, len(engine.devices))
            opened = files_opened()
            devices = train_rank(cfg, record, on_epoch, state_dir)
            record.memory = {**record.memory, **gather_memory(devices)}
            _gather_feature_files(record, files_opened() - opened)
            return devices


def _check_checkpoint_paths(state_dir: str | Path, ranks: int) -> None:
    """Every rank's checkpoint paths are regular files or nothing, before anything trains (a folder
    or a FIFO there was found only by the first save, after epoch 0).

    Raises:
        ConfigError: naming the path and what is there.
    """
    for rank in range(ranks):
        path = checkpoint_path(state_dir, rank)
        for p in (path, previous_path(path)):
            try:
                mode = os.stat(p).st_mode
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(mode):
                kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file"
                raise ConfigError(f"train.checkpoint_every: the checkpoint path {p} is {kind}; remove it, or "
                                  "point hydra.run.dir (hydra.sweep.dir) elsewhere")


def _gather_feature_files(record: RunRecord, opened: int) -> None:
    """Every pipeline rank's count of feature files opened for reading during the run (a collective)."""
    ranks: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, opened)
    if record.features is None:
        record.features = {}
    record.features["files_opened_per_rank"] = ranks
