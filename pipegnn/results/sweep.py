"""Sweeps on disk: which jobs a sweep ran, planned and left without a record, and resume checks.

- [`completed_record`][pipegnn.results.sweep.completed_record]: with ``resume=true`` a job whose output
  directory already holds a ``completed`` record of the same configuration is skipped
  (``experiments/train.py``).
- [`sweep_jobs`][pipegnn.results.sweep.sweep_jobs] /
  [`unrecorded_jobs`][pipegnn.results.sweep.unrecorded_jobs]: a sweep's jobs as found on disk, with those that
  left no record: ``incomplete`` (Hydra started the job, it wrote no ``result.json``) and ``missing`` (planned
  by the sweep's ``multirun.yaml``, never started), which [`pipegnn.results.load`][pipegnn.results.table.load]
  lists too.

Reading a sweep runs nothing its files name: the ``.hydra/*.yaml`` files and ``multirun.yaml`` are
parsed as YAML data (PyYAML's safe loader, through OmegaConf), only when they are regular files (a FIFO
never makes the reader wait) of at most `MAX_YAML_BYTES` without a YAML alias (Hydra writes none; aliases
of aliases, a few hundred bytes, would expand to billions of nodes); the sweeper's ``_target_`` is compared as
text, never imported; and interpolations are resolved only between the file's own keys (``${chunks}``):
one that calls a resolver (``${oc.env:HOME}``, ``${now:...}``, any registered one) stays as its text.

The end-of-sweep failure summary and the progress bar are in
[`pipegnn.results.callbacks`][pipegnn.results.callbacks].
"""
from __future__ import annotations

import io
import itertools
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from omegaconf import DictConfig, OmegaConf

from pipegnn.record import RunRecord, Status
from pipegnn.results.records import (
    RECORD_NAME,
    NotRegularFileError,
    RecordError,
    find_records,
    is_entry,
    load_record,
    natural_key,
    place_of,
    read_regular,
)
from pipegnn.runconfig import VOLATILE_KEYS, comparable_config, plain_config

__all__ = ["INCOMPLETE", "MAX_YAML_BYTES", "VOLATILE_KEYS", "Job", "SweepPlanError", "comparable_config",
           "completed_record", "planned_jobs", "sweep_jobs", "unrecorded_jobs"]

#: Error of an ``incomplete`` job (started, no record).
INCOMPLETE = "no result.json: the job was killed or died before writing it, or is still running"
_BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
#: The largest Hydra file (``multirun.yaml``, ``.hydra/*.yaml``) a reader parses.
MAX_YAML_BYTES = 64 << 20
#: Where a string calls a resolver: an interpolation whose text before its first brace holds a colon
#: (``${oc.env:X}``, ``${a.${now:%H}}``); a key of a node interpolation never holds one.
_RESOLVER_CALL = re.compile(r"\$\{[^{}]*:")
_ESCAPABLE = re.compile(r"(\\*)\$\{")


def _plain(node: Any, resolve: bool = False) -> Any:
    """``OmegaConf.to_container(node)``: a config as plain data, typed Any (its readers check what they
    use, or catch)."""
    return OmegaConf.to_container(node, resolve=resolve)


def _load_yaml(path: Path) -> Any:
    """What the Hydra file ``path`` holds, as plain data with its interpolations as written: read only
    when it is a regular file of at most `MAX_YAML_BYTES`, parsed by OmegaConf's safe YAML loader.

    Raises:
        OSError: it cannot be read (FileNotFoundError: there is none or a link to nothing;
            NotRegularFileError: a FIFO, a folder, a device).
        Exception: it is too large, holds a YAML alias (``*name``, see `_refuse_aliases`), or is not
            YAML that OmegaConf takes.
    """
    data = read_regular(path, MAX_YAML_BYTES)
    _refuse_aliases(path, data)
    return _plain(OmegaConf.load(io.BytesIO(data)))


def _refuse_aliases(path: Path, data: bytes) -> None:
    """Raise ValueError naming ``path`` when its YAML holds an alias (``*name``): Hydra writes none, and a
    few hundred bytes of aliases of aliases expand to billions of nodes (a "billion laughs"). Read as
    events, before anything is built: one pass over the text."""
    import yaml
    from omegaconf._utils import get_yaml_loader

    for event in yaml.parse(io.BytesIO(data), Loader=get_yaml_loader()):
        if isinstance(event, yaml.AliasEvent):
            raise ValueError(f"{path}: holds a YAML alias (*{event.anchor}), which no Hydra file does: not "
                             "read (aliases of aliases expand past any memory)")


def _inert(value: Any) -> Any:
    """``value`` (plain data) with every string that calls a resolver escaped, so that OmegaConf reads
    it as the literal text it is: resolving it then calls nothing."""
    if isinstance(value, dict):
        return {k: _inert(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_inert(v) for v in value]
    if isinstance(value, str) and _RESOLVER_CALL.search(value):
        # n backslashes before "${" stand for n/2 of them and an interpolation: 2n + 1 for n and the text
        return _ESCAPABLE.sub(lambda m: m.group(1) * 2 + "\\${", value)
    return value


def _resolved(data: Any) -> Any:
    """``data`` (a Hydra file's plain data) with its interpolations between its own keys resolved
    (``${model.lr}``); one that calls a resolver stays as its text (see `_inert`), and ``data``
    stays as written where they cannot be resolved."""
    try:
        return _plain(OmegaConf.create(_inert(data)), resolve=True)
    except Exception:  # noqa: BLE001 - a key that is not there, a cycle (RecursionError), ...
        return data


def _get(data: Any, *keys: str) -> Any:
    """``data[k1][k2]...``, None where a level is not a mapping or lacks the key."""
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _differences(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        keys = sorted(set(a) | set(b), key=str)
        return [d for k in keys for d in _differences(a.get(k), b.get(k), f"{prefix}{k}.")]
    return [] if a == b else [f"{prefix[:-1]}: {a!r} -> {b!r}"]


def completed_record(output_dir: str | Path, config: Mapping[str, Any] | DictConfig
                     ) -> tuple[RunRecord | None, str]:
    """The record to keep when resuming: ``output_dir/result.json`` (read as every record is,
    [`load_record`][pipegnn.results.records.load_record]) if it is ``completed`` and was made with the same
    config (see [`comparable_config`][pipegnn.runconfig.comparable_config]), else None; with the reason either
    way (logged by the caller)."""
    path = Path(output_dir) / RECORD_NAME
    if not is_entry(path):
        return None, "no previous record"
    try:
        record = load_record(path)
    except RecordError as e:
        return None, f"previous record unreadable ({e.reason})"
    except OSError as e:
        return None, f"previous record unreadable ({type(e).__name__}: {e})"
    if record.status is not Status.COMPLETED:
        return None, f"previous record is {record.status.value}"
    # A key an older record lacks and this config leaves null (a later option's default) is no change.
    diff = _differences(comparable_config(record.config, output_dir),
                        comparable_config(config, output_dir))
    if diff:
        more = f" (+{len(diff) - 3} more)" if len(diff) > 3 else ""
        return None, f"config changed since the completed record: {'; '.join(diff[:3])}{more}"
    return record, "completed"


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


class SweepPlanError(ValueError):
    """A sweep's ``multirun.yaml`` that cannot be read or expanded into its jobs (``str()`` names it)."""


def _overrides(directory: Path) -> list[str] | None:
    """The job's overrides as Hydra saved them (``.hydra/overrides.yaml``), None when absent."""
    try:
        saved = _load_yaml(directory / ".hydra" / "overrides.yaml")
    except Exception:  # noqa: BLE001 - .hydra files are optional (hydra.output_subdir=null)
        return None
    return [str(o) for o in saved] if isinstance(saved, list) else None


def _job_info(directory: Path) -> tuple[int | None, str]:
    num = None
    overrides = _overrides(directory)
    try:
        num = int(_get(_load_yaml(directory / ".hydra" / "hydra.yaml"), "hydra", "job", "num"))
    except Exception:  # noqa: BLE001 - no file, no number (an interpolation is no number either)
        if directory.name.isdigit():
            num = int(directory.name)
    return num, directory.name if overrides is None else " ".join(overrides)


def _hydra_job_dirs(root: Path) -> set[Path]:
    """Directories below ``root`` (itself included) that Hydra ran a job in: they hold ``.hydra/`` with
    the job's ``overrides.yaml`` or ``config.yaml``."""
    return {p.parent for p in root.rglob(".hydra") if p.is_dir()
            and ((p / "overrides.yaml").is_file() or (p / "config.yaml").is_file())}


def _incomplete(directory: Path) -> Job:
    """A job Hydra started that left no record, with what its ``.hydra/`` files tell of its config."""
    num, overrides = _job_info(directory)
    config: Any = {}
    try:
        config = _resolved(_load_yaml(directory / ".hydra" / "config.yaml"))
    except Exception:  # noqa: BLE001
        pass
    try:
        choices = _get(_load_yaml(directory / ".hydra" / "hydra.yaml"), "hydra", "runtime", "choices")
    except Exception:  # noqa: BLE001
        choices = None
    return Job(directory, num, overrides, "incomplete", INCOMPLETE, False,
               config=plain_config(config) if isinstance(config, dict) else {},
               choices={k: v for k, v in (choices if isinstance(choices, dict) else {}).items()
                        if not str(k).startswith("hydra/")})


def planned_jobs(sweep_dir: str | Path) -> list[tuple[list[str], Path]] | None:
    """The jobs the sweep in ``sweep_dir`` planned, in job order (the index is the job number): each
    job's overrides (as its ``.hydra/overrides.yaml`` will hold them) and its folder.

    Read from ``<sweep_dir>/multirun.yaml``, which Hydra's basic sweeper writes before the first job,
    expanded as that sweeper does (``hydra.sweeper.params`` then the command line's overrides, their
    product). None when that is not knowable: no ``multirun.yaml``, another sweeper, or overrides that
    need the config (a ``glob``). Nothing the file names is imported or called (see the module doc).

    Raises:
        SweepPlanError: a damaged ``multirun.yaml``, or one that is not a regular file (a folder, a FIFO,
            a link to nothing)."""
    plan = _plan(Path(sweep_dir))
    return None if plan is None else plan[1]


def _plan(sweep_dir: Path) -> tuple[dict[str, Any], list[tuple[list[str], Path]]] | None:
    """The sweep's ``multirun.yaml`` (as plain data) and [`planned_jobs`][pipegnn.results.sweep.planned_jobs];
    None without one, or for a sweeper other than Hydra's basic one (its plan is not known here).

    Raises:
        SweepPlanError: the file is damaged: not a regular file (a link to nothing, a folder, a FIFO), not
            YAML, no ``hydra.sweeper``, a sweeper that is no class name, or jobs that cannot be expanded
            (a damaged plan must never read as "no plan": it would hide missing jobs).
    """
    marker = sweep_dir / "multirun.yaml"
    try:
        cfg = _load_yaml(marker)
    except FileNotFoundError:
        if not os.path.islink(marker):
            return None
        raise SweepPlanError(f"{marker}: a link to nothing ({os.readlink(marker)!r}), not the sweep "
                             "plan") from None
    except NotRegularFileError as e:
        raise SweepPlanError(f"{marker}: not the sweep plan ({e.strerror})") from None
    except Exception as e:  # noqa: BLE001 - YAML errors, binary content, nesting too deep, a link loop
        raise SweepPlanError(f"{marker}: unreadable sweep plan ({type(e).__name__}: "
                             f"{str(e).splitlines()[0] if str(e) else ''})") from None
    target = _get(cfg, "hydra", "sweeper", "_target_")
    if target is None or not isinstance(cfg, dict):  # (a list has no target either)
        raise SweepPlanError(f"{marker}: not a whole sweep plan (no hydra.sweeper: cut short or rewritten?)")
    if target != _BASIC_SWEEPER:
        # Compared as text: importing the class it names would run code that came with the folder.
        if not (isinstance(target, str) and all(p.isidentifier() for p in target.split("."))
                and "." in target):
            raise SweepPlanError(f"{marker}: its sweeper {target!r} is no class name (cut short?)")
        if not isinstance(_get(cfg, "hydra", "overrides"), dict):  # written after the sweeper
            raise SweepPlanError(f"{marker}: not a whole sweep plan (no hydra.overrides after its "
                                 f"sweeper {target!r}: cut short?)")
        return None  # another sweeper's plan: not known here
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    try:
        params = _get(cfg, "hydra", "sweeper", "params") or {}
        task = [str(o) for o in _get(cfg, "hydra", "overrides", "task") or []]
        if not isinstance(_get(cfg, "hydra", "overrides"), dict):
            raise ValueError("no hydra.overrides")
        overrides = parser.parse_overrides([*(f"{k}={v}" for k, v in params.items()), *task])
    except Exception as e:  # noqa: BLE001 - a basic sweep's plan whose overrides do not parse is damaged
        raise SweepPlanError(f"{marker}: its overrides cannot be read ({type(e).__name__}: "
                             f"{str(e).splitlines()[0] if str(e) else ''})") from None
    try:
        jobs = _expand(overrides)
    except Exception:  # noqa: BLE001 - overrides that need the config to expand (a glob): unknown here
        return None
    return cfg, [(job, sweep_dir / _subdir(cfg, num, job, parser)) for num, job in enumerate(jobs)]


def _expand(overrides: list[Any]) -> list[list[str]]:
    """The jobs of parsed ``overrides`` as Hydra's basic sweeper expands them: each key's values (a
    sweep's, or the one value), the last override of a key winning its place, their product in order.
    Restated from Hydra's public override API: the sweeper's own expansion is in a private module.

    Raises:
        Exception: an override the basic sweeper cannot expand either (an interval; a glob needs the
            config)."""
    values: dict[str, list[str]] = {}
    for override in overrides:
        key = override.get_key_element()
        if override.is_sweep_override():
            if not override.is_discrete_sweep():
                raise ValueError(f"{key}: the basic sweeper expands discrete sweeps only")
            values[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            values[key] = [f"{key}={override.get_value_element_as_str()}"]
    return [list(job) for job in itertools.product(*values.values())]


def _subdir(cfg: dict[str, Any], num: int, overrides: list[str], parser: Any) -> str:
    """``hydra.sweep.subdir`` of job ``num`` (as Hydra's launchers set it up; interpolations between the
    plan's keys only, see `_inert`); the job number when it cannot be worked out."""
    raw = _get(cfg, "hydra", "sweep", "subdir")
    if raw in (None, "${hydra.job.num}"):
        return str(num)
    try:
        hydra = OmegaConf.create(_inert({"hydra": cfg["hydra"]}))
        settings = _get(cfg, "hydra", "job", "config", "override_dirname")
        lines = sorted(o.input_line for o in parser.parse_overrides(overrides)
                       if o.key_or_group not in (settings.get("exclude_keys") or []))
        dirname = re.sub("=", settings.get("kv_sep", "="), settings.get("item_sep", ",").join(lines))
        hydra.hydra.job.num, hydra.hydra.job.id, hydra.hydra.job.override_dirname = num, num, dirname
        subdir = str(OmegaConf.select(hydra, "hydra.sweep.subdir", throw_on_missing=True))
    except Exception:  # noqa: BLE001
        return str(num)
    # a resolver's call left as its text (see _inert) is not the folder Hydra made
    return str(num) if _RESOLVER_CALL.search(subdir) else subdir


def _missing(sweep_dir: Path, started: Iterable[Path]) -> list[Job]:
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
    started = {place_of(d) for d in started}
    ran = {tuple(o) for o in (_overrides(d) for d in started) if o is not None}
    jobs = []
    for num, (overrides, directory) in enumerate(planned):
        if tuple(overrides) in ran or place_of(directory) in started:
            continue
        if (directory.is_dir() and not (directory / ".hydra").exists()
                and not is_entry(directory / RECORD_NAME)):
            job = _incomplete(directory)
            job.num, job.overrides = num, " ".join(overrides)
        else:
            config, choices = _settings(overrides, cfg)
            job = Job(directory, num, " ".join(overrides), "missing",
                      f"never started: job {num} of the sweep ({' '.join(overrides)})", False,
                      config=config, choices=choices)
        jobs.append(job)
    return jobs


def _settings(overrides: list[str], sweep_cfg: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """What a job's overrides say of its config: (config keys they set, config-group choices). A key is
    a group when the sweep's config chose it as one, names a path or package (``a/b``, ``g@pkg``), or
    is a top-level key with a text value that is no leaf of the sweep's config (``+variant=x``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    config: dict[str, Any] = {}
    choices: dict[str, Any] = {}
    try:
        groups = set(_get(sweep_cfg, "hydra", "runtime", "choices") or {})
        base = sweep_cfg
        for o in OverridesParser.create().parse_overrides(overrides):
            key = o.key_or_group
            if o.is_delete() or key == "hydra" or key.startswith(("hydra.", "hydra/")):
                continue
            value = plain_config(o.value())
            leaf = base.get(key) if "." not in key else None
            if key in groups or "/" in key or o.package is not None or (
                    "." not in key and isinstance(value, str) and (leaf is None or isinstance(leaf, dict))):
                choices[key] = value
                continue
            node = config
            *parents, last = key.split(".")
            for part in parents:
                if not isinstance(node.get(part), dict):
                    node[part] = {}
                node = node[part]
            node[last] = value
    except Exception:  # noqa: BLE001 - the columns of a missing job are a courtesy, never an error
        pass
    return config, choices


def sweep_jobs(sweep_dir: str | Path, since: float | None = None) -> list[Job]:
    """The jobs under ``sweep_dir`` (directories holding a record or Hydra's ``.hydra/``) started at or
    after ``since`` (a file modification time; None: every job), in job order, with the jobs the sweep
    planned ([`planned_jobs`][pipegnn.results.sweep.planned_jobs]) that none of them ran (status ``missing``;
    ``incomplete`` when the folder exists). A started job without a record is ``incomplete``.

    A job's start is the time Hydra wrote its ``.hydra/overrides.yaml``, which it does for every job it
    runs, even one that resume then skips; jobs left over from an earlier, larger sweep in the same
    directory are older and left out."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        return []
    dirs = {p.parent for p in find_records(sweep_dir)} | _hydra_job_dirs(sweep_dir)
    jobs = []
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
            jobs.append(_incomplete(directory))
            continue
        num, overrides = _job_info(directory)
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
    jobs += _missing(sweep_dir, [j.directory for j in jobs])
    return _in_order(jobs)


def unrecorded_jobs(root: str | Path) -> list[Job]:
    """Every job without a record below ``root`` (any number of sweeps and runs, at any depth), in
    job order: a folder Hydra started a job in (``.hydra/``) with no ``result.json`` (``incomplete``),
    and each sweep's planned jobs that none of its folders ran (see
    [`sweep_jobs`][pipegnn.results.sweep.sweep_jobs])."""
    root = Path(root)
    if not root.is_dir():
        return []
    dirs = {p.parent for p in find_records(root)} | _hydra_job_dirs(root)
    jobs = [_incomplete(d) for d in dirs if not is_entry(d / RECORD_NAME)]
    for sweep in _sweep_dirs(root):
        jobs += _missing(sweep, [d for d in dirs if sweep in d.parents])
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
    return [Path(folder) for folder, dirs, files in os.walk(root) if "multirun.yaml" in (*dirs, *files)]


def _in_order(jobs: list[Job]) -> list[Job]:
    return sorted(jobs, key=lambda j: (j.num if j.num is not None else sys.maxsize, natural_key(j.directory)))
