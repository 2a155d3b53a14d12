"""engine=pipelining: torch.distributed.pipelining with one process per stage (gloo on CPU) trains as the
single engine does: the same losses and accuracies through ``run``, and after one step (float64, spawned
ranks) the same gradients, stage boundaries inside layers and historical halos included.

Processes are expensive here (each imports torch and PyG), so the runs are few and tiny; workers fork
from a forkserver that is started once per test session (engine.start_method's default).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest
import torch

from pipegnn.engines import per_stage_balance, stage_units

from tests.helpers import (
    build_on,
    float64_rank,
    gradient_scale,
    losses_no_dropout,
    model_keys,
    named_gradients,
    run_no_dropout,
)


def test_stage_units() -> None:
    """Units per stage in stage order; stage s runs on rank s % ranks."""
    assert stage_units(per_stage_balance([2, 2])) == [range(0, 2), range(2, 4)]
    assert stage_units(per_stage_balance([1, 4])) == [range(0, 1), range(1, 5)]
    # interleaved: rank 0 holds stages 0 and 2, rank 1 stages 1 and 3
    assert per_stage_balance([2, 2], per_rank=2) == [1, 1, 1, 1]
    assert stage_units(per_stage_balance([4, 2], per_rank=2)) == [range(0, 2), range(2, 3), range(3, 5),
                                                                  range(5, 6)]


@pytest.mark.parametrize("model, chunks", [("gat", 1), ("gat", 4), ("gcn", 1), ("gcn", 4)])
def test_training_is_transparent(model: str, chunks: int) -> None:
    """Dropout 0, same seed: single, gpipe and a 2-process pipeline (gloo, GPipe schedule) train the same
    model: per-epoch losses agree, and so do the accuracies (logits broadcast to every rank)."""
    common = (f"model={model}", f"chunks={chunks}")
    single = run_no_dropout(*common, "engine=single")
    gpipe = losses_no_dropout(*common, "engine=gpipe")
    piped = run_no_dropout(*common, "engine=pipelining")
    assert piped["status"] == "completed", (piped["error"], piped.get("traceback"))
    losses = [e["train_loss"] for e in single["epochs"]]
    assert len(losses) == 3 and losses[0] != losses[-1]
    assert gpipe == pytest.approx(losses, rel=1e-4)
    assert [e["train_loss"] for e in piped["epochs"]] == pytest.approx(losses, rel=1e-4)
    for key in ("train_acc", "val_acc", "test_acc"):
        assert [e[key] for e in piped["epochs"]] == [e[key] for e in single["epochs"]]
    # the parent's record holds rank 0's training record and every rank's memory
    assert piped["microbatch"]["chunks"] == chunks and piped["dataset"]["num_nodes"] == 400
    assert piped["model"]["parameters"] == single["model"]["parameters"]
    memory = piped["memory"]
    assert len(memory["peak_rss_bytes_per_rank"]) == 2
    assert all(m > 50e6 for m in memory["peak_rss_bytes_per_rank"])
    assert memory["peak_rss_bytes"] == max(memory["peak_rss_bytes_per_rank"])
    assert piped["workers"]["world_size"] == 2
    assert piped["timing"]["epoch_time_median_s"] > 0


def test_sampled_halos_draw_the_same_on_every_engine() -> None:
    """Sampled halos (fan-outs [3,3], drawn anew every epoch): single, gpipe and a 2-process pipeline
    draw the same blocks each epoch (every rank its own, from the same seed) and train the same model:
    the per-epoch losses and sampled edges agree, and the draws change from epoch to epoch. The pipeline
    evaluates layer-wise (microbatch.evaluation=layerwise: stage by stage over every node, its ranks'
    caches beside micro-batches redrawn every epoch), the single engine with exact micro-batches: the
    same validation losses and accuracies."""
    common = ("model=gcn", "chunks=4", "microbatch.halo=sampled", "microbatch.fanouts=[3,3]")
    single = run_no_dropout(*common, "engine=single")
    gpipe = run_no_dropout(*common, "engine=gpipe")
    piped = run_no_dropout(*common, "engine=pipelining", "microbatch.evaluation=layerwise")
    assert piped["status"] == "completed", (piped["error"], piped.get("traceback"))
    edges = [e["sampled_edges"] for e in single["epochs"]]
    assert len(set(edges)) > 1  # a new draw every epoch
    losses = [e["train_loss"] for e in single["epochs"]]
    for other in (gpipe, piped):
        assert [e["sampled_edges"] for e in other["epochs"]] == edges
        assert [e["train_loss"] for e in other["epochs"]] == pytest.approx(losses, rel=1e-4)
    val_losses = [e["val_loss"] for e in single["epochs"]]
    assert [e["val_loss"] for e in piped["epochs"]] == pytest.approx(val_losses, rel=1e-4)
    for key in ("val_acc", "test_acc"):
        assert [e[key] for e in piped["epochs"]] == [e[key] for e in single["epochs"]]
    assert single["microbatch"]["fanouts"] == [3, 3] and single["microbatch"]["eval_halo"] == "exact"
    evaluation = piped["microbatch"]["evaluation"], piped["microbatch"]["eval_halo"]
    assert evaluation == ("layerwise", "historical")


def test_other_schedules_are_transparent() -> None:
    """1F1B (2 processes, 1 stage each) and interleaved 1F1B (2 processes x 2 stages, 4-layer GCN)."""
    single = losses_no_dropout("chunks=4", "engine=single")
    assert losses_no_dropout("chunks=4", "engine=pipelining", "engine.schedule=1f1b") == \
        pytest.approx(single, rel=1e-4)
    deep = ("model=gcn", "model.layers=4", "chunks=4")
    assert losses_no_dropout(*deep, "engine=pipelining", "engine.schedule=interleaved1f1b") == \
        pytest.approx(losses_no_dropout(*deep, "engine=single"), rel=1e-4)


def test_bf16_pipeline_trains_as_the_single_engine() -> None:
    """train.precision=bf16 across 2 processes: bfloat16 activations and gradients between the ranks
    (the stages' static shapes take the features' dtype), the same losses and accuracies as the single
    engine at bf16."""
    single = run_no_dropout("chunks=4", "engine=single", "train.precision=bf16")
    piped = run_no_dropout("chunks=4", "engine=pipelining", "train.precision=bf16")
    assert piped["status"] == "completed", (piped["error"], piped.get("traceback"))
    assert piped["dataset"]["feature_dtype"] == "bfloat16"
    losses = [e["train_loss"] for e in single["epochs"]]
    assert [e["train_loss"] for e in piped["epochs"]] == pytest.approx(losses, rel=1e-3)
    assert losses != [e["train_loss"] for e in run_no_dropout("chunks=4", "engine=single")["epochs"]]
    for key in ("val_acc", "test_acc"):
        assert [e[key] for e in piped["epochs"]] == [e[key] for e in single["epochs"]]


SPLITS = (("gpipe", 1, [2, 2]), ("gpipe", 4, [1, 3]), ("1f1b", 4, [3, 1]))


def _record_traffic() -> list[str]:
    """From now on, the dtype of every tensor this process's pipeline stages send or receive (the P2P
    operations of activations and gradients the schedules ask the stages for; torch's own warm-up
    messages aside) and of the stage-by-stage refresh's send/recv."""
    import torch.distributed as dist

    from pipegnn.engines import PipeliningEngine
    from pipegnn.engines.stages import TimedStage

    seen: list[str] = []
    refreshing = [False]

    def refresh(self, *args, _refresh=PipeliningEngine.refresh, **kwargs):  # noqa: ANN001, ANN202
        refreshing[0] = True
        try:
            return _refresh(self, *args, **kwargs)
        finally:
            refreshing[0] = False

    def recorded(call: Callable, tensors: Callable) -> Callable:
        def wrapper(*args, **kwargs):  # noqa: ANN202
            out = call(*args, **kwargs)
            seen.extend(str(t.dtype) for t in tensors(args, out))
            return out
        return wrapper

    for name in ("get_fwd_send_ops", "get_bwd_send_ops", "get_fwd_recv_ops", "get_bwd_recv_ops"):
        setattr(TimedStage, name, recorded(getattr(TimedStage, name),
                                           lambda args, ops: [op.tensor for op in ops]))
    PipeliningEngine.refresh = refresh
    dist.send = recorded(dist.send, lambda args, out: args[:1] if refreshing[0] else [])
    dist.recv = recorded(dist.recv, lambda args, out: args[:1] if refreshing[0] else [])
    return seen


def _gradient_worker(rank: int, world: int, port: int, framework: str, out: str) -> None:
    """One rank of a float64 pipeline on the random graph: for several models (8-layer GCNII and residual
    GCN among them), schedules, chunk counts, stage boundaries (inside layers too) and halos (exact and
    historical), the gradients of one step, gathered on rank 0 next to the single engine's; historical
    also the logits of the stage-by-stage refresh."""
    import torch.distributed as dist

    graph, _ = float64_rank(rank, world, port, framework)
    traffic = _record_traffic()
    cases = {}
    deep = dict(hidden=8, layers=8, dropout=0.0)
    for kind, cfg, splits in (
            ("gat", dict(name="gat", hidden=4, heads=3, out_heads=2, layers=2, dropout=0.0), SPLITS),
            ("gcn", dict(name="gcn", hidden=8, layers=2, dropout=0.0), SPLITS),
            # 18 units: the input Linear, 8 layers, the output Linear; the boundary after transform3 sends
            # x0 and the rows; the residual GCN's sends the rows and their skip.
            ("gcn2", dict(name="gcn2", alpha=0.1, theta=0.5, **deep),
             (("gpipe", 4, [8, 10]), ("1f1b", 4, [11, 7]))),
            ("residual", dict(name="gcn", residual=True, **deep),
             (("gpipe", 4, [7, 9]), ("1f1b", 4, [10, 6])))):
        group, values = model_keys(cfg)
        for halo in ("exact", "historical"):
            for schedule, chunks, per_stage in splits:
                if halo == "historical" and kind in ("gat", "gcn") and chunks == 1:
                    continue
                grads = []
                for engine in ("single", "pipelining"):
                    where = {} if engine == "single" else {
                        "engine.schedule": schedule, "engine.balance": per_stage,
                        "engine.devices": ["cpu"] * 2}
                    # the training targets, and (historical) every node evaluated: the caches' refresh
                    trainee = build_on(graph, [f"framework={framework}", *group, f"engine={engine}"],
                                       {**values, **where, "chunks": chunks, "microbatch.halo": halo,
                                        "microbatch.partition": "metis", "microbatch.targets": "train"})
                    model, run = trainee.model, trainee.engine
                    if halo == "historical":  # fill the caches stage by stage, then train on stale rows
                        run.refresh(model, trainee.evaluation.ids)
                    run.train_step(trainee.training.ids, *trainee.train_labels())
                    mine: dict = named_gradients(trainee)
                    if halo == "historical":  # the refreshed logits, on every rank
                        mine["logits"] = run.refresh(model, trainee.evaluation.ids)
                    everyone: list = [None] * world
                    dist.all_gather_object(everyone, mine)
                    grads.append({k: v for d in everyone for k, v in d.items()})
                cases[kind, halo, schedule, chunks] = grads
    sent: list = [None] * world
    dist.all_gather_object(sent, sorted(set(traffic)) + [len(traffic)])
    if rank == 0:
        torch.save({"cases": cases, "traffic": sent}, out)
    dist.destroy_process_group()


@pytest.mark.parametrize("framework", ["pyg", pytest.param("dgl", marks=pytest.mark.slow)])  # dgl: test-all
def test_pipelining_gradients_equal_the_single_engine_in_float64(tmp_path: Path, framework: str) -> None:
    """2 processes, GPipe and 1F1B schedules, k in {1, 4}, boundaries between layers and inside them
    (inside GCNII's and a residual stack's chain at depth 8): after one step every parameter's gradient
    equals the single engine's (float64, 1e-9), so no gradient is scaled by the number of micro-batches
    and none is lost at a boundary (x0's and a skip's included). Historical halos: the pipeline's
    stage-by-stage refresh fills the same caches as the single engine's layer-wise one, its step reads
    the same stale rows (same micro-batch order), and gradients and refreshed logits agree. Every tensor
    either rank sent or received point to point is float64 (no micro-batch ids cross a boundary: torch
    2.11's PipelineStage cannot receive integer tensors)."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "grads.pt"
    mp.start_processes(_gradient_worker, args=(2, port, framework, str(out)), nprocs=2, start_method="spawn")
    saved = torch.load(out, weights_only=True)
    cases = saved["cases"]
    for rank, (*dtypes, count) in enumerate(saved["traffic"]):
        assert dtypes == ["torch.float64"] and count > 100, (rank, dtypes, count)
    assert len(cases) == 6 + 4 + 4 + 4  # gat and gcn x 3 splits x exact, 2 with historical; deep 2 x 2
    for case, (single, piped) in cases.items():
        assert sorted(single) == sorted(piped) and len(single) >= 4, case
        scale = gradient_scale(g for name, g in single.items() if name != "logits")
        for name, expected in single.items():
            assert expected.dtype == torch.float64 and expected.abs().sum() > 0, (case, name)
            tolerance = expected.abs().max().item() if name == "logits" else scale
            torch.testing.assert_close(piped[name], expected, rtol=1e-9, atol=1e-9 * tolerance,
                                       msg=f"{case} {name}")
