"""The result record of one run (``result.json``): [`RunRecord`][pipegnn.run_record.RunRecord], the one type a
run's record is written as ([`RunRecord.to_dict`][pipegnn.run_record.RunRecord.to_dict]) and read back as
([`RunRecord.from_dict`][pipegnn.run_record.RunRecord.from_dict], which migrates older versions), with the
rule by which a spawned pipeline's run combines its ranks' records
([`RunRecord.combine`][pipegnn.run_record.RunRecord.combine]).

This module imports nothing from [`pipegnn.runs`][pipegnn.runs] (which writes records) nor from
[`pipegnn.results`][pipegnn.results] (which reads them), so that both can import it.

Versions (the key ``record_version``; a record without it is version 1):

- 1: the records written before the key existed (every committed reference record). Its readers let a
  section be absent or null, and ``status`` be any string.
- 2: ``record_version`` first; ``status`` one of [`Status`][pipegnn.run_record.Status]; the fields
  every record has present (``error`` null when there is none); an optional section absent, never null.

[`migrate`][pipegnn.run_record.migrate] brings a version-1 record to version 2: ``record_version`` added, a
field every record has that is absent or null given its empty value (``error`` null, ``epochs`` [], a section
{}), an optional section that is null left out. Nothing else differs: a version-1 record of a run holds the
same keys and values as the version-2 record of the same run.

Reading is checked: a key that is no field, a value of the wrong type (each field's annotation), or a
few shapes inside sections that the runs table relies on, is one
[`RecordFormatError`][pipegnn.run_record.RecordFormatError] naming the key (and the file, when the caller
gives it); so is a record of a newer version than this code knows.

Whether a ``completed`` record holds what a completed run writes is
[`pipegnn.completion`][pipegnn.completion]'s.
"""
from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import NoneType, UnionType
from typing import Any, Callable

from pipegnn.config.choices import StrEnum

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

#: A run's record's file name, in the run's output folder.
RECORD_NAME = "result.json"

#: The version of the records this code writes (and the newest it reads).
RECORD_VERSION = 2
#: The most keys a record's ``config`` may hold, nested ones included (a run's holds a few hundred; every
#: one becomes a column of the runs table: 480,000 ended in a MemoryError).
MAX_CONFIG_KEYS = 10_000
#: The most stages a record's pipeline may list (a stage holds at least one unit, and a model has at most
#: 4,096 layers of two units and an input and an output unit: 2.6 million stages were as many columns).
MAX_STAGES = 2 * 4096 + 2
#: The deepest a record's sections may nest objects and arrays (a run's nest at most 6 levels; a config
#: nested 600 deep ended the reproduction check in a RecursionError).
MAX_DEPTH = 64


class Status(StrEnum):
    """How a run ended, the record's ``status``."""

    COMPLETED = "completed"
    FAILED = "failed"          # an exception (a pipeline worker's included)
    INVALID = "invalid"        # the configuration was refused (a ConfigError), before or while training
    OOM = "oom"                # out of memory (host or device)
    INTERRUPTED = "interrupted"  # SIGTERM or SIGINT; the epochs finished so far are kept


#: Field metadata key: where a spawned pipeline's run record takes the field from
#: ([`RunRecord.combine`][pipegnn.run_record.RunRecord.combine]).
COMBINE = "combine"
#: ... the launcher's own value (the process that started the workers).
LAUNCHER = "launcher"
#: ... rank 0's record, when rank 0 reported the field.
RANK0 = "rank 0"
#: ... rank 0's record when the run completed, else the launcher's own (``memory``: after a failure
#: the launcher records its own peaks).
RANK0_IF_COMPLETED = "rank 0 if completed"
#: Field metadata key: True for an optional section, which None leaves out of the written record.
OPTIONAL = "optional"


def _meta(source: str, optional: bool = False) -> dict[str, Any]:
    return {COMBINE: source, OPTIONAL: optional}


class RecordFormatError(ValueError):
    """A record that cannot be read: not shaped like one, or of a newer version. ``reason`` says why
    (``malformed record: ...``), ``key`` names the top-level key it is about (None: the whole record),
    ``path`` the file (None when the caller gave none); ``str()`` is ``"<path>: <reason>"``."""

    def __init__(self, reason: str, key: str | None = None, path: str | Path | None = None) -> None:
        super().__init__(reason if path is None else f"{path}: {reason}")
        self.reason, self.key, self.path = reason, key, None if path is None else Path(path)


@dataclass(kw_only=True)
class RunRecord(Mapping[str, Any]):
    """One run's result record. The fields are its top-level keys, in the order they are written; a
    section is a JSON object (its content is the section's writer's: see ``docs/records.md``).

    Each field's ``metadata[COMBINE]`` says where a spawned pipeline's run takes it from
    ([`combine`][pipegnn.run_record.RunRecord.combine]), ``metadata[OPTIONAL]`` whether None leaves it out
    ([`to_dict`][pipegnn.run_record.RunRecord.to_dict]).

    Read-only, a record is also a mapping of its written form (``record["status"] == "completed"``,
    ``record.get("pipeline")``), for readers written against the JSON; a writer sets the fields.
    """

    record_version: int = field(default=RECORD_VERSION, init=False, metadata=_meta(LAUNCHER))
    status: Status = field(metadata=_meta(LAUNCHER))
    #: The error message (None when completed).
    error: str | None = field(default=None, metadata=_meta(LAUNCHER))
    #: The resolved run configuration.
    config: dict[str, Any] = field(metadata=_meta(LAUNCHER))
    #: Hydra's config-group choices (group -> name or None).
    choices: dict[str, Any] = field(metadata=_meta(LAUNCHER))
    #: The job's overrides as Hydra applied them (the command line's and, in a sweep, the sweep's values
    #: for this job): with the preset they name, what recomposes ``config`` at another commit.
    overrides: list[str] | None = field(default=None, metadata=_meta(LAUNCHER, True))
    #: Versions, host, devices, threads (rank 0's: the threads a stage process trained with).
    env: dict[str, Any] = field(metadata=_meta(RANK0))
    #: One entry per finished epoch.
    epochs: list[dict[str, Any]] = field(default_factory=list, metadata=_meta(RANK0))
    final: dict[str, Any] = field(default_factory=dict, metadata=_meta(RANK0))
    timing: dict[str, Any] = field(default_factory=dict, metadata=_meta(LAUNCHER))
    memory: dict[str, Any] = field(default_factory=dict, metadata=_meta(RANK0_IF_COMPLETED))
    #: The micro-batch plans' summary.
    microbatch: dict[str, Any] = field(default_factory=dict, metadata=_meta(RANK0))
    #: The graph (once loaded).
    dataset: dict[str, Any] | None = field(default=None, metadata=_meta(RANK0, True))
    #: The model (once built).
    model: dict[str, Any] | None = field(default=None, metadata=_meta(RANK0, True))
    #: Feature rows and files (the feature store).
    features: dict[str, Any] | None = field(default=None, metadata=_meta(RANK0, True))
    #: The checkpoint a resumed run continued from.
    resumed: dict[str, Any] | None = field(default=None, metadata=_meta(RANK0, True))
    #: The traced step's timeline (``engine.trace_epoch``) while it is not yet written as ``trace.json``.
    trace: dict[str, Any] | None = field(default=None, metadata=_meta(RANK0, True))
    #: The pipeline and its stage timeline's figures.
    pipeline: dict[str, Any] | None = field(default=None, metadata=_meta(RANK0, True))
    #: A spawned pipeline's workers.
    workers: dict[str, Any] | None = field(default=None, metadata=_meta(LAUNCHER, True))
    #: The signal that ended an interrupted run.
    interrupted: dict[str, Any] | None = field(default=None, metadata=_meta(LAUNCHER, True))
    traceback: str | None = field(default=None, metadata=_meta(LAUNCHER, True))
    #: The files beside the record that could not be written (``trace.json``, the trackers' files): name ->
    #: the error. The record is written first and alone, so their failure never costs it.
    unwritten: dict[str, str] | None = field(default=None, metadata=_meta(LAUNCHER, True))
    #: The order of the keys the record was read with ([`from_dict`][pipegnn.run_record.RunRecord.from_dict]),
    #: which [`to_dict`][pipegnn.run_record.RunRecord.to_dict] keeps.
    _order: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The record as written (JSON-ready): ``record_version`` first, then the fields in their order
        (a record read by [`from_dict`][pipegnn.run_record.RunRecord.from_dict]: in the order read), optional
        sections that are None left out. The sections are the record's own objects, not copies."""
        out: dict[str, Any] = {}
        for f in _FIELDS:
            value = getattr(self, f.name)
            if value is None and f.metadata[OPTIONAL]:
                continue
            out[f.name] = Status(value).value if f.name == "status" else value
        if self._order:
            order = [k for k in self._order if k in out]
            return {k: out[k] for k in [*order, *(k for k in out if k not in order)]}
        return out

    @classmethod
    def from_dict(cls, d: Any, path: str | Path | None = None) -> RunRecord:
        """The record in ``d`` (a record's JSON value, of any version: [`migrate`][pipegnn.run_record.migrate]
        brings it to `RECORD_VERSION`). The record shares ``d``'s sections.

        Raises:
            RecordFormatError: naming ``path`` (when given) and the key: not a JSON object, a key that
                is no field, a value of the wrong type, a required field missing, or a newer version.
        """
        current = migrate(d, path)
        _check(current, path)
        values = {k: v for k, v in current.items() if k != "record_version"}
        record = cls(**{**values, "status": Status(values["status"])})
        record._order = tuple(current)
        return record

    @classmethod
    def combine(cls, parent: RunRecord, rank0: RunRecord | Mapping[str, Any] | None,
                epochs: Sequence[dict[str, Any]] = (), completed: bool = False) -> RunRecord:
        """The record of a spawned pipeline's run: the launcher's ``parent`` record with the fields that
        `COMBINE` says come from rank 0 taken from ``rank0``'s record (those it has; None: rank 0
        reported nothing), ``memory`` only when the run ``completed``; its ``epochs`` are the ``epochs``
        rank 0 streamed while it ran when they are more than its record has (rank 0 failed before it
        could report them all)."""
        values = rank0.to_dict() if isinstance(rank0, RunRecord) else dict(rank0 or {})
        taken = {name: values[name] for name in cls.from_rank0(completed) if name in values}
        combined = dataclasses.replace(parent, **taken)
        if len(epochs) > len(combined.epochs):
            combined.epochs = list(epochs)
        return combined

    @staticmethod
    def from_rank0(completed: bool) -> tuple[str, ...]:
        """The fields a spawned pipeline's run record takes from rank 0's (when it has them)."""
        return tuple(f.name for f in _FIELDS if f.metadata[COMBINE] == RANK0
                     or (completed and f.metadata[COMBINE] == RANK0_IF_COMPLETED))

    # A read-only mapping of the written form.
    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())


#: The record's keys (every field but the key order).
_FIELDS = tuple(f for f in dataclasses.fields(RunRecord) if COMBINE in f.metadata)
_NAMES = tuple(f.name for f in _FIELDS)
_HINTS = typing.get_type_hints(RunRecord)
#: The fields every record has, with their empty values for a version-1 record without them.
_EMPTY: dict[str, Callable[[], Any]] = {
    "error": lambda: None, "config": dict, "choices": dict, "env": dict, "epochs": list, "final": dict,
    "timing": dict, "memory": dict, "microbatch": dict}
_OPTIONAL = frozenset(f.name for f in _FIELDS if f.metadata[OPTIONAL])


def json_kind(value: Any) -> str:
    """The JSON name of ``value``'s type."""
    for kind, types in (("null", NoneType), ("a boolean", bool), ("a number", (int, float)),
                        ("a string", str), ("an array", (list, tuple)), ("an object", Mapping)):
        if isinstance(value, types):
            return kind
    return type(value).__name__


def migrate(d: Any, path: str | Path | None = None) -> dict[str, Any]:
    """The record ``d`` (a JSON value) as a record of `RECORD_VERSION` (``d`` itself when it is
    one; else a new dict, ``d`` untouched): each version's step in turn (1 -> 2: see the module doc).

    Raises:
        RecordFormatError: ``d`` is not a JSON object, its ``record_version`` is not a version, or a
            newer one than this code knows (update pipegnn to read it).
    """
    if isinstance(d, RunRecord):
        d = d.to_dict()
    if not isinstance(d, dict):
        raise RecordFormatError(f"malformed record: not a JSON object but {json_kind(d)}", path=path)
    version = d.get("record_version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise RecordFormatError(f"malformed record: 'record_version' is {version!r}, expected a version "
                                f"(1 to {RECORD_VERSION})", "record_version", path)
    if version > RECORD_VERSION:
        raise RecordFormatError(f"record_version {version} is newer than this pipegnn reads (up to "
                                f"{RECORD_VERSION}): update pipegnn to read this record", "record_version",
                                path)
    while version < RECORD_VERSION:
        d = _MIGRATIONS[version](d)
        version += 1
    return d


def _v1_to_v2(d: dict[str, Any]) -> dict[str, Any]:
    """Version 1 -> 2: ``record_version`` first; a field every record has, absent or null, its empty
    value; an optional section that is null left out (other values as they are, checked after)."""
    out: dict[str, Any] = {"record_version": 2}
    for key, value in d.items():
        if value is None and key in _OPTIONAL:
            continue
        out[key] = _EMPTY[key]() if value is None and key in _EMPTY else value
    for key, empty in _EMPTY.items():
        if key not in out:
            out[key] = empty()
    return out


#: Version n -> n + 1.
_MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _v1_to_v2}


def _check(d: dict[str, Any], path: str | Path | None) -> None:
    """``d`` (a current record) holds the record's keys, each of its field's type, and the shapes the
    runs table relies on; else [`RecordFormatError`][pipegnn.run_record.RecordFormatError] naming the first
    problem."""
    def bad(problem: str, key: str) -> RecordFormatError:
        return RecordFormatError(f"malformed record: {problem}", key, path)

    unknown = next((k for k in d if k not in _NAMES), None)
    if unknown is not None:
        raise bad(f"unknown key {unknown!r} (a record's keys: {', '.join(_NAMES)})", str(unknown))
    for f in _FIELDS:
        if f.name not in d:
            if f.name in _OPTIONAL:
                continue
            raise bad(f"no '{f.name}'", f.name)
        problem = _type_problem(d[f.name], _HINTS[f.name])
        if problem is not None:
            raise bad(f"'{f.name}' {problem}", f.name)
    pipeline, memory = d.get("pipeline") or {}, d["memory"]
    for key, value, of_objects in (("pipeline.stages", pipeline.get("stages"), True),
                                   ("pipeline.balance", pipeline.get("balance"), False)):
        if value is not None and not isinstance(value, list):
            raise bad(f"'{key}' is {json_kind(value)}, expected an array", key.split(".")[0])
        wrong = next((v for v in value or () if not isinstance(v, dict)), None) if of_objects else None
        if wrong is not None:
            raise bad(f"'{key}' holds {json_kind(wrong)}, expected objects", key.split(".")[0])
        if value is not None and len(value) > MAX_STAGES:  # each stage is a column of the runs table
            raise bad(f"'{key}' holds {len(value):,} stages, more than any run's {MAX_STAGES:,}",
                      key.split(".")[0])
    if not isinstance(memory.get("peak_device_bytes"), (dict, NoneType)):
        raise bad(f"'memory.peak_device_bytes' is {json_kind(memory['peak_device_bytes'])}, expected an "
                  "object", "memory")
    for group, choice in d["choices"].items():
        if isinstance(choice, (list, tuple, Mapping)):
            raise bad(f"'choices.{group}' is {json_kind(choice)}, expected a string", "choices")
    if _more_keys_than(d["config"], MAX_CONFIG_KEYS):  # each becomes a column of the runs table
        raise bad(f"'config' holds more than {MAX_CONFIG_KEYS:,} keys (a run's holds a few hundred)",
                  "config")
    deep = next((f.name for f in _FIELDS if _deeper_than(d.get(f.name), MAX_DEPTH)), None)
    if deep is not None:  # the readers that walk a record's sections recurse
        raise bad(f"'{deep}' nests objects and arrays more than {MAX_DEPTH} deep (a run's, at most 6)", deep)


def _more_keys_than(value: Any, most: int) -> bool:
    """Whether the objects nested in ``value`` hold more than ``most`` keys in all (counted until that)."""
    count, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            count += len(item)
            if count > most:
                return True
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _deeper_than(value: Any, most: int) -> bool:
    """Whether ``value`` nests objects and arrays more than ``most`` levels deep (walked until that)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (Mapping, list)):
            if depth >= most:
                return True
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, Mapping) else item))
    return False


def _type_problem(value: Any, hint: Any) -> str | None:
    """Why ``value`` is not of the field type ``hint`` (``"is a number, expected an array"``), None
    when it is."""
    args = typing.get_args(hint)
    if isinstance(hint, UnionType) or typing.get_origin(hint) is typing.Union:
        if value is None:
            return None
        (hint,) = [a for a in args if a is not NoneType]
        if hint is str:
            return None if isinstance(value, str) else f"is {json_kind(value)}, expected a string or null"
        return _type_problem(value, hint)
    if hint is Status:
        if not isinstance(value, str):
            return f"is {json_kind(value)}, expected a string"
        if value not in _STATUSES:
            return f"is {value!r}, expected one of {', '.join(_STATUSES)}"
        return None
    origin = typing.get_origin(hint) or hint
    if origin is dict:
        return None if isinstance(value, dict) else f"is {json_kind(value)}, expected an object"
    if origin is list:
        if not isinstance(value, list):
            return f"is {json_kind(value)}, expected an array"
        item = (typing.get_args(hint) or (dict,))[0]
        item = typing.get_origin(item) or item
        wrong = next((v for v in value if not isinstance(v, item)), None)
        noun = "strings" if item is str else "objects"
        return None if wrong is None else f"holds {json_kind(wrong)}, expected {noun}"
    if origin is str:
        return None if isinstance(value, str) else f"is {json_kind(value)}, expected a string"
    if origin is int:
        return None if isinstance(value, int) and not isinstance(value, bool) else \
            f"is {json_kind(value)}, expected a number"
    raise TypeError(f"no check for the field type {hint!r}")  # a field added without one


_STATUSES = tuple(s.value for s in Status)
