"""Datasets: load_graph's names and parameters (Planetoid's loader in test_planetoid.py, the saved graph
in test_graph.py)."""
from __future__ import annotations

import pytest

from pipegnn.data import load_graph
from pipegnn.errors import ConfigError


def test_unknown_synthetic_parameter() -> None:
    with pytest.raises(ConfigError, match="nodes_count"):
        load_graph({"name": "synthetic", "nodes_count": 10}, None, ".")
    with pytest.raises(ConfigError, match=r"dataset.name='imagenet' is not valid; valid: cora, "):
        load_graph({"name": "imagenet"}, None, ".")
