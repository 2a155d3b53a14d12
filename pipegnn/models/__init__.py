"""Staged GNN models: one file per model over the staging base."""
from __future__ import annotations

import math
from typing import Any, Mapping

from pipegnn.config.choices import FirstTransform, HaloDropout, ModelName, Precision, names
from pipegnn.config.schema import GATConfig, GCN2Config, ModelConfig
from pipegnn.config.typed import group_config
from pipegnn.errors import ConfigError, check_positive_int
from pipegnn.measure import allocatable_bytes
from pipegnn.models.base import FIRST_TRANSFORMS, StagedGNN, layerwise
from pipegnn.models.gat import gat_layers
from pipegnn.models.gcn import gcn_layers
from pipegnn.models.gcn2 import gcn2_stack
from pipegnn.models.precision import PRECISIONS
from pipegnn.models.sage import sage_layers
from pipegnn.models.spec import UNITS_PER_LAYER, LayerSpec, Stack
from pipegnn.models.transform import Transform
from pipegnn.models.units import Propagate, Readout, Unit

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

MODELS = names(ModelName)


#: The most layers a model may have (``model.layers=10**9`` built a billion layer specifications before
#: anything checked their weights; the deepest published GNNs have about a thousand).
MAX_LAYERS = 4096


def check_model(model: ModelConfig) -> None:
    """The model's sizes (GAT: also its heads; GCNII: alpha and theta) and dropout.

    Raises:
        ConfigError: naming the bad key, its value and what would be valid.
    """
    check_positive_int(model.layers, "model.layers")
    if model.layers > MAX_LAYERS:  # a unit and a spec per layer are built before any weight
        raise ConfigError(f"model.layers={model.layers} is past the deepest model pipegnn builds "
                          f"({MAX_LAYERS:,} layers: RevGNN's deepest has 1,001); use at most {MAX_LAYERS}")
    check_positive_int(model.hidden, "model.hidden")
    if isinstance(model, GATConfig):
        check_positive_int(model.heads, "model.heads")
        check_positive_int(model.out_heads, "model.out_heads")
    if isinstance(model, GCN2Config):
        if not 0.0 <= model.alpha <= 1.0:
            raise ConfigError("model.alpha (GCNII's initial residual) must be in [0, 1], "
                              f"got {model.alpha!r}")
        if not 0.0 <= model.theta < math.inf:
            raise ConfigError(f"model.theta (GCNII's identity mapping) must be a finite number >= 0, got "
                              f"{model.theta!r}")
    if not 0.0 <= model.dropout < 1.0:
        raise ConfigError(f"model.dropout must be in [0, 1), got {model.dropout!r}")


def model_stack(model: ModelConfig, in_dim: int, num_classes: int) -> Stack:
    """The layers (and dense input/output units) the ``model`` config group describes."""
    common: dict[str, Any] = dict(hidden=model.hidden, layers=model.layers, dropout=model.dropout)
    if isinstance(model, GCN2Config):
        return gcn2_stack(in_dim, num_classes, alpha=model.alpha, theta=model.theta, **common)
    if isinstance(model, GATConfig):
        return Stack(gat_layers(in_dim, num_classes, heads=model.heads, out_heads=model.out_heads,
                                residual=model.residual, **common))
    if model.name is ModelName.gcn:
        return Stack(gcn_layers(in_dim, num_classes, residual=model.residual, **common))
    if model.name is ModelName.sage:
        return Stack(sage_layers(in_dim, num_classes, residual=model.residual, **common))
    raise ConfigError(f"model.name={model.name!r} has no {type(model).__name__} layers; "
                      f"valid: {', '.join(MODELS)}")


def _check_weights(config: ModelConfig, specs: Stack) -> None:
    """That the model's dense weights (at least ``in_dim x product_width`` a layer, and the input and
    output Linears, in float32) fit in what this process can still allocate: a width far past memory
    (``model.hidden=10**12``) is an invalid run naming it, not an allocation failure inside torch.

    Raises:
        ConfigError: naming the widths, the bytes needed and the bytes there are.
    """
    dense = [s for s in (specs.input, specs.output) if s is not None]
    need = 4 * (sum(s.in_dim * s.product_width for s in specs.layers)
                + sum(s.in_dim * s.out_features for s in dense))
    room = allocatable_bytes()
    if need > room:
        heads = f", model.heads={config.heads}" if isinstance(config, GATConfig) else ""
        raise ConfigError(f"model.hidden={config.hidden}{heads}: the model's weights need at least {need:,} "
                          f"bytes, more than this process can still allocate ({room:,}); use a smaller "
                          "model.hidden" + (" or model.heads" if heads else ""))


def units_per_layer(model: ModelConfig | Mapping[str, Any]) -> list[int]:
    """Pipeline units of every layer of the ``model`` config (typed, or its keys over the model's YAML),
    known before any graph is loaded: the counts do not depend on the input and output widths."""
    return model_stack(group_config("model", model), 1, 1).units_per_layer


def build_model(model: ModelConfig | Mapping[str, Any], backend: Any, features: Any, num_classes: int,
                history: bool = False, first_transform: FirstTransform = FirstTransform.once_per_step,
                precision: Precision = Precision.fp32,
                halo_dropout: HaloDropout = HaloDropout.read, refresh_only: bool = False) -> StagedGNN:
    """A StagedGNN for the ``model`` config (typed, or its keys over the model's YAML:
    [`group_config`][pipegnn.config.typed.group_config]), built with ``backend``'s layers (with history
    caches for historical micro-batching when ``history``, their dropout by ``halo_dropout``; for layer-wise
    evaluation alone with ``refresh_only``) at ``precision`` (``train.precision``).
    ``model.aggregation`` selects the adapter's aggregation (``backend.with_aggregation``).

    ``features`` sizes the model (``shape``, ``dtype``) and feeds its first unit: the feature Tensor, a
    source of rows out of core ([`pipegnn.data.features.FeatureRows`][pipegnn.data.features.FeatureRows]), or
    only their description ([`pipegnn.data.features.FeatureMeta`][pipegnn.data.features.FeatureMeta]; rows
    later with ``StagedGNN.set_features``)."""
    config: ModelConfig = group_config("model", model)
    specs = model_stack(config, features.shape[1], num_classes)
    _check_weights(config, specs)
    return StagedGNN(specs, backend.with_aggregation(config.aggregation), config.name, features, history,
                     first_transform, precision, halo_dropout, refresh_only)
