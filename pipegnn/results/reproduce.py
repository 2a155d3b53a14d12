"""A record's configuration composed again at this commit: its overrides (the command line's and the
sweep's, which ``experiments/train.py`` keeps in every record) composed with the presets as they are now,
compared with the configuration the record holds, on the keys that change what a run computes.

A figure is reproducible from its preset only while this comes out equal: a default changed since the
record was written (``microbatch.targets``, say) is named here, key by key, with both values.

    python -m pipegnn.results --recompose results/reference/halo_modes

[`drift`][pipegnn.results.reproduce.drift] compares one record;
[`recompose`][pipegnn.results.reproduce.recompose] every record under a folder or in an archive.
"""
from __future__ import annotations

import copy
import functools
import json
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Iterator, Mapping, Sequence

from pipegnn.config.compare import comparable_config, drop_keys
from pipegnn.results.archive_format import ArchiveError, is_archive
from pipegnn.results.archive_read import archives_of, entries, read
from pipegnn.results.record_files import (
    MAX_RECORD_BYTES,
    RECORD_NAME,
    RecordError,
    distinct,
    find_records,
    load_record,
    record_of,
)
from pipegnn.run_record import RunRecord

__all__ = ["MAX_COMPOSITIONS", "MAX_OVERRIDES", "MAX_OVERRIDES_CHARS", "MAX_OVERRIDE_CHARS", "MAX_RECOMPOSED",
           "MAX_RECOMPOSED_BYTES", "PLACE_KEYS", "Compositions", "Drift", "TooManyRecords", "command_jobs",
           "composed_now", "computed_keys", "drift", "recompose"]

#: Keys that say where and how a run was kept, watched or bounded, not what it computed: where data and
#: caches live, trackers, resume, checkpoints, caps and deadlines, how processes start, the trace.
#: Everything else (the epoch budget and early stopping included: another budget is another figure)
#: must come out equal.
PLACE_KEYS = (
    ("resume",), ("logger",), ("cache_root",), ("data", "root"), ("data", "cache"), ("microbatch", "cache"),
    ("train", "checkpoint_every"), ("train", "memory_limit_gb"), ("engine", "memory_limit_gb"),
    ("engine", "timeout_s"), ("engine", "launcher"), ("engine", "start_method"), ("engine", "timeline"),
    ("engine", "trace_epoch"),
)
#: How a key that one side lacks shows.
_ABSENT = "<absent>"


@dataclass(frozen=True)
class Drift:
    """One record against its configuration composed now: ``differs`` maps each key that differs to
    (the record's value, this commit's); ``error`` says why it could not be composed (None: it was);
    ``overrides`` is None for a record that kept none (written before records kept them)."""

    path: Path
    overrides: list[str] | None
    differs: dict[str, tuple[Any, Any]]
    error: str | None = None


def computed_keys(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` flattened to dotted keys, without `PLACE_KEYS` (and the keys every comparison leaves
    out: [`comparable_config`][pipegnn.config.compare.comparable_config])."""
    return _flat(drop_keys(comparable_config(json.loads(json.dumps(dict(config), default=str))), PLACE_KEYS))


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        return {k: v for name, x in value.items() for k, v in _flat(x, f"{prefix}{name}.").items()}
    return {prefix[:-1]: value}


#: Bounds of the overrides composed: a record's come from a command line.
MAX_OVERRIDES = 1_000
MAX_OVERRIDE_CHARS = 4_096
#: ... and of all of them together (Hydra's parser took minutes over 999 lists of 2,000 items).
MAX_OVERRIDES_CHARS = 65_536


def _is_hydra(override: str) -> bool:
    """Whether ``override`` sets Hydra's own config (``hydra.run.dir``, ``hydra/launcher=...``): where and
    how a job ran, never what it computed, and nothing composed here (``hydra.searchpath=[pkg://m]`` would
    import ``m``)."""
    key = override.lstrip("+~").partition("=")[0].strip()
    return key == "hydra" or key.startswith(("hydra.", "hydra/"))


def _override_problem(overrides: list[str]) -> str | None:
    """Why a record's ``overrides`` are not composed (None: they are): more than `MAX_OVERRIDES` or one
    longer than `MAX_OVERRIDE_CHARS`, or an interpolation in one (``${oc.env:HOME}`` would be resolved:
    a record never calls a resolver, nor expands chains of interpolations)."""
    if len(overrides) > MAX_OVERRIDES:
        return f"more than {MAX_OVERRIDES:,} overrides, more than any command line gives: not composed"
    total = sum(len(str(o)) for o in overrides)
    if total > MAX_OVERRIDES_CHARS:
        return f"overrides of {total:,} characters (at most {MAX_OVERRIDES_CHARS:,} in all): not composed"
    for o in overrides:
        if _is_hydra(o):
            continue
        if len(o) > MAX_OVERRIDE_CHARS:
            return f"an override of {len(o):,} characters (at most {MAX_OVERRIDE_CHARS:,}): not composed"
        if "${" in o:
            return f"the override {o[:80]!r} holds an interpolation, which is not resolved here: not composed"
    return None


def drift(record: RunRecord, path: str | Path = "", compositions: Compositions | None = None) -> Drift:
    """``record``'s overrides composed at this commit against its ``config`` (see the module doc);
    ``compositions``: the budget of whole compositions it may spend (``recompose``'s, over a folder)."""
    from pipegnn.config.typed import config_container

    if record.overrides is None:
        return Drift(Path(path), None, {})
    problem = _override_problem(record.overrides)
    if problem is not None:
        return Drift(Path(path), record.overrides, {}, problem)
    try:
        now = computed_keys(config_container(composed_now([o for o in record.overrides if not _is_hydra(o)],
                                                          compositions)))
    except Exception as e:  # noqa: BLE001 - an override of a key or preset that is gone: named, not raised
        return Drift(Path(path), record.overrides, {}, f"{type(e).__name__}: {str(e).splitlines()[0]}")
    then = computed_keys(record.config)
    keys = sorted(k for k in then.keys() | now.keys() if then.get(k, _ABSENT) != now.get(k, _ABSENT))
    return Drift(Path(path), record.overrides, {k: (then.get(k, _ABSENT), now.get(k, _ABSENT)) for k in keys})


#: The most whole compositions (Hydra's, about 0.1 s each) one ``--recompose`` makes: one for every
#: record that adds or deletes a key, one for every combination of config groups (the committed
#: references' folders need at most a few dozen). 1,000 records each adding its own key took 117 s.
MAX_COMPOSITIONS = 100


class Compositions:
    """What is left of `MAX_COMPOSITIONS` in one ``--recompose``, and the group combinations composed."""

    def __init__(self) -> None:
        self.left = MAX_COMPOSITIONS
        self.groups: set[tuple[str, ...]] = set()

    def take(self, groups: tuple[str, ...] | None = None) -> None:
        """One whole composition (of the config groups ``groups``: none when they were composed before).

        Raises:
            ValueError: past `MAX_COMPOSITIONS`, naming it.
        """
        if groups is not None and groups in self.groups:
            return
        if self.left <= 0:
            raise ValueError(f"not composed: the folder's records need more than {MAX_COMPOSITIONS} whole "
                             "compositions (about 0.1 s each); give its folders one at a time")
        self.left -= 1
        if groups is not None:
            self.groups.add(groups)


def composed_now(overrides: Sequence[str], compositions: Compositions | None = None) -> Any:
    """The configuration ``overrides`` compose to at this commit, as Hydra composes it: the overrides of
    config groups choose the defaults (composed once for every record that shares them: a sweep's records
    differ in a seed or a value, and composing each took most of recomposing a folder), then every other
    override is applied in order as Hydra applies it (``OmegaConf.update``, merged). Overrides that add or
    delete a key are composed whole, by Hydra. ``compositions``: the whole compositions it may make.

    Raises:
        Exception: what Hydra or OmegaConf raises for an override that does not compose; ValueError past
            the ``compositions``.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    from pipegnn.config.schema import compose_config, config_dir

    parsed = OverridesParser.create().parse_overrides(list(overrides))
    conf = config_dir()
    group = [(conf / o.key_or_group).is_dir() for o in parsed]
    values = [o for o, g in zip(parsed, group) if not g]
    if any(o.is_delete() or o.is_add() or o.is_force_add() or o.package is not None for o in values):
        if compositions is not None:
            compositions.take()
        return compose_config(list(overrides))
    groups = tuple(str(o.input_line) for o, g in zip(parsed, group) if g)
    if compositions is not None:
        compositions.take(groups)
    cfg = copy.deepcopy(_composed(groups))
    for o in values:
        try:
            OmegaConf.update(cfg, o.key_or_group, o.value(), merge=True)
        except Exception as e:  # as Hydra says it: naming the override's whole key
            raise ValueError(f"Could not override '{o.key_or_group}': {type(e).__name__}: {e}") from None
    return cfg


@functools.lru_cache(maxsize=128)
def _composed(groups: tuple[str, ...]) -> Any:
    """The configuration of the config groups' overrides ``groups`` alone (cached: see `composed_now`)."""
    from pipegnn.config.schema import compose_config

    return compose_config(list(groups))


def _records(root: Path) -> Iterator[tuple[Path, RunRecord | str]]:
    """Every record under ``root`` (files, and the records of its archives at their unpacked places), or
    why it cannot be read."""
    for file in [] if is_archive(root) else distinct(find_records(root)):
        try:
            yield file, load_record(file)
        except (RecordError, OSError) as e:
            yield file, str(e)
    for archive in distinct(archives_of(root)):
        try:
            for entry in entries(archive):
                file = archive.parent / entry.path
                if file.name != RECORD_NAME:
                    continue
                if entry.unreadable is not None:
                    yield file, entry.unreadable
                    continue
                try:
                    yield file, record_of(entry.value, file)
                except RecordError as e:
                    yield file, str(e)
        except (ArchiveError, OSError) as e:
            yield archive, str(e)


def command_jobs(command: Sequence[str], params: Mapping[str, Any] | None = None) -> list[list[str]]:
    """The overrides of each job of the sweep that ``command`` (a ``-m`` command line's overrides) ran
    over the preset's ``hydra.sweeper.params`` (``params``), as Hydra's basic sweeper expands them, in
    its order of jobs (job ``n`` is item ``n``): the params first, the command line overriding a key of
    theirs in its place, Hydra's own overrides (``hydra.*``) left out, as a job's record keeps them. What
    rebuilds the overrides of a record written before records kept them, from its sweep's command."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from pipegnn.results.sweep_plan import expand_jobs

    lines = [f"{key}={value}" for key, value in (params or {}).items()] + list(command)
    return expand_jobs(OverridesParser.create().parse_overrides([o for o in lines if not _is_hydra(o)]),
                       Path("the command"))


#: The most records one ``--recompose`` of a folder composes (about 20 ms each: 10,000 in a few minutes;
#: the committed references hold about 1,200). An archive of 65,536 tiny records took 20 minutes.
MAX_RECOMPOSED = 10_000
#: The most bytes of record files one ``--recompose`` of a folder reads (loading one costs about 37 ms a MB:
#: 10,000 links to a 7.8 MB record would have taken 49 minutes); an archive is bounded by its own bounds.
MAX_RECOMPOSED_BYTES = 1 << 30


class TooManyRecords(ValueError):
    """A folder or archive holds more records than `MAX_RECOMPOSED` (``str()`` names it)."""


def recompose(root: str | Path) -> list[Drift]:
    """[`drift`][pipegnn.results.reproduce.drift] of every readable record under ``root`` (a folder of
    records or archives, or one archive), in the order found; an unreadable one is a Drift with its
    ``error``.

    Raises:
        TooManyRecords: more than `MAX_RECOMPOSED` records, counted before any is loaded: the files by
            name, an archive's by its keys."""
    root = Path(root)
    count, size = _extent(root)
    if count > MAX_RECOMPOSED:
        raise TooManyRecords(f"{root} holds {count:,} records, more than the {MAX_RECOMPOSED:,} one "
                             "--recompose composes (about 20 ms each): give its folders one at a time")
    if size > MAX_RECOMPOSED_BYTES:
        raise TooManyRecords(f"{root} holds {size:,} bytes of records, more than the "
                             f"{MAX_RECOMPOSED_BYTES:,} one --recompose reads: give its folders one at a "
                             "time")
    compositions = Compositions()
    return [Drift(path, None, {}, record) if isinstance(record, str) else drift(record, path, compositions)
            for path, record in _records(root)]


def _extent(root: Path) -> tuple[int, int]:
    """How many records `_records` will give for ``root``, and the bytes of its record files (each at most
    what its reader reads), both found before any is loaded: its record files by name and size (one walk),
    its archives' records by their keys (a pass over each archive that keeps no value; one that cannot be
    read is one, its error)."""
    files = [] if is_archive(root) else distinct(find_records(root))
    size = 0
    for file in files:
        try:
            size += min(file.stat().st_size, MAX_RECORD_BYTES + 1)
        except (OSError, RuntimeError):  # gone, a link to nothing or a loop: read as unreadable
            pass
    count = len(files)
    for archive in distinct(archives_of(root)):
        try:
            count += sum(PurePosixPath(key).name == RECORD_NAME for key in read(archive, keep=()).paths)
        except (ArchiveError, OSError):
            count += 1
    return count, size
