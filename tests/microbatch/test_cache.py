"""The on-disk plan cache: a plan is built once, read back identical, and rebuilt when any key changes."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

from pipegnn import run
from pipegnn.config.choices import Halo, Partitioner
from pipegnn.data import Graph
from pipegnn.microbatch import ComputationGraph, MicroBatchPlan, PlanSpec, cached_plan, plan_key

from tests.helpers import damage_a_tensor, make_cfg

BASE: dict[str, Any] = dict(num_layers=2, halo="exact", partitioner="metis", seed=0)


def assert_same_plan(a: MicroBatchPlan, b: MicroBatchPlan) -> None:
    assert (a.halo, a.partition, a.stats) == (b.halo, b.partition, b.stats)
    assert torch.equal(a.targets, b.targets) and torch.equal(a.part, b.part)
    for x, y in zip(a.micro_batches, b.micro_batches, strict=True):
        assert (x.sizes, x.sources) == (y.sizes, y.sources) and torch.equal(x.nodes, y.nodes)
        for e, f in zip(x.edges + x.weights, y.edges + y.weights, strict=True):
            assert (e is None and f is None) or torch.equal(e, f)


def build(graph: Graph, cache: Path | None, targets: torch.Tensor | None = None, chunks: int = 3,
          edge_index: torch.Tensor | None = None, weight: torch.Tensor | None = None,
          **changes: Any) -> tuple[MicroBatchPlan, bool]:
    computation = ComputationGraph(graph.edge_index if edge_index is None else edge_index, graph.num_nodes,
                                   weight)
    return cached_plan(cache, computation, graph.split("train") if targets is None else targets,
                       PlanSpec(chunks, **{**BASE, **changes}))


def test_second_build_reads_the_cache(graph: Graph, tmp_path: Path) -> None:
    weight = torch.rand(graph.num_edges)
    first, hit = build(graph, tmp_path, weight=weight)
    assert not hit and len(list(tmp_path.glob("plan-*.pt"))) == 1
    second, hit = build(graph, tmp_path, weight=weight)
    assert hit
    assert_same_plan(first, second)
    uncached, hit = build(graph, None, weight=weight)
    assert not hit
    assert_same_plan(first, uncached)


@pytest.mark.parametrize("change", ["chunks", "num_layers", "halo", "partitioner", "seed", "targets",
                                    "edges", "weights"])
def test_any_key_change_rebuilds(graph: Graph, tmp_path: Path, change: str) -> None:
    weight = torch.rand(graph.num_edges)
    build(graph, tmp_path, weight=weight)
    kwargs: dict = {"weight": weight}
    if change == "chunks":
        kwargs["chunks"] = 4
    elif change in ("num_layers", "seed"):
        kwargs[change] = 3
    elif change == "halo":
        kwargs["halo"] = "historical"
    elif change == "partitioner":
        kwargs["partitioner"] = "random"
    elif change == "targets":
        kwargs["targets"] = graph.split("all")
    elif change == "edges":
        kwargs["edge_index"] = graph.edge_index[:, 1:]
        kwargs["weight"] = weight[1:]
    else:
        kwargs["weight"] = weight * 2
    plan, hit = build(graph, tmp_path, **kwargs)
    assert not hit
    assert len(list(tmp_path.glob("plan-*.pt"))) == 2
    assert_same_plan(plan, build(graph, None, **kwargs)[0])


def test_unreadable_cache_file_is_rebuilt(graph: Graph, tmp_path: Path) -> None:
    build(graph, tmp_path)
    (path,) = tmp_path.glob("plan-*.pt")
    path.write_bytes(b"truncated")
    plan, hit = build(graph, tmp_path)
    assert not hit
    assert_same_plan(plan, build(graph, tmp_path)[0])


def only_file(folder: Path) -> Path:
    (path,) = folder.glob("plan-*.pt")
    return path


@pytest.mark.parametrize("halo", ["exact", "historical", "none"])
def test_every_halo_mode_reads_back(graph: Graph, tmp_path: Path, halo: str,
                                    caplog: pytest.LogCaptureFixture) -> None:
    first, _ = build(graph, tmp_path, targets=graph.split("all"), halo=halo)
    second, hit = build(graph, tmp_path, targets=graph.split("all"), halo=halo)
    assert hit and not caplog.records  # the load checks accept every valid plan
    assert_same_plan(first, second)


def test_stored_file_loads_weights_only(graph: Graph, tmp_path: Path) -> None:
    """Nothing read from a (writable, shared) cache folder may execute code: plain tensors and
    containers only, with the key the file was stored under."""
    build(graph, tmp_path, weight=torch.rand(graph.num_edges))
    path = only_file(tmp_path)
    state = torch.load(path, weights_only=True)
    assert path.name == f"plan-{state['key']}.pt"


def test_swapped_files_are_rebuilt(graph: Graph, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The train and eval plan files swapped on disk: each load returns its own plan, not the other's."""
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    eval_targets = graph.split("test")
    build(graph, a_dir)
    build(graph, b_dir, targets=eval_targets)
    a, b = only_file(a_dir), only_file(b_dir)
    a.rename(tmp_path / a.name)
    b.rename(tmp_path / b.name)
    a, b = tmp_path / a.name, tmp_path / b.name
    a_bytes = a.read_bytes()
    a.write_bytes(b.read_bytes())
    b.write_bytes(a_bytes)
    train, hit = build(graph, tmp_path)
    assert not hit
    assert_same_plan(train, build(graph, None)[0])
    evaluated, hit = build(graph, tmp_path, targets=eval_targets)
    assert not hit
    assert_same_plan(evaluated, build(graph, None, targets=eval_targets)[0])
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2 and str(a) in warnings[0] and str(b) in warnings[1]
    assert all("stored for key" in w for w in warnings)
    caplog.clear()
    assert build(graph, tmp_path)[1] and build(graph, tmp_path, targets=eval_targets)[1]  # overwritten
    assert not caplog.records


def test_plan_of_other_chunks_under_key_is_rebuilt(graph: Graph, tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    build(graph, tmp_path / "four", chunks=4)
    build(graph, tmp_path / "two", chunks=2)
    four = only_file(tmp_path / "four")
    four.write_bytes(only_file(tmp_path / "two").read_bytes())
    plan, hit = build(graph, tmp_path / "four", chunks=4)
    assert not hit and plan.chunks == plan.stats.chunks == 4
    assert_same_plan(plan, build(graph, None, chunks=4)[0])
    (warning,) = [r.getMessage() for r in caplog.records]
    assert str(four) in warning and "cached plan" in warning
    assert build(graph, tmp_path / "four", chunks=4)[1]


def test_edited_plan_with_its_key_is_rebuilt(graph: Graph, tmp_path: Path,
                                             caplog: pytest.LogCaptureFixture) -> None:
    """A file edited after writing (its key kept, another plan's content) fails the consistency checks."""
    build(graph, tmp_path / "three")
    build(graph, tmp_path / "two", chunks=2)
    path = only_file(tmp_path / "three")
    state = torch.load(only_file(tmp_path / "two"), weights_only=True)
    state["key"] = torch.load(path, weights_only=True)["key"]
    torch.save(state, path)
    plan, hit = build(graph, tmp_path / "three")
    assert not hit and plan.chunks == 3
    (warning,) = [r.getMessage() for r in caplog.records]
    assert str(path) in warning and "chunks=3" in warning


def test_a_plan_damaged_in_place_is_rebuilt(graph: Graph, tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    """Bytes of an edge tensor inverted in place (same size, still a loadable file with its key, and
    consistent shapes: what the load's shape checks cannot see) fail the content checksum: the plan is
    rebuilt with a warning naming the file, never trained on (it trained to another accuracy, completed)."""
    build(graph, tmp_path)
    path = only_file(tmp_path)
    size = path.stat().st_size
    damage_a_tensor(path)
    assert path.stat().st_size == size and torch.load(path, weights_only=True)["key"]
    plan, hit = build(graph, tmp_path)
    assert not hit
    assert_same_plan(plan, build(graph, None)[0])
    (warning,) = [r.getMessage() for r in caplog.records]
    assert str(path) in warning and "content checksum" in warning and "rebuilding" in warning
    assert build(graph, tmp_path)[1]  # the rebuilt file is read back


def test_unwritable_cache_folder_builds_in_memory(graph: Graph, tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    """A cache path under a regular file cannot be created, even by root: the plan is built in memory,
    with one warning naming the folder."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    cache = blocker / "plans"
    plan, hit = build(graph, cache)
    assert not hit
    assert_same_plan(plan, build(graph, None)[0])
    plan, hit = build(graph, cache, chunks=2)
    assert not hit and plan.chunks == 2
    (warning,) = [r.getMessage() for r in caplog.records]  # once per folder
    assert str(cache) in warning and "cannot be written" in warning


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes to read-only folders")
def test_read_only_cache_folder_still_serves_its_plans(graph: Graph, tmp_path: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    build(graph, tmp_path)
    tmp_path.chmod(0o555)
    try:
        assert build(graph, tmp_path)[1]  # read back
        plan, hit = build(graph, tmp_path, chunks=2)  # new: built, not written
        assert not hit and plan.chunks == 2
    finally:
        tmp_path.chmod(0o755)
    (warning,) = [r.getMessage() for r in caplog.records]
    assert str(tmp_path) in warning
    assert len(list(tmp_path.glob("plan-*.pt"))) == 1


def test_run_with_swapped_plan_files_matches_a_clean_run(tmp_path: Path) -> None:
    """End to end: the train and eval plan files of a run swapped on disk give the clean run's
    test accuracy (the swapped files used to give NaN)."""
    cfg = ("chunks=2", "train.epochs=2", "model.dropout=0", f"microbatch.cache={tmp_path}")
    clean = run(make_cfg(*cfg))
    assert clean["status"] == "completed", clean["error"]
    a, b = sorted(tmp_path.glob("plan-*.pt"))
    a_bytes = a.read_bytes()
    a.write_bytes(b.read_bytes())
    b.write_bytes(a_bytes)
    swapped = run(make_cfg(*cfg))
    assert swapped["status"] == "completed", swapped["error"]
    assert swapped["final"]["test_acc"] == clean["final"]["test_acc"]
    assert [e["train_loss"] for e in swapped["epochs"]] == [e["train_loss"] for e in clean["epochs"]]


def test_plan_key_is_unchanged() -> None:
    """Plans cached on users' disks keep hitting: the key of the same plan is the one computed before the
    build parameters became a ComputationGraph and a PlanSpec (``plan_key(edge_index, edge_weight,
    targets, num_nodes=..., chunks=..., num_layers=..., halo=..., partitioner=..., seed=..., part=...)``),
    whether a choice is spelt as a string or as its enum member."""
    edges = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4, 4, 5], [1, 0, 2, 1, 3, 2, 4, 3, 5, 4]])
    weight = torch.linspace(0.1, 1.0, 10)
    targets = torch.tensor([5, 0, 2, 3, 2])
    assert plan_key(ComputationGraph(edges, 6), targets, PlanSpec(3, 2, "exact", "metis")) == \
        "9ca2155234dd1ebe16f6f364"
    spec = PlanSpec(3, 2, "historical", "random", 7)
    assert plan_key(ComputationGraph(edges, 6, weight), targets, spec) == "f930b35559a9b3186653f7fc"
    assert plan_key(ComputationGraph(edges, 6), targets, PlanSpec(3, 2, "none", "bfs"),
                    part=torch.tensor([0, 0, 1, 1, 2, 2])) == "9469077d78f85c07382e0c44"
    for spec in (PlanSpec(3, 2), PlanSpec(3, 2, Halo.exact, Partitioner.metis, 0),
                 PlanSpec(3, 2, "exact", "metis", 0)):
        assert plan_key(ComputationGraph(edges, 6, weight), targets, spec) == "181bb51c43a9ba0a00ed0623"
