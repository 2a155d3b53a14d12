"""Datasets: load_graph's names and parameters, Planetoid from its raw files (equal to PyG's loader),
and caches that are crafted to run code or cannot be written."""
from __future__ import annotations

import logging
import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch
import torch_geometric.transforms as T
from torch_geometric.datasets import Planetoid

from pipegnn.data import load_graph
from pipegnn.data import planetoid
from pipegnn.data.graph import GRAPH_FILE, load_saved_graph, save_graph
from pipegnn.data.planetoid import load_planetoid, raw_file_names
from pipegnn.errors import ConfigError, DatasetUnavailable

from conftest import CodeMarker, plant_processed, random_graph, same_graph, unwritable_cache


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
