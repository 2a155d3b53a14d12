"""Checks of a run config's general keys (``chunks``, ``microbatch``, ``train``), made before any
training, each failing with one clear message. Types and choices are the schemas' work
([`run_config`][pipegnn.config.typed.run_config]); what a model, an engine or a pipeline's processes
need is checked beside them ([`pipegnn.models.check_model`][pipegnn.models.check_model],
[`pipegnn.engines.check_engine`][pipegnn.engines.check_engine],
[`pipegnn.training.processes.group.check_launch`][pipegnn.training.processes.group.check_launch])."""
from __future__ import annotations

import math
from typing import Any

from pipegnn.config.choices import Evaluation, Halo, HaloDropout, Precision, Storage
from pipegnn.config.schema import Config, TrainConfig
from pipegnn.errors import ConfigError, check_positive_finite, check_positive_int

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

#: Time-to-accuracy target without ``train.target_val_acc``: this fraction of the run's best validation
#: accuracy.
TTA_FRACTION = 0.98

#: Largest seed: seeds go to torch.manual_seed, torch.Generator.manual_seed and METIS, which take
#: 64-bit signed integers; a seed must be >= 0 (train.seed, microbatch.seed, dataset.seed and
#: dataset.split_seed alike).
_MAX_SEED = 2**63 - 1


def _seed(value: int, key: str) -> None:
    if not 0 <= value <= _MAX_SEED:
        raise ConfigError(f"{key} must be an integer in [0, 2**63 - 1], got {value!r}")


#: The largest learning rate or weight decay: what a float32 parameter's optimizer step can hold.
_MAX_RATE = 3.4e38
#: The largest memory cap in GiB: what an address-space limit (64-bit, in bytes) holds.
MAX_MEMORY_GB = 2**32


def _non_negative(value: float, key: str) -> None:
    """A finite number >= 0 (the optimizer's learning rate and weight decay), within float32's range."""
    if not math.isfinite(value) or value < 0 or value > _MAX_RATE:
        raise ConfigError(f"{key} must be a finite number >= 0, got {value!r} (at most {_MAX_RATE:g}: what a "
                          "float32 optimizer step holds)")


def check_config(cfg: Config) -> None:
    """Check the general keys of a typed run config.

    Raises:
        ConfigError: naming the bad key, its value and what would be valid.
    """
    memory_limit_bytes(cfg)
    mb = cfg.microbatch
    if mb.halo_dropout is HaloDropout.node and mb.halo is not Halo.historical:
        raise ConfigError(f"microbatch.halo_dropout=node draws historical halo rows' dropout masks; with "
                          f"microbatch.halo={mb.halo} there are none: use microbatch.halo=historical, or "
                          "halo_dropout=read")
    _check_fanouts(mb.halo, mb.fanouts, cfg.model.layers)
    if mb.evaluation is Evaluation.layerwise and mb.halo is Halo.none:
        raise ConfigError("microbatch.evaluation=layerwise evaluates on the full graph, and "
                          "microbatch.halo=none evaluates its own induced subgraphs: use "
                          "microbatch.evaluation=plan with halo=none, or halo=exact, historical or sampled")
    check_positive_int(cfg.chunks, "chunks")
    if cfg.data.features is Storage.sparse and cfg.train.precision is not Precision.fp32:
        raise ConfigError(f"data.features=sparse with train.precision={cfg.train.precision}: sparse features "
                          "are multiplied in float32 only; use train.precision=fp32, or data.features=memory")
    _check_train(cfg.train)
    _seed(mb.seed, "microbatch.seed")
    for key in ("seed", "split_seed"):  # a synthetic graph's or random features' seed, a split's seed
        value = getattr(cfg.dataset, key, None)
        if value is not None:
            _seed(value, f"dataset.{key}")


#: The largest fan-out (int32 draws; far above any node's degree: -1 keeps every neighbour).
MAX_FANOUT = 2**31 - 2


def _check_fanouts(halo: Halo, fanouts: list[int] | None, layers: int) -> None:
    """``microbatch.fanouts``: one per layer, each -1 (all) or >= 1, with sampled halos only."""
    if halo is not Halo.sampled:
        if fanouts is not None:
            raise ConfigError(f"microbatch.fanouts={list(fanouts)} samples neighbourhoods, which only "
                              f"microbatch.halo=sampled does (halo={halo}): set microbatch.halo=sampled, "
                              "or microbatch.fanouts=null")
        return
    if fanouts is None:
        raise ConfigError(f"microbatch.halo=sampled needs microbatch.fanouts, one per layer ({layers}): e.g. "
                          f"microbatch.fanouts=[{','.join(['10'] * layers)}] (-1 keeps every neighbour)")
    if len(fanouts) != layers:
        raise ConfigError(f"microbatch.fanouts={list(fanouts)} has {len(fanouts)} entries for a model of "
                          f"{layers} layers (model.layers): give one per layer, in hop order from the "
                          "targets")
    for f in fanouts:  # the draw holds a fan-out in int32 (pipegnn.microbatch.sample); a list, not a number
        if isinstance(f, bool) or not isinstance(f, int) or (f != -1 and not 1 <= f <= MAX_FANOUT):
            raise ConfigError(f"microbatch.fanouts={list(fanouts)}: {f} is not a fan-out; each must be -1 "
                              f"(every neighbour) or an integer from 1 to {MAX_FANOUT}")


def _check_train(train: TrainConfig) -> None:
    """Epochs, the optimizer's settings (``train.lr`` and ``train.weight_decay``, which default to
    ``model.lr`` and ``model.weight_decay``), the seed, early stopping, checkpoints and the
    time-to-accuracy target."""
    if train.epochs < 1:
        raise ConfigError(f"train.epochs must be >= 1, got {train.epochs!r}")
    _non_negative(train.lr, "train.lr")
    _non_negative(train.weight_decay, "train.weight_decay")
    if train.conv_weight_decay is not None:
        _non_negative(train.conv_weight_decay, "train.conv_weight_decay")
    _seed(train.seed, "train.seed")
    for key, null in (("patience", "no early stopping"), ("checkpoint_every", "no checkpoints")):
        value = getattr(train, key)
        if value is not None and value < 1:
            raise ConfigError(f"train.{key} must be a number of epochs >= 1 (or null: {null}), got {value!r}")
    target = train.target_val_acc
    if target is not None and not 0 < target <= 1:
        raise ConfigError(f"train.target_val_acc must be a validation accuracy in (0, 1] (or null: "
                          f"{TTA_FRACTION} of the run's best), got {target!r}")


def memory_limit_bytes(cfg: Config) -> int | None:
    """``train.memory_limit_gb`` (GiB, null = no cap) in bytes.

    Raises:
        ConfigError: not a finite number > 0.
    """
    value: Any = cfg.train.memory_limit_gb
    check_positive_finite(value, "train.memory_limit_gb", "GiB", "no cap", most=MAX_MEMORY_GB)
    return None if value is None else int(value * 2**30)
