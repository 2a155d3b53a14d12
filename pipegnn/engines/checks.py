"""Checks of the ``engine`` config, made before any training: each engine's keys, and the cross-field
checks of a pipeline (devices against the model's units, schedules against chunks and processes, what
a captured step needs), beside the engines they protect."""
from __future__ import annotations

from pipegnn.config.checks import MAX_MEMORY_GB
from pipegnn.config.choices import Capture, Schedule
from pipegnn.config.schema import (
    Config,
    EngineConfig,
    LoaderEngineConfig,
    PipeliningEngineConfig,
    SingleEngineConfig,
    StagedEngineConfig,
)
from pipegnn.engines.balance import even_balance, unit_balance
from pipegnn.engines.base import parse_device
from pipegnn.engines.capture import capture_problems
from pipegnn.errors import ConfigError, check_positive_finite, check_positive_int
from pipegnn.models import UNITS_PER_LAYER, units_per_layer

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

#: The most intra-op threads a process may ask for (``engine.threads``).
MAX_THREADS = 4096
#: The longest ``engine.timeout_s`` (about 31 years; a ``datetime.timedelta`` holds at most 1e9 days).
TIMEOUT_MAX_S = 1e9
#: The shortest ``engine.timeout_s``: a worker's start (its imports) alone takes longer, so a shorter
#: limit ended every run, after its processes started (1e-9 was accepted). Only a floor: a start, set-up
#: and first epoch take longer (a spawned worker's 3-5 s here), and a limit they pass fails the run, named.
TIMEOUT_MIN_S = 1.0


def check_engine(cfg: Config) -> None:
    """Check ``cfg``'s engine against the rest of the run's config.

    Raises:
        ConfigError: naming the bad key, its value and what would be valid.
    """
    layers = units_per_layer(cfg.model)
    engine = cfg.engine
    _check_timeline(engine)
    _check_capture(cfg)
    check_positive_int(engine.threads, "engine.threads", null="torch's default (threads per process)")
    if engine.threads is not None and engine.threads > MAX_THREADS:  # OpenMP's pool ran out at 100,000
        raise ConfigError(f"engine.threads={engine.threads} is more than the {MAX_THREADS:,} threads a "
                          "process may start; give at most the machine's cores, or null for torch's default")
    if isinstance(engine, SingleEngineConfig):
        _device(engine.device, "engine.device")
        return
    if isinstance(engine, LoaderEngineConfig):  # the rest: pipegnn.training.dgl_loader.check_loader
        _device(engine.device, "engine.device")
        return
    assert isinstance(engine, StagedEngineConfig), engine.name  # the three engine schemas
    devices = list(engine.devices)
    if not devices:
        raise ConfigError("engine.devices is empty; give one device per pipeline stage, e.g. [cpu, cpu]")
    for i, d in enumerate(devices):
        _device(d, f"engine.devices[{i}]")
    if isinstance(engine, PipeliningEngineConfig):
        _check_pipelining(engine, cfg.chunks, devices, layers)
        return
    units = sum(layers)
    if unit_balance(engine.balance, layers, len(devices)) is None and len(devices) > units:
        raise ConfigError(f"engine.devices has {len(devices)} devices but the model has only {units} "
                          f"units ({_units_note(layers)}); use at most {units} devices")


def _units_note(layers: list[int]) -> str:
    """What the model's units are, for an error message."""
    extra = ", and an input and an output Linear" if sum(layers) > UNITS_PER_LAYER * len(layers) else ""
    return f"model.layers={len(layers)}: a transform and a propagation per layer{extra}"


def _check_timeline(engine: EngineConfig) -> None:
    epoch = engine.trace_epoch
    if epoch is not None and epoch < 0:
        raise ConfigError(f"engine.trace_epoch must be an epoch number >= 0 (or null: no trace), got "
                          f"{epoch!r}")


def _check_capture(cfg: Config) -> None:
    """``engine.capture=cuda_graph`` only where a step can be recorded."""
    problems = capture_problems(cfg) if cfg.engine.capture is Capture.cuda_graph else []
    if problems:
        raise ConfigError("engine.capture=cuda_graph cannot record this run's training step: "
                          + "; ".join(problems) + ". Use engine.capture=none (eager steps)")


def _check_pipelining(engine: PipeliningEngineConfig, chunks: int, devices: list[str],
                      layers: list[int]) -> None:
    """engine=pipelining: one process per entry of engine.devices, each with one stage (or
    engine.virtual_stages stages with schedule=interleaved1f1b)."""
    ranks = len(devices)
    replicas = check_positive_int(engine.data_parallel, "engine.data_parallel") or 1
    if replicas > 1:  # D pipelines of len(devices) / D processes, each running chunks / D micro-batches
        if ranks % replicas:
            raise ConfigError(f"engine.data_parallel={replicas} pipeline replicas need one process per "
                              f"replica and stage, so len(engine.devices) must be a multiple of {replicas}; "
                              f"engine.devices={devices} has {ranks} entries (e.g. give {replicas * 2} "
                              f"devices for {replicas} x 2 stages)")
        if chunks % replicas:
            raise ConfigError(f"engine.data_parallel={replicas} shares each step's micro-batches out "
                              f"across the replicas, so chunks must be a multiple of {replicas}; "
                              f"got chunks={chunks}")
        ranks, chunks = ranks // replicas, chunks // replicas
    # bounded by what a process group's timedelta and the workers' deadlines hold (1e12 overflowed)
    check_positive_finite(engine.timeout_s, "engine.timeout_s", "seconds", most=TIMEOUT_MAX_S)
    if engine.timeout_s < TIMEOUT_MIN_S:
        raise ConfigError(f"engine.timeout_s={engine.timeout_s!r} is shorter than a worker's start: every "
                          f"run would end before its first epoch; use at least {TIMEOUT_MIN_S:g} seconds "
                          "(the default: 900)")
    check_positive_finite(engine.memory_limit_gb, "engine.memory_limit_gb", "GiB per stage process", "no cap",
                          most=MAX_MEMORY_GB)
    kinds = {d.split(":")[0] for d in devices}
    if len(kinds) > 1:
        raise ConfigError(f"engine.devices={devices} mixes CPU and CUDA; the processes of one pipeline "
                          "must all use cpu or all cuda:N")
    interleaved = engine.schedule is Schedule("interleaved1f1b")
    per_rank = (check_positive_int(engine.virtual_stages, "engine.virtual_stages") or 1) if interleaved else 1
    if interleaved and per_rank < 2:
        raise ConfigError(f"schedule=interleaved1f1b needs engine.virtual_stages >= 2 stages per "
                          f"process, got {per_rank}; use schedule=1f1b for one stage per process")
    units = sum(layers)
    # units per process (null and auto: even, which needs as many units as balance=auto's stages)
    balance = unit_balance(engine.balance, layers, ranks, "process") or even_balance(units, ranks)
    if min(balance) < per_rank:
        if interleaved:
            raise ConfigError(f"schedule=interleaved1f1b puts engine.virtual_stages={per_rank} stages on "
                              f"each of the {ranks} processes, which needs >= {per_rank} units per "
                              f"process, but the units per process are {balance} ({units} units, "
                              f"{_units_note(layers)}); use model.layers >= "
                              f"{-(-per_rank * ranks // UNITS_PER_LAYER)} or schedule=gpipe|1f1b")
        raise ConfigError(f"engine.devices has {ranks} devices but the model has only {units} units "
                          f"({_units_note(layers)}); use at most {units} devices")
    if engine.schedule is Schedule("1f1b") and chunks < ranks:
        raise ConfigError(f"schedule=1f1b needs chunks >= the number of processes ({ranks}) per pipeline "
                          f"replica, got {chunks}{' per replica' if replicas > 1 else ''}; use more chunks "
                          "or schedule=gpipe")
    if interleaved:
        rounds = max(1, chunks // ranks)
        if chunks % rounds:
            raise ConfigError(f"schedule=interleaved1f1b needs chunks to be a multiple of "
                              f"max(1, chunks // processes) = {rounds}, got chunks={chunks} with {ranks} "
                              "processes")


def _device(name: str, key: str) -> None:
    try:
        parse_device(name)
    except ValueError as e:
        raise ConfigError(f"{key}: {e}") from e
