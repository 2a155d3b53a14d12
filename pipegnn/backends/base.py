"""What every framework adapter shares: the model kinds it builds, the aggregation choice it was made
for (and which aggregations each framework offers per kind), and the stand-in left in a framework layer
whose dense transform was taken out of it.

The adapters import only from here (never from the package ``__init__``, which imports them).
"""
from __future__ import annotations

from typing import TypeVar

from torch import nn

from pipegnn.config.choices import Aggregation, ModelName, names
from pipegnn.errors import ConfigError, check_choice

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

#: ``model.aggregation`` values (which ones a framework offers per model:
#: [`aggregations`][pipegnn.backends.base.aggregations]).
AGGREGATIONS = names(Aggregation)
#: Model kinds (``model.name``) every adapter builds layers and computation graphs for.
KINDS = names(ModelName)
#: Kinds whose layers read GCN's symmetric normalisation (self-loops, full-graph degrees) as edge weights.
NORMALISED = ("gcn", "gcn2")
#: Aggregations each framework offers per model kind (kinds not listed: all of AGGREGATIONS).
_AVAILABLE: dict[str, dict[str, tuple[str, ...]]] = {
    "pyg": {"gcn": ("messages", "sparse"), "gat": ("messages",), "sage": ("messages", "sparse"),
            "gcn2": ("messages", "sparse")},
    "dgl": {"gcn": AGGREGATIONS, "gat": AGGREGATIONS, "sage": AGGREGATIONS, "gcn2": AGGREGATIONS},  # fused
}
_AdapterT = TypeVar("_AdapterT", bound="Adapter")
_WHY = {("pyg", "gat"): "PyG's GATConv needs per-edge attention values, it has no sparse-matmul path"}


def check_kind(kind: str) -> None:
    """Raise ConfigError unless the adapters know model ``kind`` (one of `KINDS`)."""
    check_choice(kind, KINDS, "model.name")


def aggregations(framework: str, kind: str) -> tuple[str, ...]:
    """The ``model.aggregation`` values available for model ``kind`` in ``framework``."""
    return _AVAILABLE.get(framework, {}).get(kind, AGGREGATIONS)


def check_aggregation(framework: str, kind: str, aggregation: str) -> None:
    """Raise ConfigError unless ``aggregation`` is available for ``kind`` in ``framework``."""
    check_choice(aggregation, AGGREGATIONS, "model.aggregation")
    available = aggregations(framework, kind)
    if aggregation not in available:
        why = _WHY.get((framework, kind))
        raise ConfigError(f"model.aggregation={str(aggregation)!r} is not available for model={kind} with "
                          f"framework={framework}{f' ({why})' if why else ''}; available: "
                          f"{', '.join(available)}")


class Adapter:
    """Base of the framework adapters: holds ``aggregation``, checked against `AGGREGATIONS`.

    Raises:
        ConfigError: unknown aggregation.
    """

    name = ""

    def __init__(self, aggregation: str = "messages"):
        check_choice(aggregation, AGGREGATIONS, "model.aggregation")
        self.aggregation = aggregation

    def __repr__(self) -> str:
        return f"{type(self).__name__}(aggregation={self.aggregation!r})"

    def with_aggregation(self: _AdapterT, aggregation: str) -> _AdapterT:
        """This adapter, or one of the same framework made for ``aggregation``."""
        return self if aggregation == self.aggregation else type(self)(aggregation)


class TakenOut(nn.Identity):
    """Stands in a framework layer for its dense transform, which a ``Transform`` unit applies before
    the layer runs (the layer then receives already transformed rows). ``reset_parameters`` is a no-op:
    the transform's parameters live, and are reset, where the transform went."""

    def reset_parameters(self) -> None:
        pass
