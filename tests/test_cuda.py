"""On a CUDA device (``pytest -m gpu``; skipped without one): exactness on ``cuda:0``, CUDA-event stage
timelines, peak device memory per device, CUDA out-of-memory as an ``oom`` record, bf16 under CUDA's
autocast, the pipelining engine over two processes sharing one GPU, and sampled halos drawn on the GPU.

PyG only, and without DGL imports: the GPU machines this project is run on have no DGL wheel for their
CUDA (docs/index.md, *On a GPU*). The reference of every exactness test is pipegnn's own full graph on
the CPU (k=1), which the CPU tests tie to PyG's and DGL's plain layers.
"""
from __future__ import annotations

import time

import pytest
import torch

from pipegnn import run
from pipegnn.backends import get_backend
from pipegnn.data import Graph
from pipegnn.microbatch.halo import InCSR, exact_block
from pipegnn.microbatch.sample import NeighbourSampler, SampleStream
from pipegnn.models import build_model

from tests.helpers import (
    assert_close,
    assert_grads_close,
    build_on,
    make_cfg,
    model_keys,
    random_graph,
    run_plan,
)
from tests.models.test_precision import GRAD_TOL, OUT_TOL, outputs_and_grads, relative

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

CUDA = torch.device("cuda:0")
MODELS = {
    "gat": dict(name="gat", hidden=4, heads=3, out_heads=2, layers=2, dropout=0.0),
    "gcn": dict(name="gcn", hidden=8, layers=3, dropout=0.0),
    "gcn2": dict(name="gcn2", hidden=8, layers=8, dropout=0.0, alpha=0.1, theta=0.5),
    "residual_gcn": dict(name="gcn", hidden=8, layers=8, dropout=0.0, residual=True),
}


def _run(*overrides: str) -> dict:
    record = run(make_cfg("model.dropout=0", *overrides))
    assert record["status"] == "completed", (record["status"], record["error"], record.get("traceback"))
    return record


@pytest.fixture
def graph(graph: Graph) -> Graph:
    graph.x = graph.x.double()
    return graph


@pytest.mark.usefixtures("float64")
@pytest.mark.parametrize("engine", ["single", "gpipe"])
@pytest.mark.parametrize("chunks", [1, 8])
@pytest.mark.parametrize("kind", list(MODELS))
def test_exact_on_cuda_equals_the_full_graph_on_cpu(graph: Graph, kind: str, chunks: int,
                                                    engine: str) -> None:
    """float64, dropout 0: exact micro-batches on ``cuda:0`` (the single engine, and GPipe with both
    stages on ``cuda:0``, cut inside a layer) compute the CPU full graph's outputs and gradients."""
    model = build_model(MODELS[kind], get_backend("pyg"), graph.x, graph.num_classes)
    expected, expected_grads = run_plan("pyg", model, MODELS[kind], graph, 1, "single")
    first = 2 if kind == "gcn2" else 3  # the first stage ends after GCNII's transform0 or the others'
    balance = [first, len(model) - first]  # transform1: inside a layer (GCNII's x0 crosses the boundary)
    out, grads = run_plan("pyg", model, MODELS[kind], graph, chunks, engine, balance, device=CUDA)
    assert_close(out, expected)
    assert_grads_close(grads, expected_grads, nonzero=True)


def test_cuda_event_boxes_lie_inside_the_synchronised_step(graph: Graph) -> None:
    """The timeline stamps a CUDA stage with events: every box of a step lies between the host clock's
    readings before the step and after its closing synchronisation, forward before backward of each
    micro-batch, the boxes of the one stream never overlap, and together they span at least the kernel
    time torch.profiler measured on the device in that step (a box spans every kernel enqueued between
    its events, and idle time too where the host is slower: on an H200 this step is host-bound, so the
    kernels need not fill the step). The kernel time leaves out the profiler's GPU user annotations, as
    torch's own table does: each ``record_function`` label (the timeline's ``stage0 forward 0``, the first
    layer's transform, the optimizer's step) is also a CUDA-device event spanning the kernels inside it,
    which the sum counted as kernels again (one H200, 2026-11-28: 45.7 ms of "kernels" against boxes of
    15.2 ms)."""
    big = Graph("wide", torch.randn(20000, 256), torch.randint(3, (20000,)),
                torch.randint(20000, (2, 400000)), *(torch.ones(20000, dtype=torch.bool),) * 3, num_classes=3)
    group, values = model_keys(dict(name="gat", hidden=64, heads=8, out_heads=1, layers=2, dropout=0.0))
    trainee = build_on(big, ["framework=pyg", *group, "engine=single"],
                       {**values, "chunks": 4, "microbatch.halo": "exact", "microbatch.partition": "metis",
                        "microbatch.targets": "train", "engine.device": str(CUDA), "engine.timeline": True})
    engine, ids = trainee.engine, trainee.training.ids
    labels, labelled = trainee.train_labels()
    engine.train_step(ids, labels, labelled)  # warm-up: kernels loaded, allocator filled
    engine.step_boxes()
    torch.cuda.synchronize(CUDA)
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as profile:
        before = time.perf_counter() - engine.timeline.origin
        engine.train_step(ids, labels, labelled)
        torch.cuda.synchronize(CUDA)
        after = time.perf_counter() - engine.timeline.origin
    boxes = engine.step_boxes()
    assert {b.kind for b in boxes} >= {"forward", "backward"}
    assert all(before - 1e-3 <= b.start < b.end <= after + 1e-3 for b in boxes), (before, after, boxes)
    for m in range(4):
        forward = next(b for b in boxes if b.kind == "forward" and b.micro_batch == m)
        backward = next(b for b in boxes if b.kind == "backward" and b.micro_batch == m)
        assert forward.end <= backward.start + 1e-6
    ordered = sorted(boxes, key=lambda b: b.start)
    assert all(a.end <= b.start + 1e-6 for a, b in zip(ordered, ordered[1:])), ordered
    cuda = [e for e in profile.events()
            if e.device_type == torch.autograd.DeviceType.CUDA and not e.is_user_annotation]
    kernels = sum(e.device_time_total for e in cuda) / 1e6  # microseconds -> seconds
    assert kernels > 0
    # what a failure needs to be read: the step's wall time, the boxes' sum by kind, the kernel time by
    # what launched it (a top-level CPU event's device time sums its kernels: autograd's backward nodes,
    # the optimizer, the rest), the kernels' count and their longest
    by_kind = {k: sum(b.end - b.start for b in boxes if b.kind == k) for k in {b.kind for b in boxes}}
    by_launcher: dict[str, float] = {}
    for e in profile.events():
        if e.device_type == torch.autograd.DeviceType.CPU and e.cpu_parent is None:
            launcher = ("backward" if e.name.startswith("autograd::engine") else
                        "optimizer" if e.name.startswith("Optimizer") else "forward and the rest")
            by_launcher[launcher] = by_launcher.get(launcher, 0.0) + e.device_time_total / 1e6
    longest = sorted(((e.device_time_total / 1e6, e.name) for e in cuda), reverse=True)[:5]
    assert sum(b.end - b.start for b in boxes) >= 0.8 * kernels, (after - before, by_kind, kernels,
                                                                   by_launcher, len(cuda), longest)


def test_run_on_cuda_records_the_gpu_and_its_peak_memory() -> None:
    record = _run("engine=single", "engine.device=cuda:0", "chunks=4")
    assert record["env"]["gpus"] == [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    peak = record["memory"]["peak_device_bytes"]
    assert list(peak) == ["cuda:0"] and peak["cuda:0"] > 0
    p = record["pipeline"]
    assert p["devices"] == ["cuda:0"] and 0 <= p["bubble"] < 1 and p["makespan_s"] > 0


def test_peak_device_memory_falls_with_chunks_at_targets_all() -> None:
    """A graph whose activations dwarf its features and weights (GAT, 8 heads x 64, 200K nodes): the
    peak at k=16 (one micro-batch's activations at a time, exact halos) is well below k=1's."""
    big = ("engine=single", "engine.device=cuda:0", "model=gat", "model.hidden=64", "model.heads=8",
           "dataset.num_nodes=200000", "dataset.num_features=32", "microbatch.targets=all", "train.epochs=1")
    full = _run(*big, "chunks=1", "microbatch.halo=none")["memory"]["peak_device_bytes"]["cuda:0"]
    micro = _run(*big, "chunks=16", "microbatch.halo=exact")["memory"]["peak_device_bytes"]["cuda:0"]
    assert micro < 0.7 * full, (micro, full)


def test_cuda_out_of_memory_is_an_oom_record_and_the_next_run_trains() -> None:
    """With the caching allocator capped at 256 MiB, a graph whose features alone need more fails
    inside torch: the record is ``oom``, and the next run in the same process (cap lifted) completes."""
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(CUDA).total_memory
    torch.cuda.set_per_process_memory_fraction(256 * 2**20 / total, CUDA)
    try:
        record = run(make_cfg("engine=single", "engine.device=cuda:0", "chunks=1", "microbatch.halo=none",
                              "dataset.num_nodes=200000", "dataset.num_features=512", "train.epochs=1"))
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, CUDA)
        torch.cuda.empty_cache()
    assert record["status"] == "oom", (record["status"], record["error"])
    assert "OutOfMemoryError" in record["error"] or "out of memory" in record["error"]
    _run("engine=single", "engine.device=cuda:0", "chunks=2")


@pytest.mark.parametrize("engine", ["single", "gpipe"])
@pytest.mark.parametrize("kind", ["gat", "gcn"])
def test_bf16_on_cuda_is_close_to_fp32(graph: Graph, kind: str, engine: str) -> None:
    """train.precision=bf16 under CUDA's autocast: within bfloat16's precision of fp32 (and not equal to
    it), 4 exact micro-batches on ``cuda:0``."""
    graph.x = graph.x.float()
    out32, grads32 = outputs_and_grads("pyg", kind, graph, "fp32", 4, engine, device=CUDA)
    out16, grads16 = outputs_and_grads("pyg", kind, graph, "bf16", 4, engine, device=CUDA)
    assert out16.dtype == torch.bfloat16 and 1e-4 < relative(out16, out32) < OUT_TOL
    assert {g.dtype for g in grads16} == {torch.float32} and relative(grads16, grads32) < GRAD_TOL


def test_pipelining_on_one_shared_gpu_trains_as_the_single_engine() -> None:
    """engine=pipelining with both stage processes on ``cuda:0`` (engine.backend=auto): the same
    per-epoch losses as the single engine on ``cuda:0`` (dropout 0, same seed), and each rank's peak
    device memory in the record."""
    single = _run("engine=single", "engine.device=cuda:0", "chunks=4")
    piped = _run("engine=pipelining", "engine.devices=[cuda:0,cuda:0]", "chunks=4")
    assert [e["train_loss"] for e in piped["epochs"]] == pytest.approx(
        [e["train_loss"] for e in single["epochs"]], rel=1e-4)
    assert piped["memory"]["peak_device_bytes"]


def test_the_sampler_draws_on_cuda_and_keeps_every_neighbour_with_fanouts_of_minus_one() -> None:
    """A CUDA CSR draws on the device (its own stream): fan-outs of -1 give the exact blocks the CPU
    builds; fan-outs of 2 keep at most 2 in-neighbours and the self-loop per computed node."""
    g = random_graph(num_nodes=200, num_edges=1500)
    edge_index, weight = get_backend("pyg").computation_graph("gcn", g.edge_index, g.num_nodes)
    host = InCSR(edge_index, g.num_nodes, weight)
    targets = [torch.arange(0, 200, 9), torch.arange(4, 200, 13)]
    every = NeighbourSampler(host.to(CUDA), targets, [-1, -1], seed=0)
    assert every.stream == SampleStream("cuda:0", "philox4x32")
    for drawn, t in zip(every.draw(3), targets, strict=True):
        exact = exact_block(host, t, 2)
        assert drawn.nodes.device == CUDA and torch.equal(drawn.nodes.cpu(), exact.nodes)
        assert all(torch.equal(a.cpu(), b) for a, b in zip(drawn.edges, exact.edges))
        assert all(torch.equal(a.cpu(), b) for a, b in zip(drawn.weights, exact.weights))
    for drawn in NeighbourSampler(host.to(CUDA), targets, [2, 2], seed=0).draw(1):
        for layer, edges in enumerate(drawn.edges):
            per_node = torch.bincount(edges[1].long(), minlength=drawn.sizes[layer + 1])
            assert int(per_node.max()) <= 3


def test_a_sampled_run_on_cuda_draws_there_and_with_every_neighbour_trains_as_exact_halos() -> None:
    common = ("engine=single", "engine.device=cuda:0", "model=gcn", "chunks=3", "train.epochs=4")
    sampled = _run(*common, "microbatch.halo=sampled", "microbatch.fanouts=[-1,-1]")
    exact = _run(*common, "microbatch.halo=exact")
    assert sampled["microbatch"]["sample_stream"] == {"device": "cuda:0", "generator": "philox4x32"}
    assert all(e["sample_s"] > 0 for e in sampled["epochs"][1:])
    assert [e["train_loss"] for e in sampled["epochs"]] == pytest.approx(
        [e["train_loss"] for e in exact["epochs"]], rel=1e-4)
