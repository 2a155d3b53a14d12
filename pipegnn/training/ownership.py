"""Who a sweep's folder and a job's folder belong to, so that no sweep or job writes over another's.

- [`SweepOwner`][pipegnn.training.ownership.SweepOwner]: a Hydra callback (``experiments/train.py`` adds it to
  ``hydra.callbacks``) that, before the sweeper writes its plan (``multirun.yaml``), takes ``hydra.sweep.dir``
  for this sweep: it holds an exclusive lock (``flock``) on ``.pipegnn-sweep.lock`` there for as long as the
  sweep runs (the kernel lets it go when the process ends, however it ends) and writes the owner,
  ``.pipegnn-sweep.json`` (pid, host, start, the sweep's overrides). A second sweep started into the folder
  while the first runs is refused naming it (the command exits with 1 before the sweeper writes anything);
  once it has ended, only the same sweep (the same overrides and sweeper parameters, ``resume`` aside: a rerun
  or a resume) may take the folder again.
- A single run's ``hydra.run.dir`` (and a sweep's folder) that is a file, or lies under one, stops the
  command before Hydra makes it, with one line naming it (exit 1).
- [`claim_job`][pipegnn.training.ownership.claim_job]: a job claims its output folder (``.pipegnn-job.json``:
  the job's number and overrides, created only if absent) before it runs; a folder that another job of the
  sweep claimed (``hydra.sweep.subdir`` resolving to one folder for several jobs) is refused naming that job,
  and the refused job writes nothing there.
"""
from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import stat
import time
from pathlib import Path
from typing import IO, Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from pipegnn.atomic import atomic_file

__all__ = ["JOB_FILE", "LOCK_FILE", "OWNER_FILE", "FolderTaken", "SweepOwner", "check_folder", "claim_job",
           "take_sweep"]

log = logging.getLogger(__name__)

LOCK_FILE = ".pipegnn-sweep.lock"
OWNER_FILE = ".pipegnn-sweep.json"
JOB_FILE = ".pipegnn-job.json"


class FolderTaken(RuntimeError):
    """A sweep's or a job's folder belongs to another sweep or job (named in the message)."""


def _plan(config: DictConfig) -> dict[str, Any]:
    """What makes one sweep this sweep: its overrides (``resume`` aside) and its sweeper's parameters."""
    task = [str(o) for o in OmegaConf.to_container(config.hydra.overrides.task, resolve=False) or []]
    params = config.hydra.sweeper.get("params") if "sweeper" in config.hydra else None
    return {"overrides": sorted(o for o in task if not o.lstrip("+~").startswith("resume=")),
            "sweeper_params": OmegaConf.to_container(params, resolve=False) if params is not None else None}


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, "rb", opener=lambda p, f: os.open(p, f | os.O_NONBLOCK)) as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return {}
            value = json.loads(f.read(1 << 20) or b"{}")
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _describe(owner: dict[str, Any]) -> str:
    overrides = " ".join(owner.get("overrides") or []) or "no overrides"
    return (f"the sweep of pid {owner.get('pid', '?')} on host {owner.get('host', '?')}, started "
            f"{owner.get('started', '?')} ({overrides})")


def take_sweep(sweep_dir: str | Path, plan: dict[str, Any]) -> IO[Any]:
    """Take ``sweep_dir`` for the sweep of ``plan`` (see the module doc); returns the open lock file,
    whose lock holds until it is closed (or the process ends).

    Raises:
        FolderTaken: another sweep runs there, or another sweep's plan is there; naming it.
    """
    folder = Path(sweep_dir)
    check_folder(folder, "hydra.sweep.dir")
    lock = open(folder / LOCK_FILE, "a+")  # noqa: SIM115 - held for the sweep
    try:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            running = _read_json(folder / OWNER_FILE) or {}
            raise FolderTaken(f"hydra.sweep.dir={folder} is in use by {_describe(running)}; wait for it to "
                              "end, or give this sweep another hydra.sweep.dir") from None
        owner = _read_json(folder / OWNER_FILE)
        if owner is not None and {k: owner.get(k) for k in plan} != plan:
            raise FolderTaken(f"hydra.sweep.dir={folder} holds {_describe(owner)}, another sweep; its "
                              "records and plan would be mixed with this one's: give this sweep another "
                              "hydra.sweep.dir (or remove that folder)")
        with atomic_file(folder / OWNER_FILE) as f:
            json.dump({**plan, "pid": os.getpid(), "host": socket.gethostname(),
                       "started": time.strftime("%Y-%m-%d %H:%M:%S")}, f, indent=1)
    except BaseException:
        lock.close()
        raise
    return lock


def check_folder(folder: Path, key: str) -> None:
    """Make ``folder`` (the value of ``key``) unless it is there.

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
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise FolderTaken(f"{key}={folder} cannot be made: {e}") from None


class SweepOwner(Callback):
    """Takes the sweep's folder before the sweeper writes its plan
    ([`take_sweep`][pipegnn.training.ownership.take_sweep]), lets it go after the last job."""

    def __init__(self) -> None:
        self.lock: IO[Any] | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            self.lock = take_sweep(config.hydra.sweep.dir, _plan(config))
        except FolderTaken as e:  # Hydra turns a callback's Exception into a warning and goes on
            log.error("sweep refused: %s", e)
            raise SystemExit(f"sweep refused: {e}") from None

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        """A single run's folder (``hydra.run.dir``) can take its record, or the command stops here
        with one line (Hydra's own mkdir ended in its traceback)."""
        try:
            check_folder(Path(config.hydra.run.dir), "hydra.run.dir")
        except FolderTaken as e:
            log.error("run refused: %s", e)
            raise SystemExit(f"run refused: {e}") from None

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self.lock is not None:
            self.lock.close()
            self.lock = None


def claim_job(output_dir: str | Path, num: int, overrides: list[str]) -> None:
    """Claim ``output_dir`` for job ``num`` of a sweep (see the module doc); a folder already claimed
    by job ``num`` (a resumed or rerun sweep) is this job's.

    Raises:
        FolderTaken: another job of the sweep claimed the folder; naming it.
    """
    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / JOB_FILE
    mine = {"num": int(num), "overrides": list(overrides)}
    tmp = folder / f".{JOB_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(mine))
    try:
        os.link(tmp, path)  # atomic: exactly one of several jobs creates it
        return
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    other = _read_json(path) or {}
    if other.get("num") != mine["num"]:
        raise FolderTaken(f"job {num} ({' '.join(overrides) or 'no overrides'}) would write into {folder}, "
                          f"which job {other.get('num', '?')} ({' '.join(other.get('overrides') or [])}) of "
                          "the sweep writes into; give every job its own folder (hydra.sweep.subdir "
                          "must differ per job, e.g. ${hydra.job.num})")
