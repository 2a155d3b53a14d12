"""What a sweep planned: the jobs of its ``multirun.yaml``, expanded as Hydra's basic sweeper does.

[`planned_jobs`][pipegnn.results.sweep_plan.planned_jobs] gives each planned job's overrides and folder, so
that [`sweep_jobs`][pipegnn.results.sweep.sweep_jobs] can name the jobs that never started (``missing``). The
file is read as data ([`hydra_files`][pipegnn.results.hydra_files]); the sweeper's ``_target_`` is compared
as text, never imported; a damaged plan raises [`SweepPlanError`][pipegnn.results.sweep_plan.SweepPlanError]
(it must never read as "no plan": that would hide missing jobs).
"""
from __future__ import annotations

import itertools
import os
import re
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from pipegnn.config.compare import plain_config
from pipegnn.jsonfile import NotRegularFileError
from pipegnn.results.hydra_files import (
    _RESOLVER_CALL,
    MAX_RESOLVED_CHARS,
    _get,
    _inert,
    _resolved_size,
    read_hydra_file,
)

__all__ = ["MAX_PLANNED_CHARS", "MAX_PLANNED_JOBS", "MAX_PLANNED_OVERRIDES", "SweepPlanError", "expand_jobs",
           "planned_jobs"]

_BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
#: The most jobs a sweep's plan is expanded into (Hydra's basic sweeper runs them one by one: a plan of
#: more is damaged, or no plan anyone runs).
MAX_PLANNED_JOBS = 10_000
#: The most overrides all planned jobs hold together (jobs x keys): each job's folder is worked out from
#: its overrides (10,000 jobs of 2,002 keys each ran past 5 minutes).
MAX_PLANNED_OVERRIDES = 500_000
#: The most characters all planned jobs' overrides hold together (each job's overrides are kept, and set
#: its columns: 10,000 jobs holding a 50,000-character value took 2.5 GB; this project's sweeps: at most
#: 200 characters a job).
MAX_PLANNED_CHARS = 20_000_000
#: The longest ``hydra.sweep.subdir`` worked out per job (a path holds at most 4,096 bytes).
_MAX_SUBDIR_CHARS = 4096


class SweepPlanError(ValueError):
    """A sweep's ``multirun.yaml`` that cannot be read or expanded into its jobs (``str()`` names it)."""


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
    """The sweep's ``multirun.yaml`` (as plain data) and
    [`planned_jobs`][pipegnn.results.sweep_plan.planned_jobs]; None without one, or for a sweeper other
    than Hydra's basic one (its plan is not known here).

    Raises:
        SweepPlanError: the file is damaged: not a regular file (a link to nothing, a folder, a FIFO), not
            YAML, no ``hydra.sweeper``, a sweeper that is no class name, or jobs that cannot be expanded
            (a damaged plan must never read as "no plan": it would hide missing jobs).
    """
    marker = sweep_dir / "multirun.yaml"
    try:
        cfg = read_hydra_file(marker)
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
        jobs = expand_jobs(overrides, marker)
    except SweepPlanError:
        raise
    except Exception:  # noqa: BLE001 - overrides that need the config to expand (a glob): unknown here
        return None
    return cfg, [(job, sweep_dir / subdir) for job, subdir in zip(jobs, _subdirs(cfg, jobs, Parsed()))]


def expand_jobs(overrides: list[Any], marker: Path) -> list[list[str]]:
    """The jobs of parsed ``overrides`` as Hydra's basic sweeper expands them: each key's values (a
    sweep's, or the one value), the last override of a key winning its place, their product in order.
    Restated from Hydra's public override API: the sweeper's own expansion is in a private module. A plan
    of more than `MAX_PLANNED_JOBS` jobs is counted before it is expanded (``range(0,1000000)`` would
    build a million jobs' overrides).

    Raises:
        SweepPlanError: more than `MAX_PLANNED_JOBS` jobs (``marker``: the plan's file, named).
        Exception: an override the basic sweeper cannot expand either (an interval; a glob needs the
            config)."""
    values: dict[str, list[str]] = {}
    for override in overrides:
        key = override.get_key_element()
        if override.is_sweep_override():
            if not override.is_discrete_sweep():
                raise ValueError(f"{key}: the basic sweeper expands discrete sweeps only")
            found = list(itertools.islice(override.sweep_string_iterator(), MAX_PLANNED_JOBS + 1))
            values[key] = [f"{key}={value}" for value in found]
        else:
            values[key] = [f"{key}={override.get_value_element_as_str()}"]
    count = 1
    for key, found in values.items():
        count *= len(found)
        if count > MAX_PLANNED_JOBS:
            raise SweepPlanError(f"{marker}: plans more than {MAX_PLANNED_JOBS:,} jobs (at {key}, of "
                                 f"{'more than ' * (len(found) > MAX_PLANNED_JOBS)}"
                                 f"{min(len(found), MAX_PLANNED_JOBS):,} values): not expanded")
    if count * len(values) > MAX_PLANNED_OVERRIDES:
        raise SweepPlanError(f"{marker}: plans {count:,} jobs of {len(values):,} overrides each, more than "
                             f"{MAX_PLANNED_OVERRIDES:,} overrides in all: not expanded")
    chars = sum(sum(map(len, found)) * (count // len(found)) for found in values.values() if found)
    if chars > MAX_PLANNED_CHARS:
        raise SweepPlanError(f"{marker}: plans {count:,} jobs whose overrides hold {chars:,} characters in "
                             f"all, more than {MAX_PLANNED_CHARS:,}: not expanded")
    return [list(job) for job in itertools.product(*values.values())]


class Parsed(dict[str, Any]):
    """Overrides parsed by Hydra's parser, each distinct one once within one plan (a sweep's jobs repeat
    their keys' values in every job: 10,000 jobs of 49 keys, each job parsed whole, took a minute); one
    per plan, so that what it holds is bounded by the plan's bounds. ``parsed(override)``."""

    def __call__(self, override: str) -> Any:
        if override not in self:
            from hydra.core.override_parser.overrides_parser import OverridesParser

            self[override] = OverridesParser.create().parse_overrides([override])[0]
        return self[override]


def _subdirs(cfg: dict[str, Any], jobs: list[list[str]], parsed: Parsed) -> list[str]:
    """``hydra.sweep.subdir`` of each job (as Hydra's launchers set it up; interpolations between the
    plan's keys only, see `_inert`); a job's number where it cannot be worked out. The plan's Hydra
    config is built once (once per job, 10,000 jobs took minutes)."""
    raw = _get(cfg, "hydra", "sweep", "subdir")
    if raw in (None, "${hydra.job.num}"):
        return [str(num) for num in range(len(jobs))]
    # resolved once per job: a subdir no path can hold, or interpolations past their bound, are numbers
    # (a 60,000-character subdir took 50 ms a job; a chain of doubling references grows without bound)
    if len(str(raw)) > _MAX_SUBDIR_CHARS or _resolved_size({"hydra": cfg.get("hydra")}) > MAX_RESOLVED_CHARS:
        return [str(num) for num in range(len(jobs))]
    try:
        hydra = OmegaConf.create(_inert({"hydra": cfg["hydra"]}))
        settings = _get(cfg, "hydra", "job", "config", "override_dirname")
        exclude = settings.get("exclude_keys") or []
    except Exception:  # noqa: BLE001
        return [str(num) for num in range(len(jobs))]
    out = []
    for num, overrides in enumerate(jobs):
        try:
            lines = sorted(o.input_line for o in map(parsed, overrides) if o.key_or_group not in exclude)
            dirname = re.sub("=", settings.get("kv_sep", "="), settings.get("item_sep", ",").join(lines))
            hydra.hydra.job.num, hydra.hydra.job.id, hydra.hydra.job.override_dirname = num, num, dirname
            subdir = str(OmegaConf.select(hydra, "hydra.sweep.subdir", throw_on_missing=True))
        except Exception:  # noqa: BLE001
            subdir = str(num)
        # a resolver's call left as its text (see _inert) is not the folder Hydra made
        out.append(str(num) if _RESOLVER_CALL.search(subdir) else subdir)
    return out


def _settings(overrides: list[str], sweep_cfg: dict[str, Any],
              parsed: Parsed) -> tuple[dict[str, Any], dict[str, Any]]:
    """What a job's overrides say of its config: (config keys they set, config-group choices). A key is
    a group when the sweep's config chose it as one, names a path or package (``a/b``, ``g@pkg``), or
    is a top-level key with a text value that is no leaf of the sweep's config (``+variant=x``)."""
    config: dict[str, Any] = {}
    choices: dict[str, Any] = {}
    try:
        groups = set(_get(sweep_cfg, "hydra", "runtime", "choices") or {})
        base = sweep_cfg
        for o in map(parsed, overrides):
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
