"""A sweep's folder belongs to one sweep, a job's folder to one job: no sweep or job writes over another's
records or plan, and each refusal names the other sweep or job."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipegnn.errors import FolderTaken
from pipegnn.runs.claims import JOB_FILE, OWNER_FILE, RUN_FILE, RUN_LOCK
from pipegnn.runs.ownership import claim_job, take_sweep
from pipegnn.runs.run_claims import claim_run

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


@pytest.mark.parametrize("subdir", ["same", "lr${train.lr}", "${chunks}", "."])
def test_a_subdir_that_may_give_jobs_one_folder_stops_the_sweep(tmp_path: Path, subdir: str) -> None:
    """One folder for every job, a folder per learning rate for two seeds, ${chunks} (the issue's example:
    refused jobs overwrote the owner's .hydra/overrides.yaml before they could refuse), ``.`` (refused
    records went outside the sweep's folder): the sweep stops before any job, in one line naming the
    subdir and what would do."""
    sweep = tmp_path / "sweep"
    done = _sweep(tmp_path, "train.seed=0,1", f"hydra.sweep.dir={sweep}", f"hydra.sweep.subdir={subdir}")
    assert done.returncode == 1, done.stderr[-3000:]
    assert f"sweep refused: hydra.sweep.subdir={subdir} " in done.stderr, done.stderr[-3000:]
    assert "${hydra.job.num}" in done.stderr and "Traceback" not in done.stderr
    assert not sweep.exists() or not any(sweep.iterdir())


@pytest.mark.parametrize("subdir, extra", [
    # the job's override_dirname without the key that tells the jobs apart (it overwrote job 0's .hydra)
    ("x${hydra.job.override_dirname}", ["hydra.job.config.override_dirname.exclude_keys=[train.seed]"]),
    # the job's number only as the default of a variable that is set (a second case)
    ("'${oc.env:PX,${hydra.job.num}}'", []),
    # found by probing again: a variable beside the number (PX=../.. climbs out), the working directory,
    # override_dirname of values that are paths (cache_root=../../../B)
    ("'${hydra.job.num}/${oc.env:PX}'", []),
    ("'${hydra.runtime.cwd}/B/${hydra.job.num}'", []),
    ("${hydra.job.override_dirname}", ["cache_root=../../../B"]),
])
def test_a_subdir_naming_jobs_only_in_appearance_stops_the_sweep(tmp_path: Path, subdir: str,
                                                                extra: list[str]) -> None:
    sweep = tmp_path / "sweep"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PX": "shared"}
    done = subprocess.run([sys.executable, str(ROOT / "experiments" / "train.py"), "-m", *TINY_SYNTHETIC,
                           "train.epochs=2", "engine=single", "train.seed=0,1", f"hydra.sweep.dir={sweep}",
                           f"hydra.sweep.subdir={subdir}", *extra], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "sweep refused: hydra.sweep.subdir=" in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and (not sweep.exists() or not any(sweep.iterdir()))


@pytest.mark.parametrize("seeds, jobs", [("0,0", "jobs 0 and 1"), ("1,0,1", "jobs 0 and 2")])
def test_a_value_swept_twice_under_override_dirname_stops_the_sweep(tmp_path: Path, seeds: str,
                                                                   jobs: str) -> None:
    """hydra.sweep.subdir=${hydra.job.override_dirname} with train.seed=0,0 (the example; a second case:
    1,0,1) gave two jobs one folder: the second wrote its .hydra files into the first's before it could
    refuse it. The sweep stops before any job, naming the two jobs."""
    sweep = tmp_path / "sweep"
    done = _sweep(tmp_path, f"train.seed={seeds}", f"hydra.sweep.dir={sweep}",
                  "hydra.sweep.subdir=${hydra.job.override_dirname}")
    assert done.returncode == 1, done.stderr[-3000:]
    refusal = f"sweep refused: {jobs} of this sweep have the same overrides ("
    assert refusal in done.stderr and f" train.seed={seeds[0]}), so " in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and (not sweep.exists() or not any(sweep.iterdir()))


@pytest.mark.parametrize("how", ["run", "sweep"])
def test_an_override_holding_a_hydra_interpolation_runs(tmp_path: Path, how: str) -> None:
    """``train.seed=${hydra:job.num}`` (Hydra's own idiom) refused a whole sweep (the example) and a single
    run (a second case), naming the folder: the claims read the overrides before Hydra's config was set,
    resolving them. They read them as written now: the sweep's jobs complete, the record keeping the
    override as Hydra writes a job's (escaped); a single run, which has no job number, is one ``invalid``
    record naming the key."""
    out = tmp_path / "out"
    if how == "run":
        done = _single(tmp_path, f"hydra.run.dir={out}", "train.seed=${hydra:job.num}")
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
        record = json.loads((out / "result.json").read_text())
        assert record["status"] == "invalid" and record["error"].startswith("train.seed does not resolve: ")
        return
    done = _sweep(tmp_path, f"hydra.sweep.dir={out}", "train.seed=${hydra:job.num}", "train.lr=0.01,0.02")
    assert done.returncode == 0, done.stderr[-3000:]
    for job in ("0", "1"):
        record = json.loads((out / job / "result.json").read_text())
        seed = [o for o in record["overrides"] if o.startswith("train.seed=")]  # as Hydra escapes it
        assert record["status"] == "completed" and seed == ["train.seed=$\\{hydra\\:job.num\\}"]
        assert record["config"]["train"]["seed"] == int(job)


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


@pytest.mark.parametrize("how", [pytest.param("moved", marks=pytest.mark.slow), "copied"])  # moved: test-all
def test_a_sweep_folder_moved_or_copied_resumes_there(tmp_path: Path, sweep_a: Path, how: str) -> None:
    """A sweep's folder moved elsewhere (the example) or copied (a second case, the original kept) was
    never resumable: its jobs' claims named the old folder, so each job was refused as another sweep's.
    Its jobs resume where it lies now, and a completed job's record is left as it was."""
    place = tmp_path / "elsewhere" / "A"
    place.parent.mkdir()
    if how == "moved":
        first = _sweep(tmp_path, "train.seed=0,1", f"hydra.sweep.dir={tmp_path / 'A'}")
        assert first.returncode == 0, first.stderr[-3000:]
        (tmp_path / "A").rename(place)
    else:
        subprocess.run(["cp", "-a", str(sweep_a), str(place)], check=True)
    records = {k: v for k, v in _records(place).items() if k.endswith("result.json")}
    again = _sweep(tmp_path, "train.seed=0,1", f"hydra.sweep.dir={place}", "resume=true")
    assert again.returncode == 0, again.stderr[-3000:]
    assert {k: v for k, v in _records(place).items() if k.endswith("result.json")} == records
    assert len(records) == 2


def test_a_job_claim_names_its_sweep(tmp_path: Path) -> None:
    """Job 0 of another sweep (another hydra.sweep.dir) is another job, though its number is the same."""
    claim_job(tmp_path / "A" / "0", 0, ["train.seed=0"], sweep=tmp_path / "A")
    with pytest.raises(FolderTaken, match=r"which job 0 \(train.seed=0\) of the sweep in .*A writes into"):
        claim_job(tmp_path / "A" / "0", 0, ["train.seed=0"], sweep=tmp_path / "B")
    claim_job(tmp_path / "A" / "0", 0, ["train.seed=0", "resume=true"], sweep=tmp_path / "A")  # resume
    (tmp_path / "old").mkdir()  # an older version's claim (no sweep in it): its number and overrides
    (tmp_path / "old" / JOB_FILE).write_text(json.dumps({"num": 0, "overrides": ["train.seed=0"]}))
    claim_job(tmp_path / "old", 0, ["train.seed=0"], sweep=tmp_path / "C")
    with pytest.raises(FolderTaken, match="which job 0"):
        claim_job(tmp_path / "old", 0, ["train.lr=0.1"], sweep=tmp_path / "D")


@pytest.fixture(scope="module")
def sweep_a(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished sweep of two jobs (train.seed=0,1)."""
    where = tmp_path_factory.mktemp("sweep_a")
    done = _sweep(where, "train.seed=0,1", f"hydra.sweep.dir={where / 'A'}")
    assert done.returncode == 0, done.stderr[-3000:]
    return where / "A"


def _records(sweep: Path) -> dict[str, str]:
    return {str(p.relative_to(sweep)): p.read_text() for p in sorted(sweep.rglob("*")) if p.is_file()}


def _single(cwd: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(ROOT / "experiments" / "train.py"), *TINY_SYNTHETIC,
                           "train.epochs=2", "engine=single", *overrides], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("how", ["subdir into its jobs", "relative subdir into its jobs",
                                 "single run into a job", "sweep inside a job", "single run into the sweep"])
def test_nothing_writes_into_another_sweeps_folders(tmp_path: Path, sweep_a: Path, how: str) -> None:
    """Another sweep whose jobs' folders are A's (hydra.sweep.subdir=<A>/${hydra.job.num}), a single run
    in a job's folder of A or in A's folder, a sweep whose folder lies inside a job's of A: each is
    refused naming A's job or sweep (exit 1), and A's files stay as they were."""
    before = _records(sweep_a)
    if how in ("subdir into its jobs", "relative subdir into its jobs"):
        subdir = (f"{sweep_a}/${{hydra.job.num}}" if how == "subdir into its jobs"
                  else f"../../{sweep_a.parent.name}/A/${{hydra.job.num}}")
        done = _sweep(tmp_path, "train.seed=5,6", f"hydra.sweep.dir={tmp_path / 'B'}",
                      f"hydra.sweep.subdir={subdir}")
        assert "sweep refused" in done.stderr and "lies outside hydra.sweep.dir" in done.stderr, done.stderr
    elif how == "single run into a job":
        done = _single(tmp_path, "train.seed=7", f"hydra.run.dir={sweep_a / '1'}")
        assert "run refused" in done.stderr and "the folder of job 1" in done.stderr, done.stderr[-3000:]
    elif how == "sweep inside a job":
        done = _sweep(tmp_path, "train.seed=5,6", f"hydra.sweep.dir={sweep_a / '0'}")
        assert "sweep refused" in done.stderr and "the folder of job 0" in done.stderr, done.stderr[-3000:]
    else:
        done = _single(tmp_path, "train.seed=7", f"hydra.run.dir={sweep_a}")
        assert "run refused" in done.stderr and "the sweep of pid" in done.stderr, done.stderr[-3000:]
    assert done.returncode == 1, done.stderr[-3000:]
    after = _records(sweep_a)
    assert {k: v for k, v in after.items() if k in before} == before
    assert after == before


def test_a_sweep_without_its_owner_file_keeps_its_plan(tmp_path: Path) -> None:
    """A sweep's folder with its plan (multirun.yaml) but no owner file (an older version's sweep, or a
    copied one): another sweep is refused, naming the plan; the same sweep may resume."""
    sweep = tmp_path / "sweep"
    assert _sweep(tmp_path, "train.seed=0,1", f"hydra.sweep.dir={sweep}").returncode == 0
    (sweep / OWNER_FILE).unlink()
    for job in ("0", "1"):
        (sweep / job / JOB_FILE).unlink()
    before = _records(sweep)
    other = _sweep(tmp_path, "train.lr=0.01,0.02", f"hydra.sweep.dir={sweep}")
    assert other.returncode == 1 and "the plan of a sweep in" in other.stderr, other.stderr[-3000:]
    assert _records(sweep) == before
    again = _sweep(tmp_path, "train.seed=0,1", f"hydra.sweep.dir={sweep}", "resume=true")
    assert again.returncode == 0, again.stderr[-3000:]


@pytest.mark.parametrize("lock", ["folder", "unreadable name"])
def test_a_lock_that_cannot_be_taken_stops_the_sweep(tmp_path: Path, lock: str) -> None:
    """The lock's path is a folder (or lies under a file): the sweep stops before its plan or any job,
    with one line (exit 1), not Hydra's warning and a sweep that runs."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    if lock == "folder":
        (sweep / ".pipegnn-sweep.lock").mkdir()
    else:
        (sweep / ".pipegnn-sweep.lock").symlink_to(tmp_path / "a-file" / "below")
        (tmp_path / "a-file").write_text("")
    done = _sweep(tmp_path, "train.seed=0,1", f"hydra.sweep.dir={sweep}")
    assert done.returncode == 1, done.stderr[-3000:]
    assert "sweep refused" in done.stderr and "cannot be opened" in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert not (sweep / "multirun.yaml").exists() and not (sweep / "0").exists()


def test_a_job_folder_inside_another_sweeps_is_refused(tmp_path: Path) -> None:
    """The job's own check, behind the sweep's (a subdir that resolves into another sweep's folder): the
    job writes nothing there and names that sweep."""
    take_sweep(tmp_path / "A", _PLAN).close()
    with pytest.raises(FolderTaken, match=r"lies inside .*A, which is the folder of the sweep of pid"):
        claim_job(tmp_path / "A" / "0", 0, ["train.seed=5"], sweep=tmp_path / "B")
    assert not (tmp_path / "A" / "0" / JOB_FILE).exists()


def test_a_run_never_writes_into_another_runs_folder(tmp_path: Path) -> None:
    """A folder a live run holds, or that a run with other overrides claimed, is refused naming that run;
    the same run again (a rerun, a resume) takes it."""
    held = claim_run(tmp_path, ["train.seed=0"])
    try:
        with pytest.raises(FolderTaken, match=rf"is in use by the run of pid {os.getpid()} .*train.seed=0"):
            claim_run(tmp_path, ["train.seed=0"])
    finally:
        held.close()
    with pytest.raises(FolderTaken, match=r"holds the record of the run of pid .*\(train.seed=0\)"):
        claim_run(tmp_path, ["train.seed=1"])
    with pytest.raises(FolderTaken, match="holds the record"):  # a timestamped folder: never a rerun's
        claim_run(tmp_path, ["train.seed=0"], fresh=True)
    claim_run(tmp_path, ["train.seed=0", "resume=true"]).close()
    assert json.loads((tmp_path / RUN_FILE).read_text())["overrides"] == ["train.seed=0", "resume=true"]


def test_a_job_claim_covers_its_overrides(tmp_path: Path) -> None:
    """Job 0 of the same sweep folder with other overrides (a sweep that took over a folder whose plan
    and owner were lost) is another job."""
    claim_job(tmp_path / "A" / "0", 0, ["train.seed=0"], sweep=tmp_path / "A")
    with pytest.raises(FolderTaken, match=r"which job 0 \(train.seed=0\) of the sweep writes into"):
        claim_job(tmp_path / "A" / "0", 0, ["train.lr=0.1"], sweep=tmp_path / "A")


def test_a_sweep_whose_plan_and_owner_are_lost_is_not_taken_over(tmp_path: Path, sweep_a: Path) -> None:
    """The issue's example: its jobs' claims remain, and another sweep into the folder is refused before
    it writes anything, naming one of them."""
    copy = tmp_path / "A"
    subprocess.run(["cp", "-a", str(sweep_a), str(copy)], check=True)
    (copy / OWNER_FILE).unlink()
    (copy / "multirun.yaml").unlink()
    before = _records(copy)
    done = _sweep(tmp_path, "train.lr=0.01,0.02", f"hydra.sweep.dir={copy}")
    assert done.returncode == 1 and "sweep refused" in done.stderr, done.stderr[-3000:]
    assert "whose plan (multirun.yaml) and owner (.pipegnn-sweep.json) are gone" in done.stderr
    assert _records(copy) == before


def test_a_job_past_what_is_scanned_is_never_unseen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep folder whose plan and owner are lost was scanned for its jobs' claims up to 10,000 entries,
    and a job past them went unseen (the folder taken over). A folder holding more than the scan reads is
    refused now, naming the bound (here 200 entries, a job folder after 300 files); one within it is
    read whole."""
    from pipegnn.runs import ownership

    monkeypatch.setattr(ownership, "_SCAN", 200)
    folder = tmp_path / "S"
    (folder / "many").mkdir(parents=True)
    for i in range(300):
        (folder / "many" / f"{i}.txt").write_text("")
    (folder / "z" / "job").mkdir(parents=True)
    (folder / "z" / "job" / JOB_FILE).write_text(json.dumps({"num": 7, "overrides": ["train.seed=9"]}))
    with pytest.raises(FolderTaken, match=f"hydra.sweep.dir={folder} holds more than 200 files and folders"):
        take_sweep(folder, _PLAN)
    assert not (folder / OWNER_FILE).exists()
    for i in range(150):
        (folder / "many" / f"{i}.txt").unlink()
    with pytest.raises(FolderTaken, match="of a sweep whose plan .* are gone"):
        take_sweep(folder, _PLAN)


def test_runs_in_one_second_get_their_own_folders(tmp_path: Path) -> None:
    """A timestamped hydra.run.dir (the default's ${now:...}) that a live run holds (the issue's example)
    or that a finished run claimed (a second case): the run writes into <dir>-2, <dir>-3."""
    pattern = f"hydra.run.dir={tmp_path / 'out'}/${{now:%Y}}"
    year = __import__("time").strftime("%Y")
    held = claim_run(tmp_path / "out" / year, ["train.seed=9"])
    try:
        first = _single(tmp_path, pattern)
    finally:
        held.close()
    assert first.returncode == 0, first.stderr[-3000:]
    second = _single(tmp_path, pattern)
    assert second.returncode == 0, second.stderr[-3000:]
    assert not (tmp_path / "out" / year / "result.json").exists()
    for folder in (f"{year}-2", f"{year}-3"):
        assert json.loads((tmp_path / "out" / folder / "result.json").read_text())["status"] == "completed"


@pytest.mark.parametrize("how", ["held", "claimed", "lock cannot be made"])
def test_a_run_into_a_taken_folder_is_refused_in_one_line(tmp_path: Path, how: str) -> None:
    """An explicit hydra.run.dir held by a live run, claimed by another, or where the claim cannot be made
    (its lock path a folder, as in a read-only folder): one line naming why, exit 1, nothing written."""
    out = tmp_path / "run"
    out.mkdir()
    held = None
    if how == "held":
        held = claim_run(out, ["train.seed=9"])
    elif how == "claimed":  # by a run that has ended (a live claimant holds the folder: see below)
        subprocess.run([sys.executable, "-c", "import sys; from pipegnn.runs.run_claims import claim_run; "
                        "claim_run(sys.argv[1], ['train.seed=9']).close()", str(out)], check=True, cwd=ROOT)
    else:
        (out / RUN_LOCK).mkdir()
    before = _records(out)
    try:
        done = _single(tmp_path, f"hydra.run.dir={out}")
    finally:
        if held is not None:
            held.close()
    assert done.returncode == 1, done.stderr[-3000:]
    why = {"held": "is in use by the run of pid", "claimed": "holds the record of the run of pid",
           "lock cannot be made": "cannot be made (IsADirectoryError"}[how]
    assert "run refused" in done.stderr and why in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert _records(out) == before


@pytest.mark.parametrize("plan", ["alias bomb", "too large"])
def test_a_plan_that_cannot_be_read_in_bounds_never_stalls_a_start(tmp_path: Path, plan: str) -> None:
    """A 711-byte YAML alias bomb as a folder's multirun.yaml hung the start of a run (the ownership check
    read it with OmegaConf.load, while the results reader refused it); a plan past the readers' size bound
    (a second case) is refused the same way: an unreadable plan, another sweep's, at once."""
    from pipegnn.results.hydra_files import MAX_YAML_BYTES

    (tmp_path / "multirun.yaml").write_text(
        "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}' if i else 'x'] * 10)}]\n" for i in range(9))
        if plan == "alias bomb" else "a: [" + "1, " * (MAX_YAML_BYTES // 3) + "1]\n")
    start = time.monotonic()
    with pytest.raises(FolderTaken, match=r"a sweep in .*multirun.yaml \(<unreadable: ValueError>\)"):
        take_sweep(tmp_path, _PLAN)
    assert time.monotonic() - start < 5


@pytest.mark.parametrize("name", ["train.log", ".hydra/config.yaml"])
def test_a_fifo_where_hydra_writes_stops_a_run_at_once(tmp_path: Path, name: str) -> None:
    """A FIFO at RUN/train.log or RUN/.hydra/config.yaml hung the run (Hydra opens it and waits): it
    is refused in one line naming it, before Hydra opens anything."""
    out = tmp_path / "run"
    (out / ".hydra").mkdir(parents=True)
    os.mkfifo(out / name)
    done = _single(tmp_path, f"hydra.run.dir={out}")
    assert done.returncode == 1, done.stderr[-3000:]
    assert f"run refused: {out / name} is a FIFO, where Hydra writes a regular file" in done.stderr


def test_a_fifo_in_a_sweeps_job_folder_stops_the_sweep(tmp_path: Path, sweep_a: Path) -> None:
    """The same in a job's folder of a sweep run again (resume): the sweep stops before any job."""
    copy = tmp_path / "A"
    subprocess.run(["cp", "-a", str(sweep_a), str(copy)], check=True)
    (copy / "1" / "train.log").unlink()
    os.mkfifo(copy / "1" / "train.log")
    done = _sweep(tmp_path, "train.seed=0,1", f"hydra.sweep.dir={copy}", "resume=true")
    assert done.returncode == 1, done.stderr[-3000:]
    assert f"sweep refused: {copy / '1' / 'train.log'} is a FIFO" in done.stderr


def test_claims_compare_overrides_in_any_order(tmp_path: Path) -> None:
    claim_run(tmp_path, ["a=1", "b=2"]).close()
    claim_run(tmp_path, ["b=2", "a=1", "resume=true"]).close()


def _run_once(tmp_path: Path, folder: Path, *overrides: str, env: dict | None = None) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "experiments" / "train.py"), *TINY_SYNTHETIC,
                           "train.epochs=2", "engine=single", f"hydra.run.dir={folder}", *overrides],
                          cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def run_a(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished single run (train.seed=0)."""
    where = tmp_path_factory.mktemp("run_a")
    _run_once(where, where / "A", "train.seed=0")
    return where / "A"


@pytest.mark.parametrize("how", ["RANK=1 in the environment", "a sweep's job", "a sweep's folder",
                                 "a run inside it", "its record without a claim"])
def test_nothing_writes_into_a_single_runs_folder(tmp_path: Path, run_a: Path, how: str) -> None:
    """A run with RANK=1 set outside torchrun skipped the claim and overwrote the record; a sweep's job
    (its subdir the run's folder), a sweep whose folder is the run's, a run nested in it, a run into a
    folder whose record predates claims (the claim removed): each wrote into another run's folder. Each is
    refused now (exit 1), and the run's files stay as they were."""
    copy = tmp_path / "A"
    subprocess.run(["cp", "-a", str(run_a), str(copy)], check=True)
    before = _records(copy)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if how == "RANK=1 in the environment":
        env["RANK"] = "1"
        done = subprocess.run([sys.executable, str(ROOT / "experiments" / "train.py"), *TINY_SYNTHETIC,
                               "train.epochs=2", "engine=single", "train.seed=21", f"hydra.run.dir={copy}"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    elif how == "a sweep's job":  # the run's folder is where the sweep's job 0 goes
        (tmp_path / "S").mkdir()
        copy = copy.rename(tmp_path / "S" / "0")
        done = _sweep(tmp_path, "train.seed=4,5", f"hydra.sweep.dir={tmp_path / 'S'}")
    elif how == "a sweep's folder":
        done = _sweep(tmp_path, "train.seed=4", f"hydra.sweep.dir={copy}")
    elif how == "a run inside it":
        done = _single(tmp_path, "train.seed=4", f"hydra.run.dir={copy / 'inner'}")
    else:
        for name in (RUN_FILE, RUN_LOCK):
            (copy / name).unlink()
        before = _records(copy)
        done = _single(tmp_path, "train.seed=4", f"hydra.run.dir={copy}")
    assert done.returncode == 1, done.stderr[-3000:]
    assert "refused" in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert _records(copy) == before


@pytest.mark.parametrize("how", [".hydra a FIFO", ".hydra a link", "output_subdir outside",
                                 "job.name outside", "output_subdir the record's", "log file the record's",
                                 ".hydra/config.yaml a hard link", "train.log a hard link"])
def test_hydras_own_folder_and_names_stay_inside_the_run(tmp_path: Path, run_a: Path, how: str) -> None:
    """RUN/.hydra as a FIFO ended in a traceback; as a link to another run's .hydra, or with
    hydra.output_subdir or hydra.job.name pointing into another run's folder, the run wrote there; with
    Hydra's folder or log at RUN/result.json, the run lost its record. Each is refused in one line, and
    the other run's files stay as they were."""
    copy = tmp_path / "A"
    subprocess.run(["cp", "-a", str(run_a), str(copy)], check=True)
    before = _records(copy)
    out = tmp_path / "B"
    out.mkdir()
    extra: list[str] = []
    if how == ".hydra a FIFO":
        os.mkfifo(out / ".hydra")
    elif how == ".hydra a link":
        (out / ".hydra").symlink_to(copy / ".hydra")
    elif how == "output_subdir outside":
        extra = [f"hydra.output_subdir={copy / '.hydra'}"]
    elif how == "output_subdir the record's":  # a folder at RUN/result.json: the record was lost
        extra = ["hydra.output_subdir=result.json"]
    elif how.endswith("a hard link"):  # Hydra truncated and rewrote the other run's file through it
        linked = how.split()[0]
        (out / linked).parent.mkdir(exist_ok=True)
        os.link(copy / linked, out / linked)
    elif how == "log file the record's":
        extra = ["hydra.job_logging.handlers.file.filename=${hydra.runtime.output_dir}/result.json"]
    else:
        extra = ["hydra.job.name=../A/train"]
    shared = {f: f.read_bytes() for f in (copy / ".hydra" / "config.yaml", copy / "train.log")}
    done = _single(tmp_path, "train.seed=11", f"hydra.run.dir={out}", *extra)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "run refused" in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert _records(copy) == before
    assert all(f.read_bytes() == content for f, content in shared.items())


@pytest.mark.parametrize("how", ["jobs one level down", "a link to another sweep's job"])
def test_a_sweep_never_writes_through_what_its_folder_holds(tmp_path: Path, sweep_a: Path, how: str) -> None:
    """An orphaned sweep whose jobs lie one level down (subdir g/${hydra.job.num}; plan and owner removed)
    was taken over; a new sweep's folder holding a link to another sweep's job wrote through it. Both are
    refused before any job, and nothing of the other sweep changes."""
    before = _records(sweep_a)
    sweep = tmp_path / "S"
    if how == "jobs one level down":
        (sweep / "g").mkdir(parents=True)
        for job in ("0", "1"):
            subprocess.run(["cp", "-a", str(sweep_a / job), str(sweep / "g" / job)], check=True)
        target, before = sweep / "g", _records(sweep / "g")
    else:
        sweep.mkdir()
        (sweep / "0").symlink_to(sweep_a / "0")
        target = sweep_a
    done = _sweep(tmp_path, "train.seed=7,8", f"hydra.sweep.dir={sweep}")
    assert done.returncode == 1 and "sweep refused" in done.stderr, done.stderr[-3000:]
    assert _records(target) == before


def test_a_fifo_where_a_tracker_writes_never_holds_the_run(tmp_path: Path) -> None:
    """A FIFO at RUN/csv/metrics.csv held the run at epoch 0; at final.csv, after the record, for ever
    (SIGTERM ignored). The tracker replaces the path with its file now: the run completes."""
    from pipegnn import run

    from tests.helpers import make_cfg

    for name in ("metrics.csv", "final.csv"):
        out = tmp_path / name
        (out / "csv").mkdir(parents=True)
        os.mkfifo(out / "csv" / name)
        record = run(make_cfg("train.epochs=2", "logger=csv"), output_dir=out)
        assert record["status"] == "completed" and "unwritten" not in record.to_dict(), record["error"]
        assert (out / "csv" / name).is_file()


def test_a_tracker_folder_outside_the_run_is_invalid(tmp_path: Path) -> None:
    from pipegnn import run

    from tests.helpers import make_cfg

    record = run(make_cfg("train.epochs=2", "logger=csv", f"logger.csv.dir={tmp_path / 'elsewhere'}"),
                 output_dir=tmp_path / "run")
    assert record["status"] == "invalid" and "lies outside the run's folder" in record["error"]
    assert not (tmp_path / "elsewhere").exists()


def test_a_fifo_at_sweep_log_never_holds_the_sweep(tmp_path: Path) -> None:
    sweep = tmp_path / "S"
    sweep.mkdir()
    os.mkfifo(sweep / "sweep.log")
    done = _sweep(tmp_path, "train.seed=0", f"hydra.sweep.dir={sweep}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "not written to" in done.stderr and "it is not a regular file" in done.stderr


@pytest.mark.parametrize("how", ["sweep output_subdir outside", "sweep job.name outside", "log file outside",
                                 "tracker folder a link", "RANK=1 outside torchrun", "rank 1 under torchrun",
                                 "RANK=00 under torchrun", "rank 1 under torchrun, inside it",
                                 # (the second and third cases of rank 1's checks: make test-all)
                                 *(pytest.param(f"rank 1 under torchrun, {how}", marks=pytest.mark.slow)
                                   for how in ("through it", "subdir outside")),
                                 "run inside it"])
def test_what_probing_found_again_writes_nothing_into_another_run(tmp_path: Path, run_a: Path,
                                                                   how: str) -> None:
    """A sweep's hydra.output_subdir or hydra.job.name into another run's folder, a job log handler's file
    there, a tracker folder that is a link to it, RANK=1 with engine.launcher=external outside torchrun,
    rank 1 of a torchrun pipeline whose rank 0 was refused the folder (its .hydra/ and train.log replaced
    the other run's; it ends here at an invalid value, as it would at rank 0's absence), a run inside it
    (which made its folder there before it was refused), rank 1 of a torchrun pipeline inside it, through
    it (``A/sub/..``) or with its Hydra files outside its folder (it made the folder its rank 0 was
    refused: rank 1 checks what rank 0 checks but the claim): each wrote into the other run's folder, or
    made one. Each is
    refused (a sweep or run: exit 1; the tracker: an invalid record), and nothing of the other run
    changes."""
    copy = tmp_path / "A"
    subprocess.run(["cp", "-a", str(run_a), str(copy)], check=True)
    before = _records(copy)
    out = tmp_path / "B"
    if how == "sweep output_subdir outside":
        done = _sweep(tmp_path, "train.seed=1,2", f"hydra.sweep.dir={out}",
                      "hydra.output_subdir=../../A/.hydra")
    elif how == "sweep job.name outside":
        done = _sweep(tmp_path, "train.seed=1,2", f"hydra.sweep.dir={out}", "hydra.job.name=../../A/train")
    elif how == "log file outside":
        done = _single(tmp_path, f"hydra.run.dir={out}",
                       f"hydra.job_logging.handlers.file.filename={copy / 'train.log'}")
    elif how == "tracker folder a link":
        out.mkdir()
        (out / "csv").symlink_to(copy)
        done = _single(tmp_path, f"hydra.run.dir={out}", "logger=csv")
        assert json.loads((out / "result.json").read_text())["status"] == "invalid"
    elif "RANK" in how or "rank" in how:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "RANK": "00" if how.startswith("RANK=00") else "1"}
        if how != "RANK=1 outside torchrun":  # rank 0 (00 is rank 0 too) claims; rank 1 writes nothing
            env["TORCHELASTIC_RUN_ID"] = "probe"
        folder = {"rank 1 under torchrun, inside it": copy / "inner", "rank 1 under torchrun, through it":
                  f"{copy}/inner/..", "rank 1 under torchrun, subdir outside": out}.get(how, copy)
        done = subprocess.run([sys.executable, str(ROOT / "experiments" / "train.py"), *TINY_SYNTHETIC,
                               "train.epochs=2", "engine=pipelining", "chunks=2", "engine.launcher=external",
                               "train.seed=3", f"hydra.run.dir={folder}",
                               *(["chunks=0"] if how in ("rank 1 under torchrun", "rank 1 under torchrun, "
                                                         "through it") else []),
                               *(["hydra.output_subdir=../esc"] if how.endswith("outside") else [])],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert not (copy / "inner").exists() and not out.exists() and not (tmp_path / "esc").exists()
    else:
        done = _single(tmp_path, "train.seed=4", f"hydra.run.dir={copy / 'inner'}")
        assert not (copy / "inner").exists()
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert _records(copy) == before


@pytest.mark.parametrize("how", ["Hydra's own log into it", "override_dirname separators",
                                 "a path through it", "a name too long for a log"])
def test_what_probing_found_a_third_time_writes_nothing(tmp_path: Path, run_a: Path, how: str) -> None:
    """hydra.hydra_logging's file handler into another run's folder (or a FIFO: a hang), override_dirname
    whose separator holds '/../..' (jobs' folders outside the sweep), a run folder spelt through the other
    run's (A/x/..: it made A/x), a job name whose log passes 255 bytes (Hydra's traceback after the claim,
    which stayed): each is refused in one line, and nothing is made or changed."""
    copy = tmp_path / "A"
    subprocess.run(["cp", "-a", str(run_a), str(copy)], check=True)
    before = _records(copy)
    out = tmp_path / "B"
    if how == "Hydra's own log into it":
        done = _single(tmp_path, f"hydra.run.dir={out}", "+hydra.hydra_logging.handlers.f={class:logging."
                       f"FileHandler,filename:{copy / 'hl.log'}}}", "+hydra.hydra_logging.root.handlers=[f]")
    elif how == "override_dirname separators":
        done = _sweep(tmp_path, "train.seed=1,2", f"hydra.sweep.dir={out}",
                      "hydra.sweep.subdir=${hydra.job.override_dirname}",
                      'hydra.job.config.override_dirname.kv_sep="/../../KV/"')
        assert not (tmp_path / "KV").exists()
    elif how == "a path through it":
        done = _single(tmp_path, "train.seed=4", f"hydra.run.dir={copy}/x/..")
        assert not (copy / "x").exists()
    else:
        done = _single(tmp_path, f"hydra.run.dir={out}", f"hydra.job.name={'x' * 300}")
        assert not (out / RUN_FILE).exists()
    assert done.returncode == 1 and "refused" in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and not (out.exists() and any(out.iterdir()))
    assert _records(copy) == before


def test_a_live_runs_claim_holds_though_its_lock_is_removed(tmp_path: Path) -> None:
    """Removing a running run's lock let a second run write into its folder beside it: the claim names a
    live process on this host, which holds the folder still."""
    import socket

    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / RUN_FILE).write_text(json.dumps({"overrides": ["train.seed=0"], "pid": live.pid,
                                                     "host": socket.gethostname()}))
        with pytest.raises(FolderTaken, match=rf"in use by the run of pid {live.pid} .*its lock was removed"):
            claim_run(tmp_path, ["train.seed=0"])
    finally:
        live.kill()
        live.wait()
    claim_run(tmp_path, ["train.seed=0"]).close()  # once it ended: the same run again
