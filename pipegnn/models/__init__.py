"""Staged GNN models: one file per model over the staging base."""
from __future__ import annotations

from typing import Any, Mapping

from pipegnn.errors import ConfigError
from pipegnn.models.base import FIRST_TRANSFORMS, UNITS_PER_LAYER, Propagate, StagedGNN, Transform, Unit
from pipegnn.models.gat import gat_layers
from pipegnn.models.gcn import gcn_layers
from pipegnn.models.precision import PRECISIONS
from pipegnn.models.sage import sage_layers
from pipegnn.models.spec import LayerSpec

__all__ = ["FIRST_TRANSFORMS", "MODELS", "PRECISIONS", "UNITS_PER_LAYER", "LayerSpec", "Propagate", "StagedGNN", "Transform", "Unit", "build_model", "layer_specs"]

MODELS = ("gat", "gcn", "sage")


def layer_specs(model: Mapping[str, Any], in_dim: int, num_classes: int) -> list[LayerSpec]:
    """Layer specs from the ``model`` config group."""
    name = model["name"]
    common = dict(hidden=int(model["hidden"]), layers=int(model["layers"]),
                  dropout=float(model["dropout"]))
    if name == "gat":
        return gat_layers(in_dim, num_classes, heads=int(model["heads"]),
                          out_heads=int(model["out_heads"]), **common)
    if name == "gcn":
        return gcn_layers(in_dim, num_classes, **common)
    if name == "sage":
        return sage_layers(in_dim, num_classes, **common)
    raise ConfigError(f"unknown model {name!r}; valid: {', '.join(MODELS)}")


def build_model(model: Mapping[str, Any], backend: Any, features: Any, num_classes: int,
                history: bool = False, first_transform: str = "once_per_step",
                precision: str = "fp32") -> StagedGNN:
    """A StagedGNN for the ``model`` config, built with ``backend``'s layers (with history caches
    for historical micro-batching when ``history``) at ``precision`` (``train.precision``).
    ``model.aggregation``, when given, selects the adapter's aggregation (``backend.with_aggregation``).

    ``features`` sizes the model (``shape``, ``dtype``) and feeds its first unit: the feature Tensor, a
    source of rows out of core (:class:`pipegnn.data.features.FeatureRows`), or only their description
    (:class:`pipegnn.data.features.FeatureMeta`; rows later with ``StagedGNN.set_features``)."""
    specs = layer_specs(model, features.shape[1], num_classes)
    if model.get("aggregation") is not None:
        backend = backend.with_aggregation(model["aggregation"])
    return StagedGNN(specs, backend, model["name"], features, history, first_transform, precision)
