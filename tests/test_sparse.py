"""Sparse CSR features (pipegnn.sparse): row selection and dropout against their dense counterparts, and a
run with data.features=sparse against the same run dense."""
from __future__ import annotations

import pytest
import torch

from pipegnn import run
from pipegnn.config.checks import check_config
from pipegnn.config.typed import run_config
from pipegnn.errors import ConfigError
from pipegnn.sparse import csr_rows, is_csr, sparse_dropout, to_csr

from tests.helpers import make_cfg


def features(rows: int = 30, cols: int = 12, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(rows, cols, generator=g, dtype=torch.float64)
    x[torch.rand(rows, cols, generator=g) < 0.7] = 0
    x[3] = 0  # an empty row
    return x


def test_csr_rows_equal_dense_rows_in_any_order_with_repeats() -> None:
    x = features()
    index = torch.tensor([5, 3, 29, 0, 5, 17, 3])
    rows = csr_rows(to_csr(x), index)
    assert is_csr(rows) and rows.shape == (7, 12)
    assert torch.equal(rows.to_dense(), x[index])
    assert torch.equal(csr_rows(to_csr(x), torch.tensor([], dtype=torch.long)).to_dense(), x[:0])


def test_sparse_dropout_drops_stored_values_as_dense_dropout_does() -> None:
    x = to_csr(torch.ones(200, 50, dtype=torch.float64))
    torch.manual_seed(0)
    dropped = sparse_dropout(x, 0.25).to_dense()
    assert set(dropped.unique().tolist()) == {0.0, 1 / 0.75}
    assert (dropped == 0).double().mean().item() == pytest.approx(0.25, abs=0.01)  # 10,000 entries
    assert sparse_dropout(x, 0.25, training=False) is x and sparse_dropout(x, 0.0) is x
    zeros = to_csr(torch.zeros(4, 4))
    assert sparse_dropout(zeros, 0.5).values().numel() == 0  # nothing stored, nothing drawn


def test_a_run_with_sparse_features_trains_as_the_dense_run() -> None:
    """Dropout 0: the same losses, to float32 rounding (the sparse product sums in another order); the
    record counts the CSR arrays' bytes."""
    dense = run(make_cfg("model=gcn", "model.dropout=0", "engine=single", "chunks=2"))
    sparse = run(make_cfg("model=gcn", "model.dropout=0", "engine=single", "chunks=2",
                          "data.features=sparse"))
    assert dense["status"] == sparse["status"] == "completed", sparse["error"]
    losses = [e["train_loss"] for e in dense["epochs"]]
    assert [e["train_loss"] for e in sparse["epochs"]] == pytest.approx(losses, rel=1e-5)
    assert 0 < sparse["dataset"]["feature_bytes"] < dense["dataset"]["feature_bytes"]


def test_sparse_features_in_bf16_are_refused_before_training() -> None:
    record = run(make_cfg("data.features=sparse", "train.precision=bf16"))
    assert record["status"] == "invalid" and record["epochs"] == []
    assert "data.features=sparse with train.precision=bf16" in record["error"]
    with pytest.raises(ConfigError):
        check_config(run_config(make_cfg("data.features=sparse", "train.precision=bf16")))
