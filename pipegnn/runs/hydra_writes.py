"""What Hydra writes into a run's or a job's folder before the run starts (its ``.hydra`` files, the job log,
the jobs' subfolders of a sweep), kept inside that folder and checked before Hydra writes: Hydra writes them
before any job can refuse its folder, so whatever could put them elsewhere (a subdir naming an environment
variable, a job name with a ``/``, a log handler's file) or hang them (a FIFO) is refused here, naming it.
Used by [`pipegnn.runs.ownership`][pipegnn.runs.ownership]'s callbacks.
"""
from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from pipegnn.errors import FolderTaken
from pipegnn.jsonfile import file_kind
from pipegnn.run_record import RECORD_NAME
from pipegnn.runs.claims import task_overrides

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


#: What a job's ``hydra.sweep.subdir`` must name, outside any other interpolation, so that every job gets
#: a folder of its own (``${hydra.job.override_dirname}`` only while no key is excluded from it).
_PER_JOB = ("${hydra.job.num}", "${hydra.job.id}", "${hydra.job.override_dirname}")


#: An interpolation, with the interpolations nested in it (``${oc.env:X,${hydra.job.num}}`` is one).
_INTERPOLATION = re.compile(r"\$\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}")


def _top_level(text: str, name: str) -> bool:
    """Whether ``name`` (an interpolation) occurs in ``text`` outside every other interpolation (in
    ``${oc.env:X,${hydra.job.num}}`` it is only a default that may not be used)."""
    start = text.find(name)
    while start >= 0:
        if text[:start].count("${") == text[:start].count("}"):
            return True
        start = text.find(name, start + 1)
    return False


def check_subdir_per_job(config: DictConfig) -> None:
    """``hydra.sweep.subdir`` as written names each job apart (`_PER_JOB`, outside any other
    interpolation): Hydra writes a job's ``.hydra`` files and log into its folder before the job can refuse
    it, so a subdir that may give several jobs one folder (``${chunks}``, ``.``, an environment variable
    that defaults to the job's number, ``${hydra.job.override_dirname}`` with excluded keys) is refused
    here, before any job.

    Raises:
        FolderTaken: naming the subdir and what would do.
    """
    sweep = OmegaConf.to_container(config.hydra.sweep, resolve=False)
    subdir = str(sweep.get("subdir") if isinstance(sweep, dict) else None)
    excluded = OmegaConf.select(config, "hydra.job.config.override_dirname.exclude_keys") or []
    task = task_overrides(config.hydra.overrides.task)
    # override_dirname holds the overrides' values as written, joined by its separators: a path in one
    # (cache_root=../../A), or a separator with a slash (kv_sep=/../../), climbs out
    separators = OmegaConf.select(config, "hydra.job.config.override_dirname") or {}
    paths = any("/" in o.partition("=")[2] for o in task) or any(
        "/" in str(separators.get(k, "")) or "\\" in str(separators.get(k, ""))
        for k in ("kv_sep", "item_sep"))
    names = [n for n in _PER_JOB if not (n == "${hydra.job.override_dirname}" and (excluded or paths))]
    others = [m for m in _INTERPOLATION.findall(subdir) if m not in _PER_JOB]
    if others:  # an environment variable, another key, the working directory: anywhere, once resolved
        raise FolderTaken(f"hydra.sweep.subdir={subdir} names {others[0]}, which may resolve outside the "
                          "sweep's folder or to one folder for several jobs: name each job's folder with "
                          f"{', '.join(_PER_JOB)} and plain text only, e.g. "
                          "hydra.sweep.subdir=${hydra.job.num}")
    if not any(_top_level(subdir, name) for name in names):
        raise FolderTaken(f"hydra.sweep.subdir={subdir} may give several jobs one folder (Hydra writes each "
                          "job's .hydra files there before a job can refuse it): name each job in it, e.g. "
                          f"hydra.sweep.subdir={subdir}_${{hydra.job.num}}, or "
                          "${hydra.job.override_dirname} with no excluded keys")
    if not any(_top_level(subdir, name) for name in _PER_JOB[:2]):  # the overrides alone name each job
        _jobs_apart(subdir, task, OmegaConf.select(config, "hydra.sweeper.params"))


def _jobs_apart(subdir: str, task: list[str], params: Any) -> None:
    """No two jobs of the sweep (``task`` over the sweeper's ``params``, as the basic sweeper expands them)
    have the same overrides, which ``${hydra.job.override_dirname}`` would name as one folder
    (``train.seed=0,0``: job 1 wrote its .hydra files into job 0's before it could refuse it).

    Raises:
        FolderTaken: naming the two jobs and their overrides.
    """
    from pipegnn.results.reproduce import command_jobs

    params = OmegaConf.to_container(params, resolve=False) if isinstance(params, DictConfig) else params
    try:
        jobs = command_jobs(task, params if isinstance(params, dict) else None)
    except Exception:  # noqa: BLE001 - SweepPlanError, an interval, a glob (needs the config loader): not
        return  # a plan expanded here; each job's claim still refuses a folder another job claimed
    first: dict[tuple[str, ...], int] = {}
    for num, job in enumerate(jobs):
        earlier = first.setdefault(tuple(sorted(job)), num)
        if earlier != num:
            raise FolderTaken(f"jobs {earlier} and {num} of this sweep have the same overrides "
                              f"({' '.join(job)}), so hydra.sweep.subdir={subdir} gives them one folder: "
                              "sweep each value once, or name each job, e.g. "
                              f"hydra.sweep.subdir={subdir}_${{hydra.job.num}}")


def hydra_paths(folder: Path, config: DictConfig) -> list[tuple[Path, bool]]:
    """What Hydra opens in a run's or job's ``folder`` before the run starts, each with whether it is a
    folder: its log and, unless ``hydra.output_subdir`` is null, that folder and its ``.hydra/*.yaml``.

    Raises:
        FolderTaken: ``hydra.job.name`` or ``hydra.output_subdir`` would take them outside ``folder``
            (a name with a ``/``; an absolute subdir or one with ``..``), or one of them would take the
            record's place (``hydra.output_subdir=result.json``).
    """
    name, subdir = str(config.hydra.job.name), config.hydra.output_subdir
    if "/" in name or name in ("", ".", ".."):
        raise FolderTaken(f"hydra.job.name={name} would put the run's log outside its folder: give it a "
                          "plain name")
    if len(f"{name}.log".encode()) > 255:  # Hydra's log handler would fail after the claim
        raise FolderTaken(f"hydra.job.name is {len(name.encode())} bytes long: its log's name would pass a "
                          "file name's 255; give it a shorter name")
    _no_hydra_log_files(config)
    paths = [(folder / log, False) for log in _log_files(config, name)]
    if subdir is not None:
        if Path(str(subdir)).is_absolute() or ".." in Path(str(subdir)).parts:
            raise FolderTaken(f"hydra.output_subdir={subdir} lies outside the run's folder (another run's, "
                              "perhaps): give it a folder inside, e.g. .hydra")
        paths += [(folder / str(subdir), True)]
        paths += [(folder / str(subdir) / f"{n}.yaml", False) for n in ("config", "hydra", "overrides")]
    for path, _ in paths:  # the record's place is the record's: a folder or a log there would lose it
        written = path.relative_to(folder)
        if written.parts[:1] == (RECORD_NAME,):
            in_subdir = subdir is not None and written.parts[0] == Path(str(subdir)).parts[0]
            key = "hydra.output_subdir" if in_subdir else "hydra.job_logging"
            raise FolderTaken(f"{key} would put Hydra's {written} where the run's record goes "
                              f"({folder / RECORD_NAME}): name another")
    return paths


#: Where a job log handler's file may be: the run's folder, by a plain name.
_LOG_IN_FOLDER = re.compile(r"\$\{hydra\.runtime\.output_dir\}/(?P<name>(?:[^/${}]|\$\{hydra\.job\.name\})+)")


def _log_files(config: DictConfig, name: str) -> list[str]:
    """The names of the files Hydra's job logging writes in the run's folder (``hydra.job_logging``'s
    handlers with a ``filename``; ``train.log`` by default).

    Raises:
        FolderTaken: a handler's file lies anywhere else (``/elsewhere/train.log``: another run's log).
    """
    logging_config = OmegaConf.to_container(config.hydra.job_logging, resolve=False) \
        if config.hydra.get("job_logging") is not None else None
    handlers = logging_config.get("handlers") if isinstance(logging_config, dict) else None
    out = []
    for handler, settings in (handlers.items() if isinstance(handlers, dict) else ()):
        filename = settings.get("filename") if isinstance(settings, dict) else None
        if filename is None:
            continue
        m = _LOG_IN_FOLDER.fullmatch(str(filename))
        if m is None:
            raise FolderTaken(f"hydra.job_logging.handlers.{handler}.filename={filename} may lie outside the "
                              "run's folder: name a file in it, e.g. ${hydra.runtime.output_dir}/"
                              "${hydra.job.name}.log")
        out.append(m["name"].replace("${hydra.job.name}", name))
    return out


def _no_hydra_log_files(config: DictConfig) -> None:
    """Hydra's own logging (``hydra.hydra_logging``) writes to no file: it runs before any run's folder
    is known, so a file there may lie anywhere (another run's log, a FIFO that hangs the start).

    Raises:
        FolderTaken: naming the handler and its file.
    """
    hydra_logging = OmegaConf.to_container(config.hydra.hydra_logging, resolve=False) \
        if config.hydra.get("hydra_logging") is not None else None
    handlers = hydra_logging.get("handlers") if isinstance(hydra_logging, dict) else None
    for handler, settings in (handlers.items() if isinstance(handlers, dict) else ()):
        if isinstance(settings, dict) and settings.get("filename") is not None:
            raise FolderTaken(f"hydra.hydra_logging.handlers.{handler}.filename={settings['filename']}: "
                              "Hydra's own log may go to the console only (a file there may be another "
                              "run's); log into the run's folder through hydra.job_logging")


def check_kinds(paths: list[tuple[Path, bool]]) -> None:
    """Each of ``paths`` is what Hydra writes there (a regular file of one link, or for a folder a real
    one) or nothing: a FIFO there hung the run (Hydra opens it and waits), a link, or a hard link to another
    run's file, wrote into another run's folder, anything else ended in Hydra's traceback.

    Raises:
        FolderTaken: naming the first that is not, and what it is.
    """
    for path, folder in paths:
        try:
            info = os.lstat(path)
        except OSError:
            continue
        mode = info.st_mode
        if not folder and stat.S_ISREG(mode) and info.st_nlink > 1:
            raise FolderTaken(f"{path} is one of {info.st_nlink} hard links to one file (another run's, "
                              "perhaps), which Hydra would write through before the run starts; remove it")
        if not (stat.S_ISDIR(mode) if folder else stat.S_ISREG(mode)):
            what = "a link" if stat.S_ISLNK(mode) else "a file" if stat.S_ISREG(mode) else file_kind(mode)
            kind = "folder" if folder else "regular file"
            raise FolderTaken(f"{path} is {what}, where Hydra writes a {kind} before the run starts; "
                              "remove it")


def check_subdir_inside(config: DictConfig) -> None:
    """A job's folder lies inside its sweep's: ``hydra.sweep.subdir`` as written may be neither absolute
    nor climb out (``..``). Hydra writes a job's ``.hydra`` files and log before the job can refuse a
    folder, so a subdir into another sweep's folders is refused here, before any job.

    Raises:
        FolderTaken: naming the subdir.
    """
    sweep = OmegaConf.to_container(config.hydra.sweep, resolve=False)
    if not isinstance(sweep, dict):
        return
    subdir = sweep.get("subdir")
    if isinstance(subdir, str) and (os.path.isabs(subdir) or ".." in Path(subdir).parts):
        raise FolderTaken(f"hydra.sweep.subdir={subdir} lies outside hydra.sweep.dir={sweep.get('dir')} (in "
                          "another sweep's folders, perhaps): give each job a folder inside its sweep's, "
                          "e.g. hydra.sweep.subdir=${hydra.job.num}")
