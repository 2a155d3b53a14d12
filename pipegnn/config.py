"""Checks of a run's configuration, made before any training, each failing with one clear message."""
from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import Tensor

from pipegnn.backends import FRAMEWORKS
from pipegnn.data import DATASETS, Graph
from pipegnn.engines import CHECKPOINT_MODES, ENGINES, parse_device
from pipegnn.errors import ConfigError
from pipegnn.microbatch import HALOS, PARTITIONERS, TARGETS
from pipegnn.models import MODELS

__all__ = ["EVAL_SPLITS", "check_config", "check_targets", "eval_targets"]

#: Splits whose nodes are the evaluation targets (train accuracy is measured in the same pass).
EVAL_SPLITS = ("train", "val", "test")


def _choice(value: Any, valid: tuple[str, ...], key: str) -> None:
    if value not in valid:
        raise ConfigError(f"{key}={value!r} is not valid; valid: {', '.join(valid)}")


def _positive_int(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{key} must be an integer >= 1, got {value!r}")
    return value


def check_config(cfg: Mapping[str, Any]) -> None:
    """Check everything that does not need the graph.

    Raises:
        ConfigError: naming the bad key, its value and what would be valid.
    """
    _choice(cfg["dataset"]["name"], DATASETS, "dataset.name")
    _choice(cfg["model"]["name"], MODELS, "model.name")
    _choice(cfg["framework"]["name"], FRAMEWORKS, "framework.name")
    _choice(cfg["engine"]["name"], ENGINES, "engine.name")
    _choice(cfg["microbatch"]["halo"], HALOS, "microbatch.halo")
    _choice(cfg["microbatch"]["partition"], PARTITIONERS, "microbatch.partition")
    _choice(cfg["microbatch"]["targets"], TARGETS, "microbatch.targets")
    _positive_int(cfg["chunks"], "chunks")
    layers = _positive_int(cfg["model"]["layers"], "model.layers")
    _positive_int(cfg["model"]["hidden"], "model.hidden")
    if not 0.0 <= float(cfg["model"]["dropout"]) < 1.0:
        raise ConfigError(f"model.dropout must be in [0, 1), got {cfg['model']['dropout']!r}")
    if int(cfg["train"]["epochs"]) < 1:
        raise ConfigError(f"train.epochs must be >= 1, got {cfg['train']['epochs']!r}")
    engine = cfg["engine"]
    if engine["name"] == "single":
        _device(engine["device"], "engine.device")
        return
    devices = list(engine["devices"])
    if not devices:
        raise ConfigError("engine.devices is empty; give one device per pipeline stage, e.g. [cpu, cpu]")
    for i, d in enumerate(devices):
        _device(d, f"engine.devices[{i}]")
    _choice(engine["checkpoint"], CHECKPOINT_MODES, "engine.checkpoint")
    balance = engine["balance"]
    if balance is None:
        if len(devices) > layers:
            raise ConfigError(f"engine.devices has {len(devices)} devices but the model has only "
                              f"{layers} layers; use at most {layers} devices")
        return
    balance = list(balance)
    if len(balance) != len(devices) or sum(balance) != layers or min(balance) < 1:
        raise ConfigError(f"engine.balance={balance} does not match the model: it needs one positive "
                          f"entry per device ({len(devices)} devices) summing to model.layers={layers}")


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
