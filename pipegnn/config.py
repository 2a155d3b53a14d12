"""Checks of a run's configuration, made before any training, each failing with one clear message."""
from __future__ import annotations

import math
from typing import Any, Mapping

import torch
from torch import Tensor

from pipegnn.backends import FRAMEWORKS
from pipegnn.backends.base import check_aggregation
from pipegnn.data import DATASETS, STORAGE, Graph
from pipegnn.errors import ConfigError, check_choice, check_positive_finite, check_positive_int
from pipegnn.microbatch import HALO_DROPOUTS, HALOS, PARTITIONERS, TARGETS
from pipegnn.models import FIRST_TRANSFORMS, MODELS, PRECISIONS
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
    check_positive_int(cfg["chunks"], "chunks")
    _check_model(cfg["model"])
    _check_train(cfg["train"])
    _seed(cfg["microbatch"]["seed"], "microbatch.seed")


def _check_model(model: Mapping[str, Any]) -> None:
    """The model's sizes (GAT: also its heads; GCNII: alpha and theta), dropout and residual flag."""
    check_positive_int(model["layers"], "model.layers")
    check_positive_int(model["hidden"], "model.hidden")
    if model["name"] == "gat":
        check_positive_int(model["heads"], "model.heads")
        check_positive_int(model["out_heads"], "model.out_heads")
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


def memory_limit_bytes(cfg: Mapping[str, Any]) -> int | None:
    """``train.memory_limit_gb`` (GiB, null = no cap) in bytes.

    Raises:
        ConfigError: not a finite number > 0.
    """
    value = cfg["train"].get("memory_limit_gb")
    check_positive_finite(value, "train.memory_limit_gb", "GiB", "no cap")
    return None if value is None else int(value * 2**30)


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
