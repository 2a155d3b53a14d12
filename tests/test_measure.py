"""pipegnn.measure's process resources: the intra-op threads a run trains with (``engine.threads``)."""
from __future__ import annotations

from typing import Any

import pytest
import torch
from omegaconf import OmegaConf

from pipegnn import run
from pipegnn.measure import intra_op_threads

from tests.helpers import make_cfg


def test_intra_op_threads_sets_the_count_inside_and_restores_it() -> None:
    before = torch.get_num_threads()
    with intra_op_threads(before + 1):
        assert torch.get_num_threads() == before + 1
    assert torch.get_num_threads() == before
    with intra_op_threads(None):
        assert torch.get_num_threads() == before


@pytest.mark.parametrize("engine", ["single", "gpipe", "pipelining"])
def test_a_run_trains_with_engine_threads_and_records_them(engine: str) -> None:
    """Every process that trains (a pipeline's stage processes too) takes ``engine.threads``; the record's
    ``env.torch_threads`` says so, and the calling process gets its own count back for the next job."""
    before = torch.get_num_threads()
    record = run(make_cfg(f"engine={engine}", f"engine.threads={before + 1}", "chunks=2", "train.epochs=1"))
    assert record["status"] == "completed", record["error"]
    assert record["env"]["torch_threads"] == before + 1
    assert torch.get_num_threads() == before
    if engine != "pipelining":  # (a stage process's default is a new process's: OMP_NUM_THREADS or the cores)
        default = run(make_cfg(f"engine={engine}", "chunks=2", "train.epochs=1"))
        assert default["env"]["torch_threads"] == before  # null: what this process has


@pytest.mark.parametrize("value, message", [
    *((v, "engine.threads must be an integer >= 1, or null for torch's default (threads per process)")
      for v in (0, -2)),
    *((v, f"engine.threads: Value '{v}' of type '{type(v).__name__}' could not be converted to Integer")
      for v in (True, 1.5, "many")),
])
def test_bad_threads_are_invalid_before_training(value: Any, message: str) -> None:
    """(The schema refuses the last three when Hydra composes; a config given to ``run`` as a dict is
    typed by the same schema.)"""
    cfg = OmegaConf.to_container(make_cfg("engine=pipelining"), resolve=True)
    cfg["engine"]["threads"] = value
    record = run(cfg)
    assert record["status"] == "invalid", record["error"]
    assert message in record["error"]
    assert record["epochs"] == []
