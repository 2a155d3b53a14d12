"""Datasets: the embedded synthetic graph and Planetoid through PyG's loader."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch
from torch_geometric.datasets import Planetoid
from torch_geometric.utils import is_undirected

from pipegnn.data import SyntheticSpec, load_graph, make_synthetic
from pipegnn.data.planetoid import load_planetoid, raw_file_names
from pipegnn.errors import ConfigError, DatasetUnavailable


def test_synthetic_default_is_pubmed_shaped() -> None:
    g = make_synthetic(SyntheticSpec())
    assert (g.num_nodes, g.num_features, g.num_classes) == (19717, 500, 3)
    assert abs(g.num_edges - 88648) / 88648 < 0.02  # PubMed has 88,648 directed edges
    assert [int(m.sum()) for m in (g.train_mask, g.val_mask, g.test_mask)] == [60, 500, 1000]
    assert torch.equal(torch.bincount(g.y[g.train_mask]), torch.tensor([20, 20, 20]))
    assert not bool((g.train_mask & g.val_mask).any() | (g.val_mask & g.test_mask).any())
    assert is_undirected(g.edge_index) and bool((g.edge_index[0] != g.edge_index[1]).all())
    torch.testing.assert_close(g.x.sum(1), torch.ones(g.num_nodes))
    src, dst = g.edge_index
    homophily = (g.y[src] == g.y[dst]).float().mean().item()
    assert 0.7 <= homophily <= 0.85  # community edges (0.7) plus same-class chance edges
    # Class-correlated features: nodes are closer to their own class's mean feature vector.
    means = torch.stack([g.x[g.y == c].mean(0) for c in range(3)])
    assert (torch.cdist(g.x, means).argmin(1) == g.y).float().mean() > 0.6


def test_synthetic_default_graph_is_pinned() -> None:
    # The default graph as generated before the scalable rewrite: plan caches and records stay valid.
    g = make_synthetic(SyntheticSpec())
    assert g.structure_hash() == "2a9a3b12b4ec697c"
    assert hashlib.sha1((g.x > 0).numpy().tobytes()).hexdigest()[:16] == "d8ed052fcdbc9baf"  # words
    torch.testing.assert_close(g.x[0, [19, 38, 41]], torch.tensor([0.0368656, 0.0211709, 0.0211958]))


def test_synthetic_is_deterministic_per_seed() -> None:
    spec = SyntheticSpec(num_nodes=500, num_features=20, num_val=50, num_test=50)
    a, b = make_synthetic(spec), make_synthetic(spec)
    assert torch.equal(a.edge_index, b.edge_index) and torch.equal(a.x, b.x)
    c = make_synthetic(SyntheticSpec(num_nodes=500, num_features=20, num_val=50, num_test=50, seed=1))
    assert not torch.equal(a.edge_index, c.edge_index)


def test_synthetic_power_law_skews_degrees() -> None:
    kw = dict(num_nodes=5000, num_features=8, avg_degree=10, num_val=100, num_test=100)
    flat = torch.bincount(make_synthetic(SyntheticSpec(**kw)).edge_index[1]).float()
    skew = torch.bincount(make_synthetic(SyntheticSpec(power_law=2.2, **kw)).edge_index[1]).float()
    assert skew.max() > 5 * flat.max()


def test_unknown_synthetic_parameter() -> None:
    with pytest.raises(ConfigError, match="nodes_count"):
        load_graph({"name": "synthetic", "nodes_count": 10}, None, ".")
    with pytest.raises(ConfigError, match="unknown dataset 'imagenet'"):
        load_graph({"name": "imagenet"}, None, ".")


def test_cora_through_planetoid(data_root: Path, tmp_path: Path) -> None:
    before = sorted(p.name for p in (data_root / "Cora").iterdir())
    g = load_planetoid("cora", data_root, tmp_path)
    assert (g.num_nodes, g.num_edges, g.num_features, g.num_classes) == (2708, 10556, 1433, 7)
    assert [int(m.sum()) for m in (g.train_mask, g.val_mask, g.test_mask)] == [140, 500, 1000]
    assert sorted(p.name for p in (data_root / "Cora").iterdir()) == before  # source untouched
    assert (tmp_path / "Cora" / "processed").is_dir()


def test_citeseer_through_planetoid(data_root: Path, tmp_path: Path) -> None:
    g = load_planetoid("citeseer", data_root, tmp_path)
    assert (g.num_nodes, g.num_features, g.num_classes) == (3327, 3703, 6)


def test_missing_files_offline_give_one_clear_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(Planetoid, "url", "http://127.0.0.1:9")  # nothing listens: offline
    with pytest.raises(DatasetUnavailable) as info:
        load_planetoid("pubmed", tmp_path / "empty", tmp_path / "cache")
    message = str(info.value)
    assert all(f in message for f in raw_file_names("pubmed"))
    assert "http://127.0.0.1:9" in message and "PubMed/raw" in message
