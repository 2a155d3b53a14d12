"""What a run's, a job's and a sweep's claims on their folders are made of, shared by the run claims
([`pipegnn.runs.run_claims`][pipegnn.runs.run_claims]) and the sweeps' and jobs' ownership
([`pipegnn.runs.ownership`][pipegnn.runs.ownership]): the files' names, a claim read (bounded; a FIFO
never waited on), how each claim is named in a refusal, a sweep's plan as it is compared, and the checks
that a folder can be made and lies inside no other run's, job's or sweep's folder.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from pipegnn.errors import FolderTaken
from pipegnn.jsonfile import read_regular
from pipegnn.results.hydra_files import read_hydra_file

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

LOCK_FILE = ".pipegnn-sweep.lock"
OWNER_FILE = ".pipegnn-sweep.json"
JOB_FILE = ".pipegnn-job.json"
RUN_FILE = ".pipegnn-run.json"
RUN_LOCK = ".pipegnn-run.lock"
PLAN_FILE = "multirun.yaml"


def sweep_plan_of(config: DictConfig | dict[str, Any]) -> dict[str, Any]:
    """What makes one sweep this sweep: its overrides (``resume`` aside) and its sweeper's parameters
    (of the sweep's config, or of its plan read as data)."""
    hydra = config["hydra"] if isinstance(config, dict) else \
        OmegaConf.to_container(config.hydra, resolve=False)
    hydra = hydra if isinstance(hydra, dict) else {}
    overrides = hydra.get("overrides")
    overrides = overrides if isinstance(overrides, dict) else {}
    sweeper = hydra.get("sweeper")
    sweeper = sweeper if isinstance(sweeper, dict) else {}
    task = [str(o) for o in overrides.get("task") or []]
    return {"overrides": sorted(o for o in task if not o.lstrip("+~").startswith("resume=")),
            "sweeper_params": sweeper.get("params")}


def read_claim(path: Path, limit: int = 1 << 20) -> dict[str, Any] | None:
    """The claim (a JSON object) at ``path``; None when there is none; ``{}`` (nobody's claim) when it is
    not one: not a regular file (a FIFO is never waited on), more than ``limit`` bytes, not JSON, nested
    past the parser, not an object."""
    try:
        value = json.loads(read_regular(path, limit) or b"{}")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def describe_sweep(owner: dict[str, Any]) -> str:
    overrides = " ".join(owner.get("overrides") or []) or "no overrides"
    if "plan" in owner:
        return f"the plan of a sweep in {owner['plan']} ({overrides})"
    return (f"the sweep of pid {owner.get('pid', '?')} on host {owner.get('host', '?')}, started "
            f"{owner.get('started', '?')} ({overrides})")


def describe_job(job: dict[str, Any]) -> str:
    overrides = " ".join(job.get("overrides") or []) or "no overrides"
    sweep = f" of the sweep in {job['sweep']}" if job.get("sweep") else ""
    return f"job {job.get('num', '?')} ({overrides}){sweep}"


def describe_run(run: dict[str, Any]) -> str:
    overrides = " ".join(run.get("overrides") or []) or "no overrides"
    return (f"the run of pid {run.get('pid', '?')} on host {run.get('host', '?')}, started "
            f"{run.get('started', '?')} ({overrides})")


def plan_file(path: Path) -> dict[str, Any] | None:
    """The plan of the sweep whose ``multirun.yaml`` is at ``path`` as
    [`take_sweep`][pipegnn.runs.ownership.take_sweep] compares it (with ``plan``: the file); None when
    there is none; one that cannot be read is nobody's plan (it compares unequal to every sweep)."""
    if not (path.exists() or path.is_symlink()):
        return None
    try:  # as data, bounded, aliases refused: the results reader's own reading (a 711-byte alias bomb hung)
        config = read_hydra_file(path)
        if not isinstance(config, dict):
            raise ValueError("not a mapping")
        return {**sweep_plan_of(config), "plan": str(path)}
    except Exception as e:  # noqa: BLE001 - whatever it holds, it is not this sweep's plan
        return {"overrides": [f"<unreadable: {type(e).__name__}>"], "sweeper_params": None, "plan": str(path)}


def not_inside_another(folder: Path, key: str, own_sweep: Path | None = None,
                        claiming: bool = False) -> None:
    """Refuse ``folder`` (``key``'s value) when it is a job's folder or lies inside one, or is or lies
    inside a sweep's folder other than ``own_sweep`` (any sweep's, when it is None: a single run; the
    folder itself is a sweep's when it holds an owner, or for a single run a plan, ``multirun.yaml``).
    ``claiming``: a job's own folder may hold its own claim (which claim_job compares). A single run's
    folder (its claim, ``.pipegnn-run.json``) is refused the same way, but for a single run's own folder
    (``own_sweep`` None, not ``claiming``: [`claim_run`][pipegnn.runs.run_claims.claim_run] compares it).

    Raises:
        FolderTaken: naming the job or sweep whose folder it is.
    """
    here = folder.resolve()
    own = own_sweep.resolve() if own_sweep is not None else None
    what = "run" if own is None and not claiming else "sweep" if not claiming else "job"
    for above in (here, *here.parents):
        if not above.is_dir():  # not made yet (or a file: check_folder names it)
            continue
        where = "is" if above == here else f"lies inside {above}, which is"
        job = above / JOB_FILE
        if (job.exists() or job.is_symlink()) and not (claiming and above == here):
            raise FolderTaken(f"{key}={folder} {where} the folder of {describe_job(read_claim(job) or {})}; "
                              f"give this {what} a folder of its own")
        run = above / RUN_FILE
        if (run.exists() or run.is_symlink()) and not (above == here and own is None and not claiming):
            raise FolderTaken(f"{key}={folder} {where} the folder of {describe_run(read_claim(run) or {})}; "
                              f"give this {what} a folder of its own")
        if above == own:
            continue
        owner = read_claim(above / OWNER_FILE)
        if owner is None and above == here and own is None:
            owner = plan_file(above / PLAN_FILE)
        if owner is not None:
            raise FolderTaken(f"{key}={folder} {where} the folder of {describe_sweep(owner)}; give this "
                              f"{what} a folder of its own")


def check_folder(folder: Path, key: str, make: bool = True) -> None:
    """Make ``folder`` (the value of ``key``) unless it is there (``make``: else only check that it can
    be: a refused run makes no folder inside another's).

    Raises:
        FolderTaken: ``folder``, or a folder above it, is a file (or it cannot be made); naming it.
    """
    for above in (folder, *folder.parents):
        if above.exists() or above.is_symlink():
            if not above.is_dir():
                what = "is" if above == folder else f"lies under {above}, which is"
                raise FolderTaken(f"{key}={folder} {what} a file, not a folder: the run's record has no "
                                  f"place to go; give {key} a folder's path")
            break
    if not make:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise FolderTaken(f"{key}={folder} cannot be made: {e}") from None


def task_overrides(task: Any) -> list[str]:
    """A job's overrides (``hydra.overrides.task``) as written: an override holding an interpolation
    (``train.seed=${hydra:job.num}``) is not resolved (before a job runs Hydra's config is not set, and
    resolving it refused the run naming its folder)."""
    written = OmegaConf.to_container(task, resolve=False) if isinstance(task, ListConfig) else task
    return [str(o) for o in written or []]


def job_overrides(overrides: list[Any]) -> list[str]:
    """A job's overrides as two runs of one job hold them (``resume`` aside, in any order)."""
    return sorted(str(o) for o in overrides if not str(o).lstrip("+~").startswith("resume="))
