"""Memory: sparse aggregation equals the message path and the full graph; unavailable aggregations and bad
caps are clear config errors; a run over its memory cap is an ``oom`` record and the cap is lifted after."""
from __future__ import annotations

import copy
import json
import re
import resource
from pathlib import Path
from typing import Any

import pytest
import torch
from omegaconf import OmegaConf

from pipegnn import run
from pipegnn.backends import get_backend
from pipegnn.data import Graph
from pipegnn.measure import address_space_bytes
from pipegnn.models import build_model

from tests.helpers import assert_close, assert_grads_close, make_cfg
from tests.test_exactness import MODELS, micro_batched, reference


def cfg(*overrides: str, **extra: Any) -> dict[str, Any]:
    """A tiny run config as a plain dict, with ``extra`` keys set by dotted path (``model__aggregation``)."""
    container = OmegaConf.to_container(make_cfg("microbatch.cache=null", *overrides), resolve=True)
    for key, value in extra.items():
        group, name = key.split("__")
        container[group][name] = value
    return container


@pytest.mark.usefixtures("float64")
@pytest.mark.parametrize("engine", ["single", "gpipe"])
@pytest.mark.parametrize("chunks", [1, 4])
def test_sparse_gcn_equals_messages_and_full_graph(graph: Graph, chunks: int, engine: str) -> None:
    graph.x = graph.x.double()
    targets = graph.split("train")
    model = build_model(MODELS["gcn"], get_backend("pyg"), graph.x, graph.num_classes)
    sparse = build_model(dict(MODELS["gcn"], aggregation="sparse"), get_backend("pyg"), graph.x,
                         graph.num_classes)
    sparse.load_state_dict(model.state_dict())
    propagations = list(sparse)[1::2]
    assert [u.backend.aggregation for u in propagations] == ["sparse"] * sparse.num_layers
    expected, expected_grads = reference("pyg", copy.deepcopy(model), graph, targets)
    keys = MODELS["gcn"]
    messages, messages_grads = micro_batched("pyg", model, keys, graph, "train", chunks, "metis", engine)
    out, grads = micro_batched("pyg", sparse, dict(keys, aggregation="sparse"), graph, "train", chunks,
                               "metis", engine)
    assert_close(messages, expected)
    assert_close(out, expected)
    assert_close(out, messages)
    assert_grads_close(grads, expected_grads)
    assert_grads_close(grads, messages_grads)


def test_pyg_sparse_gcn_trains_like_messages() -> None:
    losses = {}
    for aggregation in ("messages", "sparse"):
        record = run(cfg("model=gcn", "model.dropout=0", "engine=gpipe", "chunks=4",
                         model__aggregation=aggregation))
        assert record["status"] == "completed", record["error"]
        assert record["config"]["model"]["aggregation"] == aggregation
        losses[aggregation] = [e["train_loss"] for e in record["epochs"]]
    assert losses["sparse"] == pytest.approx(losses["messages"], rel=1e-5)


@pytest.mark.parametrize("framework, model, aggregation, match", [
    ("pyg", "gat", "sparse", r"model.aggregation='sparse' is not available for model=gat with "
                             r"framework=pyg .*attention.*; available: messages"),
    ("pyg", "gcn", "fused", r"model.aggregation='fused' is not valid; valid: messages, sparse"),
    ("dgl", "gat", "dense", r"model.aggregation='dense' is not valid; valid: messages, sparse"),
])
def test_unavailable_aggregation_is_invalid(framework: str, model: str, aggregation: str,
                                            match: str) -> None:
    record = run(cfg(f"framework={framework}", f"model={model}", model__aggregation=aggregation))
    assert record["status"] == "invalid"
    assert re.search(match, record["error"]), record["error"]
    assert record["epochs"] == []


@pytest.mark.parametrize("value, message", [
    *((v, "train.memory_limit_gb must be a finite number of GiB > 0 and <= 4.29497e+09, or null for no cap")
      for v in (0, -1.5, float("inf"), float("nan"))),
    ("lots", "train.memory_limit_gb: Value 'lots' of type 'str' could not be converted to Float"),
    (True, "train.memory_limit_gb: Value 'True' of type 'bool' could not be converted to Float"),
])
def test_bad_memory_limit_is_invalid(value: Any, message: str) -> None:
    """Infinity and NaN too (they used to fail in training with an OverflowError): null is no cap; a
    value of the wrong type (in a plain config: composition refuses it) is the schema's error."""
    record = run(cfg(train__memory_limit_gb=value))
    assert record["status"] == "invalid"
    assert message in record["error"]


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_cap_below_the_process_is_invalid() -> None:
    limits = resource.getrlimit(resource.RLIMIT_AS)
    record = run(cfg(train__memory_limit_gb=address_space_bytes() / 2**30 / 2))
    assert record["status"] == "invalid"
    assert "below this process's address space" in record["error"]
    assert resource.getrlimit(resource.RLIMIT_AS) == limits


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_over_the_cap_is_an_oom_record_and_the_cap_is_lifted(tmp_path: Path) -> None:
    """A graph that fits under the cap (100K nodes of 16 features: the graph's own check passes) whose first
    layer's rows (100K x 512 x 8 heads float32 = 1.6 GB) exceed the room left: the run fails inside torch,
    is recorded as ``oom``, the process lives on, and the next run in the same process is not capped."""
    limits = resource.getrlimit(resource.RLIMIT_AS)
    room = 160 * 2**20
    big = cfg("engine=single", "chunks=1", "microbatch.halo=none", "dataset.num_nodes=100000",
              "dataset.num_features=16", "model.hidden=512", "dataset.avg_degree=4", "train.epochs=1",
              train__memory_limit_gb=(address_space_bytes() + room) / 2**30)
    record = run(big, output_dir=tmp_path)
    assert record["status"] == "oom", (record["status"], record["error"])
    assert "can't allocate memory" in record["error"] or "MemoryError" in record["error"]
    assert (tmp_path / "result.json").is_file()
    assert resource.getrlimit(resource.RLIMIT_AS) == limits
    # The limit is restored: the same process allocates beyond the old cap, then trains normally.
    assert int(torch.empty(2 * room, dtype=torch.uint8).fill_(1)[-1]) == 1
    after = run(cfg("engine=single", "chunks=2"))
    assert after["status"] == "completed", after["error"]


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_a_stage_beyond_its_device_memory_is_an_oom_record_naming_the_rank(tmp_path: Path) -> None:
    """engine.memory_limit_gb caps each pipeline stage process while it trains, as a device of that
    size would: the first stage's dense transform (4000 x 8192 float32 = 131 MB in one tensor) does not
    fit in 64 MiB, so the run is an ``oom`` naming rank 0, with the cap in the record; with 1 GiB the
    same pipeline trains."""
    big = ("engine=pipelining", "model=gcn", "model.hidden=8192", "dataset.num_nodes=4000", "chunks=2",
           "train.epochs=1")
    record = run(cfg(*big, "engine.memory_limit_gb=0.0625"), output_dir=tmp_path)
    assert record["status"] == "oom", (record["status"], record["error"])
    assert record["error"].startswith("MemoryError: pipeline worker rank 0: RuntimeError: "), record["error"]
    assert "can't allocate memory" in record["error"]  # the allocation itself, not the schedule's wrapper
    assert json.loads((tmp_path / "result.json").read_text())["status"] == "oom"
    fits = run(cfg(*big, "engine.memory_limit_gb=1"))
    assert fits["status"] == "completed", fits["error"]
    assert fits["memory"]["stage_limit_bytes"] == 2**30


@pytest.mark.parametrize("value, message", [
    *((v, "engine.memory_limit_gb must be a finite number of GiB per stage process > 0")
      for v in (0, -1, float("inf"), float("nan"))),
    (True, "engine.memory_limit_gb: Value 'True' of type 'bool' could not be converted to Float"),
    ("a lot", "engine.memory_limit_gb: Value 'a lot' of type 'str' could not be converted to Float"),
])
def test_bad_stage_memory_limit_is_invalid(value: Any, message: str) -> None:
    record = run(cfg("engine=pipelining", engine__memory_limit_gb=value))
    assert record["status"] == "invalid"
    assert message in record["error"]
