"""Shared fixtures and the test session's setup (its own dataset and plan cache); the helper functions
and hand-made records the tests import are in tests/helpers.py."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import torch

from pipegnn.data import Graph
from pipegnn.runs.record_writes import write_record

from tests.helpers import COMPLETED_RECORD, failed_record, invalid_record, random_graph, shared_datasets

# Dataset copies and cached plans of the test session go to a fresh folder, never the user's cache.
os.environ["PIPEGNN_CACHE"] = tempfile.mkdtemp(prefix="pipegnn-test-cache-")


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


@pytest.fixture
def graph() -> Graph:
    return random_graph()


@pytest.fixture
def records_sweep(tmp_path: Path) -> Path:
    """A multirun directory: 0 completed, 1 failed, 2 invalid, plus a leftover temp file."""
    root = tmp_path / "multirun" / "2024-01-01" / "12-00-00"
    for job, record in enumerate((COMPLETED_RECORD, failed_record(), invalid_record())):
        write_record(root / str(job), record)
    (root / "0" / ".result.tmp123.json").write_text("{half")
    return root
