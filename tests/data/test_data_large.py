"""Large datasets from tiny raw files in each loader's own format (equal to ogb's and PyG's loaders,
safe from crafted cache files, fine with an unwritable cache), and the synthetic presets (PubMed's
topology from the shared raw files: test_planetoid.py)."""
from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import torch
from omegaconf import OmegaConf
from torch_geometric.datasets import Reddit
from torch_geometric.utils import is_undirected

from pipegnn.data import DATASETS, LARGE_NAMES, Graph, SyntheticSpec, large, load_graph
from pipegnn.data.graph import GRAPH_FILE, load_saved_graph
from pipegnn.errors import DatasetUnavailable

from tests.helpers import (
    CONF,
    TINY_SYNTHETIC,
    CodeMarker,
    make_cfg,
    plant_processed,
    same_graph,
    unwritable_cache,
)

# --- OGB: the CSV files ogb's read_csv_graph_raw and get_idx_split read -------------------------------

# A tiny citation graph: 8 nodes, 9 directed edges (one reciprocal pair 0->1, 1->0), 40 classes.
ARXIV_EDGES = np.array([[0, 1, 1, 2, 3, 4, 5, 6, 7], [1, 0, 2, 3, 4, 5, 6, 7, 0]])
ARXIV_LABELS = np.array([3, 0, 39, 7, 7, 12, 0, 5])
SPLIT = {"train": [0, 1, 2, 3], "valid": [4, 5], "test": [6, 7]}


def _csv(path: Path, rows: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(path, header=False, index=False, compression="gzip")


def write_ogb(folder: Path, edges: np.ndarray, labels: np.ndarray, features: int, split: str,
              node_year: bool) -> None:
    """Raw files as in ogb's zip: raw/*.csv.gz (one graph) and split/<split>/{train,valid,test}.csv.gz."""
    n = labels.size
    raw = folder / "raw"
    _csv(raw / "edge.csv.gz", edges.T)
    _csv(raw / "node-feat.csv.gz", np.random.default_rng(0).random((n, features)).astype(np.float32))
    _csv(raw / "node-label.csv.gz", labels.reshape(-1, 1))
    _csv(raw / "num-node-list.csv.gz", np.array([[n]]))
    _csv(raw / "num-edge-list.csv.gz", np.array([[edges.shape[1]]]))
    if node_year:
        _csv(raw / "node_year.csv.gz", np.arange(2000, 2000 + n).reshape(-1, 1))
    for part, ids in SPLIT.items():
        _csv(folder / "split" / split / f"{part}.csv.gz", np.array(ids).reshape(-1, 1))


# ogb's own process() makes a tensor from a read-only pandas array.
@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
def test_ogbn_arxiv_through_ogb(tmp_path: Path) -> None:
    root = tmp_path / "root"
    write_ogb(root / "ogbn_arxiv", ARXIV_EDGES, ARXIV_LABELS, 128, "time", node_year=True)
    before = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    g = load_graph({"name": "ogbn-arxiv"}, root, tmp_path / "cache")
    assert (g.name, g.num_nodes, g.num_features, g.num_classes) == ("ogbn-arxiv", 8, 128, 40)
    assert g.num_edges == 16  # 9 citations made undirected; the reciprocal pair 0<->1 counted once
    assert is_undirected(g.edge_index) and g.x.dtype == torch.float32
    assert torch.equal(g.y, torch.from_numpy(ARXIV_LABELS))
    for mask, part in zip((g.train_mask, g.val_mask, g.test_mask), ("train", "valid", "test")):
        assert mask.nonzero().view(-1).tolist() == SPLIT[part]
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == before  # source untouched
    cached = tmp_path / "cache" / "ogbn_arxiv"
    assert sorted(str(p.relative_to(cached)) for p in cached.rglob("*")) == ["processed",
                                                                            f"processed/{GRAPH_FILE}"]
    again = load_graph({"name": "ogbn-arxiv"}, None, tmp_path / "cache")  # processed graph reused
    assert same_graph(again, g) and again.num_classes == 40


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
def test_ogbn_products_through_ogb_from_zip_folder(tmp_path: Path) -> None:
    # Products lists each undirected edge once; ogb adds the inverse edges (add_inverse_edge).
    edges = np.array([[0, 0, 1, 2, 3, 5, 6], [1, 2, 3, 4, 5, 6, 7]])
    labels = np.array([0, 46, 2, 2, 9, 1, 1, 0])
    write_ogb(tmp_path / "root" / "products", edges, labels, 100, "sales_ranking", node_year=False)
    g = load_graph({"name": "ogbn-products"}, tmp_path / "root", tmp_path / "cache")
    assert (g.num_nodes, g.num_edges, g.num_features, g.num_classes) == (8, 14, 100, 47)
    assert is_undirected(g.edge_index)
    assert torch.equal(g.y, torch.from_numpy(labels))
    assert [int(m.sum()) for m in (g.train_mask, g.val_mask, g.test_mask)] == [4, 2, 2]


def old_ogb_graph(folder: Path, name: str, undirected: bool):
    """The old path: ogb's PygNodePropPredDataset on a private copy of the raw files (``folder``, in
    ogb's layout), then the same edge and mask handling as load_ogb."""
    from ogb.nodeproppred import PygNodePropPredDataset
    from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
    from torch_geometric.data.storage import GlobalStorage
    from torch_geometric.utils import coalesce, index_to_mask, to_undirected

    (folder / "RELEASE_v1.txt").touch()
    with torch.serialization.safe_globals([DataEdgeAttr, DataTensorAttr, GlobalStorage]):
        dataset = PygNodePropPredDataset(name, root=str(folder.parent))
        split = dataset.get_idx_split()
    data = dataset[0]
    n = int(data.num_nodes)
    edges = to_undirected(data.edge_index, num_nodes=n) if undirected else coalesce(data.edge_index,
                                                                                      num_nodes=n)
    masks = [index_to_mask(split[p].view(-1), size=n) for p in ("train", "valid", "test")]
    return Graph("old", data.x.float(), data.y.view(-1).long(), edges, *masks,
                 num_classes=int(dataset.num_classes))


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
@pytest.mark.parametrize("name", ["ogbn-arxiv", "ogbn-products"])
def test_ogb_equals_ogb_loader_and_ignores_code_in_cache(name: str, tmp_path: Path, caplog) -> None:
    spec = large.OGB_DATASETS[name]
    edges = np.array([[0, 0, 1, 2, 3, 5, 6, 7], [1, 2, 3, 4, 5, 6, 7, 2]])
    labels = np.array([3, 0, 39, 7, 7, 12, 0, 5])
    write_ogb(tmp_path / "root" / spec.folder, edges, labels, 16, spec.split,
              node_year=name == "ogbn-arxiv")
    shutil.copytree(tmp_path / "root" / spec.folder, tmp_path / "old" / spec.folder)
    old = old_ogb_graph(tmp_path / "old" / spec.folder, name, spec.undirected)
    # Crafted files where ogb's loader reads its processed data and split, and where pipegnn keeps its
    # processed graph.
    marker = tmp_path / "code-ran"
    cached = tmp_path / "cache" / spec.folder
    plant_processed(cached / "processed", marker,
                    ("geometric_data_processed.pt", "pre_transform.pt", "pre_filter.pt", GRAPH_FILE))
    plant_processed(cached / "split" / spec.split, marker, ("split_dict.pt",))
    g = load_graph({"name": name}, tmp_path / "root", tmp_path / "cache")
    assert not marker.exists()
    assert same_graph(g, old) and g.num_classes == old.num_classes
    assert "ignoring cached graph" in caplog.text  # the crafted one, overwritten with the real graph
    again = load_saved_graph(cached / "processed" / GRAPH_FILE, name)
    assert again is not None and same_graph(again, g) and not marker.exists()


def test_ogb_missing_files_offline_give_one_clear_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(large.OGB_URLS, "ogbn-arxiv", "http://127.0.0.1:9/arxiv.zip")
    with pytest.raises(DatasetUnavailable) as info:
        load_graph({"name": "ogbn-arxiv"}, tmp_path / "empty", tmp_path / "cache")
    message = str(info.value)
    assert all(f in message for f in ("raw/edge.csv.gz", "raw/node-feat.csv.gz", "raw/node_year.csv.gz",
                                      "split/time/train.csv.gz"))
    assert "http://127.0.0.1:9/arxiv.zip" in message and "<data.root>/ogbn_arxiv/" in message


# --- Reddit: the two .npz files PyG's Reddit.process reads ---------------------------------------------

def test_reddit_through_pyg(tmp_path: Path) -> None:
    n = 10
    raw = tmp_path / "root" / "Reddit" / "raw"
    raw.mkdir(parents=True)
    types = np.array([1, 1, 1, 1, 2, 2, 3, 3, 3, 1])  # 1 train, 2 val, 3 test
    labels = np.array([0, 40, 3, 3, 7, 0, 1, 2, 2, 5])
    np.savez(raw / "reddit_data.npz", feature=np.random.default_rng(0).random((n, 602)),
             label=labels, node_types=types)
    row = np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0])
    col = np.array([1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 1])  # the last entry duplicates 0->1
    sp.save_npz(raw / "reddit_graph.npz", sp.coo_matrix((np.ones(row.size), (row, col)), shape=(n, n)))
    g = load_graph({"name": "reddit"}, tmp_path / "root", tmp_path / "cache")
    assert (g.name, g.num_nodes, g.num_edges, g.num_features, g.num_classes) == ("reddit", 10, 10, 602, 41)
    assert torch.equal(g.y, torch.from_numpy(labels))
    assert g.train_mask.nonzero().view(-1).tolist() == [0, 1, 2, 3, 9]
    assert g.val_mask.nonzero().view(-1).tolist() == [4, 5]
    assert g.test_mask.nonzero().view(-1).tolist() == [6, 7, 8]
    assert (tmp_path / "cache" / "Reddit" / "processed" / GRAPH_FILE).is_file()


def write_reddit(raw: Path) -> None:
    raw.mkdir(parents=True)
    rng = np.random.default_rng(1)
    np.savez(raw / "reddit_data.npz", feature=rng.random((12, 20)), label=rng.integers(0, 5, 12),
             node_types=np.array([1, 1, 1, 1, 1, 2, 2, 2, 3, 3, 3, 3]))
    row, col = rng.integers(0, 12, 40), rng.integers(0, 12, 40)
    sp.save_npz(raw / "reddit_graph.npz", sp.coo_matrix((np.ones(40), (row, col)), shape=(12, 12)))


def test_reddit_equals_pyg_loader_and_ignores_code_in_cache(tmp_path: Path) -> None:
    write_reddit(tmp_path / "root" / "Reddit" / "raw")
    shutil.copytree(tmp_path / "root" / "Reddit", tmp_path / "old" / "Reddit")
    old = Reddit(str(tmp_path / "old" / "Reddit"))[0]  # the old path, on a private copy
    marker = tmp_path / "code-ran"
    plant_processed(tmp_path / "cache" / "Reddit" / "processed", marker,
                    ("data.pt", "pre_transform.pt", "pre_filter.pt", GRAPH_FILE))
    g = load_graph({"name": "reddit"}, tmp_path / "root", tmp_path / "cache")
    assert not marker.exists()
    assert same_graph(g, old) and g.num_classes == int(old.y.max()) + 1
    # Raw files in the cache, no data root: read from there (the processed graph removed first).
    shutil.copytree(tmp_path / "root" / "Reddit" / "raw", tmp_path / "cache" / "Reddit" / "raw")
    (tmp_path / "cache" / "Reddit" / "processed" / GRAPH_FILE).unlink()
    assert same_graph(load_graph({"name": "reddit"}, None, tmp_path / "cache"), old)
    assert not marker.exists()


def test_reddit_npz_with_pickled_objects_is_refused(tmp_path: Path) -> None:
    raw = tmp_path / "cache" / "Reddit" / "raw"
    write_reddit(raw)
    marker = tmp_path / "code-ran"
    np.savez(raw / "reddit_data.npz", feature=np.array([CodeMarker(marker)], dtype=object),
             label=np.zeros(1), node_types=np.ones(1))
    with pytest.raises(DatasetUnavailable, match="could not be read.*allow_pickle=False"):
        load_graph({"name": "reddit"}, None, tmp_path / "cache")
    assert not marker.exists()


@pytest.mark.parametrize("how", ["under_file", "chmod"])
def test_reddit_unwritable_cache(how: str, tmp_path: Path, caplog) -> None:
    write_reddit(tmp_path / "root" / "Reddit" / "raw")
    expected = load_graph({"name": "reddit"}, tmp_path / "root", tmp_path / "clean")
    cache = unwritable_cache(tmp_path, how)
    with caplog.at_level(logging.WARNING):
        g = load_graph({"name": "reddit"}, tmp_path / "root", cache)
    assert same_graph(g, expected)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "cannot be written" in warnings[0].getMessage()


def test_reddit_download_into_unwritable_cache(tmp_path: Path, monkeypatch, caplog) -> None:
    import zipfile

    from torch_geometric import data as pyg_data

    write_reddit(tmp_path / "src")
    archive = tmp_path / "reddit.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for f in large.REDDIT_FILES:
            z.write(tmp_path / "src" / f, f)

    def download_url(url: str, folder: str, log: bool = True) -> str:  # served locally, no network
        return shutil.copy(archive, folder)

    monkeypatch.setattr(pyg_data, "download_url", download_url)
    expected = load_graph({"name": "reddit"}, None, tmp_path / "clean")  # downloaded into a cache
    assert sorted(os.listdir(tmp_path / "clean" / "Reddit" / "raw")) == sorted(large.REDDIT_FILES)
    cache = unwritable_cache(tmp_path, "under_file")
    with caplog.at_level(logging.WARNING):
        g = load_graph({"name": "reddit"}, None, cache)
    assert same_graph(g, expected)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "cannot be written" in warnings[0].getMessage()


def test_reddit_missing_files_offline_give_one_clear_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(Reddit, "url", "http://127.0.0.1:9/reddit.zip")
    with pytest.raises(DatasetUnavailable) as info:
        load_graph({"name": "reddit"}, tmp_path / "empty", tmp_path / "cache")
    message = str(info.value)
    assert "reddit_data.npz" in message and "reddit_graph.npz" in message
    assert "http://127.0.0.1:9/reddit.zip" in message and "<data.root>/Reddit/raw/" in message


# --- Synthetic presets ---------------------------------------------------------------------------------

PRESETS = ["synthetic_pubmed", "synthetic_nodes", "synthetic_density", "synthetic_hidden",
           "synthetic_large"]


@pytest.mark.parametrize("preset", PRESETS)
def test_synthetic_presets_compose(preset: str) -> None:
    cfg = make_cfg(f"dataset={preset}")
    assert (cfg.dataset.name, cfg.dataset.preset) == ("synthetic", preset)
    assert (cfg.dataset.avg_degree is None) != (cfg.dataset.get("density") is None)
    SyntheticSpec(**{k: v for k, v in cfg.dataset.items() if k not in ("name", "preset")})  # valid
    if preset in ("synthetic_nodes", "synthetic_density", "synthetic_hidden"):
        assert (cfg.dataset.num_nodes, cfg.dataset.density) == (32000, 0.0008)


def test_synthetic_pubmed_preset_is_the_default_graph() -> None:
    preset = make_cfg("dataset=synthetic_pubmed").dataset
    assert preset == OmegaConf.load(CONF / "dataset" / "synthetic.yaml")
    assert make_cfg("dataset=synthetic_pubmed", *TINY_SYNTHETIC).dataset == make_cfg().dataset
    assert (preset.num_nodes, preset.avg_degree, preset.num_features) == (19717, 4.5, 500)
    gat = make_cfg("dataset=synthetic_pubmed", "model=gat")
    # the synthetic graphs: lr 0.005
    assert (gat.model.out_heads, gat.train.lr, gat.train.weight_decay) == (8, 0.005, 0.001)


def test_sweep_overrides_of_presets() -> None:
    cfg = make_cfg("dataset=synthetic_nodes", "dataset.num_nodes=8000")
    assert (cfg.dataset.num_nodes, cfg.dataset.density) == (8000, 0.0008)
    cfg = make_cfg("dataset=synthetic_density", "dataset.density=0.0016")
    spec = SyntheticSpec(**{k: v for k, v in cfg.dataset.items() if k not in ("name", "preset")})
    assert spec.num_undirected_edges == round(0.0016 * 32000 * 31999 / 2)
    assert make_cfg("dataset=synthetic_hidden", "model.hidden=64").model.hidden == 64
    cfg = make_cfg("dataset=synthetic", "dataset.avg_degree=null", "dataset.density=0.01")
    graph = load_graph(OmegaConf.to_container(cfg.dataset), None, ".")
    assert graph.num_edges == 2 * round(0.01 * 400 * 399 / 2)  # the tiny 400-node test graph


@pytest.mark.parametrize("dataset", ["ogbn-arxiv", "ogbn-products", "reddit", "pubmed_topology"])
def test_real_dataset_configs(dataset: str) -> None:
    cfg = make_cfg(f"dataset={dataset}", "model=gat")
    assert cfg.dataset.name == dataset and dataset in DATASETS
    assert set(LARGE_NAMES) == {*large.OGB_DATASETS, "reddit"}
    # PubMed's topology gets the GAT paper's PubMed settings, as dataset=pubmed does.
    assert cfg.model.out_heads == (8 if dataset == "pubmed_topology" else 1)
