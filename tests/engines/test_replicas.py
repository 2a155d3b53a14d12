"""engine.data_parallel: pipeline replicas (pipegnn.engines.replicas), each a pipeline of its own over
its share of a step's micro-batches, their gradients all-reduced: they train as the single engine does,
through ``run`` and after one step in float64."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers import (
    build_on,
    float64_rank,
    free_port,
    gradient_scale,
    losses_no_dropout,
    model_keys,
    named_gradients,
    run_no_dropout,
)


def test_pipeline_replicas_train_as_the_single_engine() -> None:
    """engine.data_parallel=2 x 2 stages through run(): the losses and accuracies of the single engine
    (dropout 0), every rank's memory, and a timeline of 4 stages (2 per replica) on 4 lanes."""
    common = ("model.dropout=0", "chunks=4")
    single = run_no_dropout(*common, "engine=single")
    piped = run_no_dropout(*common, "engine=pipelining", "engine.data_parallel=2",
                           "engine.devices=[cpu,cpu,cpu,cpu]")
    assert piped["status"] == "completed", (piped["error"], piped.get("traceback"))
    assert [e["train_loss"] for e in piped["epochs"]] == \
        pytest.approx(losses_no_dropout(*common, "engine=single"), rel=1e-4)
    assert [e["val_acc"] for e in piped["epochs"]] == [e["val_acc"] for e in single["epochs"]]
    p = piped["pipeline"]
    assert (p["replicas"], p["num_stages"], p["num_lanes"], p["lanes"]) == (2, 4, 4, [0, 1, 2, 3])
    assert p["stage_units"][2][0].startswith("replica1:") and len(p["stages"]) == 4
    assert all(s["busy_s"] > 0 for s in p["stages"])
    assert len(piped["memory"]["peak_rss_bytes_per_rank"]) == 4 and piped["workers"]["world_size"] == 4


def _data_parallel_worker(rank: int, world: int, port: int, framework: str, out: str) -> None:
    """One of 4 ranks: 2 replicas x 2 stages of a float64 pipeline (exact halos, k=4: 2 micro-batches per
    replica) for GAT and GCN, GPipe and 1F1B; after one step every rank's gradients, and the logits of a
    prediction, gathered on rank 0 beside the single engine's. Both engines' pieces come from
    ``pipegnn.build`` (the pipeline's: this rank's stage)."""
    import torch.distributed as dist

    graph, _ = float64_rank(rank, world, port, framework)
    cases = {}
    for cfg in (dict(name="gat", hidden=4, heads=3, out_heads=2, layers=2, dropout=0.0),
                dict(name="gcn", hidden=8, layers=2, dropout=0.0)):
        group, values = model_keys(cfg)
        for schedule, per_stage in (("gpipe", [2, 2]), ("1f1b", [1, 3])):
            results = []
            for engine in ("single", "pipelining"):
                where = {} if engine == "single" else {
                    "engine.schedule": schedule, "engine.balance": per_stage, "engine.data_parallel": 2,
                    "engine.devices": ["cpu"] * 4}
                trainee = build_on(graph, [f"framework={framework}", *group, f"engine={engine}"],
                                   {**values, **where, "chunks": 4, "microbatch.halo": "exact",
                                    "microbatch.partition": "metis", "microbatch.targets": "train"})
                model, run, ids = trainee.model, trainee.engine, trainee.training.ids
                loss = run.train_step(ids, *trainee.train_labels())
                mine = named_gradients(trainee)
                everyone: list = [None] * world
                dist.all_gather_object(everyone, mine)
                replicas = [{k: v for d in everyone[r:r + 2] for k, v in d.items()} for r in (0, 2)]
                model.eval()
                results.append({"loss": loss, "logits": run.predict(ids), "replicas": replicas})
            cases[cfg["name"], schedule] = results
    if rank == 0:
        torch.save(cases, out)
    dist.destroy_process_group()


@pytest.mark.parametrize("framework", ["pyg", pytest.param("dgl", marks=pytest.mark.slow)])  # dgl: test-all
def test_two_replicas_of_two_stages_equal_the_single_engine_in_float64(tmp_path: Path,
                                                                       framework: str) -> None:
    """engine.data_parallel=2 over 4 processes (2 pipeline replicas x 2 stages, each replica 2 of the 4
    micro-batches): after one step the loss, every parameter's gradient on both replicas (summed over
    them) and the predicted logits (gathered in micro-batch order) equal the single engine's (float64,
    1e-9), GPipe and 1F1B, GAT and GCN."""
    import torch.multiprocessing as mp

    out = tmp_path / "dp.pt"
    mp.start_processes(_data_parallel_worker, args=(4, free_port(), framework, str(out)), nprocs=4,
                       start_method="spawn")
    cases = torch.load(out, weights_only=True)
    assert sorted(cases) == [("gat", "1f1b"), ("gat", "gpipe"), ("gcn", "1f1b"), ("gcn", "gpipe")]
    for case, (single, piped) in cases.items():
        assert piped["loss"] == pytest.approx(single["loss"], rel=1e-12), case
        torch.testing.assert_close(piped["logits"], single["logits"], rtol=1e-9, atol=1e-12)
        expected = single["replicas"][0]
        assert len(expected) >= 4, case
        scale = gradient_scale(expected.values())
        for replica in piped["replicas"]:
            assert sorted(replica) == sorted(expected), case
            for name, grad in expected.items():
                assert grad.dtype == torch.float64 and grad.abs().sum() > 0, (case, name)
                torch.testing.assert_close(replica[name], grad, rtol=1e-9, atol=1e-9 * scale,
                                           msg=f"{case} {name}")
