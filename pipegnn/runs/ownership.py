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
- [`claim_run`][pipegnn.runs.ownership.claim_run]: a single run claims its folder before Hydra writes
  into it: a lock (``.pipegnn-run.lock``, held while the run lives) and a claim (``.pipegnn-run.json``: pid,
  host, start, the run's overrides). A folder whose lock another run holds, or that another run (other
  overrides, ``resume`` aside) claimed, is never written into: a timestamped ``hydra.run.dir`` (the default,
  ``${now:...}``) moves to the first free ``<dir>-2``, ``<dir>-3``, ...; any other is refused with one line
  naming the first run. A folder where the lock cannot be made (read-only, say) is refused the same way.
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
import stat
import time
from pathlib import Path
from typing import IO, Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from pipegnn.atomic import atomic_file, process_alive
from pipegnn.errors import FolderTaken
from pipegnn.results.hydra_files import read_hydra_file
from pipegnn.results.sweep_plan import MAX_PLANNED_JOBS
from pipegnn.run_record import RECORD_NAME
from pipegnn.runs.hydra_writes import check_kinds, check_subdir_inside, check_subdir_per_job, hydra_paths

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

log = logging.getLogger(__name__)

LOCK_FILE = ".pipegnn-sweep.lock"
OWNER_FILE = ".pipegnn-sweep.json"
JOB_FILE = ".pipegnn-job.json"
RUN_FILE = ".pipegnn-run.json"
RUN_LOCK = ".pipegnn-run.lock"
PLAN_FILE = "multirun.yaml"


def _plan(config: DictConfig | dict[str, Any]) -> dict[str, Any]:
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


def _read_json(path: Path, limit: int = 1 << 20) -> dict[str, Any] | None:
    try:
        with open(path, "rb", opener=lambda p, f: os.open(p, f | os.O_NONBLOCK)) as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return {}
            value = json.loads(f.read(limit) or b"{}")
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _describe(owner: dict[str, Any]) -> str:
    overrides = " ".join(owner.get("overrides") or []) or "no overrides"
    if "plan" in owner:
        return f"the plan of a sweep in {owner['plan']} ({overrides})"
    return (f"the sweep of pid {owner.get('pid', '?')} on host {owner.get('host', '?')}, started "
            f"{owner.get('started', '?')} ({overrides})")


def _plan_file(path: Path) -> dict[str, Any] | None:
    """The plan of the sweep whose ``multirun.yaml`` is at ``path`` as
    [`take_sweep`][pipegnn.runs.ownership.take_sweep] compares it (with ``plan``: the file); None when
    there is none; one that cannot be read is nobody's plan (it compares unequal to every sweep)."""
    if not (path.exists() or path.is_symlink()):
        return None
    try:  # as data, bounded, aliases refused: the results reader's own reading (a 711-byte alias bomb hung)
        config = read_hydra_file(path)
        if not isinstance(config, dict):
            raise ValueError("not a mapping")
        return {**_plan(config), "plan": str(path)}
    except Exception as e:  # noqa: BLE001 - whatever it holds, it is not this sweep's plan
        return {"overrides": [f"<unreadable: {type(e).__name__}>"], "sweeper_params": None, "plan": str(path)}


def _not_inside_another(folder: Path, key: str, own_sweep: Path | None = None,
                        claiming: bool = False) -> None:
    """Refuse ``folder`` (``key``'s value) when it is a job's folder or lies inside one, or is or lies
    inside a sweep's folder other than ``own_sweep`` (any sweep's, when it is None: a single run; the
    folder itself is a sweep's when it holds an owner, or for a single run a plan, ``multirun.yaml``).
    ``claiming``: a job's own folder may hold its own claim (which claim_job compares). A single run's
    folder (its claim, ``.pipegnn-run.json``) is refused the same way, but for a single run's own folder
    (``own_sweep`` None, not ``claiming``: [`claim_run`][pipegnn.runs.ownership.claim_run] compares it).

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
            raise FolderTaken(f"{key}={folder} {where} the folder of {_describe_job(_read_json(job) or {})}; "
                              f"give this {what} a folder of its own")
        run = above / RUN_FILE
        if (run.exists() or run.is_symlink()) and not (above == here and own is None and not claiming):
            raise FolderTaken(f"{key}={folder} {where} the folder of {_describe_run(_read_json(run) or {})}; "
                              f"give this {what} a folder of its own")
        if above == own:
            continue
        owner = _read_json(above / OWNER_FILE)
        if owner is None and above == here and own is None:
            owner = _plan_file(above / PLAN_FILE)
        if owner is not None:
            raise FolderTaken(f"{key}={folder} {where} the folder of {_describe(owner)}; give this {what} a "
                              "folder of its own")


def _describe_job(job: dict[str, Any]) -> str:
    overrides = " ".join(job.get("overrides") or []) or "no overrides"
    sweep = f" of the sweep in {job['sweep']}" if job.get("sweep") else ""
    return f"job {job.get('num', '?')} ({overrides}){sweep}"


def take_sweep(sweep_dir: str | Path, plan: dict[str, Any]) -> IO[Any]:
    """Take ``sweep_dir`` for the sweep of ``plan`` (see the module doc); returns the open lock file,
    whose lock holds until it is closed (or the process ends).

    Raises:
        FolderTaken: another sweep runs there, or another sweep's plan is there; naming it.
    """
    folder = Path(sweep_dir)
    check_folder(folder, "hydra.sweep.dir")
    _not_inside_another(folder, "hydra.sweep.dir", own_sweep=folder)
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
            running = _read_json(folder / OWNER_FILE) or {}
            raise FolderTaken(f"hydra.sweep.dir={folder} is in use by {_describe(running)}; wait for it to "
                              "end, or give this sweep another hydra.sweep.dir") from None
        owner = _read_json(folder / OWNER_FILE)
        if owner is None:  # a sweep of an older version, or copied without its owner: its plan says
            owner = _plan_file(folder / PLAN_FILE)
        if owner is None:  # no owner, no plan, but jobs: a sweep whose plan and owner are lost
            job = _a_job_inside(folder)
            if job is not None:
                raise FolderTaken(f"hydra.sweep.dir={folder} holds {_describe_job(job)}, of a sweep whose "
                                  f"plan ({PLAN_FILE}) and owner ({OWNER_FILE}) are gone: this sweep cannot "
                                  "tell whether those records are its own; give it another hydra.sweep.dir "
                                  "(or restore that plan, or remove those jobs' folders)")
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


#: The most entries of a sweep's folder read when looking for its jobs' claims: 64 for each job of the
#: largest sweep a plan may hold (a job's folder holds about ten); a folder holding more is refused, not
#: read in part (a job past the part read would go unseen).
_SCAN = 64 * MAX_PLANNED_JOBS


def _a_job_inside(folder: Path) -> dict[str, Any] | None:
    """The claim of a job whose folder lies below ``folder`` (at any depth; the first), or None.

    Raises:
        FolderTaken: ``folder`` holds more than `_SCAN` entries."""
    for job in _job_folders(folder):
        claim = _read_json(job / JOB_FILE)
        if claim is not None:
            return {"num": "?", **claim}
    return None


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


def _job_folders(sweep_dir: Path) -> list[Path]:
    """The folders below ``sweep_dir`` that hold a job's claim or Hydra's files (a sweep run again or
    resumed, ``subdir`` of any depth), and every link to a folder among its entries.

    Raises:
        FolderTaken: it holds more than `_SCAN` entries (more than a sweep writes: which of them are jobs
            of another sweep, or links, cannot be told without reading them all).
    """
    found: list[Path] = []
    seen = 0
    for where, folders, files in os.walk(sweep_dir):
        seen += len(folders) + len(files)
        if seen > _SCAN:
            raise FolderTaken(f"hydra.sweep.dir={sweep_dir} holds more than {_SCAN:,} files and folders, "
                              f"more than a sweep of {MAX_PLANNED_JOBS:,} jobs writes: not read further, so "
                              "this sweep cannot tell whether another sweep's jobs are among them; give it "
                              "another hydra.sweep.dir")
        here = Path(where)
        if here != sweep_dir and (JOB_FILE in files or RUN_FILE in files or ".hydra" in folders
                                  or ".hydra" in files):
            found.append(here)
        found += [here / n for n in folders if (here / n).is_symlink()]  # (os.walk lists links to folders)
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
            run = _describe_run(_read_json(folder / RUN_FILE) or {})
            raise FolderTaken(f"{folder} is the folder of {run}: a job of this sweep would write into it; "
                              "give the sweep another hydra.sweep.dir")
        if folder.is_symlink():
            raise FolderTaken(f"{folder} is a link (to {os.readlink(folder)}): a job writing there would "
                              "write into another folder; remove it")
        check_kinds(hydra_paths(folder, config))


def _describe_run(run: dict[str, Any]) -> str:
    overrides = " ".join(run.get("overrides") or []) or "no overrides"
    return (f"the run of pid {run.get('pid', '?')} on host {run.get('host', '?')}, started "
            f"{run.get('started', '?')} ({overrides})")


def _lock(path: Path, what: str) -> IO[Any] | None:
    """``path`` opened and locked (``flock``, exclusive), or None when another process holds the lock.

    Raises:
        FolderTaken: the lock cannot be made or taken (a read-only folder, a folder at its path), naming
            ``what`` and the cause.
    """
    try:
        lock = open(path, "a+")  # noqa: SIM115 - held by the caller
    except OSError as e:
        raise FolderTaken(f"{what}: its lock {path} cannot be made ({type(e).__name__}: "
                          f"{e.strerror or e}), so the run's record could not be written there either; give "
                          "it a writable folder") from None
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        lock.close()
        if e.errno in (errno.EAGAIN, errno.EACCES):
            return None
        raise FolderTaken(f"{what}: its lock {path} cannot be taken ({type(e).__name__}: "
                          f"{e.strerror or e})") from None
    return lock


def claim_run(folder: str | Path, overrides: list[str], fresh: bool = False) -> IO[Any]:
    """Claim ``folder`` (``hydra.run.dir``) for a single run with ``overrides`` (see the module doc);
    returns the open lock file, whose lock holds until it is closed (or the process ends). ``fresh``: the
    folder must hold no earlier run's claim at all (a timestamped folder: never a rerun's).

    Raises:
        FolderTaken: another run holds or claimed the folder (naming it), or it cannot take a claim.
    """
    folder = Path(folder)
    key = f"hydra.run.dir={folder}"
    check_folder(folder, "hydra.run.dir")
    made = not (folder / RUN_LOCK).exists()  # a refused run leaves nothing behind, not even its lock
    lock = _lock(folder / RUN_LOCK, key)
    if lock is None:
        running = _read_json(folder / RUN_FILE) or {}
        raise FolderTaken(f"{key} is in use by {_describe_run(running)}; give this run a folder of its own")
    try:
        other = _read_json(folder / RUN_FILE)
        if other is not None and _alive_elsewhere(other):  # its lock deleted under it
            raise FolderTaken(f"{key} is in use by {_describe_run(other)} (its lock was removed); give this "
                              "run a folder of its own")
        if other is not None and (fresh or _job_overrides(list(other.get("overrides") or []))
                                  != _job_overrides(overrides)):
            raise FolderTaken(f"{key} holds the record of {_describe_run(other)}; give this run a folder of "
                              "its own (or remove that folder)")
        record = folder / RECORD_NAME
        if other is None and (record.exists() or record.is_symlink()):  # a run of before claims: its record's
            written = _read_json(record, 16 << 20) or {}                # overrides say whose it is, if any
            theirs = written.get("overrides")
            same = isinstance(theirs, list) and _job_overrides(theirs) == _job_overrides(overrides)
            if fresh or not same:
                raise FolderTaken(f"{key} holds the record of another run ({record}, from before runs "
                                  "claimed their folders); give this run a folder of its own (or remove that "
                                  "record)")
        try:
            with atomic_file(folder / RUN_FILE) as f:
                json.dump({"overrides": list(overrides), "pid": os.getpid(), "host": socket.gethostname(),
                           "started": time.strftime("%Y-%m-%d %H:%M:%S")}, f, indent=1)
        except OSError as e:
            raise FolderTaken(f"{key} cannot take the run's claim, nor its record: {e}") from None
    except BaseException:
        if made:
            (folder / RUN_LOCK).unlink(missing_ok=True)
        lock.close()
        raise
    return lock


def _alive_elsewhere(claim: dict[str, Any]) -> bool:
    """Whether the run of ``claim`` is another process still running on this host."""
    pid = claim.get("pid")
    if claim.get("host") != socket.gethostname() or not isinstance(pid, int) or pid == os.getpid():
        return False
    return process_alive(pid)


#: The most folders ``<dir>-2``, ``<dir>-3``, ... a timestamped run tries before it is refused.
_SIBLINGS = 100


def _claim_run_folder(config: DictConfig) -> IO[Any]:
    """Claim the run's folder (``hydra.run.dir``); a timestamped one that is taken moves to the first free
    ``<dir>-N``, written back into ``config`` (Hydra makes the folder it names after this).

    Raises:
        FolderTaken: the folder is taken (not timestamped), or no ``<dir>-N`` is free.
    """
    folder = Path(os.path.normpath(str(config.hydra.run.dir)))  # R1/x/.. is R1 (and makes no R1/x)
    overrides = [str(o) for o in config.hydra.overrides.task]
    written = OmegaConf.to_container(config.hydra.run, resolve=False)
    timestamped = isinstance(written, dict) and "${now:" in str(written.get("dir"))
    check_folder(folder, "hydra.run.dir", make=False)
    _not_inside_another(folder, "hydra.run.dir")  # before anything is made there, nor beside it
    check_kinds(hydra_paths(folder, config))
    if not timestamped:
        return claim_run(folder, overrides)
    first: FolderTaken | None = None
    for n in range(1, _SIBLINGS + 1):
        here = folder if n == 1 else folder.with_name(f"{folder.name}-{n}")
        try:
            _not_inside_another(here, "hydra.run.dir")
            lock = claim_run(here, overrides, fresh=True)
        except FolderTaken as e:
            first = first or e
            continue
        if here != folder:
            log.info("%s is taken (%s); this run writes into %s", folder, first, here)
            with read_write(config.hydra.run), open_dict(config.hydra.run):
                config.hydra.run.dir = str(here)
        return lock
    raise FolderTaken(f"{first}; and {folder}-2 ... {folder}-{_SIBLINGS} are taken too")


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
            self.lock = take_sweep(config.hydra.sweep.dir, _plan(config))
        except Exception as e:  # Hydra turns a callback's Exception into a warning and goes on: stop here
            why = str(e) if isinstance(e, FolderTaken) else f"hydra.sweep.dir={config.hydra.sweep.dir} " \
                f"cannot be taken: {type(e).__name__}: {e}"
            raise SystemExit(f"sweep refused: {why}") from None  # one line on stderr, exit 1

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        """A single run claims its folder (``hydra.run.dir``:
        [`claim_run`][pipegnn.runs.ownership.claim_run]), or the command stops here with one line,
        before Hydra writes into it (Hydra's own mkdir ended in its traceback)."""
        try:
            rank = os.environ.get("RANK", "0")
            torchrun_rank = (rank not in ("", "0") and "TORCHELASTIC_RUN_ID" in os.environ
                             and OmegaConf.select(config, "engine.launcher") == "external")
            if torchrun_rank:  # another rank of a pipeline under torchrun: rank 0 claims the folder
                check_folder(Path(config.hydra.run.dir), "hydra.run.dir")
                _hydra_writes_nothing(config)
            else:
                self.run_lock = _claim_run_folder(config)
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


def _hydra_writes_nothing(config: DictConfig) -> None:
    """Another rank of a pipeline under torchrun writes none of Hydra's files (``.hydra/``, the job's log
    file) into the run's folder: rank 0 claims it and writes them. Were rank 0 refused (a folder another
    run holds), the other ranks' files would have replaced that run's; their log goes to the console."""
    with read_write(config.hydra), open_dict(config.hydra):
        config.hydra.output_subdir = None
        logging_config = config.hydra.job_logging
        handlers = logging_config.get("handlers") or {}
        files = [name for name in handlers if "filename" in handlers[name]]
        for name in files:
            del handlers[name]
        for holder in (logging_config.get("root"), *(logging_config.get("loggers") or {}).values()):
            if holder is not None and holder.get("handlers") is not None:
                holder.handlers = [h for h in holder.handlers if h not in files]


def _job_overrides(overrides: list[Any]) -> list[str]:
    """A job's overrides as two runs of one job hold them (``resume`` aside, in any order)."""
    return sorted(str(o) for o in overrides if not str(o).lstrip("+~").startswith("resume="))


def claim_job(output_dir: str | Path, num: int, overrides: list[str],
              sweep: str | Path | None = None) -> None:
    """Claim ``output_dir`` for job ``num`` (with ``overrides``) of the sweep in ``sweep`` (its
    ``hydra.sweep.dir``; see the module doc); a folder already claimed by this job of this sweep (a resumed
    or rerun sweep) is this job's. A claim of an older version (no sweep in it) is this job's when its
    number and overrides are this job's.

    Raises:
        FolderTaken: another job of this or another sweep claimed the folder, or the folder lies inside
            another job's folder or another sweep's; naming it.
    """
    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    own = Path(sweep).resolve() if sweep is not None else None
    mine: dict[str, Any] = {"num": int(num), "overrides": list(overrides),
                            "sweep": None if own is None else str(own)}
    name = f"job {num} ({' '.join(overrides) or 'no overrides'})"
    if own is not None:
        _not_inside_another(folder, f"{name}: hydra.sweep.subdir", own_sweep=own, claiming=True)
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
    other = _read_json(path) or {}
    # the same job: its number, its overrides (resume aside) and, unless the claim is of an older version
    # (none in it), its sweep
    same = (other.get("num") == mine["num"] and other.get("sweep", mine["sweep"]) == mine["sweep"]
            and _job_overrides(list(other.get("overrides") or [])) == _job_overrides(mine["overrides"]))
    if not same:
        who = _describe_job(other) if other.get("sweep") not in (None, mine["sweep"]) else \
            f"job {other.get('num', '?')} ({' '.join(other.get('overrides') or [])}) of the sweep"
        raise FolderTaken(f"{name} would write into {folder}, which {who} writes into; give every job its "
                          "own folder (hydra.sweep.subdir must differ per job, e.g. ${hydra.job.num}, inside "
                          "the sweep's own hydra.sweep.dir)")
