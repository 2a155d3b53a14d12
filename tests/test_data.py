"""Datasets: the embedded synthetic graph, Planetoid from its raw files (equal to PyG's loader), and
caches that are crafted to run code or cannot be written."""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch
import torch_geometric.transforms as T
from omegaconf import OmegaConf
from torch_geometric.datasets import Planetoid
from torch_geometric.utils import is_undirected

from pipegnn.data import SyntheticSpec, load_graph, make_synthetic
from pipegnn.data import planetoid
from pipegnn.data.graph import GRAPH_FILE, load_saved_graph, save_graph
from pipegnn.data.planetoid import load_planetoid, raw_file_names
from pipegnn.data.synthetic import DEFAULT_AVG_DEGREE
from pipegnn.errors import ConfigError, DatasetUnavailable

from conftest import CONF, CodeMarker, plant_processed, random_graph, same_graph, unwritable_cache


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
    # The default graph (5-word documents, signal 0.2), pinned so that plan caches and records keep
    # matching it. Its edges are the former defaults' (50 words at signal 0.07); the split is not (the
    # shorter documents draw fewer random numbers before it).
    g = make_synthetic(SyntheticSpec())
    assert g.structure_hash() == "eb336e88d5542aea"
    assert hashlib.sha1((g.x > 0).numpy().tobytes()).hexdigest()[:16] == "3943a359de0eed7c"  # words
    torch.testing.assert_close(g.x[0, [48, 62, 298]], torch.tensor([0.1631046, 0.2054837, 0.2109217]))


def test_synthetic_former_defaults_still_generate_the_former_graph() -> None:
    # The generator is unchanged: the former defaults, passed as knobs, give the graph generated before
    # the scalable rewrite and before the defaults changed (older records name these values).
    g = make_synthetic(SyntheticSpec(words_per_node=50, signal=0.07))
    assert g.structure_hash() == "2a9a3b12b4ec697c"
    assert hashlib.sha1((g.x > 0).numpy().tobytes()).hexdigest()[:16] == "d8ed052fcdbc9baf"  # words
    torch.testing.assert_close(g.x[0, [19, 38, 41]], torch.tensor([0.0368656, 0.0211709, 0.0211958]))
    assert torch.equal(g.edge_index, make_synthetic(SyntheticSpec()).edge_index)


def test_synthetic_spec_defaults_are_the_yaml() -> None:
    # SyntheticSpec() and dataset=synthetic describe the same graph: every knob, same default.
    yaml = OmegaConf.to_container(OmegaConf.load(CONF / "dataset" / "synthetic.yaml"))
    knobs = {k: v for k, v in yaml.items() if k not in ("name", "preset")}
    defaults = {f.name: f.default for f in dataclasses.fields(SyntheticSpec)}
    # avg_degree: the spec's None means PubMed's 4.5 (so that density alone can be set); the YAML says 4.5.
    assert defaults.pop("avg_degree") is None and knobs.pop("avg_degree") == DEFAULT_AVG_DEGREE
    assert knobs == defaults


def test_synthetic_default_rows_carry_pubmeds_class_signal() -> None:
    # The cause of the former erratic curves: a class's mean row sat 0.011 from the overall mean (PubMed's
    # row-normalised TF-IDF, its 1,060 rows in the raw files: 0.030), so training crept and whole classes
    # of validation predictions flipped from epoch to epoch.
    g = make_synthetic(SyntheticSpec())
    means = torch.stack([g.x[g.y == c].mean(0) for c in range(3)])
    separation = (means - g.x.mean(0)).norm(dim=1)
    assert bool((separation > 0.028).all()) and bool((separation < 0.038).all())


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
    assert not (tmp_path / "Cora").exists()  # read in place: nothing copied, nothing processed


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


@pytest.mark.parametrize("name", ["cora", "citeseer"])
def test_planetoid_equals_pyg_loader(name: str, data_root: Path, tmp_path: Path) -> None:
    # The old path: PyG's Planetoid on a private copy of the raw files, row-normalised, public split.
    pyg_name = planetoid.PLANETOID_NAMES[name]
    shutil.copytree(data_root / pyg_name / "raw", tmp_path / "old" / pyg_name / "raw")
    old = Planetoid(str(tmp_path / "old"), pyg_name, transform=T.NormalizeFeatures())[0]
    g = load_planetoid(name, data_root, tmp_path / "cache")
    assert same_graph(g, old) and g.num_classes == int(old.y.max()) + 1


def test_planetoid_ignores_code_in_processed_cache(data_root: Path, tmp_path: Path) -> None:
    clean = load_planetoid("cora", data_root, tmp_path / "clean")
    marker = tmp_path / "code-ran"
    cache = tmp_path / "cache"
    plant_processed(cache / "Cora" / "processed", marker)  # PyG's Planetoid loads these
    g = load_planetoid("cora", data_root, cache)
    assert not marker.exists()
    assert g.num_nodes == 2708 and same_graph(g, clean)
    # The same from raw files in the cache (no data root), beside the crafted processed files.
    shutil.copytree(data_root / "Cora" / "raw", cache / "Cora" / "raw")
    g = load_planetoid("cora", None, cache)
    assert not marker.exists() and same_graph(g, clean)


@pytest.mark.parametrize("part", ["x", "graph", "ally"])
def test_planetoid_raw_pickle_cannot_run_code(part: str, data_root: Path, tmp_path: Path) -> None:
    marker = tmp_path / "code-ran"
    raw = tmp_path / "cache" / "Cora" / "raw"
    shutil.copytree(data_root / "Cora" / "raw", raw)
    with open(raw / f"ind.cora.{part}", "wb") as f:  # a downloaded raw file replaced in the cache
        pickle.dump(CodeMarker(marker), f, protocol=2)
    with pytest.raises(DatasetUnavailable, match="not valid Planetoid files.*not allowed"):
        load_planetoid("cora", None, tmp_path / "cache")
    assert not marker.exists()


def test_planetoid_raw_reader_refuses_foreign_objects(data_root: Path, tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    shutil.copytree(data_root / "Cora" / "raw", raw)
    with open(raw / "ind.cora.y", "wb") as f:  # allowed globals only, but not a label matrix
        pickle.dump([1, 2, 3], f, protocol=2)
    with pytest.raises(ValueError, match="numeric array"):
        planetoid.read_raw(raw, "cora", "y")
    with open(raw / "ind.cora.graph", "wb") as f:
        pickle.dump({0: ["1"]}, f, protocol=2)
    with pytest.raises(ValueError, match="adjacency dict"):
        planetoid.read_raw(raw, "cora", "graph")


def fake_download(source: Path):
    """PyG's download_url served from the shared raw files (no network)."""
    def download_url(url: str, folder: str, log: bool = True) -> str:
        name = url.rpartition("/")[2]
        shutil.copyfile(source / name, Path(folder) / name)
        return str(Path(folder) / name)
    return download_url


def test_planetoid_download_moves_files_into_the_cache(data_root: Path, tmp_path: Path,
                                                       monkeypatch) -> None:
    monkeypatch.setattr(planetoid, "download_url", fake_download(data_root / "Cora" / "raw"))
    cache = tmp_path / "cache"
    (cache / "Cora" / "raw").mkdir(parents=True)
    shutil.copyfile(data_root / "Cora" / "raw" / "ind.cora.x", cache / "Cora" / "raw" / "ind.cora.x")
    g = load_planetoid("cora", tmp_path / "empty", cache)
    assert same_graph(g, load_planetoid("cora", data_root, tmp_path / "clean"))
    # All eight files there, no staging folder left behind.
    assert sorted(os.listdir(cache / "Cora" / "raw")) == sorted(raw_file_names("cora"))


@pytest.mark.parametrize("how", ["under_file", "chmod"])
def test_planetoid_unwritable_cache(how: str, data_root: Path, tmp_path: Path, monkeypatch,
                                    caplog) -> None:
    clean = load_planetoid("cora", data_root, tmp_path / "clean")
    cache = unwritable_cache(tmp_path, how)
    with caplog.at_level(logging.WARNING):
        assert same_graph(load_planetoid("cora", data_root, cache), clean)  # nothing to write
    assert not caplog.records
    # Files to download: they go to a temporary folder, with one warning.
    monkeypatch.setattr(planetoid, "download_url", fake_download(data_root / "Cora" / "raw"))
    with caplog.at_level(logging.WARNING):
        g = load_planetoid("cora", tmp_path / "empty", cache)
    assert same_graph(g, clean)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "cannot be written" in warnings[0].getMessage()
    assert "\n" not in warnings[0].getMessage()


def test_saved_graph_round_trip_and_refusals(tmp_path: Path, caplog) -> None:
    g = random_graph()
    path = tmp_path / "c" / GRAPH_FILE
    assert save_graph(g, path)
    back = load_saved_graph(path, "random")
    assert back is not None and same_graph(back, g) and back.num_classes == g.num_classes
    assert load_saved_graph(tmp_path / "none.pt", "random") is None
    assert load_saved_graph(path, "other") is None and "ignoring cached graph" in caplog.text
    marker = tmp_path / "code-ran"
    torch.save(CodeMarker(marker), path)
    assert load_saved_graph(path, "random") is None and not marker.exists()
    blocked = tmp_path / "blocker"
    blocked.write_text("")
    with caplog.at_level(logging.WARNING):
        assert not save_graph(g, blocked / "c" / GRAPH_FILE)
    assert "cannot be written" in caplog.text
