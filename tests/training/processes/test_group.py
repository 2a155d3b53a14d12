"""engine.launcher=external: the processes started by torchrun join the run's process group from its
environment (pipegnn.training.processes.group); one torchrun, or two agents as two nodes, train as the
spawn launcher does, and only rank 0 writes the record."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipegnn import run
from pipegnn.runs.claims import RUN_FILE

from tests.helpers import ROOT, TINY_SYNTHETIC, free_port, make_cfg


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


def test_external_launcher_under_torchrun(tmp_path: Path) -> None:
    """torchrun starts both ranks; only rank 0 writes result.json. Its timestamped folder is another run's
    (its claim and a rank-1 checkpoint there), so rank 0 moves to ``<dir>-2``, and rank 1 keeps its
    checkpoints beside rank 0's (it wrote them into the other run's folder, over its checkpoint)."""
    torchrun = Path(sys.executable).with_name("torchrun")
    taken = tmp_path / "run"  # ${now:run} is "run" at any time: a timestamped folder that cannot roll over
    taken.mkdir()
    (taken / RUN_FILE).write_text(json.dumps({"overrides": ["train.seed=5"], "pid": 1, "host": "elsewhere"}))
    (taken / "checkpoint-rank1.pt").write_bytes(b"the other run's")
    env = {**os.environ, "PIPEGNN_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([str(torchrun), "--standalone", "--nproc-per-node", "2",
                           str(ROOT / "experiments" / "train.py"), *TINY_SYNTHETIC, "train.epochs=2",
                           "engine=pipelining", "engine.launcher=external", "train.checkpoint_every=1",
                           f"hydra.run.dir={tmp_path}/${{now:run}}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "run-2"
    records = list(tmp_path.rglob("result.json"))
    assert records == [out / "result.json"]
    assert sorted(p.name for p in out.glob("checkpoint-rank?.pt")) == ["checkpoint-rank0.pt",
                                                                         "checkpoint-rank1.pt"]
    assert sorted(p.name for p in taken.iterdir()) == [RUN_FILE, "checkpoint-rank1.pt"]
    assert (taken / "checkpoint-rank1.pt").read_bytes() == b"the other run's"
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


@pytest.mark.slow  # make test-all; one torchrun of two ranks stays in make test
def test_two_torchrun_agents_as_two_nodes(tmp_path: Path) -> None:
    """Two torchrun agents that find each other as two nodes would (c10d rendezvous, --nnodes 2, one
    process each: the README's multi-node command, hosts aside): one pipeline of 2 ranks whose rank 0
    writes the only record, and whose losses equal the spawn launcher's on the same configuration."""
    torchrun = Path(sys.executable).with_name("torchrun")
    endpoint = f"127.0.0.1:{free_port()}"
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
