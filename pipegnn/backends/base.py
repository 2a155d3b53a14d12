"""What every framework adapter shares: the aggregation choice it was made for, and the stand-in left
in a framework layer whose dense transform was taken out of it."""
from __future__ import annotations

from torch import nn

from pipegnn.errors import ConfigError

__all__ = ["AGGREGATIONS", "Adapter", "TakenOut"]

#: ``model.aggregation`` values (which ones a framework offers per model: ``backends.aggregations``).
AGGREGATIONS = ("messages", "sparse")


class Adapter:
    """Base of the framework adapters: holds ``aggregation``, checked against :data:`AGGREGATIONS`.

    Raises:
        ConfigError: unknown aggregation.
    """

    name = ""

    def __init__(self, aggregation: str = "messages"):
        if aggregation not in AGGREGATIONS:
            raise ConfigError(f"model.aggregation={aggregation!r} is not valid; valid: "
                              f"{', '.join(AGGREGATIONS)}")
        self.aggregation = aggregation

    def __repr__(self) -> str:
        return f"{type(self).__name__}(aggregation={self.aggregation!r})"

    def with_aggregation(self, aggregation: str) -> "Adapter":
        """This adapter, or one of the same framework made for ``aggregation``."""
        return self if aggregation == self.aggregation else type(self)(aggregation)


class TakenOut(nn.Identity):
    """Stands in a framework layer for its dense transform, which a ``Transform`` unit applies before
    the layer runs (the layer then receives already transformed rows). ``reset_parameters`` is a no-op:
    the transform's parameters live, and are reset, where the transform went."""

    def reset_parameters(self) -> None:
        pass
