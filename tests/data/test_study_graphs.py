"""The GNN benchmark study's graphs: tiny files of the study's .npz layout written here (all four names
through the one loader), the two real files of ../shared/datasets when present, and bad files, each
one DatasetUnavailable before anything trains."""
from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from torch_geometric.utils import is_undirected

from pipegnn.config.typed import group_config
from pipegnn.data import load_graph, split_summary, study_graphs
from pipegnn.data.graph import GRAPH_FILE
from pipegnn.data.study_graphs import STUDY_FILES
from pipegnn.errors import ConfigError, DatasetUnavailable

SHARED = Path(os.environ.get("PIPEGNN_DATA", Path(__file__).parents[3] / "shared" / "datasets"))

# 9 nodes: a component {0..6} with a self loop (2, 2), one-way edges and a weight of 3, and a smaller
# component {7, 8}; 3 classes; count features (a 2 becomes a 1).
EDGES = [(0, 1), (1, 2), (2, 2), (2, 3), (3, 4), (4, 0), (5, 6), (6, 0), (1, 0), (7, 8)]
LABELS = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2])
FEATURES = np.array([[1, 0, 2, 0], [0, 1, 0, 0], [1, 1, 0, 0], [0, 0, 0, 1], [3, 0, 0, 0],
                     [0, 0, 1, 0], [0, 1, 1, 0], [1, 0, 0, 1], [0, 0, 0, 1]], dtype=np.float32)


def write_npz(path: Path, edges=EDGES, labels=LABELS, features=FEATURES,
              override: dict | None = None) -> Path:
    """A file of the study's layout (PyG's Amazon and Coauthor read the same arrays), with the arrays of
    ``override`` in place of the graph's (None: left out)."""
    n = labels.size
    rows, cols = zip(*edges)
    data = np.ones(len(edges), dtype=np.float32)
    data[0] = 3.0  # a weighted edge: the study makes the graph unweighted
    adj = sp.csr_matrix((data, (rows, cols)), shape=(n, n))
    attr = sp.csr_matrix(features)
    arrays = dict(adj_data=adj.data, adj_indices=adj.indices, adj_indptr=adj.indptr,
                  adj_shape=np.array(adj.shape),
                  attr_data=attr.data, attr_indices=attr.indices, attr_indptr=attr.indptr,
                  attr_shape=np.array(attr.shape), labels=labels, class_names=np.array(["a", "b", "c"]))
    arrays.update(override or {})
    arrays = {k: v for k, v in arrays.items() if v is not None}
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **arrays)
    return path


def place(root: Path, name: str, **kw) -> Path:
    return write_npz(root / STUDY_FILES[name].raw, **kw)


def load(name: str, root: Path | None, cache: Path, **split) -> object:
    return load_graph({"name": name, "train_per_class": 1, "val_per_class": 1, **split}, root, cache)


@pytest.mark.parametrize("name", list(STUDY_FILES))
def test_the_study_standardisation_of_each_graph(tmp_path: Path, name: str) -> None:
    place(tmp_path / "root", name)
    graph = load(name, tmp_path / "root", tmp_path / "cache")
    assert graph.name == name and graph.num_nodes == 7  # the largest connected component, in order
    assert graph.y.tolist() == LABELS[:7].tolist()
    assert is_undirected(graph.edge_index) and bool((graph.edge_index[0] != graph.edge_index[1]).all())
    undirected = {tuple(sorted(e)) for e in EDGES if e[0] != e[1] and max(e) < 7}
    assert graph.num_edges == 2 * len(undirected)
    assert torch.equal(graph.x, torch.from_numpy((FEATURES[:7] > 0).astype(np.float32)))
    assert graph.num_classes == 3
    # the cache holds the graph under the raw file's checksum; the split is drawn on every load
    assert list((tmp_path / "cache").rglob(GRAPH_FILE))


def test_per_class_and_random_splits_drawn_per_seed(tmp_path: Path) -> None:
    place(tmp_path, "amazon_photo")
    a = load("amazon_photo", tmp_path, tmp_path / "cache", split_seed=1)
    b = load("amazon_photo", tmp_path, tmp_path / "cache", split_seed=1)
    c = [load("amazon_photo", tmp_path, tmp_path / "cache", split_seed=s) for s in range(2, 8)]
    assert torch.equal(a.train_mask, b.train_mask) and torch.equal(a.val_mask, b.val_mask)
    assert any(not torch.equal(a.train_mask, g.train_mask) for g in c)
    for g in (a, *c):
        assert torch.bincount(g.y[g.train_mask], minlength=3).tolist() == [1, 1, 1]
        assert torch.bincount(g.y[g.val_mask], minlength=3).tolist() == [1, 1, 1]
        assert not bool((g.train_mask & g.val_mask).any())
        assert torch.equal(g.test_mask, ~(g.train_mask | g.val_mask))
    dense = load("amazon_photo", tmp_path, tmp_path / "cache", split="random", train_fraction=0.6,
                 val_fraction=0.2)
    assert [int(m.sum()) for m in (dense.train_mask, dense.val_mask, dense.test_mask)] == [4, 1, 2]
    summary = split_summary(group_config("dataset", {"name": "amazon_photo", "split_seed": 1}), a)
    assert summary == {"split": "per_class", "split_seed": 1, "train_nodes": 3, "val_nodes": 3,
                       "test_nodes": 1}


def test_a_split_that_cannot_be_drawn_names_the_class(tmp_path: Path) -> None:
    place(tmp_path, "coauthor_cs")
    with pytest.raises(ConfigError, match=r"class\(es\) \[0, 1, 2\] have only \[3, 2, 2\]"):
        load_graph({"name": "coauthor_cs"}, tmp_path, tmp_path / "cache")  # the study's 20 + 30


@pytest.mark.parametrize("name, nodes, edges, train", [
    ("amazon_computers", 13381, 491556, 200),
    # the same path on a larger graph: 41 s of make test's 10 minutes (its 8,415 features' processing);
    # make test-all runs it
    pytest.param("coauthor_physics", 34493, 495924, 100, marks=pytest.mark.slow)])
def test_the_real_files_give_the_study_statistics(tmp_path: Path, name: str, nodes: int, edges: int,
                                                   train: int) -> None:
    if not (SHARED / STUDY_FILES[name].raw).is_file():
        pytest.skip(f"{SHARED / STUDY_FILES[name].raw} is absent")
    graph = load_graph({"name": name}, SHARED, tmp_path)
    assert (graph.num_nodes, graph.num_edges, int(graph.train_mask.sum())) == (nodes, edges, train)
    assert int(graph.val_mask.sum()) == train * 3 // 2
    assert set(graph.x.unique().tolist()) == {0.0, 1.0}


def test_a_missing_file_offline_gives_one_clear_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(study_graphs, "STUDY_URL", "http://127.0.0.1:9/npz")
    with pytest.raises(DatasetUnavailable) as e:
        load("coauthor_physics", tmp_path / "root", tmp_path / "cache")
    message = str(e.value)
    assert "http://127.0.0.1:9/npz/ms_academic_phy.npz" in message
    assert "Coauthor/Physics/raw/ms_academic_phy.npz" in message and str(tmp_path / "root") in message


def test_the_file_of_another_graph_is_refused(tmp_path: Path) -> None:
    # a file with Coauthor Physics' shape (34,493 nodes, 8,415 features, 5 classes) in Computers' place
    spec = STUDY_FILES["coauthor_physics"]
    labels = np.arange(spec.nodes) % spec.classes
    ring = [(i, (i + 1) % spec.nodes) for i in range(spec.nodes)]
    nodes = np.arange(spec.nodes)
    features = sp.csr_matrix((np.ones(spec.nodes), (nodes, nodes % spec.features)),
                             shape=(spec.nodes, spec.features))
    place(tmp_path, "amazon_computers", edges=ring, labels=labels, features=features)
    with pytest.raises(DatasetUnavailable,
                       match="the graph of dataset 'coauthor_physics', not 'amazon_computers'"):
        load("amazon_computers", tmp_path, tmp_path / "cache")


def _bad_arrays() -> dict[str, dict]:
    n = LABELS.size
    return {
        "labels of another length": dict(labels=LABELS[:5]),
        "row pointers cut short": dict(adj_indptr=np.array([0, 1, 2])),
        "a column out of range": dict(attr_indices=np.full(int((FEATURES != 0).sum()), 99, dtype=np.int32)),
        "a missing array": dict(adj_data=None),
        "a declared shape of three numbers": dict(attr_shape=np.array([n, 4, 1])),
        "object labels": dict(labels=np.array([None] * n, dtype=object)),
    }


@pytest.mark.parametrize("case", list(_bad_arrays()))
def test_damaged_arrays_are_refused_before_training(tmp_path: Path, case: str) -> None:
    place(tmp_path, "coauthor_cs", override=_bad_arrays()[case])
    with pytest.raises(DatasetUnavailable, match="not a usable file of the study"):
        load("coauthor_cs", tmp_path, tmp_path / "cache")


def test_a_truncated_file_is_refused(tmp_path: Path) -> None:
    path = place(tmp_path, "amazon_photo")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(DatasetUnavailable, match="could not be read"):
        load("amazon_photo", tmp_path, tmp_path / "cache")


@pytest.mark.parametrize("array", ["labels", "adj_indptr", "a directory that lies"])
def test_a_file_that_inflates_far_past_its_size_is_refused_before_it_is_read(tmp_path: Path,
                                                                             array: str) -> None:
    """A 1.5 MB file of compressed zeros (labels and row pointers of 67 million nodes) inflated to 5.4 GB
    in 47 s before any check refused it: arrays inflating more than MAX_INFLATION times the file's bytes
    are refused from the archive's directory, labels or (a second case) row pointers, also (a third) when
    the directory says every member is stored as large as it inflates."""
    n = 1 << 20
    big = "labels" if array == "a directory that lies" else array
    path = place(tmp_path, "amazon_photo", override={big: np.zeros(n + (big != "labels"), dtype=np.int64)})
    if array == "a directory that lies":
        data = bytearray(path.read_bytes())
        at = data.find(b"PK\x01\x02")
        while at != -1:  # each central directory entry: its compressed size := its size
            data[at + 20:at + 24] = data[at + 24:at + 28]
            at = data.find(b"PK\x01\x02", at + 4)
        path.write_bytes(bytes(data))
    read = []
    real = np.load
    with pytest.MonkeyPatch.context() as m:
        m.setattr(np, "load", lambda *a, **k: (read.append(a), real(*a, **k))[1])
        with pytest.raises(DatasetUnavailable, match=r"its arrays inflate to [\d,]+ bytes from [\d,]+, more "
                                                      r"than 100 times"):
            load("amazon_photo", tmp_path, tmp_path / "cache")
    assert read == []  # refused before any array was read


def test_a_raw_file_past_its_bound_is_refused_unread(tmp_path: Path) -> None:
    """A 4 GiB sparse file in the raw file's place was read whole into memory to be hashed (4.6 GB, 23 s):
    a file past MAX_STUDY_FILE_BYTES is refused from its size."""
    path = place(tmp_path, "amazon_photo")
    os.truncate(path, 4 << 30)
    with pytest.raises(DatasetUnavailable, match=r"it holds 4,294,967,296 bytes, more than the "
                                                 r"1,073,741,824 "):
        load("amazon_photo", tmp_path, tmp_path / "cache")


def test_a_huge_declared_shape_is_refused_before_it_is_allocated(tmp_path: Path) -> None:
    """A tiny archive whose labels' header declares 2**40 entries: refused from the header."""
    path = place(tmp_path, "amazon_photo")
    header = np.lib.format.header_data_from_array_1_0(np.zeros(1, dtype=np.int64))
    header["shape"] = (2**40,)
    with zipfile.ZipFile(path) as z:
        members = {i.filename: z.read(i) for i in z.infolist()}
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    members["labels.npy"] = buf.getvalue() + b"\0" * 64
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for member, data in members.items():
            z.writestr(member, data)
    with pytest.raises(DatasetUnavailable, match=r"array labels declares shape \(1099511627776,\)"):
        load("amazon_photo", tmp_path, tmp_path / "cache")


def test_a_replaced_raw_file_is_not_shadowed_by_the_cached_graph(tmp_path: Path) -> None:
    place(tmp_path, "amazon_computers")
    first = load("amazon_computers", tmp_path, tmp_path / "cache")
    place(tmp_path, "amazon_computers", edges=[*EDGES, (7, 0)])  # joins {7, 8} to the component
    second = load("amazon_computers", tmp_path, tmp_path / "cache")
    assert (first.num_nodes, second.num_nodes) == (7, 9)


def test_every_record_names_its_split() -> None:
    """Planetoid's public split and a synthetic graph's generated one are named as well, with sizes."""
    from tests.helpers import random_graph

    graph = random_graph()
    sizes = {"train_nodes": 20, "val_nodes": 10, "test_nodes": 15}
    assert split_summary(group_config("dataset", {"name": "cora"}), graph) == {
        "split": "public", "split_seed": None, **sizes}
    synthetic = group_config("dataset", {"name": "synthetic", "seed": 3})
    assert split_summary(synthetic, graph) == {"split": "generated", "split_seed": 3, **sizes}


def test_a_label_beyond_the_nodes_is_refused_before_anything_is_sized_by_it(tmp_path: Path) -> None:
    """A label of 10**9 would size a billion classes (GiBs of one-hot rows and counts)."""
    labels = LABELS.copy()
    labels[5] = 10**9
    place(tmp_path, "amazon_computers", labels=labels)
    with pytest.raises(DatasetUnavailable, match=r"labels must be integers in \[0, 9\)"):
        load("amazon_computers", tmp_path, tmp_path / "cache")


def test_large_arrays_the_row_pointers_do_not_count_are_refused_before_they_are_read(tmp_path: Path) -> None:
    """Indices and values of 2**16 entries where the row pointers count ten: refused from the headers and
    the row pointers, before the large arrays are read (random values: compressed zeros are refused before,
    by how far they inflate)."""
    noise = np.random.default_rng(0).integers(0, 2**31, 2**16, dtype=np.int32)
    place(tmp_path, "coauthor_cs", override=dict(adj_indices=noise, adj_data=noise.astype(np.float32)))
    assert (tmp_path / STUDY_FILES["coauthor_cs"].raw).stat().st_size < 2**20
    with pytest.raises(DatasetUnavailable, match=r"adj_indices declares shape \(65536,\); the row pointers "
                                                 r"count 10 entries"):
        load("coauthor_cs", tmp_path, tmp_path / "cache")


_UNDER_A_CAP = """
import resource, sys
from pathlib import Path
from pipegnn.data.study_graphs import read_study_npz
from pipegnn.errors import DatasetUnavailable
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, resource.RLIM_INFINITY))
try:
    read_study_npz(Path(sys.argv[1]), "amazon_photo")
except DatasetUnavailable as e:
    print(e)
"""


def test_declared_features_past_a_processes_memory_cap_are_refused(tmp_path: Path) -> None:
    """A small file declaring 9 x 300,000,000 features (10 GiB dense) under a 3 GiB address-space cap
    (prlimit, train.memory_limit_gb): the check compared with the machine's available memory only and
    the allocation failed inside torch. It is one DatasetUnavailable now, before anything is allocated."""
    path = place(tmp_path, "amazon_photo", override={"attr_shape": np.array([9, 300_000_000])})
    import subprocess
    import sys

    from tests.helpers import ROOT

    done = subprocess.run([sys.executable, "-c", _UNDER_A_CAP, str(path)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "GiB, more than the" in done.stdout and "this process may allocate" in done.stdout, done.stdout
