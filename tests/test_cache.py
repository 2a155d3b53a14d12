"""The on-disk plan cache: a plan is built once, read back identical, and rebuilt when any key changes."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pipegnn.data import Graph
from pipegnn.microbatch import MicroBatchPlan, cached_plan

BASE = dict(num_layers=2, halo="exact", partitioner="metis", seed=0)


def assert_same_plan(a: MicroBatchPlan, b: MicroBatchPlan) -> None:
    assert (a.halo, a.partition, a.stats) == (b.halo, b.partition, b.stats)
    assert torch.equal(a.targets, b.targets) and torch.equal(a.part, b.part)
    for x, y in zip(a.micro_batches, b.micro_batches, strict=True):
        assert (x.sizes, x.sources) == (y.sizes, y.sources) and torch.equal(x.nodes, y.nodes)
        for e, f in zip(x.edges + x.weights, y.edges + y.weights, strict=True):
            assert (e is None and f is None) or torch.equal(e, f)


def build(graph: Graph, cache: Path | None, targets: torch.Tensor | None = None, chunks: int = 3,
          edge_index: torch.Tensor | None = None, weight: torch.Tensor | None = None,
          **changes: object) -> tuple[MicroBatchPlan, bool]:
    return cached_plan(cache, graph.edge_index if edge_index is None else edge_index, graph.num_nodes,
                       graph.split("train") if targets is None else targets, chunks,
                       edge_weight=weight, **{**BASE, **changes})


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
