"""A sweep's folder belongs to one sweep, a job's folder to one job: no sweep or job writes over another's
records or plan, and each refusal names the other sweep or job."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipegnn.training.ownership import JOB_FILE, OWNER_FILE, FolderTaken, claim_job, take_sweep

from tests.helpers import ROOT, TINY_SYNTHETIC

_PLAN = {"overrides": ["train.seed=0,1"], "sweeper_params": None}


def test_a_running_sweep_keeps_its_folder(tmp_path: Path) -> None:
    held = take_sweep(tmp_path, _PLAN)
    try:
        with pytest.raises(FolderTaken,
                           match=rf"is in use by the sweep of pid {os.getpid()} on host .*train.seed=0,1"):
            take_sweep(tmp_path, _PLAN)
    finally:
        held.close()
    take_sweep(tmp_path, _PLAN).close()  # once it ended: the same sweep again (a rerun, a resume)


def test_a_finished_sweeps_folder_refuses_another_sweep(tmp_path: Path) -> None:
    take_sweep(tmp_path, _PLAN).close()
    with pytest.raises(FolderTaken, match="holds the sweep of pid .*train.seed=0,1.*another sweep"):
        take_sweep(tmp_path, {"overrides": ["train.lr=0.1,0.2"], "sweeper_params": None})
    assert json.loads((tmp_path / OWNER_FILE).read_text())["overrides"] == ["train.seed=0,1"]


def test_a_job_never_takes_another_jobs_folder(tmp_path: Path) -> None:
    claim_job(tmp_path, 0, ["train.seed=0"])
    with pytest.raises(FolderTaken,
                       match=r"job 1 \(train.seed=1\) would write into .*which job 0 \(train.seed=0\)"):
        claim_job(tmp_path, 1, ["train.seed=1"])
    claim_job(tmp_path, 0, ["train.seed=0"])  # the same job again (resume)
    assert json.loads((tmp_path / JOB_FILE).read_text())["num"] == 0


def _sweep(cwd: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(ROOT / "experiments" / "train.py"), "-m", *TINY_SYNTHETIC,
                           "train.epochs=2", "engine=single", *overrides], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("subdir, collide", [
    ("same", {1: 0, 2: 0}),  # the example: one folder for every job
    ("lr${train.lr}", {1: 0}),  # not named there: a folder per learning rate, two seeds each
])
def test_jobs_sharing_a_folder_are_refused_with_a_record(tmp_path: Path, subdir: str, collide: dict) -> None:
    sweep = tmp_path / "sweep"
    seeds = "0,1,2" if subdir == "same" else "0,1"
    done = _sweep(tmp_path, f"train.seed={seeds}", f"hydra.sweep.dir={sweep}", f"hydra.sweep.subdir={subdir}")
    assert done.returncode == 1, done.stderr[-3000:]
    for job, other in collide.items():
        refused = next(sweep.glob(f"*.job{job}.refused"))
        record = json.loads((refused / "result.json").read_text())
        assert record["status"] == "invalid" and f"which job {other} " in record["error"], record["error"]
    kept = [json.loads(p.read_text()) for p in sweep.glob("*/result.json") if ".refused" not in str(p)]
    assert [r["status"] for r in kept] == ["completed"] * len(kept) and kept


def test_a_second_sweep_into_a_sweeps_folder_is_refused(tmp_path: Path) -> None:
    """One after the other (the issue's two sweeps at once are the lock's test above): the folder keeps
    the first sweep's plan and records; the first sweep itself may come back (resume)."""
    sweep = tmp_path / "sweep"
    assert _sweep(tmp_path, "train.seed=0,1", f"hydra.sweep.dir={sweep}").returncode == 0
    plan = (sweep / "multirun.yaml").read_text()
    other = _sweep(tmp_path, "train.lr=0.01,0.02,0.03", f"hydra.sweep.dir={sweep}")
    assert other.returncode == 1 and "another sweep" in other.stderr, other.stderr[-3000:]
    assert (sweep / "multirun.yaml").read_text() == plan and not (sweep / "2").exists()
    again = _sweep(tmp_path, "train.seed=0,1", f"hydra.sweep.dir={sweep}", "resume=true")
    assert again.returncode == 0, again.stderr[-3000:]


def test_two_sweeps_at_once_one_is_refused(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, str(ROOT / "experiments" / "train.py"), "-m", *TINY_SYNTHETIC, "engine=single",
           f"hydra.sweep.dir={sweep}"]
    first = subprocess.Popen([*cmd, "train.epochs=40", "train.seed=0,1"], cwd=tmp_path, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        while not (sweep / "multirun.yaml").is_file():
            assert first.poll() is None, first.communicate()[1][-3000:]
        second = subprocess.run([*cmd, "train.epochs=2", "train.lr=0.01,0.02,0.03"], cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=300)
        _, err = first.communicate(timeout=300)
    finally:
        first.kill()
    assert first.returncode == 0, err[-3000:]
    assert second.returncode == 1 and f"in use by the sweep of pid {first.pid}" in second.stderr
    assert "train.seed=0,1" in (sweep / "multirun.yaml").read_text() and not (sweep / "2").exists()
