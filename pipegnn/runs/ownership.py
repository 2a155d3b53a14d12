"""Who a sweep's folder and a job's folder belong to, so that no sweep or job writes over another's.

- [`SweepOwner`][pipegnn.runs.ownership.SweepOwner]: a Hydra callback (``conf/config.yaml``'s
  ``hydra.callbacks``) that, before the sweeper writes its plan (``multirun.yaml``), takes ``hydra.sweep.dir``
  for this sweep: it holds an exclusive lock (``flock``) on ``.pipegnn-sweep.lock`` there for as long as the
  sweep runs (the kernel lets it go when the process ends, however it ends) and writes the owner,
  ``.pipegnn-sweep.json`` (pid, host, start, the sweep's overrides). A second sweep started into the folder
  while the first runs is refused naming it (the command exits with 1 before the sweeper writes anything);
  once it has ended, only the same sweep (the same overrides and sweeper parameters, ``resume`` aside: a rerun
  or a resume) may take the folder again; a folder without an owner file but with a plan (an older version's
  sweep, or a copied one) is compared with that plan's overrides. A sweep's folder that is a job's folder
  or lies inside one, or inside another sweep's folder, a ``hydra.sweep.subdir`` that is absolute or climbs
  out of the sweep's folder, and a lock that cannot be taken (whatever the error) stop the sweep too.
- A single run's ``hydra.run.dir`` (and a sweep's folder) that is a file, or lies under one, stops the
  command before Hydra makes it, with one line naming it (exit 1); so does a ``hydra.run.dir`` that is, or
  lies inside, a sweep's folder or a job's.
- A single run's claim on its folder is [`pipegnn.runs.run_claims`][pipegnn.runs.run_claims]'s (the
  ``SweepOwner`` callback makes it before Hydra writes there); the claims' files, their reading and the
  checks that a folder lies inside no other's are [`pipegnn.runs.claims`][pipegnn.runs.claims]'.
- What Hydra writes before a run or job starts (``.hydra``, the job log, a sweep's subdirs) is checked by
  [`pipegnn.runs.hydra_writes`][pipegnn.runs.hydra_writes] before Hydra writes it.
- [`claim_job`][pipegnn.runs.ownership.claim_job]: a job claims its output folder (``.pipegnn-job.json``:
  the job's number and overrides and its sweep's folder, created only if absent) before it runs; a folder
  that another job claimed (another number, or other overrides, ``resume`` aside), of this sweep
  (``hydra.sweep.subdir`` resolving to one folder for several jobs) or of another sweep, or that lies
  inside another sweep's folder or a job's, is refused naming that job or sweep, and the refused job
  writes nothing there.
"""
from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import time
from pathlib import Path
from typing import IO, Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from pipegnn.atomic import atomic_file
from pipegnn.errors import FolderTaken
from pipegnn.folder_walk import FolderTooDeep, walk
from pipegnn.results.sweep_plan import MAX_PLANNED_JOBS
from pipegnn.runs.claims import (
    JOB_FILE,
    LOCK_FILE,
    OWNER_FILE,
    PLAN_FILE,
    RUN_FILE,
    check_folder,
    describe_job,
    describe_run,
    describe_sweep,
    job_overrides,
    not_inside_another,
    plan_file,
    read_claim,
    sweep_plan_of,
)
from pipegnn.runs.hydra_writes import check_kinds, check_subdir_inside, check_subdir_per_job, hydra_paths
from pipegnn.runs.run_claims import claim_run_folder, hydra_writes_nothing

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

log = logging.getLogger(__name__)


def take_sweep(sweep_dir: str | Path, plan: dict[str, Any]) -> IO[Any]:
    """Take ``sweep_dir`` for the sweep of ``plan`` (see the module doc); returns the open lock file,
    whose lock holds until it is closed (or the process ends).

    Raises:
        FolderTaken: another sweep runs there, or another sweep's plan is there; naming it.
    """
    folder = Path(sweep_dir)
    check_folder(folder, "hydra.sweep.dir")
    not_inside_another(folder, "hydra.sweep.dir", own_sweep=folder)
    try:
        lock = open(folder / LOCK_FILE, "a+")  # noqa: SIM115 - held for the sweep
    except OSError as e:
        raise FolderTaken(f"hydra.sweep.dir={folder}: its lock {folder / LOCK_FILE} cannot be opened "
                          f"({type(e).__name__}: {e.strerror or e}); remove what is there, or give this "
                          "sweep another hydra.sweep.dir") from None
    try:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EACCES):
                raise FolderTaken(f"hydra.sweep.dir={folder}: its lock {folder / LOCK_FILE} cannot be "
                                  f"taken ({type(e).__name__}: {e.strerror or e})") from None
            running = read_claim(folder / OWNER_FILE) or {}
            raise FolderTaken(f"hydra.sweep.dir={folder} is in use by {describe_sweep(running)}; wait for it "
                              "to end, or give this sweep another hydra.sweep.dir") from None
        owner = read_claim(folder / OWNER_FILE)
        if owner is None:  # a sweep of an older version, or copied without its owner: its plan says
            owner = plan_file(folder / PLAN_FILE)
        if owner is None:  # no owner, no plan, but jobs: a sweep whose plan and owner are lost
            job = _a_job_inside(folder)
            if job is not None:
                raise FolderTaken(f"hydra.sweep.dir={folder} holds {describe_job(job)}, of a sweep whose "
                                  f"plan ({PLAN_FILE}) and owner ({OWNER_FILE}) are gone: this sweep cannot "
                                  "tell whether those records are its own; give it another hydra.sweep.dir "
                                  "(or restore that plan, or remove those jobs' folders)")
        if owner is not None and {k: owner.get(k) for k in plan} != plan:
            raise FolderTaken(f"hydra.sweep.dir={folder} holds {describe_sweep(owner)}, another sweep; its "
                              "records and plan would be mixed with this one's: give this sweep another "
                              "hydra.sweep.dir (or remove that folder)")
        with atomic_file(folder / OWNER_FILE) as f:
            json.dump({**plan, "pid": os.getpid(), "host": socket.gethostname(),
                       "started": time.strftime("%Y-%m-%d %H:%M:%S")}, f, indent=1)
    except BaseException:
        lock.close()
        raise
    return lock


#: The most entries of a sweep's folder read when looking for its jobs' claims: 64 for each job of the
#: largest sweep a plan may hold (a job's folder holds about ten); a folder holding more is refused, not
#: read in part (a job past the part read would go unseen).
_SCAN = 64 * MAX_PLANNED_JOBS


def _a_job_inside(folder: Path) -> dict[str, Any] | None:
    """The claim of a job whose folder lies below ``folder`` (at any depth; the first), or None.

    Raises:
        FolderTaken: ``folder`` holds more than `_SCAN` entries."""
    for job in _job_folders(folder):
        claim = read_claim(job / JOB_FILE)
        if claim is not None:
            return {"num": "?", **claim}
    return None


def _job_folders(sweep_dir: Path) -> list[Path]:
    """The folders below ``sweep_dir`` that hold a job's claim or Hydra's files (a sweep run again or
    resumed, ``subdir`` of any depth), and every link to a folder among its entries.

    Raises:
        FolderTaken: it holds more than `_SCAN` entries (more than a sweep writes: which of them are jobs
            of another sweep, or links, cannot be told without reading them all), or nests folders past
            `pipegnn.folder_walk.MAX_DEPTH`.
    """
    found: list[Path] = []
    seen = 0
    try:
        for where, folders, files in walk(sweep_dir):
            seen += len(folders) + len(files)
            if seen > _SCAN:
                raise FolderTaken(f"hydra.sweep.dir={sweep_dir} holds more than {_SCAN:,} files and "
                                  f"folders, more than a sweep of {MAX_PLANNED_JOBS:,} jobs writes: not read "
                                  "further, so this sweep cannot tell whether another sweep's jobs are among "
                                  "them; give it another hydra.sweep.dir")
            here = Path(where)
            if here != sweep_dir and (JOB_FILE in files or RUN_FILE in files or ".hydra" in folders
                                      or ".hydra" in files):
                found.append(here)
            found += [here / n for n in folders if (here / n).is_symlink()]  # (links to folders are listed)
    except FolderTooDeep as e:
        raise FolderTaken(f"hydra.sweep.dir={sweep_dir}: {e.strerror}; give it another "
                          "hydra.sweep.dir") from e
    return found


def _job_folders_clean(sweep_dir: Path, config: DictConfig) -> None:
    """The job folders already in ``sweep_dir`` hold nothing but what Hydra writes where it writes a job's
    files (see `check_kinds`), and none of its entries is a link (Hydra would write through it, into
    another sweep's job).

    Raises:
        FolderTaken: naming the first that does not.
    """
    for folder in _job_folders(sweep_dir):
        if (folder / RUN_FILE).exists():
            run = describe_run(read_claim(folder / RUN_FILE) or {})
            raise FolderTaken(f"{folder} is the folder of {run}: a job of this sweep would write into it; "
                              "give the sweep another hydra.sweep.dir")
        if folder.is_symlink():
            raise FolderTaken(f"{folder} is a link (to {os.readlink(folder)}): a job writing there would "
                              "write into another folder; remove it")
        check_kinds(hydra_paths(folder, config))


class SweepOwner(Callback):
    """Takes the sweep's folder before the sweeper writes its plan
    ([`take_sweep`][pipegnn.runs.ownership.take_sweep]), lets it go after the last job."""

    def __init__(self) -> None:
        self.lock: IO[Any] | None = None
        self.run_lock: IO[Any] | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            check_subdir_inside(config)
            check_subdir_per_job(config)
            hydra_paths(Path(config.hydra.sweep.dir), config)  # hydra.job.name, output_subdir, the log
            _job_folders_clean(Path(config.hydra.sweep.dir), config)
            self.lock = take_sweep(config.hydra.sweep.dir, sweep_plan_of(config))
        except Exception as e:  # Hydra turns a callback's Exception into a warning and goes on: stop here
            why = str(e) if isinstance(e, FolderTaken) else f"hydra.sweep.dir={config.hydra.sweep.dir} " \
                f"cannot be taken: {type(e).__name__}: {e}"
            raise SystemExit(f"sweep refused: {why}") from None  # one line on stderr, exit 1

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        """A single run claims its folder (``hydra.run.dir``:
        [`claim_run`][pipegnn.runs.run_claims.claim_run]), or the command stops here with one line,
        before Hydra writes into it (Hydra's own mkdir ended in its traceback)."""
        try:
            torchrun_rank = (_rank() != 0 and "TORCHELASTIC_RUN_ID" in os.environ
                             and OmegaConf.select(config, "engine.launcher") == "external")
            if torchrun_rank:  # another rank of a pipeline under torchrun: rank 0 claims the folder; this
                # rank refuses what rank 0 refuses but the claim (which its rank 0 may hold), before Hydra
                # makes the folder, and Hydra makes it normalised (R/x/.. made R/x)
                folder = Path(os.path.normpath(str(config.hydra.run.dir)))
                check_folder(folder, "hydra.run.dir", make=False)
                not_inside_another(folder, "hydra.run.dir")
                check_kinds(hydra_paths(folder, config))
                hydra_writes_nothing(config)
                with read_write(config.hydra.run), open_dict(config.hydra.run):
                    config.hydra.run.dir = str(folder)
            else:
                self.run_lock = claim_run_folder(config)
        except Exception as e:  # as on_multirun_start: a warning would let the run go on
            why = str(e) if isinstance(e, FolderTaken) else f"hydra.run.dir={config.hydra.run.dir}: " \
                f"{type(e).__name__}: {e}"
            raise SystemExit(f"run refused: {why}") from None  # one line on stderr, exit 1

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self.run_lock is not None:
            self.run_lock.close()
            self.run_lock = None

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self.lock is not None:
            self.lock.close()
            self.lock = None


def _rank() -> int:
    """``RANK`` as the process group reads it (an integer: ``00`` is rank 0, which claims the folder and
    writes the record); 0 when it is not one."""
    try:
        return int(os.environ.get("RANK", "0") or 0)
    except ValueError:
        return 0


def claim_job(output_dir: str | Path, num: int, overrides: list[str],
              sweep: str | Path | None = None) -> None:
    """Claim ``output_dir`` for job ``num`` (with ``overrides``) of the sweep in ``sweep`` (its
    ``hydra.sweep.dir``; see the module doc); a folder already claimed by this job of this sweep (a resumed
    or rerun sweep) is this job's, and so is one claimed by this job at the same place of a sweep folder
    that was moved or copied here since. A claim of an older version (no sweep in it) is this job's when
    its number and overrides are this job's.

    Raises:
        FolderTaken: another job of this or another sweep claimed the folder, or the folder lies inside
            another job's folder or another sweep's; naming it.
    """
    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    own = Path(sweep).resolve() if sweep is not None else None
    place = None if own is None else os.path.relpath(folder.resolve(), own)  # where in its sweep
    mine: dict[str, Any] = {"num": int(num), "overrides": list(overrides),
                            "sweep": None if own is None else str(own), "place": place}
    name = f"job {num} ({' '.join(overrides) or 'no overrides'})"
    if own is not None:
        not_inside_another(folder, f"{name}: hydra.sweep.subdir", own_sweep=own, claiming=True)
    path = folder / JOB_FILE
    tmp = folder / f".{JOB_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(mine))
    try:
        os.link(tmp, path)  # atomic: exactly one of several jobs creates it
        return
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    other = read_claim(path) or {}
    # the same job: its number, its overrides (resume aside) and, unless the claim is of an older version
    # (none in it), its sweep; or its place in its sweep, when the sweep's folder was moved or copied
    # since (the folder no longer lies in the sweep the claim names)
    claimed_in = other.get("sweep", mine["sweep"])
    moved = (isinstance(claimed_in, str) and own is not None and other.get("place") == place
             and not folder.resolve().is_relative_to(Path(claimed_in)))
    same = (other.get("num") == mine["num"] and (claimed_in == mine["sweep"] or moved)
            and job_overrides(list(other.get("overrides") or [])) == job_overrides(mine["overrides"]))
    if not same:
        who = describe_job(other) if other.get("sweep") not in (None, mine["sweep"]) else \
            f"job {other.get('num', '?')} ({' '.join(other.get('overrides') or [])}) of the sweep"
        raise FolderTaken(f"{name} would write into {folder}, which {who} writes into; give every job its "
                          "own folder (hydra.sweep.subdir must differ per job, e.g. ${hydra.job.num}, inside "
                          "the sweep's own hydra.sweep.dir)")
