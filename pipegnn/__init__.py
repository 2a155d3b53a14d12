"""pipegnn: pipeline-parallel GNN training with graph-aware micro-batches."""
from typing import Any

from pipegnn.errors import ConfigError, DatasetUnavailable

__all__ = ["ConfigError", "DatasetUnavailable", "run"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # `run` pulls in torch and the frameworks; loaded on first use so that light entry points
    # (e.g. `python -m pipegnn.results`) start fast.
    if name == "run":
        from pipegnn.training.launch import run
        return run
    raise AttributeError(f"module 'pipegnn' has no attribute {name!r}")
