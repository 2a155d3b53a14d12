"""train.precision=bf16: features stored in bfloat16, every unit under autocast (in every engine and in
torchgpipe's worker threads), parameters, gradients, optimiser state and loss in float32, and outputs
within bfloat16's precision of float32's (micro-batched exact mode of full batch, full batch of fp32)."""
from __future__ import annotations

import threading

import pytest
import torch
from torch import Tensor

from pipegnn.backends import FRAMEWORKS, get_backend
from pipegnn.data import Graph
from pipegnn.engines.base import exact_loss
from pipegnn.models import FIRST_TRANSFORMS, PRECISIONS, build_model
from pipegnn.models.precision import autocast_dtype, dtype_name

from tests.helpers import build_on, model_keys

CPU = torch.device("cpu")
MODELS = {
    "gat": dict(name="gat", hidden=8, heads=2, out_heads=1, layers=2, dropout=0.0),
    "gcn": dict(name="gcn", hidden=8, layers=2, dropout=0.0),
    "sage": dict(name="sage", hidden=8, layers=2, dropout=0.0),
}
#: Relative error (norm of the difference over the norm) that bfloat16's 8-bit mantissa allows in a
#: 2-layer model's outputs (measured here: 2e-3 to 6e-3) and in all its gradients together (measured:
#: 3e-3 to 1e-2). Gradients are compared as one vector: GAT's ``att_dst`` has a gradient near zero (the
#: target's own term cancels in its softmax but for the LeakyReLU), so its own relative error (up to
#: 6e-2) measures cancellation, not precision.
OUT_TOL, GRAD_TOL = 2e-2, 3e-2


def relative(a: Tensor | list[Tensor], b: Tensor | list[Tensor]) -> float:
    """``|a - b| / |b|`` (tensors, or lists of tensors taken as one vector)."""
    if isinstance(a, list):
        a, b = torch.cat([t.flatten() for t in a]), torch.cat([t.flatten() for t in b])
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


def staged(framework: str, kind: str, graph: Graph, precision: str, chunks: int, engine: str = "single",
           first: str = "once_per_step", halo: str = "exact", aggregation: str = "messages",
           device: torch.device = CPU):
    """The model, its plan over all nodes, their ids and the engine on ``device`` (every stage's; GPipe's
    first stage the first layer's transform), as ``pipegnn.build`` makes them (seed 0, so every call has
    the same initial weights)."""
    group, keys = model_keys({**MODELS[kind], "aggregation": aggregation})
    where = {"engine.device": str(device)} if engine == "single" else \
        {"engine.devices": [str(device)] * 2, "engine.balance": [1, 2 * MODELS[kind]["layers"] - 1]}
    trainee = build_on(graph, [f"framework={framework}", *group, f"engine={engine}"],
                       {**keys, **where, "chunks": chunks, "train.seed": 0, "train.precision": precision,
                        "microbatch.first_transform": first, "microbatch.halo": halo,
                        "microbatch.targets": "all", "microbatch.partition": "metis"})
    return trainee.model, trainee.training.plan, trainee.training.ids, trainee.engine


def outputs_and_grads(framework: str, kind: str, graph: Graph, precision: str, chunks: int,
                      engine: str = "single", **kw) -> tuple[Tensor, list[Tensor]]:
    """Logits of one forward (ascending node order) and the gradients of one training step, on the CPU."""
    model, plan, ids, run = staged(framework, kind, graph, precision, chunks, engine, **kw)
    if plan.halo == "historical":
        model.eval()
        model.refresh(ids)
        model.train()
    out = run.predict(ids).cpu()
    labels = graph.y[plan.targets].to(run.output_device)
    run.train_step(ids, labels, labels.numel())
    order = torch.argsort(plan.targets)
    return out[order], [p.grad.cpu() for p in model.parameters()]


def test_precision_names() -> None:
    assert PRECISIONS == ("fp32", "bf16")
    assert autocast_dtype("fp32") is None and autocast_dtype("bf16") is torch.bfloat16
    assert dtype_name(torch.bfloat16) == "bfloat16"
    with pytest.raises(ValueError, match="train.precision='fp16' is not valid; valid: fp32, bf16"):
        autocast_dtype("fp16")
    with pytest.raises(ValueError, match="valid: fp32, bf16"):
        build_model(MODELS["gcn"], get_backend("pyg"), torch.randn(4, 3), 2, precision="half")


def test_exact_loss_is_float32_for_bfloat16_logits() -> None:
    logits = torch.randn(6, 3)
    labels = torch.tensor([0, 1, 2, 0, -1, 1])
    low = exact_loss(logits.bfloat16(), labels, 5)
    assert low.dtype == torch.float32
    assert float(low) == pytest.approx(float(exact_loss(logits.bfloat16().float(), labels, 5)), rel=1e-6)
    assert exact_loss(logits.double(), labels, 5).dtype == torch.float64  # fp32/fp64 untouched


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_bf16_stores_features_in_bf16_and_trains_float32(graph: Graph, framework: str) -> None:
    """The features' buffer is bfloat16 (half the bytes), every unit hands on bfloat16 rows, and the
    parameters, their gradients, Adam's state and the loss are float32."""
    fp32, *_ = staged(framework, "gat", graph, "fp32", 2)
    model, plan, ids, run = staged(framework, "gat", graph, "bf16", 2)
    features = model[0].features
    assert features.dtype == torch.bfloat16 and fp32[0].features.dtype == torch.float32
    assert features.numel() * features.element_size() * 2 == fp32[0].features.numel() * 4
    assert torch.equal(features, graph.x.bfloat16())
    seen: list[torch.dtype] = []
    for unit in model:
        unit.register_forward_hook(lambda module, args, out: seen.append(out[0].dtype))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    labels = graph.y[plan.targets]
    loss = run.train_step(ids, labels, labels.numel())
    optimizer.step()
    assert 0 < loss < 10
    assert seen and set(seen) == {torch.bfloat16}
    params = list(model.parameters())
    assert {p.dtype for p in params} == {p.grad.dtype for p in params} == {torch.float32}
    assert all(float(p.grad.abs().sum()) > 0 for p in params)
    state = [s for p in params for s in optimizer.state[p].values() if s.dim() > 0]
    assert len(state) == 2 * len(params) and {s.dtype for s in state} == {torch.float32}


@pytest.mark.parametrize("engine", ["single", "gpipe"])
@pytest.mark.parametrize("kind", list(MODELS))
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_bf16_exact_micro_batches_are_close_to_full_batch(graph: Graph, framework: str, kind: str,
                                                           engine: str) -> None:
    """bf16 exact micro-batches are within bfloat16's precision of bf16 full batch, which is within it
    of fp32 full batch (and not equal to it: bfloat16 really computed)."""
    full32, grads32 = outputs_and_grads(framework, kind, graph, "fp32", 1)
    full16, grads16 = outputs_and_grads(framework, kind, graph, "bf16", 1)
    micro16, micro_grads16 = outputs_and_grads(framework, kind, graph, "bf16", 4, engine)
    assert full16.dtype == micro16.dtype == torch.bfloat16
    assert 1e-4 < relative(full16, full32) < OUT_TOL
    assert relative(micro16, full16) < OUT_TOL
    assert {g.dtype for g in grads16 + micro_grads16} == {torch.float32}
    assert relative(grads16, grads32) < GRAD_TOL and relative(micro_grads16, grads16) < GRAD_TOL


@pytest.mark.parametrize("framework, kind, overrides", [
    ("pyg", "gat", dict(first="per_micro_batch")),
    ("dgl", "gcn", dict(first="per_micro_batch")),
    ("pyg", "gcn", dict(aggregation="sparse")),
    ("pyg", "sage", dict(aggregation="sparse")),
])
def test_bf16_other_modes_are_close_to_fp32(graph: Graph, framework: str, kind: str, overrides: dict) -> None:
    """The per-micro-batch first transform and PyG's sparse aggregation (which runs outside autocast on
    float32 rows: torch's CSR matmul has no bfloat16 kernel on CPU) under bf16, GPipe, 4 chunks."""
    out32, grads32 = outputs_and_grads(framework, kind, graph, "fp32", 4, "gpipe", **overrides)
    out16, grads16 = outputs_and_grads(framework, kind, graph, "bf16", 4, "gpipe", **overrides)
    assert out16.dtype == torch.bfloat16 and 1e-4 < relative(out16, out32) < OUT_TOL
    assert relative(grads16, grads32) < GRAD_TOL


def test_bf16_historical_caches_hold_bf16(graph: Graph) -> None:
    """Historical halos under bf16: the caches hold the activations' dtype (bfloat16, half the memory),
    and the refreshed outputs stay within bfloat16's precision of fp32's."""
    out32, grads32 = outputs_and_grads("pyg", "gat", graph, "fp32", 4, "gpipe", halo="historical")
    out16, grads16 = outputs_and_grads("pyg", "gat", graph, "bf16", 4, "gpipe", halo="historical")
    assert relative(out16, out32) < OUT_TOL
    assert relative(grads16, grads32) < GRAD_TOL
    model, *_ = staged("pyg", "gat", graph, "bf16", 4, halo="historical")
    assert [h.rows.dtype for h in model.histories()] == [torch.bfloat16]


@pytest.mark.parametrize("first", FIRST_TRANSFORMS)
def test_gpipe_worker_threads_run_under_autocast(graph: Graph, first: str) -> None:
    """torchgpipe runs units in its worker threads, where an autocast context of the caller's thread
    would not reach, and re-runs them (checkpointing) in the thread that runs the backward: in both
    the dense transforms compute in bfloat16 under autocast."""
    model, plan, ids, run = staged("pyg", "gcn", graph, "bf16", 4, "gpipe", first=first)
    run.pipe.checkpoint = "always"  # every micro-batch's forward is recomputed during the backward
    calls: list[tuple[bool, bool, torch.dtype, torch.dtype]] = []

    def hook(module, args, out) -> None:
        calls.append((threading.current_thread() is threading.main_thread(),
                      torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"), out.dtype))

    model[2].transform.register_forward_hook(hook)  # the second layer's Linear, in a worker thread
    labels = graph.y[plan.targets]
    run.train_step(ids, labels, labels.numel())
    assert len(calls) == 2 * plan.chunks  # forward and recomputation of each micro-batch
    assert {c[0] for c in calls[:plan.chunks]} == {False}  # the forwards ran in a worker thread
    assert {c[1:] for c in calls} == {(True, torch.bfloat16, torch.bfloat16)}
    assert not torch.is_autocast_enabled("cpu")  # nothing leaks into the caller's thread


def test_staged_model_precision_defaults_to_fp32(graph: Graph) -> None:
    model = build_model(MODELS["gcn"], get_backend("pyg"), graph.x, graph.num_classes)
    assert model.precision == "fp32" and model[0].features is graph.x
    assert {u.compute_dtype for u in model} == {None}
