"""The nodes a run computes: the evaluation targets of an epoch, and the chunk count checked against
them once the graph is loaded."""
from __future__ import annotations

import torch
from torch import Tensor

from pipegnn.config.choices import Evaluation, Halo
from pipegnn.config.schema import Config
from pipegnn.data import Graph
from pipegnn.errors import ConfigError

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


def layerwise(halo: Halo, evaluation: Evaluation) -> bool:
    """Whether a run evaluates layer-wise: historical halos always do, the others with
    ``microbatch.evaluation=layerwise``."""
    return halo is Halo.historical or evaluation is Evaluation.layerwise


def eval_targets(graph: Graph, halo: Halo = Halo.exact, evaluation: Evaluation = Evaluation.plan) -> Tensor:
    """Node ids evaluated each epoch: the union of the train, val and test splits, or every node when
    evaluating layer-wise (each layer computes every node: historical halos' also refreshes every cached
    row)."""
    if layerwise(halo, evaluation):
        return graph.split("all")
    mask = graph.train_mask | graph.val_mask | graph.test_mask
    return torch.nonzero(mask).view(-1)


def check_splits(cfg: Config, graph: Graph) -> None:
    """Every split holds a node: an empty one would train on nothing, or select and report epochs by the
    accuracy of no node (NaN).

    Raises:
        ConfigError: naming the empty split and the dataset keys that drew it.
    """
    for split in ("train", "val", "test"):
        if not bool(getattr(graph, f"{split}_mask").any()):
            how = getattr(cfg.dataset, "split", None)  # the study's graphs: random or per_class
            key = {"random": f"{split}_fraction", "per_class": f"{split}_per_class"}.get(str(how))
            value = getattr(cfg.dataset, key, None) if key is not None else None
            drawn = f" (dataset.split={how}: dataset.{key}={value})" if value is not None else ""
            raise ConfigError(f"dataset {graph.name!r} has no {split} nodes{drawn}; every split needs at "
                              "least one node: give it a larger share")


def check_targets(cfg: Config, graph: Graph) -> None:
    """Check the splits (`check_splits`) and the chunk count against the graph's targets.

    Raises:
        ConfigError: an empty split, or chunks exceeds the number of training or evaluation targets.
    """
    check_splits(cfg, graph)
    mb = cfg.microbatch
    for name, count in (("training", graph.split(mb.targets).numel()),
                        ("evaluation", eval_targets(graph, mb.halo, mb.evaluation).numel())):
        if cfg.chunks > count:
            raise ConfigError(f"chunks={cfg.chunks} is larger than the number of {name} targets ({count}) "
                              f"of dataset {graph.name!r} with microbatch.targets={mb.targets}, "
                              f"halo={mb.halo}; use chunks <= {count}")
