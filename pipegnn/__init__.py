"""pipegnn: pipeline-parallel GNN training with graph-aware micro-batches."""
from pipegnn.errors import ConfigError, DatasetUnavailable, RunFailed
from pipegnn.train import run

__all__ = ["ConfigError", "DatasetUnavailable", "RunFailed", "run"]
__version__ = "0.1.0"
