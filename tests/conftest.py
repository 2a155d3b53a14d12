"""Shared fixtures: small graphs with the awkward cases, the read-only raw datasets, tiny configs, and
helpers for dataset-cache tests (code-carrying files, unwritable folders)."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from omegaconf import DictConfig
from torch_geometric.utils import coalesce

from pipegnn.data import Graph
from pipegnn.schema import compose_config

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
# Dataset copies and cached plans of the test session go to a fresh folder, never the user's cache.
os.environ["PIPEGNN_CACHE"] = tempfile.mkdtemp(prefix="pipegnn-test-cache-")


def shared_datasets() -> Path | None:
    """The read-only raw datasets ($PIPEGNN_DATA or ../shared/datasets), or None."""
    for candidate in (os.environ.get("PIPEGNN_DATA"), ROOT.parent / "shared" / "datasets"):
        if candidate and (Path(candidate) / "Cora" / "raw" / "ind.cora.x").is_file():
            return Path(candidate)
    return None


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _one_thread():
    """One intra-op thread: on a busy CPU, OpenMP kernels (DGL's especially) wait for their threads far
    longer than the tiny graphs here take; results do not depend on it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def float64():
    """float64 as the default dtype, for comparisons at 1e-9 (see test_exactness.py)."""
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(torch.float32)


@pytest.fixture
def data_root() -> Path:
    root = shared_datasets()
    if root is None:
        pytest.skip("raw Planetoid files not found: set $PIPEGNN_DATA or place ../shared/datasets")
    return root


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dataset-cache")


def random_graph(num_nodes: int = 50, num_edges: int = 160, num_features: int = 6,
                 num_classes: int = 3, seed: int = 0) -> Graph:
    """A directed random graph with self-loops, isolated nodes and one-way edges."""
    g = torch.Generator().manual_seed(seed)
    active = num_nodes - 5  # the last five nodes are isolated
    edge_index = torch.randint(active, (2, num_edges), generator=g)
    loops = torch.arange(0, active, 7).repeat(2, 1)  # some explicit self-loops
    edge_index = coalesce(torch.cat([edge_index, loops], 1), num_nodes=num_nodes)
    y = torch.randint(num_classes, (num_nodes,), generator=g)
    perm = torch.randperm(num_nodes, generator=g)
    masks = [torch.zeros(num_nodes, dtype=torch.bool) for _ in range(3)]
    for mask, ids in zip(masks, (perm[:20], perm[20:30], perm[30:45])):
        mask[ids] = True
    return Graph("random", torch.randn(num_nodes, num_features, generator=g), y, edge_index, *masks,
                 num_classes=num_classes)


@pytest.fixture
def graph() -> Graph:
    return random_graph()


TINY_SYNTHETIC = ["dataset.num_nodes=400", "dataset.num_features=16", "dataset.num_communities=6",
                  "dataset.train_per_class=10", "dataset.num_val=40", "dataset.num_test=60"]


def make_cfg(*overrides: str) -> DictConfig:
    """The real config composed with Hydra, shrunk to 3 epochs and (unless another dataset is chosen)
    a tiny synthetic graph."""
    other = any(o.startswith("dataset=") and o != "dataset=synthetic" for o in overrides)
    tiny = [] if other else TINY_SYNTHETIC
    return compose_config([*tiny, "train.epochs=3", *overrides])


# --- Dataset caches: crafted files and unwritable folders --------------------------------------------

FIELDS = ("x", "y", "edge_index", "train_mask", "val_mask", "test_mask")


class CodeMarker:
    """Unpickling it creates the folder ``path``: the proof that a load ran code from a file."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def plant_processed(folder: Path, marker: Path, names=("data.pt", "pre_transform.pt", "pre_filter.pt")):
    """Code-carrying files where PyG's (and ogb's) dataset classes look for their processed files."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        torch.save(CodeMarker(marker), folder / name)


def same_graph(a: Graph, b) -> bool:
    """Equal values, dtypes and shapes in every field (``b``: a Graph or PyG Data)."""
    return all(torch.equal(getattr(a, f), getattr(b, f)) and getattr(a, f).dtype == getattr(b, f).dtype
               for f in FIELDS)


def unwritable_cache(tmp_path: Path, how: str) -> Path:
    """A cache folder that cannot be created or written: under a regular file (fails even as root), or
    an existing folder with mode 0o555 (skipped as root, whom the mode does not stop)."""
    if how == "under_file":
        blocker = tmp_path / "blocker"
        blocker.write_text("a file, not a folder")
        return blocker / "cache"
    if os.geteuid() == 0:
        pytest.skip("root writes into a 0o555 folder; the under_file case covers root")
    cache = tmp_path / "readonly"
    cache.mkdir()
    cache.chmod(0o555)
    return cache


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """``experiments/train.py`` with ``args`` in ``cwd`` (its own cache, one thread), output captured."""
    env = {**os.environ, "PIPEGNN_CACHE": str(cwd / "cache"), "OMP_NUM_THREADS": "1",
           "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, str(ROOT / "experiments" / "train.py"), *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
