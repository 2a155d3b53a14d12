"""engine=pipelining: torch.distributed.pipelining with one process per stage (gloo on CPU).

Processes are expensive here (each imports torch and PyG), so the runs are few and tiny; workers fork
from a forkserver that is started once per test session (engine.start_method's default).
"""
from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import psutil
import pytest
from omegaconf import OmegaConf
import torch

from pipegnn import run
from pipegnn.engines import per_stage_balance, stage_units

from tests.helpers import ROOT, TINY_SYNTHETIC, gradient_scale, make_cfg


def _run(*overrides: str) -> dict:
    return run(make_cfg("model.dropout=0", *overrides))


def _losses(*overrides: str) -> list[float]:
    record = _run(*overrides)
    assert record["status"] == "completed", (record["error"], record.get("traceback"))
    return [e["train_loss"] for e in record["epochs"]]


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
    single = _run(*common, "engine=single")
    gpipe = _losses(*common, "engine=gpipe")
    piped = _run(*common, "engine=pipelining")
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
    assert len(memory["peak_rss_bytes_per_rank"]) == 2 and all(m > 50e6 for m in memory["peak_rss_bytes_per_rank"])
    assert memory["peak_rss_bytes"] == max(memory["peak_rss_bytes_per_rank"])
    assert piped["workers"]["world_size"] == 2
    assert piped["timing"]["epoch_time_median_s"] > 0


def test_other_schedules_are_transparent() -> None:
    """1F1B (2 processes, 1 stage each) and interleaved 1F1B (2 processes x 2 stages, 4-layer GCN)."""
    single = _losses("chunks=4", "engine=single")
    assert _losses("chunks=4", "engine=pipelining", "engine.schedule=1f1b") == pytest.approx(single, rel=1e-4)
    deep = ("model=gcn", "model.layers=4", "chunks=4")
    assert _losses(*deep, "engine=pipelining", "engine.schedule=interleaved1f1b") == \
        pytest.approx(_losses(*deep, "engine=single"), rel=1e-4)


def test_bf16_pipeline_trains_as_the_single_engine() -> None:
    """train.precision=bf16 across 2 processes: bfloat16 activations and gradients between the ranks
    (the stages' static shapes take the features' dtype), the same losses and accuracies as the single
    engine at bf16."""
    single = _run("chunks=4", "engine=single", "train.precision=bf16")
    piped = _run("chunks=4", "engine=pipelining", "train.precision=bf16")
    assert piped["status"] == "completed", (piped["error"], piped.get("traceback"))
    assert piped["dataset"]["feature_dtype"] == "bfloat16"
    losses = [e["train_loss"] for e in single["epochs"]]
    assert [e["train_loss"] for e in piped["epochs"]] == pytest.approx(losses, rel=1e-3)
    assert losses != [e["train_loss"] for e in _run("chunks=4", "engine=single")["epochs"]]
    for key in ("val_acc", "test_acc"):
        assert [e[key] for e in piped["epochs"]] == [e[key] for e in single["epochs"]]


@pytest.mark.parametrize("key, value, valid", [
    ("schedule", "zigzag", "gpipe, 1f1b, interleaved1f1b"),
    ("launcher", "ssh", "spawn, external"),
    ("start_method", "fork", "forkserver, spawn"),
    ("backend", "mpi", "auto, gloo, nccl"),
])
def test_a_bad_engine_choice_is_refused(key: str, value: str, valid: str) -> None:
    """At composition (Hydra's error), and in a plain config handed to ``run`` (an ``invalid`` record)."""
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException) as info:
        make_cfg("engine=pipelining", f"engine.{key}={value}")
    assert f"Invalid value '{value}', expected one of [{valid}]" in str(info.value.__cause__)
    plain = OmegaConf.to_container(make_cfg("engine=pipelining"), resolve=True)
    plain["engine"][key] = value
    record = run(plain)
    assert record["status"] == "invalid" and record["error"] == f"engine.{key}={value!r} is not valid; valid: {valid}"


@pytest.mark.parametrize("overrides, message", [
    (["engine.balance=[2,1]"], "engine.balance=[2, 1] does not match the model"),
    (["engine.balance=[1,1,1]"], "one positive entry per process (2 processes)"),
    (["engine.balance=[1,2]"], "summing to model.layers=2 (whole layers) or to 4 (units"),
    (["engine.devices=[cpu,cpu,cpu,cpu,cpu]"], "has 5 devices but the model has only 4 units"),
    (["model.layers=1", "engine.schedule=interleaved1f1b"],
     "needs >= 2 units per process, but the units per process are [1, 1]"),
    (["engine.schedule=interleaved1f1b", "model.layers=4", "engine.virtual_stages=1"],
     "needs engine.virtual_stages >= 2"),
    (["engine.schedule=1f1b", "chunks=1"], "schedule=1f1b needs chunks >= the number of processes (2)"),
    (["engine.backend=nccl"], "engine.backend=nccl needs CUDA devices"),
    (["engine.data_parallel=2", "engine.devices=[cpu,cpu,cpu]"],
     "engine.data_parallel=2 pipeline replicas need one process per replica and stage, so "
     "len(engine.devices) must be a multiple of 2"),
    (["engine.data_parallel=2", "engine.devices=[cpu,cpu,cpu,cpu]", "chunks=3"],
     "chunks must be a multiple of 2; got chunks=3"),
    (["engine.data_parallel=2", "engine.devices=[cpu,cpu,cpu,cpu]", "chunks=2", "engine.schedule=1f1b"],
     "schedule=1f1b needs chunks >= the number of processes (2) per pipeline replica, got 1 per replica"),
    (["engine.data_parallel=0"], "engine.data_parallel must be"),
    (["engine.timeout_s=0"], "engine.timeout_s must be a finite number of seconds > 0, got 0"),
    (["engine.timeout_s=inf"], "engine.timeout_s must be a finite number of seconds > 0, got inf"),
    (["engine.timeout_s=nan"], "engine.timeout_s must be a finite number of seconds > 0, got nan"),
    (["engine.memory_limit_gb=nan"], "engine.memory_limit_gb must be a finite number"),
])
def test_invalid_engine_config(tmp_path: Path, overrides: list[str], message: str) -> None:
    record = run(make_cfg("engine=pipelining", *overrides), output_dir=tmp_path)
    assert record["status"] == "invalid", record["error"]
    assert message in record["error"]
    assert "workers" not in record and "launch_s" not in record["timing"]  # no process was started
    assert json.loads((tmp_path / "result.json").read_text())["status"] == "invalid"


def test_pipeline_replicas_train_as_the_single_engine() -> None:
    """engine.data_parallel=2 x 2 stages through run(): the losses and accuracies of the single engine
    (dropout 0), every rank's memory, and a timeline of 4 stages (2 per replica) on 4 lanes."""
    common = ("model.dropout=0", "chunks=4")
    single = _run(*common, "engine=single")
    piped = _run(*common, "engine=pipelining", "engine.data_parallel=2", "engine.devices=[cpu,cpu,cpu,cpu]")
    assert piped["status"] == "completed", (piped["error"], piped.get("traceback"))
    assert [e["train_loss"] for e in piped["epochs"]] == pytest.approx(_losses(*common, "engine=single"), rel=1e-4)
    assert [e["val_acc"] for e in piped["epochs"]] == [e["val_acc"] for e in single["epochs"]]
    p = piped["pipeline"]
    assert (p["replicas"], p["num_stages"], p["num_lanes"], p["lanes"]) == (2, 4, 4, [0, 1, 2, 3])
    assert p["stage_units"][2][0].startswith("replica1:") and len(p["stages"]) == 4
    assert all(s["busy_s"] > 0 for s in p["stages"])
    assert len(piped["memory"]["peak_rss_bytes_per_rank"]) == 4 and piped["workers"]["world_size"] == 4


def test_pipeline_replicas_record_the_staleness_of_their_own_caches() -> None:
    """Historical halos with 2 replicas: each keeps its own caches (its micro-batches' pushes only, the
    other replica's rows refreshed by the evaluation), so the rows pulled are older than with one
    pipeline, and the record says so per replica and stage."""
    common = ("model.dropout=0", "chunks=4", "microbatch.halo=historical", "microbatch.targets=all",
              "engine=pipelining")
    one = _run(*common)
    two = _run(*common, "engine.data_parallel=2", "engine.devices=[cpu,cpu,cpu,cpu]")
    assert two["status"] == "completed", (two["error"], two.get("traceback"))
    stages = two["microbatch"]["history_per_stage"]
    assert [s["caches"] for s in stages] == [0, 1, 0, 1]
    assert all(s["pulled_rows"] > 0 and s["pushed_rows"] > 0 for s in stages[1::2])
    assert two["epochs"][-1]["staleness"] > one["epochs"][-1]["staleness"] > 0


def test_launcher_hands_rank_zero_epochs_to_on_epoch() -> None:
    seen: list[dict] = []
    record = run(make_cfg("engine=pipelining"), on_epoch=seen.append)
    assert record["status"] == "completed", record["error"]
    assert seen == record["epochs"] and [e["epoch"] for e in seen] == [0, 1, 2]


def test_external_launcher_needs_torchrun(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    record = run(make_cfg("engine=pipelining", "engine.launcher=external"))
    assert record["status"] == "invalid" and "needs torchrun's environment" in record["error"]
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29999")
    record = run(make_cfg("engine=pipelining", "engine.launcher=external"))
    assert record["status"] == "invalid"
    assert "torchrun started 3 process(es) but engine.devices=['cpu', 'cpu'] has 2 entries" in record["error"]


def test_failing_worker_fails_the_run(tmp_path: Path) -> None:
    """A worker's exception (here: a learning rate so large that the loss of the second epoch is not
    finite) becomes a failed record with the worker's message and traceback, promptly, and keeps the
    epoch that was trained."""
    record = run(make_cfg("engine=pipelining", "train.lr=1e30"), output_dir=tmp_path)
    assert record["status"] == "failed"
    assert record["error"].startswith("WorkerFailed: pipeline worker rank")
    assert "FloatingPointError: training loss is nan at epoch 1" in record["error"]
    assert "in fit" in record["traceback"]  # the worker's traceback, not the parent's
    assert [e["epoch"] for e in record["epochs"]] == [0]
    assert record["timing"]["total_s"] < 60
    assert json.loads((tmp_path / "result.json").read_text())["status"] == "failed"


def test_worker_invalid_config_is_invalid() -> None:
    """chunks above the number of targets is found in the workers (it needs the graph): invalid."""
    record = run(make_cfg("engine=pipelining", "chunks=31"))
    assert record["status"] == "invalid"
    assert "chunks=31 is larger than the number of training targets (30)" in record["error"]


def test_timeout_terminates_workers() -> None:
    record = run(make_cfg("engine=pipelining", "engine.timeout_s=4", "train.epochs=1000000"))
    assert record["status"] == "failed"
    assert "did not finish within engine.timeout_s=4s" in record["error"], record["error"]
    assert record["timing"]["total_s"] < 4 + 40  # (+ the forkserver's start when this test runs first)


#: The launcher's log line with the workers' pids, in rank order.
_PIDS = re.compile(r"started 2 pipeline workers \(.*\): pids \[(\d+), (\d+)\]")


def _wait_for(log: Path, pattern: str | re.Pattern, timeout: float = 60.0,
              running: Callable[[], bool] = lambda: True) -> re.Match:
    """The first match of ``pattern`` in the log file, polled until ``timeout`` (or until ``running``
    says the run is over)."""
    end = time.monotonic() + timeout
    while True:
        text = log.read_text() if log.is_file() else ""
        match = re.search(pattern, text)
        if match is not None:
            return match
        if time.monotonic() > end or not running():
            raise AssertionError(f"{pattern!r} not in the log within {timeout:g}s:\n{text[-3000:]}")
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _still_alive(pids: list[int], timeout: float) -> list[int]:
    """The processes of ``pids`` still running after waiting up to ``timeout`` for them to end."""
    end = time.monotonic() + timeout
    while [p for p in pids if _alive(p)] and time.monotonic() < end:
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _start_run(tmp_path: Path, *overrides: str) -> tuple[subprocess.Popen, Path]:
    """A pipelining run of many epochs in a process of its own (``python -c``), logging into the
    returned file (its workers too), with its temporary files under ``tmp_path / "tmp"``."""
    log, tmp = tmp_path / "run.log", tmp_path / "tmp"
    tmp.mkdir()
    code = ("import logging, sys; sys.path.insert(0, sys.argv[1]); from tests.helpers import make_cfg; "
            "from pipegnn import run; logging.basicConfig(filename=sys.argv[2], level=logging.INFO); "
            "run(make_cfg('engine=pipelining', 'train.epochs=1000000', *sys.argv[3:]))")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    with open(tmp_path / "console.log", "w") as console:
        proc = subprocess.Popen([sys.executable, "-c", code, str(ROOT), str(log), *overrides],
                                env=env, cwd=tmp_path, stdout=console, stderr=subprocess.STDOUT)
    return proc, log


def test_killing_the_launcher_ends_its_workers(tmp_path: Path) -> None:
    """kill -9 of a run's process during training: its workers (and the forkserver they came from) end
    within seconds, and no temporary folder of the run is left behind."""
    proc, log = _start_run(tmp_path)
    descendants: list[int] = []
    try:
        _wait_for(log, r"\[rank 0\] epoch +1 ", running=lambda: proc.poll() is None)
        descendants = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        assert len(descendants) >= 2  # the workers (and the forkserver and resource tracker)
        proc.kill()
        proc.wait()
        left = _still_alive(descendants, timeout=10.0)
        assert not left, f"still running after their launcher was killed: {left}"
    finally:
        proc.kill()
        _kill(descendants)
    # The first worker to end saw its lifeline close (the other may end first from the lost peer).
    assert re.search(r"pipeline worker rank \d: the launching process exited; stopping", log.read_text())
    assert not list((tmp_path / "tmp").glob("pipegnn-pipeline-*"))


def test_workers_stop_themselves_at_the_deadline(tmp_path: Path) -> None:
    """A launcher that cannot end its workers (stopped, SIGSTOP) at engine.timeout_s: the workers stop
    themselves at that deadline, with a clear error in the log."""
    proc, log = _start_run(tmp_path, "engine.timeout_s=15")
    pids: list[int] = []
    try:
        pids = [int(p) for p in _wait_for(log, _PIDS, running=lambda: proc.poll() is None).groups()]
        os.kill(proc.pid, signal.SIGSTOP)
        left = _still_alive(pids, timeout=15 + 15)
        assert not left, f"still running past the deadline: {left}"
    finally:
        proc.kill()
        proc.wait()
        _kill(pids)
    assert re.search(r"pipeline worker rank \d did not finish within engine.timeout_s=15s of the run's "
                     "start; it stopped itself", log.read_text())


def test_killed_rank_is_named_and_the_trained_epochs_are_kept(tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    """kill -9 of rank 1 during training: the run fails naming rank 1 and the signal (not rank 0, which
    only lost its peer), and the record keeps the epochs rank 0 had finished."""
    caplog.set_level(logging.INFO)  # the workers log at the launcher's level, into its log files
    log = tmp_path / "run.log"
    handler = logging.FileHandler(log)
    root = logging.getLogger()
    root.addHandler(handler)
    out: dict = {}
    # timeout_s bounds the run if the kill never comes (the test then fails at its assertions).
    thread = threading.Thread(target=lambda: out.update(record=run(make_cfg(
        "engine=pipelining", "train.epochs=1000000", "engine.timeout_s=120"))))
    pids: list[int] = []
    try:
        thread.start()
        pids = [int(p) for p in _wait_for(log, _PIDS, running=thread.is_alive).groups()]
        _wait_for(log, r"\[rank 0\] epoch +2 ", running=thread.is_alive)
        os.kill(pids[1], signal.SIGKILL)
        thread.join(60)
        assert not thread.is_alive(), "the run did not end after its rank 1 was killed"
    finally:
        if thread.is_alive():
            _kill(pids)
            thread.join(30)
        root.removeHandler(handler)
        handler.close()
    record = out["record"]
    assert record["status"] == "failed"
    assert "pipeline worker rank 1 was killed by SIGKILL (exit code -9)" in record["error"], record["error"]
    epochs = [e["epoch"] for e in record["epochs"]]
    assert len(epochs) >= 3 and epochs == list(range(len(epochs)))
    assert all(0 <= e["train_acc"] <= 1 and "pipeline" in e for e in record["epochs"])
    assert not _still_alive(pids, timeout=10.0)


def test_external_launcher_under_torchrun(tmp_path: Path) -> None:
    """torchrun starts both ranks; only rank 0 writes result.json."""
    torchrun = Path(sys.executable).with_name("torchrun")
    out = tmp_path / "run"
    env = {**os.environ, "PIPEGNN_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([str(torchrun), "--standalone", "--nproc-per-node", "2",
                           str(ROOT / "experiments" / "train.py"), *TINY_SYNTHETIC, "train.epochs=2",
                           "engine=pipelining", "engine.launcher=external", f"hydra.run.dir={out}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = list(tmp_path.rglob("result.json"))
    assert records == [out / "result.json"]
    record = json.loads(records[0].read_text())
    assert record["status"] == "completed"
    assert [e["epoch"] for e in record["epochs"]] == [0, 1]
    assert record["config"]["engine"]["launcher"] == "external"
    assert len(record["memory"]["peak_rss_bytes_per_rank"]) == 2
    assert "[rank 0] epoch   1  loss" in (out / "train.log").read_text()
    # The same pipeline under the spawn launcher trains the same model.
    spawned = run(make_cfg("train.epochs=2", "engine=pipelining"))
    assert [e["train_loss"] for e in record["epochs"]] == \
        pytest.approx([e["train_loss"] for e in spawned["epochs"]], rel=1e-6)


def _float64_rank(rank: int, world: int, port: int, framework: str) -> tuple:
    """A spawned test rank's setup: float64 default, one thread, the gloo group, and the float64 random
    graph with ``framework``'s adapter."""
    import torch.distributed as dist

    from pipegnn.backends import get_backend

    from tests.helpers import random_graph

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    graph = random_graph()
    graph.x = graph.x.double()
    return graph, get_backend(framework)


def _data_parallel_worker(rank: int, world: int, port: int, framework: str, out: str) -> None:
    """One of 4 ranks: 2 replicas x 2 stages of a float64 pipeline (exact halos, k=4: 2 micro-batches per
    replica) for GAT and GCN, GPipe and 1F1B; after one step every rank's gradients, and the logits of a
    prediction, gathered on rank 0 beside the single engine's."""
    import torch.distributed as dist

    from pipegnn.engines import PipeliningEngine, SingleEngine
    from pipegnn.microbatch import ComputationGraph, PlanSpec, build_plan
    from pipegnn.models import build_model

    graph, backend = _float64_rank(rank, world, port, framework)
    cases = {}
    for cfg in (dict(name="gat", hidden=4, heads=3, out_heads=2, layers=2, dropout=0.0),
                dict(name="gcn", hidden=8, layers=2, dropout=0.0)):
        edge_index, weight = backend.computation_graph(cfg["name"], graph.edge_index, graph.num_nodes,
                                                       torch.float64)
        plan = build_plan(ComputationGraph(edge_index, graph.num_nodes, weight), graph.split("train"),
                          PlanSpec(4, 2, halo="exact"))
        labels, n = graph.y[plan.targets], plan.targets.numel()
        for schedule, per_stage in (("gpipe", [2, 2]), ("1f1b", [1, 3])):
            results = []
            for engine in ("single", "pipelining"):
                torch.manual_seed(0)
                model = build_model(cfg, backend, graph.x, graph.num_classes)
                names = {id(p): name for name, p in model.named_parameters()}
                ids = model.attach(plan)
                run = (SingleEngine(model, torch.device("cpu"), 4) if engine == "single" else
                       PipeliningEngine(model, torch.device("cpu"), 4, schedule, per_stage, data_parallel=2))
                loss = run.train_step(ids, labels, n)
                mine = {names[id(p)]: p.grad for p in model.parameters()}
                everyone: list = [None] * world
                dist.all_gather_object(everyone, mine)
                replicas = [{k: v for d in everyone[r:r + 2] for k, v in d.items()} for r in (0, 2)]
                model.eval()
                results.append({"loss": loss, "logits": run.predict(ids), "replicas": replicas})
            cases[cfg["name"], schedule] = results
    if rank == 0:
        torch.save(cases, out)
    dist.destroy_process_group()


@pytest.mark.parametrize("framework", ["pyg", "dgl"])
def test_two_replicas_of_two_stages_equal_the_single_engine_in_float64(tmp_path: Path, framework: str) -> None:
    """engine.data_parallel=2 over 4 processes (2 pipeline replicas x 2 stages, each replica 2 of the 4
    micro-batches): after one step the loss, every parameter's gradient on both replicas (summed over
    them) and the predicted logits (gathered in micro-batch order) equal the single engine's (float64,
    1e-9), GPipe and 1F1B, GAT and GCN."""
    import torch.multiprocessing as mp

    out = tmp_path / "dp.pt"
    mp.start_processes(_data_parallel_worker, args=(4, _free_port(), framework, str(out)), nprocs=4,
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_torchrun_agents_as_two_nodes(tmp_path: Path) -> None:
    """Two torchrun agents that find each other as two nodes would (c10d rendezvous, --nnodes 2, one
    process each: the README's multi-node command, hosts aside): one pipeline of 2 ranks whose rank 0
    writes the only record, and whose losses equal the spawn launcher's on the same configuration."""
    torchrun = Path(sys.executable).with_name("torchrun")
    endpoint = f"127.0.0.1:{_free_port()}"
    env = {**os.environ, "PIPEGNN_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    agents = []
    for node in range(2):  # each node has its own output folder, as on two hosts
        command = [str(torchrun), "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                   "--rdzv-endpoint", endpoint, "--rdzv-id", "pipegnn-test",
                   str(ROOT / "experiments" / "train.py"), *TINY_SYNTHETIC, "train.epochs=2",
                   "engine=pipelining", "engine.launcher=external", "engine.devices=[cpu,cpu]",
                   f"hydra.run.dir={tmp_path / f'node{node}'}"]
        agents.append(subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.PIPE, text=True))
    try:
        errors = [agent.communicate(timeout=240)[1] for agent in agents]
    finally:
        for agent in agents:
            agent.kill()
    assert [a.returncode for a in agents] == [0, 0], "\n".join(e[-2000:] for e in errors)
    records = list(tmp_path.rglob("result.json"))
    assert len(records) == 1 and records[0].parent.name in ("node0", "node1")
    record = json.loads(records[0].read_text())
    assert record["status"] == "completed" and len(record["memory"]["peak_rss_bytes_per_rank"]) == 2
    spawned = run(make_cfg("train.epochs=2", "engine=pipelining"))
    assert [e["train_loss"] for e in record["epochs"]] == \
        pytest.approx([e["train_loss"] for e in spawned["epochs"]], rel=1e-6)


@pytest.mark.slow
def test_spawn_start_method() -> None:
    """Fresh interpreters (engine.start_method=spawn) instead of the forkserver."""
    assert _losses("engine=pipelining", "engine.start_method=spawn") == \
        pytest.approx(_losses("engine=single"), rel=1e-4)


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
        setattr(TimedStage, name, recorded(getattr(TimedStage, name), lambda args, ops: [op.tensor for op in ops]))
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

    from pipegnn.engines import PipeliningEngine, SingleEngine
    from pipegnn.microbatch import ComputationGraph, PlanSpec, build_plan
    from pipegnn.models import build_model

    graph, backend = _float64_rank(rank, world, port, framework)
    traffic = _record_traffic()
    cases = {}
    deep = dict(hidden=8, layers=8, dropout=0.0)
    for kind, cfg, splits in (
            ("gat", dict(name="gat", hidden=4, heads=3, out_heads=2, layers=2, dropout=0.0), SPLITS),
            ("gcn", dict(name="gcn", hidden=8, layers=2, dropout=0.0), SPLITS),
            # 18 units: the input Linear, 8 layers, the output Linear; the boundary after transform3 sends
            # x0 and the rows; the residual GCN's sends the rows and their skip.
            ("gcn2", dict(name="gcn2", alpha=0.1, theta=0.5, **deep), (("gpipe", 4, [8, 10]), ("1f1b", 4, [11, 7]))),
            ("residual", dict(name="gcn", residual=True, **deep), (("gpipe", 4, [7, 9]), ("1f1b", 4, [10, 6])))):
        edge_index, weight = backend.computation_graph(cfg["name"], graph.edge_index, graph.num_nodes,
                                                       torch.float64)
        for halo in ("exact", "historical"):
            for schedule, chunks, per_stage in splits:
                if halo == "historical" and kind in ("gat", "gcn") and chunks == 1:
                    continue
                plans = [build_plan(ComputationGraph(edge_index, graph.num_nodes, weight), t,
                                    PlanSpec(chunks, cfg["layers"], halo=halo))
                         for t in (graph.split("train"), graph.split("all"))]
                labels, n = graph.y[plans[0].targets], plans[0].targets.numel()
                grads = []
                for engine in ("single", "pipelining"):
                    torch.manual_seed(0)
                    model = build_model(cfg, backend, graph.x, graph.num_classes, history=halo == "historical")
                    names = {id(p): name for name, p in model.named_parameters()}
                    ids, all_ids = (model.attach(p) for p in plans)
                    run = (SingleEngine(model, torch.device("cpu"), chunks) if engine == "single" else
                           PipeliningEngine(model, torch.device("cpu"), chunks, schedule, per_stage))
                    if halo == "historical":  # fill the caches stage by stage, then train on stale rows
                        run.refresh(model, all_ids)
                    run.train_step(ids, labels, n)
                    mine = {names[id(p)]: p.grad for p in model.parameters()}
                    if halo == "historical":  # the refreshed logits, on every rank
                        mine["logits"] = run.refresh(model, all_ids)
                    everyone: list = [None] * world
                    dist.all_gather_object(everyone, mine)
                    grads.append({k: v for d in everyone for k, v in d.items()})
                cases[kind, halo, schedule, chunks] = grads
    sent: list = [None] * world
    dist.all_gather_object(sent, sorted(set(traffic)) + [len(traffic)])
    if rank == 0:
        torch.save({"cases": cases, "traffic": sent}, out)
    dist.destroy_process_group()


@pytest.mark.parametrize("framework", ["pyg", "dgl"])
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
