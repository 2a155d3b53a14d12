"""Checks of a run's configuration, made before any training, each failing with one clear message."""
from __future__ import annotations

import math
from typing import Any, Mapping

import torch
from torch import Tensor

from pipegnn.backends import FRAMEWORKS
from pipegnn.backends.base import check_aggregation
from pipegnn.data import DATASETS, STORAGE, Graph
from pipegnn.engines import CHECKPOINT_MODES, ENGINES, SCHEDULES, even_balance, parse_device, unit_balance
from pipegnn.engines.capture import CAPTURES, capture_problems
from pipegnn.errors import ConfigError, check_choice
from pipegnn.microbatch import HALO_DROPOUTS, HALOS, PARTITIONERS, TARGETS
from pipegnn.models import FIRST_TRANSFORMS, MODELS, PRECISIONS, UNITS_PER_LAYER, units_per_layer
from pipegnn.schema import targets_for_halo  # noqa: F401 - registers the resolver run configs use

__all__ = ["EVAL_SPLITS", "MONITORS", "TTA_FRACTION", "check_config", "check_targets", "eval_targets",
           "memory_limit_bytes"]

#: Splits whose nodes are the evaluation targets (train accuracy is measured in the same pass).
EVAL_SPLITS = ("train", "val", "test")
#: Time-to-accuracy target without ``train.target_val_acc``: this fraction of the run's best validation
#: accuracy.
TTA_FRACTION = 0.98
#: What picks the best epoch (and what early stopping waits on): the highest validation accuracy (as
#: GNNAutoScale and the GAT paper select) or the lowest validation loss (as the GCNII paper does).
MONITORS = ("val_acc", "val_loss")

#: Largest seed: seeds go to torch.manual_seed, torch.Generator.manual_seed and METIS, which take
#: 64-bit signed integers; like dataset.seed, a seed must be >= 0.
_MAX_SEED = 2**63 - 1


def _positive_int(value: Any, key: str, null: str | None = None) -> int | None:
    """``value`` if it is an integer >= 1 (or None where ``null`` says what None means)."""
    if value is None and null is not None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        alternative = f", or null for {null}" if null is not None else ""
        raise ConfigError(f"{key} must be an integer >= 1{alternative}, got {value!r}")
    return value


def _seed(value: Any, key: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_SEED:
        raise ConfigError(f"{key} must be an integer in [0, 2**63 - 1], got {value!r}")


def _non_negative(value: Any, key: str) -> None:
    """A finite number >= 0 (the optimizer's learning rate and weight decay)."""
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or value < 0):
        raise ConfigError(f"{key} must be a finite number >= 0, got {value!r}")


def check_config(cfg: Mapping[str, Any]) -> None:
    """Check everything that does not need the graph.

    Raises:
        ConfigError: naming the bad key, its value and what would be valid.
    """
    check_choice(cfg["dataset"]["name"], DATASETS, "dataset.name")
    check_choice(cfg["data"].get("features", "memory"), STORAGE, "data.features")
    check_choice(cfg["model"]["name"], MODELS, "model.name")
    check_choice(cfg["framework"]["name"], FRAMEWORKS, "framework.name")
    check_aggregation(cfg["framework"]["name"], cfg["model"]["name"],
                      cfg["model"].get("aggregation") or "messages")
    memory_limit_bytes(cfg)
    check_choice(cfg["engine"]["name"], ENGINES, "engine.name")
    check_choice(cfg["microbatch"]["halo"], HALOS, "microbatch.halo")
    check_choice(cfg["microbatch"]["partition"], PARTITIONERS, "microbatch.partition")
    check_choice(cfg["microbatch"]["targets"], TARGETS, "microbatch.targets")
    halo_dropout = cfg["microbatch"].get("halo_dropout", "read")
    check_choice(halo_dropout, HALO_DROPOUTS, "microbatch.halo_dropout")
    if halo_dropout == "node" and cfg["microbatch"]["halo"] != "historical":
        raise ConfigError(f"microbatch.halo_dropout=node draws historical halo rows' dropout masks; with "
                          f"microbatch.halo={cfg['microbatch']['halo']} there are none: use "
                          "microbatch.halo=historical, or halo_dropout=read")
    check_choice(cfg["microbatch"].get("first_transform", "once_per_step"), FIRST_TRANSFORMS,
                 "microbatch.first_transform")
    _positive_int(cfg["chunks"], "chunks")
    _check_model(cfg["model"])
    layers = units_per_layer(cfg["model"])
    _check_train(cfg["train"])
    _seed(cfg["microbatch"]["seed"], "microbatch.seed")
    engine = cfg["engine"]
    _check_timeline(engine)
    _check_capture(cfg)
    _positive_int(engine.get("threads"), "engine.threads", null="torch's default (threads per process)")
    if engine["name"] == "single":
        _device(engine["device"], "engine.device")
        extra = sorted(set(engine) & {"balance", "devices", "schedule", "data_parallel",
                                      "memory_limit_gb", "checkpoint", "virtual_stages"})
        if extra:
            raise ConfigError(f"engine={engine['name']} runs the whole model as one stage in one process, so "
                              f"{', '.join(f'engine.{k}' for k in extra)} would have no effect; use "
                              "engine=gpipe or engine=pipelining for stages, or leave it out")
        return
    devices = list(engine["devices"])
    if not devices:
        raise ConfigError("engine.devices is empty; give one device per pipeline stage, e.g. [cpu, cpu]")
    for i, d in enumerate(devices):
        _device(d, f"engine.devices[{i}]")
    if engine["name"] == "pipelining":
        _check_pipelining(cfg, devices, layers)
        return
    check_choice(engine["checkpoint"], CHECKPOINT_MODES, "engine.checkpoint")
    units = sum(layers)
    if unit_balance(engine["balance"], layers, len(devices)) is None and len(devices) > units:
        raise ConfigError(f"engine.devices has {len(devices)} devices but the model has only {units} "
                          f"units ({_units_note(layers)}); use at most {units} devices")


def _units_note(layers: list[int]) -> str:
    """What the model's units are, for an error message."""
    extra = ", and an input and an output Linear" if sum(layers) > UNITS_PER_LAYER * len(layers) else ""
    return f"model.layers={len(layers)}: a transform and a propagation per layer{extra}"


def _check_model(model: Mapping[str, Any]) -> None:
    """The model's sizes (GAT: also its heads; GCNII: alpha and theta), dropout and residual flag."""
    _positive_int(model["layers"], "model.layers")
    _positive_int(model["hidden"], "model.hidden")
    if model["name"] == "gat":
        _positive_int(model["heads"], "model.heads")
        _positive_int(model["out_heads"], "model.out_heads")
    if model["name"] == "gcn2":
        if not 0.0 <= float(model["alpha"]) <= 1.0:
            raise ConfigError("model.alpha (GCNII's initial residual) must be in [0, 1], "
                              f"got {model['alpha']!r}")
        if not float(model["theta"]) >= 0.0:
            raise ConfigError(f"model.theta (GCNII's identity mapping) must be >= 0, got {model['theta']!r}")
    if not isinstance(model.get("residual", False), bool):
        raise ConfigError(f"model.residual must be true or false, got {model['residual']!r}")
    if not 0.0 <= float(model["dropout"]) < 1.0:
        raise ConfigError(f"model.dropout must be in [0, 1), got {model['dropout']!r}")


def _positive_finite(value: Any, key: str, what: str, null: str | None = None) -> None:
    """A finite number > 0 (a limit, where infinity and NaN mean nothing: null says "no limit")."""
    if value is None and null is not None:
        return
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or value <= 0):
        alternative = f", or null for {null}" if null is not None else ""
        raise ConfigError(f"{key} must be a finite number of {what} > 0{alternative}, got {value!r}")


def _check_train(train: Mapping[str, Any]) -> None:
    """Epochs, the optimizer's settings (``train.lr`` and ``train.weight_decay``, which default to
    ``model.lr`` and ``model.weight_decay``), the seed, the precision, the monitor, early stopping and
    checkpoints."""
    if int(train["epochs"]) < 1:
        raise ConfigError(f"train.epochs must be >= 1, got {train['epochs']!r}")
    _non_negative(train["lr"], "train.lr")
    _non_negative(train["weight_decay"], "train.weight_decay")
    if train.get("conv_weight_decay") is not None:
        _non_negative(train["conv_weight_decay"], "train.conv_weight_decay")
    _seed(train["seed"], "train.seed")
    check_choice(train.get("precision", "fp32"), PRECISIONS, "train.precision")
    check_choice(train.get("monitor", "val_acc"), MONITORS, "train.monitor")
    for key, null in (("patience", "no early stopping"), ("checkpoint_every", "no checkpoints")):
        value = train.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ConfigError(f"train.{key} must be a number of epochs >= 1 (or null: {null}), got {value!r}")
    target = train.get("target_val_acc")
    if target is not None and (isinstance(target, bool) or not isinstance(target, (int, float))
                               or not 0 < target <= 1):
        raise ConfigError(f"train.target_val_acc must be a validation accuracy in (0, 1] (or null: "
                          f"{TTA_FRACTION} of the run's best), got {target!r}")


def _check_timeline(engine: Mapping[str, Any]) -> None:
    if not isinstance(engine.get("timeline", True), bool):
        raise ConfigError(f"engine.timeline must be true or false, got {engine['timeline']!r}")
    epoch = engine.get("trace_epoch")
    if epoch is not None and (isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0):
        raise ConfigError(f"engine.trace_epoch must be an epoch number >= 0 (or null: no trace), got "
                          f"{epoch!r}")


def _check_capture(cfg: Mapping[str, Any]) -> None:
    """``engine.capture``: a choice, and ``cuda_graph`` only where a step can be recorded."""
    capture = cfg["engine"]["capture"]
    check_choice(capture, CAPTURES, "engine.capture")
    problems = capture_problems(cfg) if capture == "cuda_graph" else []
    if problems:
        raise ConfigError("engine.capture=cuda_graph cannot record this run's training step: "
                          + "; ".join(problems) + ". Use engine.capture=none (eager steps)")


def _check_pipelining(cfg: Mapping[str, Any], devices: list[Any], layers: list[int]) -> None:
    """engine=pipelining: one process per entry of engine.devices, each with one stage (or
    engine.virtual_stages stages with schedule=interleaved1f1b)."""
    engine, chunks, ranks = cfg["engine"], int(cfg["chunks"]), len(devices)
    replicas = _positive_int(engine.get("data_parallel", 1), "engine.data_parallel")
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
    check_choice(engine["schedule"], tuple(SCHEDULES), "engine.schedule")
    _positive_finite(engine["timeout_s"], "engine.timeout_s", "seconds")
    _positive_finite(engine.get("memory_limit_gb"), "engine.memory_limit_gb", "GiB per stage process",
                     "no cap")
    kinds = {str(d).split(":")[0] for d in devices}
    if len(kinds) > 1:
        raise ConfigError(f"engine.devices={devices} mixes CPU and CUDA; the processes of one pipeline "
                          "must all use cpu or all cuda:N")
    interleaved = engine["schedule"] == "interleaved1f1b"
    per_rank = _positive_int(engine["virtual_stages"], "engine.virtual_stages") if interleaved else 1
    if interleaved and per_rank < 2:
        raise ConfigError(f"schedule=interleaved1f1b needs engine.virtual_stages >= 2 stages per "
                          f"process, got {per_rank}; use schedule=1f1b for one stage per process")
    units = sum(layers)
    # units per process (null and auto: even, which needs as many units as balance=auto's stages)
    balance = unit_balance(engine["balance"], layers, ranks, "process") or even_balance(units, ranks)
    if min(balance) < per_rank:
        if interleaved:
            raise ConfigError(f"schedule=interleaved1f1b puts engine.virtual_stages={per_rank} stages on "
                              f"each of the {ranks} processes, which needs >= {per_rank} units per "
                              f"process, but the units per process are {balance} ({units} units, "
                              f"{_units_note(layers)}); use model.layers >= "
                              f"{-(-per_rank * ranks // UNITS_PER_LAYER)} or schedule=gpipe|1f1b")
        raise ConfigError(f"engine.devices has {ranks} devices but the model has only {units} units "
                          f"({_units_note(layers)}); use at most {units} devices")
    if engine["schedule"] == "1f1b" and chunks < ranks:
        raise ConfigError(f"schedule=1f1b needs chunks >= the number of processes ({ranks}) per pipeline "
                          f"replica, got {chunks}{' per replica' if replicas > 1 else ''}; use more chunks "
                          "or schedule=gpipe")
    if interleaved:
        rounds = max(1, chunks // ranks)
        if chunks % rounds:
            raise ConfigError(f"schedule=interleaved1f1b needs chunks to be a multiple of "
                              f"max(1, chunks // processes) = {rounds}, got chunks={chunks} with {ranks} "
                              "processes")


def memory_limit_bytes(cfg: Mapping[str, Any]) -> int | None:
    """``train.memory_limit_gb`` (GiB, null = no cap) in bytes.

    Raises:
        ConfigError: not a finite number > 0.
    """
    value = cfg["train"].get("memory_limit_gb")
    _positive_finite(value, "train.memory_limit_gb", "GiB", "no cap")
    return None if value is None else int(value * 2**30)


def _device(name: Any, key: str) -> None:
    try:
        parse_device(name)
    except ValueError as e:
        raise ConfigError(f"{key}: {e}") from e


def eval_targets(graph: Graph, halo: str = "exact") -> Tensor:
    """Node ids evaluated each epoch: the union of the train, val and test splits, or every node in
    historical mode (its layer-wise evaluation also refreshes every cached row)."""
    if halo == "historical":
        return graph.split("all")
    mask = graph.train_mask | graph.val_mask | graph.test_mask
    return torch.nonzero(mask).view(-1)


def check_targets(cfg: Mapping[str, Any], graph: Graph) -> None:
    """Check the chunk count against the graph's targets.

    Raises:
        ConfigError: chunks exceeds the number of training or evaluation targets.
    """
    chunks = int(cfg["chunks"])
    mb = cfg["microbatch"]
    for name, count in (("training", graph.split(mb["targets"]).numel()),
                        ("evaluation", eval_targets(graph, mb["halo"]).numel())):
        if chunks > count:
            raise ConfigError(f"chunks={chunks} is larger than the number of {name} targets ({count}) "
                              f"of dataset {graph.name!r} with microbatch.targets={mb['targets']}, "
                              f"halo={mb['halo']}; use chunks <= {count}")
