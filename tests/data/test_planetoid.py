"""pipegnn.data.planetoid: Cora, CiteSeer and PubMed from their raw files (equal to PyG's loader), safe
from crafted cache files, fine with an unwritable cache, and PubMed's topology from the shared raw files."""
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
from torch_geometric.utils import is_undirected

from pipegnn.data import load_graph, planetoid
from pipegnn.data.planetoid import PUBMED_TOPOLOGY_FILES, load_planetoid, load_pubmed_topology, raw_file_names
from pipegnn.errors import DatasetUnavailable

from tests.helpers import ROOT, CodeMarker, plant_processed, same_graph, unwritable_cache


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


def test_a_pickle_naming_a_huge_memo_index_costs_nothing(tmp_path: Path) -> None:
    """9 bytes (``PROTO 2, NONE, LONG_BINPUT 2**27, STOP``) made the C unpickler grow its memo table to
    2.4 GB in 14 s: the raw files are read by Python's unpickler, whose memo is a dict (traced here: a
    2**24 index would have asked 256 MB)."""
    import tracemalloc

    (tmp_path / "ind.cora.y").write_bytes(b"\x80\x02Nr" + (1 << 24).to_bytes(4, "little") + b".")
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="expected a numeric array, got NoneType"):
            planetoid.read_raw(tmp_path, "cora", "y")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak


@pytest.mark.parametrize("shape, dtype", [((140, 1433), "f8"), ((5000, 100), "O")])
def test_an_array_reconstructed_without_its_entries_is_refused(tmp_path: Path, shape: tuple,
                                                                dtype: str) -> None:
    """numpy's ``_reconstruct`` at the published shape with no state after it (74 bytes) loaded as Cora's
    features, uninitialised heap memory; of objects (a second case: 5e8 of them took 4.2 GB). A raw file
    reconstructs only empty arrays, whose entries its checked state then gives."""
    kind = b"U" + bytes([len(dtype)]) + dtype.encode()
    array = (b"\x80\x02cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n"
             + pickle.dumps(shape, protocol=2)[2:-1] + kind + b"\x87R.")
    (tmp_path / "ind.cora.x").write_bytes(array)
    with pytest.raises(ValueError, match=rf"reconstructs an array of shape \({shape[0]}, {shape[1]}\) "):
        planetoid.read_raw(tmp_path, "cora", "x")


@pytest.mark.parametrize("node, bad, why", [
    (0, -3, "node 0 has the neighbour id -3, outside the 2708 labelled nodes (0 to 2707)"),
    (5, 2708, "node 5 has the neighbour id 2708, outside the 2708 labelled nodes (0 to 2707)"),
    (-1, 0, "node id -1 is outside the 2708 labelled nodes (0 to 2707)"),
])
def test_planetoid_refuses_neighbour_ids_outside_the_graph(node: int, bad: int, why: str, data_root: Path,
                                                           tmp_path: Path) -> None:
    """ind.cora.graph with a neighbour id -3 trained: building the edges dropped it without a word. Every
    node and neighbour id is checked now, before the edges are built: one error naming the file, the
    node and the id."""
    raw = tmp_path / "cache" / "Cora" / "raw"
    shutil.copytree(data_root / "Cora" / "raw", raw)
    graph = dict(planetoid.read_raw(raw, "cora", "graph"))
    graph[node] = [*(graph[node] if node in graph else graph.pop(0)), bad]  # as many nodes as published
    with open(raw / "ind.cora.graph", "wb") as f:
        pickle.dump(graph, f, protocol=2)
    with pytest.raises(DatasetUnavailable) as raised:
        load_planetoid("cora", None, tmp_path / "cache")
    assert f"{raw / 'ind.cora.graph'}: {why}" in str(raised.value)


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



# --- PubMed topology from the shared raw files ---------------------------------------------------------

def _pubmed_root() -> Path | None:
    for candidate in (os.environ.get("PIPEGNN_DATA"), ROOT.parent / "shared" / "datasets"):
        for sub in ("PubMed-partial", "PubMed"):
            if candidate and all((Path(candidate) / sub / "raw" / f).is_file()
                                 for f in PUBMED_TOPOLOGY_FILES):
                return Path(candidate)
    return None


@pytest.fixture
def pubmed_root() -> Path:
    root = _pubmed_root()
    if root is None:
        pytest.skip("raw PubMed graph/label/split files not found: set $PIPEGNN_DATA or place "
                    "../shared/datasets with PubMed-partial/raw or PubMed/raw")
    return root


def test_pubmed_topology(pubmed_root: Path, tmp_path: Path, caplog) -> None:
    g = load_graph({"name": "pubmed_topology", "seed": 0}, pubmed_root, tmp_path)
    # 88,648 directed edges as PyG reports for PubMed: coalesced, without the raw files' 3 self-loops.
    assert (g.num_nodes, g.num_edges, g.num_features, g.num_classes) == (19717, 88648, 500, 3)
    assert [int(m.sum()) for m in (g.train_mask, g.val_mask, g.test_mask)] == [60, 500, 1000]
    assert g.train_mask[:60].all() and g.val_mask[60:560].all() and g.test_mask[18717:].all()
    assert is_undirected(g.edge_index) and bool((g.edge_index[0] != g.edge_index[1]).all())
    assert torch.bincount(g.y).tolist() == [4103, 7739, 7875]  # PubMed's class sizes
    torch.testing.assert_close(g.x.sum(1), torch.ones(g.num_nodes))
    assert "RANDOM features" in caplog.text and "never for accuracy" in caplog.text
    same = load_pubmed_topology(pubmed_root, tmp_path, seed=0)
    other = load_pubmed_topology(pubmed_root, tmp_path, seed=1)
    assert torch.equal(same.x, g.x) and not torch.equal(other.x, g.x)
    assert torch.equal(other.edge_index, g.edge_index) and torch.equal(other.y, g.y)


def test_pubmed_topology_raw_pickle_in_cache_cannot_run_code(pubmed_root: Path, tmp_path: Path) -> None:
    source = next(pubmed_root / sub / "raw" for sub in ("PubMed-partial", "PubMed")
                  if (pubmed_root / sub / "raw" / "ind.pubmed.graph").is_file())
    raw = tmp_path / "cache" / "PubMed" / "raw"
    raw.mkdir(parents=True)
    for f in PUBMED_TOPOLOGY_FILES:
        shutil.copyfile(source / f, raw / f)
    clean = load_pubmed_topology(None, tmp_path / "cache")  # from the cache's raw files
    assert same_graph(clean, load_pubmed_topology(pubmed_root, tmp_path / "other"))
    marker = tmp_path / "code-ran"
    with open(raw / "ind.pubmed.ally", "wb") as f:
        pickle.dump(CodeMarker(marker), f, protocol=2)
    with pytest.raises(DatasetUnavailable, match="not valid Planetoid files"):
        load_pubmed_topology(None, tmp_path / "cache")
    assert not marker.exists()


def test_pubmed_topology_missing_files(tmp_path: Path) -> None:
    with pytest.raises(DatasetUnavailable) as info:
        load_graph({"name": "pubmed_topology"}, tmp_path / "empty", tmp_path / "cache")
    message = str(info.value)
    assert all(f in message for f in PUBMED_TOPOLOGY_FILES) and "<data.root>/PubMed/raw/" in message


@pytest.mark.parametrize("kind", ["FIFO", "folder"])
def test_a_raw_file_that_is_no_file_is_named_not_missing(kind: str, data_root: Path, tmp_path: Path) -> None:
    """A FIFO (the example) or a folder (a second case) at ind.cora.x was reported as all eight files
    missing: it is named, with what it is, before any download."""
    raw = tmp_path / "cache" / "Cora" / "raw"
    shutil.copytree(data_root / "Cora" / "raw", raw)
    (raw / "ind.cora.x").unlink()
    os.mkfifo(raw / "ind.cora.x") if kind == "FIFO" else (raw / "ind.cora.x").mkdir()
    with pytest.raises(DatasetUnavailable, match=rf"{raw / 'ind.cora.x'} is a {kind}, not a raw Planetoid"):
        load_planetoid("cora", None, tmp_path / "cache")
