"""Sweeps on disk: which jobs a sweep ran, and which it left without a record.

[`sweep_jobs`][pipegnn.results.sweep.sweep_jobs] / [`unrecorded_jobs`][pipegnn.results.sweep.unrecorded_jobs]:
a sweep's jobs as found on disk, with those that left no record: ``incomplete`` (Hydra started the job, it
wrote no ``result.json``) and ``missing`` (planned by the sweep's ``multirun.yaml``, never started), which
[`pipegnn.results.load`][pipegnn.results.table.load] lists too.

What a sweep planned is [`sweep_plan`][pipegnn.results.sweep_plan]'s; Hydra's files are read as data only
([`hydra_files`][pipegnn.results.hydra_files]: reading a sweep runs nothing its files name); the check that
lets ``resume=true`` skip a completed job is [`resume_check`][pipegnn.runs.resume_check]'s, on the run
side. `planned_jobs`, `SweepPlanError` and `MAX_YAML_BYTES` are importable from here too, as they were before
they moved.

The end-of-sweep failure summary and the progress bar are in
[`pipegnn.runs.callbacks`][pipegnn.runs.callbacks].
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from pipegnn.config.compare import plain_config
from pipegnn.folder_walk import walk
from pipegnn.results.hydra_files import MAX_YAML_BYTES as MAX_YAML_BYTES
from pipegnn.results.hydra_files import _get, _resolved, read_hydra_file, read_override_list
from pipegnn.results.record_files import (
    RECORD_NAME,
    RecordError,
    find_records,
    is_entry,
    load_record,
    natural_key,
    place_of,
)
from pipegnn.results.sweep_plan import Parsed, SweepPlanError, _plan, _settings
from pipegnn.results.sweep_plan import planned_jobs as planned_jobs

__all__ = ["INCOMPLETE", "Job", "Listing", "sweep_jobs", "unrecorded_jobs"]

#: Error of an ``incomplete`` job (started, no record).
INCOMPLETE = "no result.json: the job was killed or died before writing it, or is still running"


@dataclass
class Job:
    """One job of a sweep as found on disk (or, for a ``missing`` one, as the sweep planned it)."""

    directory: Path
    num: int | None
    overrides: str
    #: completed | failed | invalid | oom | interrupted (its record's) | unreadable (record not valid JSON
    #: or malformed) | incomplete (started, no record) | missing (planned, never started: no folder)
    status: str
    error: str | None
    fresh: bool          # its record was written by this sweep (False: kept by resume, or none)
    #: What is known of the config of a job without a record (None for the others): an incomplete job's
    #: ``.hydra/config.yaml``, a missing job's overrides of config keys; ``choices`` likewise holds the
    #: config-group choices (``.hydra/hydra.yaml``, or the group overrides).
    config: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    choices: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    #: The file the status is about when it is not the job's ``result.json`` (a damaged ``multirun.yaml``).
    file: Path | None = field(default=None, compare=False)


#: `_job_info`'s ``hydra`` when the job's ``hydra.yaml`` is not to be read (tried already, or past a budget).
_UNREAD = object()


def _job_info(directory: Path, listing: Listing, hydra: Any = None) -> tuple[int | None, str]:
    """A job's number (its ``.hydra/hydra.yaml``; ``hydra``: that file read already, or `_UNREAD`) and
    overrides (its folder's name where they are not read)."""
    num = None
    overrides = listing.overrides(directory)
    try:
        if hydra is None:
            hydra = read_hydra_file(directory / ".hydra" / "hydra.yaml")
        num = int(_get(hydra, "hydra", "job", "num"))  # (_UNREAD: no number, as a file without one)
    except Exception:  # noqa: BLE001 - no file, no number (an interpolation is no number either)
        if directory.name.isdigit():
            num = int(directory.name)
    return num, directory.name if overrides is None else " ".join(overrides)


#: The most bytes of incomplete jobs' ``.hydra/config.yaml`` and ``hydra.yaml`` one listing parses for
#: their config columns (YAML parses at about 4 s a MiB here; Hydra writes about 10 KB a job): past it, an
#: incomplete job is listed without them (twelve folders of files just under the size bound took minutes).
MAX_INCOMPLETE_CONFIG_BYTES = 8 << 20
#: The most bytes of jobs' ``.hydra/overrides.yaml`` one listing parses (libyaml: about 0.4 s a MiB here;
#: Hydra writes some hundreds of bytes a job): past it, a job is listed by its folder's name, as one without
#: the file (100 jobs of 64 KiB lists took 4.9 s, each list bounded and their count not).
MAX_OVERRIDE_LIST_BYTES = 8 << 20


class _Budget:
    """What is left of a number of bytes to parse in one listing."""

    def __init__(self, total: int) -> None:
        self.left = total

    def take(self, *paths: Path) -> bool:
        """Whether ``paths`` fit in what is left (taking their sizes from it when they do)."""
        sizes = []
        for path in paths:
            try:  # (a file past MAX_YAML_BYTES is refused unparsed: charged as much)
                sizes.append(min(path.stat().st_size, MAX_YAML_BYTES))
            except (OSError, RuntimeError):  # not there (read as absent), or a link loop
                sizes.append(0)
        if sum(sizes) > self.left:
            return False
        self.left -= sum(sizes)
        return True


class Listing:
    """What one listing may still parse of the jobs' Hydra files (`MAX_INCOMPLETE_CONFIG_BYTES` of incomplete
    jobs' configs, `MAX_OVERRIDE_LIST_BYTES` of override lists), and the override lists it read, each once."""

    def __init__(self) -> None:
        self.configs = _Budget(MAX_INCOMPLETE_CONFIG_BYTES)
        self.lists = _Budget(MAX_OVERRIDE_LIST_BYTES)
        self._overrides: dict[Path, list[str] | None] = {}

    def overrides(self, directory: Path) -> list[str] | None:
        """The job's overrides as Hydra saved them (``.hydra/overrides.yaml``), None when absent, unreadable
        or past the budget."""
        if directory not in self._overrides:
            path = directory / ".hydra" / "overrides.yaml"
            found = None
            if self.lists.take(path):
                try:
                    found = read_override_list(path)
                except Exception:  # noqa: BLE001 - .hydra files are optional (hydra.output_subdir=null)
                    pass
            self._overrides[directory] = found
        return self._overrides[directory]


def _hydra_job_dirs(root: Path) -> set[Path]:
    """Directories below ``root`` (itself included) that Hydra ran a job in: they hold ``.hydra/`` with
    the job's ``overrides.yaml`` or ``config.yaml``."""
    return {Path(folder) for folder, folders, _ in walk(root) if ".hydra" in folders
            and (Path(folder, ".hydra", "overrides.yaml").is_file()
                 or Path(folder, ".hydra", "config.yaml").is_file())}


def _incomplete(directory: Path, listing: Listing) -> Job:
    """A job Hydra started that left no record, with what its ``.hydra/`` files tell of its config (while
    the listing's budget lasts)."""
    config: Any = {}
    hydra: Any = _UNREAD  # past the budget, or unreadable: not read (again) for the job's number
    choices = None
    files = directory / ".hydra" / "config.yaml", directory / ".hydra" / "hydra.yaml"
    if listing.configs.take(*files):
        try:
            config = _resolved(read_hydra_file(files[0]))
        except Exception:  # noqa: BLE001
            pass
        try:
            hydra = read_hydra_file(files[1])
            choices = _get(hydra, "hydra", "runtime", "choices")
        except Exception:  # noqa: BLE001
            pass
    num, overrides = _job_info(directory, listing, hydra)
    return Job(directory, num, overrides, "incomplete", INCOMPLETE, False,
               config=plain_config(config) if isinstance(config, dict) else {},
               choices={k: v for k, v in (choices if isinstance(choices, dict) else {}).items()
                        if not str(k).startswith("hydra/")})


def _is_dir(path: Path) -> bool:
    """Whether ``path`` is a folder; False for a path no folder can have (a name past 255 bytes, which a
    plan's ``${hydra.job.override_dirname}`` of long values gives)."""
    try:
        return path.is_dir()
    except OSError:
        return False


def _missing(sweep_dir: Path, started: Iterable[Path], listing: Listing) -> list[Job]:
    """The planned jobs of the sweep in ``sweep_dir`` that none of the ``started`` job folders ran: a
    job whose folder exists bare (no ``.hydra/``, as with ``hydra.output_subdir=null``, nor record) is
    incomplete, any other missing."""
    try:
        plan = _plan(sweep_dir)
    except SweepPlanError as e:
        why = f"{e}; so the sweep's missing jobs cannot be named"
        return [Job(sweep_dir, None, "", "unreadable", why, False, file=sweep_dir / "multirun.yaml")]
    if plan is None:
        return []
    cfg, planned = plan
    parsed = Parsed()  # each distinct override of the plan parsed once for the missing jobs' columns
    started = {place_of(d) for d in started}
    ran = {tuple(o) for o in (listing.overrides(d) for d in started) if o is not None}
    jobs = []
    for num, (overrides, directory) in enumerate(planned):
        if tuple(overrides) in ran or place_of(directory) in started:
            continue
        if (_is_dir(directory) and not (directory / ".hydra").exists()
                and not is_entry(directory / RECORD_NAME)):
            job = _incomplete(directory, listing)
            job.num, job.overrides = num, " ".join(overrides)
        else:
            config, choices = _settings(overrides, cfg, parsed)
            job = Job(directory, num, " ".join(overrides), "missing",
                      f"never started: job {num} of the sweep ({' '.join(overrides)})", False,
                      config=config, choices=choices)
        jobs.append(job)
    return jobs


def sweep_jobs(sweep_dir: str | Path, since: float | None = None) -> list[Job]:
    """The jobs under ``sweep_dir`` (directories holding a record or Hydra's ``.hydra/``) started at or
    after ``since`` (a file modification time; None: every job), in job order, with the jobs the sweep
    planned ([`planned_jobs`][pipegnn.results.sweep_plan.planned_jobs]) that none of them ran (status
    ``missing``; ``incomplete`` when the folder exists). A started job without a record is ``incomplete``.

    A job's start is the time Hydra wrote its ``.hydra/overrides.yaml``, which it does for every job it
    runs, even one that resume then skips; jobs left over from an earlier, larger sweep in the same
    directory are older and left out."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        return []
    dirs = {p.parent for p in find_records(sweep_dir)} | _hydra_job_dirs(sweep_dir)
    jobs = []
    listing = Listing()
    for directory in dirs:
        record_path = directory / RECORD_NAME
        stamp_file = directory / ".hydra" / "overrides.yaml"
        recorded = is_entry(record_path)  # a FIFO or a link loop there: an unreadable record
        if not stamp_file.is_file() and not recorded:
            stamp_file = directory / ".hydra" / "config.yaml"
        stamp = _mtime(stamp_file if stamp_file.is_file() else record_path)
        if since is not None and stamp < since:
            continue
        if not recorded:
            jobs.append(_incomplete(directory, listing))
            continue
        num, overrides = _job_info(directory, listing)
        fresh = since is None or _mtime(record_path) >= since
        try:
            record = load_record(record_path)
            status, error = record.status.value, record.error
        except RecordError as e:
            status, error = "unreadable", e.reason
        except OSError as e:
            status, error = "unreadable", f"{type(e).__name__}: {e}"
        first_line = str(error).strip().split("\n", 1)[0] if error else None
        jobs.append(Job(directory, num, overrides, str(status), first_line, fresh))
    jobs += _missing(sweep_dir, [j.directory for j in jobs], listing)
    return _in_order(jobs)


def unrecorded_jobs(root: str | Path, listing: Listing | None = None) -> list[Job]:
    """Every job without a record below ``root`` (any number of sweeps and runs, at any depth), in
    job order: a folder Hydra started a job in (``.hydra/``) with no ``result.json`` (``incomplete``),
    and each sweep's planned jobs that none of its folders ran (see
    [`sweep_jobs`][pipegnn.results.sweep.sweep_jobs]). ``listing``: the budgets of a listing of several
    folders, spent over all of them (default: this folder's own)."""
    root = Path(root)
    if not root.is_dir():
        return []
    dirs = {p.parent for p in find_records(root)} | _hydra_job_dirs(root)
    listing = Listing() if listing is None else listing
    jobs = [_incomplete(d, listing) for d in dirs if not is_entry(d / RECORD_NAME)]
    for sweep in _sweep_dirs(root):
        jobs += _missing(sweep, [d for d in dirs if sweep in d.parents], listing)
    return _in_order(jobs)


def _mtime(path: Path) -> float:
    """When ``path`` was last written: its target's time, or the link's own when it leads nowhere."""
    try:
        return path.stat().st_mtime
    except (OSError, RuntimeError):
        return path.lstat().st_mtime


def _sweep_dirs(root: Path) -> list[Path]:
    """The folders below ``root`` (itself included; links to folders not followed, as ``rglob`` does)
    holding an entry named ``multirun.yaml`` of any kind: a link to nothing, a folder or a FIFO there is
    a damaged plan (`_plan` says so), never no plan."""
    return [Path(folder) for folder, dirs, files in walk(root) if "multirun.yaml" in (*dirs, *files)]


def _in_order(jobs: list[Job]) -> list[Job]:
    return sorted(jobs, key=lambda j: (j.num if j.num is not None else sys.maxsize, natural_key(j.directory)))
