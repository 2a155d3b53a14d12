"""A training step waits for the device once (its loss), whatever the micro-batches and the depth: no
unit, and not the stage timeline either, reads a device value on the host (counted on the CPU with
torch.profiler, on every thread: pipegnn.hostcalls). Counted for every engine that runs in one process
(single; gpipe, its partitions in one worker thread or, on two devices, in two), in the default
configuration (engine.timeline=true) and with the timeline off."""
from __future__ import annotations

import threading

import pytest
import torch

from pipegnn.hostcalls import HOST_READ, HostCalls, count_calls, read_on_host

from tests.helpers import build_on, model_keys, random_graph

MODELS = {
    "gat 2": dict(name="gat", hidden=4, heads=2, out_heads=1, layers=2, dropout=0.0),
    "gcn2 2": dict(name="gcn2", hidden=8, layers=2, alpha=0.1, theta=0.5, dropout=0.0),
    "gcn2 16": dict(name="gcn2", hidden=8, layers=16, alpha=0.1, theta=0.5, dropout=0.0),
}


#: GPipe's partitions on one device (one torchgpipe worker thread) or on two (two threads: "cpu" and
#: "cpu:0" are different devices to torchgpipe)
GPIPE_DEVICES = {"gpipe": ["cpu", "cpu"], "gpipe-two-threads": ["cpu", "cpu:0"]}


def step_calls(model_cfg: dict, halo: str, chunks: int, engine: str,
               timeline: bool = True) -> tuple[HostCalls, HostCalls | None]:
    """Calls of the third training step (the first two warm up: structures, caches' first checks) and,
    with history caches, of reading their traffic; each step's timeline is read after it, as training
    does (outside the step: after its closing synchronisation)."""
    graph = random_graph(num_nodes=80, num_edges=300)
    group, keys = model_keys(model_cfg)
    where = {} if engine == "single" else {"engine.devices": GPIPE_DEVICES[engine]}
    name = "single" if engine == "single" else "gpipe"
    trainee = build_on(graph, ["framework=pyg", *group, f"engine={name}"],
                       {**keys, **where, "chunks": chunks, "microbatch.halo": halo,
                        "microbatch.targets": "all", "microbatch.partition": "random",
                        "engine.timeline": timeline})
    model, runner, ids = trainee.model, trainee.engine, trainee.training.ids
    if engine != "single":
        units = len(model)
        assert [len(p) for p in runner.pipe.partitions] == [units // 2, units - units // 2]  # balance=null
    assert (runner.timeline is not None) == timeline
    labels, labelled = trainee.train_labels()
    if halo == "historical":
        runner.refresh(model, ids)  # fills the caches
    for _ in range(2):
        model.tick()
        runner.train_step(ids, labels, labelled)
        runner.step_boxes()
    model.tick()
    step = count_calls(lambda: runner.train_step(ids, labels, labelled))
    if timeline:
        assert runner.step_boxes(), "the timeline recorded the counted step"
    traffic = count_calls(lambda: runner.history_traffic(model)) if halo == "historical" else None
    return step, traffic


# historical GPipe with a second thread and the timeline on stays in make test; its three other variants
# (4-5 s each) run in make test-all
_SLOW = pytest.mark.slow


@pytest.mark.parametrize("halo, engine, timeline", [
    pytest.param(halo, engine, timeline, id=f"{halo}-{engine}-{'timeline' if timeline else 'no-timeline'}",
                 marks=_SLOW if halo == "historical" and engine.startswith("gpipe")
                 and (engine, timeline) != ("gpipe-two-threads", True) else ())
    for halo in ("exact", "historical") for engine in ("single", *GPIPE_DEVICES)
    for timeline in (True, False)])
def test_one_wait_per_step_at_any_k_and_depth(engine: str, halo: str, timeline: bool) -> None:
    for name, cfg in MODELS.items():
        if name == "gcn2 16" and halo == "exact":
            continue  # exact 16-hop halos are the whole graph: the same code as 2 layers, slower
        for chunks in (1, 8):
            step, traffic = step_calls(cfg, halo, chunks, engine, timeline)
            assert step.syncs == 1, (name, chunks, {k: v for k, v in step.ops.items() if "scalar" in k})
            assert step.ops.get("aten::_local_scalar_dense") == 1  # the loss, read by train_step
            if traffic is not None:  # every cache's ages at once
                assert traffic.syncs == 1 and traffic.ops[HOST_READ] == 1, (name, chunks)


def test_counts_see_waits() -> None:
    """The proxy counts what it claims: item(), boolean masks, and pipegnn's labelled reads."""
    x = torch.arange(10.0)
    calls = count_calls(lambda: (x.sum().item(), x[x > 3], read_on_host(x)))
    assert calls.syncs == 3
    assert calls.aten > calls.syncs
    assert count_calls(lambda: x * 2).syncs == 0


def test_counts_see_other_threads() -> None:
    """torchgpipe computes its partitions' forward in worker threads: their waits count too."""
    x = torch.arange(10.0)

    def work() -> None:
        worker = threading.Thread(target=lambda: x.sum().item())
        worker.start()
        worker.join()

    assert count_calls(work).syncs == 1
