"""The stage timeline learns each box's micro-batch on the host (pipegnn.microbatch.current), and what it
learns is what the id tensor's value says (what the timeline read from the device before): for the
single engine and GPipe (every checkpoint mode: recomputations included; its partitions in one
torchgpipe worker thread or in two), with the micro-batches in an order other than 0..k-1. That it
reads nothing from the device is counted in tests/test_hostcalls.py."""
from __future__ import annotations

import pytest
import torch
from torchgpipe.checkpoint import is_recomputing

from tests.helpers import build_on, model_keys, random_graph

GAT = dict(name="gat", hidden=4, heads=2, out_heads=1, layers=2, dropout=0.0)
CHUNKS = 8


@pytest.mark.parametrize("engine, checkpoint", [
    ("single", None), ("gpipe", "except_last"), ("gpipe", "always"), ("gpipe", "never"),
    ("gpipe-two-threads", "except_last"), ("gpipe-two-threads", "never")])
def test_box_ids_are_the_id_tensors_values(engine: str, checkpoint: str | None) -> None:
    graph = random_graph(num_nodes=80, num_edges=300)
    group, keys = model_keys(GAT)
    # "cpu" and "cpu:0" are different devices to torchgpipe: a worker thread each
    where = {} if engine == "single" else {"engine.checkpoint": checkpoint, "engine.devices":
                                            ["cpu", "cpu"] if engine == "gpipe" else ["cpu", "cpu:0"]}
    name = "single" if engine == "single" else "gpipe"
    trainee = build_on(graph, ["framework=pyg", *group, f"engine={name}"],
                       {**keys, **where, "chunks": CHUNKS, "microbatch.halo": "exact",
                        "microbatch.targets": "all", "microbatch.partition": "random"})
    runner, ids, plan = trainee.engine, trainee.training.ids, trainee.training.plan
    targets = plan.targets
    if engine == "single":
        stages = [runner.model]
    else:
        units = len(trainee.model)
        assert [len(p) for p in runner.pipe.partitions] == [units // 2, units - units // 2]  # balance=null
        stages = list(runner.pipe.partitions)
    assert runner.timeline is not None  # the default: engine.timeline=true

    # what the id tensor says, read on the host, at every stage call the timeline records
    seen: list[tuple[int, str, int]] = []

    def read_device_id(stage: int, module: torch.nn.Module, args: tuple) -> None:
        if runner.timeline is not None and runner.timeline.recording:
            kind = "recompute" if is_recomputing() else "forward"
            seen.append((stage, kind, int(args[0][-1][0])))

    for s, module in enumerate(stages):
        module.register_forward_pre_hook(lambda mod, args, s=s: read_device_id(s, mod, args))

    order = ids[torch.tensor([3, 0, 7, 5, 1, 6, 2, 4])]  # not the micro-batches' positions
    labels = torch.full((len(targets),), -1)  # sizes add up whatever the order; no label needed
    labels[: len(targets) // 2] = graph.y[plan.targets[: len(targets) // 2]]
    for _ in range(2):
        for step_ids in (ids, order):
            seen.clear()
            runner.train_step(step_ids, labels, len(targets))
            boxes = runner.step_boxes()
            assert boxes
            for s in range(len(stages)):
                for kind in ("forward", "recompute"):  # a stage's calls, in order (boxes by start)
                    recorded = [b.micro_batch for b in boxes if b.stage == s and b.kind == kind]
                    assert recorded == [m for stage, k, m in seen if stage == s and k == kind]
                assert sorted(b.micro_batch for b in boxes if b.stage == s and b.kind == "forward") == \
                    sorted(b.micro_batch for b in boxes if b.stage == s and b.kind == "backward") == \
                    sorted(step_ids.tolist())
            kinds = {kind for _, kind, _ in seen}
            assert ("recompute" in kinds) == (checkpoint in ("except_last", "always"))
