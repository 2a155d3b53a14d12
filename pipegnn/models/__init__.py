"""Staged GNN models: one file per model over the staging base."""
from __future__ import annotations

from typing import Any, Mapping

from pipegnn.errors import ConfigError
from pipegnn.models.base import FIRST_TRANSFORMS, UNITS_PER_LAYER, StagedGNN, layerwise
from pipegnn.models.gat import gat_layers
from pipegnn.models.gcn import gcn_layers
from pipegnn.models.gcn2 import gcn2_stack
from pipegnn.models.precision import PRECISIONS
from pipegnn.models.sage import sage_layers
from pipegnn.models.spec import LayerSpec, Stack
from pipegnn.models.transform import Transform
from pipegnn.models.units import Propagate, Readout, Unit

__all__ = ["FIRST_TRANSFORMS", "MODELS", "PRECISIONS", "UNITS_PER_LAYER", "LayerSpec", "Propagate",
           "Readout", "Stack", "StagedGNN", "Transform", "Unit", "build_model", "layerwise", "model_stack",
           "units_per_layer"]

MODELS = ("gat", "gcn", "sage", "gcn2")


def model_stack(model: Mapping[str, Any], in_dim: int, num_classes: int) -> Stack:
    """The layers (and dense input/output units) the ``model`` config group describes."""
    name = model["name"]
    common = dict(hidden=int(model["hidden"]), layers=int(model["layers"]),
                  dropout=float(model["dropout"]))
    if name == "gcn2":
        return gcn2_stack(in_dim, num_classes, alpha=float(model["alpha"]), theta=float(model["theta"]),
                          **common)
    residual = bool(model.get("residual", False))
    if name == "gat":
        return Stack(gat_layers(in_dim, num_classes, heads=int(model["heads"]),
                                out_heads=int(model["out_heads"]), residual=residual, **common))
    if name == "gcn":
        return Stack(gcn_layers(in_dim, num_classes, residual=residual, **common))
    if name == "sage":
        return Stack(sage_layers(in_dim, num_classes, residual=residual, **common))
    raise ConfigError(f"unknown model {name!r}; valid: {', '.join(MODELS)}")


def units_per_layer(model: Mapping[str, Any]) -> list[int]:
    """Pipeline units of every layer of the ``model`` config (:attr:`Stack.units_per_layer`), known
    before any graph is loaded: the counts do not depend on the input and output widths."""
    return model_stack(model, 1, 1).units_per_layer


def build_model(model: Mapping[str, Any], backend: Any, features: Any, num_classes: int,
                history: bool = False, first_transform: str = "once_per_step",
                precision: str = "fp32", halo_dropout: str = "read") -> StagedGNN:
    """A StagedGNN for the ``model`` config, built with ``backend``'s layers (with history caches
    for historical micro-batching when ``history``, their dropout by ``halo_dropout``) at ``precision``
    (``train.precision``).
    ``model.aggregation``, when given, selects the adapter's aggregation (``backend.with_aggregation``).

    ``features`` sizes the model (``shape``, ``dtype``) and feeds its first unit: the feature Tensor, a
    source of rows out of core (:class:`pipegnn.data.features.FeatureRows`), or only their description
    (:class:`pipegnn.data.features.FeatureMeta`; rows later with ``StagedGNN.set_features``)."""
    specs = model_stack(model, features.shape[1], num_classes)
    if model.get("aggregation") is not None:
        backend = backend.with_aggregation(model["aggregation"])
    return StagedGNN(specs, backend, model["name"], features, history, first_transform, precision,
                     halo_dropout)
