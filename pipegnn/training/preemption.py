"""Runs that survive preemption: a signal ends a run with a record, and a checkpoint lets it continue.

- [`interruptible`][pipegnn.training.preemption.interruptible]: while a run trains, SIGTERM (a scheduler's
  preemption or time limit) and SIGINT (Ctrl-C) raise [`Interrupted`][pipegnn.training.preemption.Interrupted]
  in the main thread, so the run unwinds, records ``status: interrupted`` with the epochs finished so far and
  the signal, and then ends (exit code 128 + signal, as a process killed by it reports). Later signals while
  the run unwinds, and any while it writes its record, wait for the record.
- [`save`][pipegnn.training.preemption.save] / [`load`][pipegnn.training.preemption.load]: the training state
  of one process (``train.checkpoint_every``): parameters, optimizer, the finished epochs' entries
  (best-validation bookkeeping is computed from them), RNG states and history caches, written atomically
  beside the record as ``checkpoint-rank<r>.pt`` (one per pipeline rank: each holds its own stages' state)
  with their content checksum ([`pipegnn.integrity`][pipegnn.integrity]). They are read with
  ``torch.load(weights_only=True)``, which builds tensors and plain containers only, never code.
- [`resume`][pipegnn.training.preemption.resume]: a checkpoint that cannot be resumed from (unreadable,
  damaged, incomplete, made with another configuration, or holding more epochs than ``train.epochs``) is set
  aside as ``<file>.unusable`` with a warning naming the keys that differ. A checkpoint's configuration covers
  what changes the computation only (`NON_COMPUTING_KEYS` are left out: the epoch budget, early
  stopping, checkpoints, caps, deadlines, trackers, caches; `PATH_KEYS` compared resolved): a
  run resumed with a larger ``train.epochs`` trains on.
- One resume point for every rank: each rank keeps its newest checkpoint and the one before it
  (``checkpoint-rank<r>.previous.pt``: a save moves the newest there just before its own file takes
  the newest's place), so a pipeline killed between two ranks' saves still has an epoch every rank can
  resume from. Before any rank trains, the ranks exchange the epochs they can resume from (through
  the process group) and all resume from the newest one they have in common, or all train from epoch
  0 when there is none; a rank's files of later epochs are removed then (they belong to a future the
  run no longer has).
"""
from __future__ import annotations

import copy
import json
import logging
import os
import signal
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, NamedTuple

import torch
import torch.distributed as dist

from pipegnn.atomic import atomic_file
from pipegnn.integrity import seal, unsealed
from pipegnn.record import RunRecord
from pipegnn.runconfig import comparable_config, config_container
from pipegnn.schema import Config

if TYPE_CHECKING:
    from pipegnn.models import StagedGNN

__all__ = ["DENSE_FEATURES", "GENERATED_DATASETS", "NON_COMPUTING_KEYS", "PATH_KEYS", "SIGNALS", "Guard",
           "Interrupted", "checkpoint_path",
           "Resumed", "config_difference", "config_key", "interruptible", "load", "previous_path", "restore",
           "resume", "resume_from", "save", "signals_deferred", "training_state"]

log = logging.getLogger(__name__)

#: The signals that end a run with a record.
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(BaseException):
    """The run was stopped by a signal (``signum``). A BaseException, as KeyboardInterrupt is, so that
    no ``except Exception`` on the way records it as a failure; [`pipegnn.run`][pipegnn.training.launch.run]
    records it and raises it again with the record attached (``record``)."""

    def __init__(self, signum: int, record: RunRecord | None = None):
        self.signum = int(signum)
        self.name = signal.Signals(self.signum).name
        self.record = record
        super().__init__(f"interrupted by {self.name}")

    @property
    def exit_code(self) -> int:
        """What a shell reports for a process killed by the signal: 128 + its number."""
        return 128 + self.signum


class Guard:
    """The signal handling of one [`interruptible`][pipegnn.training.preemption.interruptible] block:
    ``signum`` of the first signal (None if none came) and whether it raises now or is held
    ([`hold`][pipegnn.training.preemption.Guard.hold])."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.held = False
        self.deferring = False

    def handler(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            return  # the run is already unwinding: let it write its record
        self.signum = signum
        if not self.held and not self.deferring:
            raise Interrupted(signum)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """A signal inside the block is raised ([`Interrupted`][pipegnn.training.preemption.Interrupted]) once
        the block has finished, not in the middle of it (a checkpoint being saved: the record and the
        checkpoint then hold the same epochs)."""
        if self.held or self.deferring:
            yield
            return
        self.deferring = True
        try:
            yield
        finally:
            self.deferring = False
        if self.signum is not None:
            raise Interrupted(self.signum)

    def hold(self) -> None:
        """From now on a signal is only noted in ``signum`` (the caller is writing the record, and raises
        [`Interrupted`][pipegnn.training.preemption.Interrupted] for it afterwards)."""
        self.held = True


@contextmanager
def interruptible() -> Iterator[Guard]:
    """Inside the block the first SIGTERM or SIGINT raises
    [`Interrupted`][pipegnn.training.preemption.Interrupted] (later ones are ignored, so that the record gets
    written); after [`Guard.hold`][pipegnn.training.preemption.Guard.hold] it is only noted in the guard. Off
    the main thread, where Python cannot install signal handlers, nothing changes."""
    global _active
    guard = Guard()
    if threading.current_thread() is not threading.main_thread():
        yield guard
        return
    previous = {s: signal.signal(s, guard.handler) for s in SIGNALS}
    outer, _active = _active, guard
    try:
        yield guard
    finally:
        _active = outer
        for s, h in previous.items():
            signal.signal(s, h)


#: The guard of the innermost [`interruptible`][pipegnn.training.preemption.interruptible] block of the main
#: thread (None: none).
_active: Guard | None = None


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Inside an [`interruptible`][pipegnn.training.preemption.interruptible] block of the main thread,
    [`Guard.deferred`][pipegnn.training.preemption.Guard.deferred]; elsewhere nothing changes."""
    guard = _active if threading.current_thread() is threading.main_thread() else None
    if guard is None:
        yield
        return
    with guard.deferred():
        yield


def checkpoint_path(directory: str | Path, rank: int = 0) -> Path:
    """Where rank ``rank``'s training state is kept in ``directory`` (the run's output directory)."""
    return Path(directory) / f"checkpoint-rank{rank}.pt"


def previous_path(path: str | Path) -> Path:
    """Where the checkpoint before the newest one at ``path`` is kept (``checkpoint-rank<r>.previous.pt``)."""
    path = Path(path)
    return path.with_name(f"{path.stem}.previous{path.suffix}")


class _Writes:
    """The file ``torch.save`` writes to, keeping the OSError of a write that failed: torch reports it
    only as "unexpected pos ..." (a full disk named neither the file nor the cause)."""

    def __init__(self, f: Any):
        self.f = f
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            return self.f.write(data)
        except OSError as e:
            self.error = e
            raise

    def flush(self) -> None:
        self.f.flush()


def save(path: str | Path, state: dict[str, Any], keep_previous: bool = False) -> None:
    """Write ``state`` (tensors, numbers, strings, lists and dicts of them) to ``path`` atomically: a
    reader, or a run killed while writing, never sees half a file. With ``keep_previous`` the file that
    was at ``path`` becomes [`previous_path`][pipegnn.training.preemption.previous_path] once the new one is
    written in full (a kill at any moment leaves the newest complete state, or the one before it, or both).

    Raises:
        OSError: naming ``path`` and the cause (``No space left on device``).
    """
    path = Path(path)
    with atomic_file(path, "wb") as f:
        out = _Writes(f)
        try:
            # torch writes to any object with write and flush (its docs); its hint names files only
            torch.save(seal(state), out)  # type: ignore[arg-type]
        except RuntimeError:
            if out.error is None:
                raise
            raise out.error from None
        f.flush()
        if keep_previous and path.is_file():
            os.replace(path, previous_path(path))


def load(path: str | Path) -> dict[str, Any] | None:
    """The state [`save`][pipegnn.training.preemption.save] wrote at ``path`` (None when there is none), read
    with ``weights_only=True``: tensors and plain containers, nothing that runs code."""
    path = Path(path)
    if not path.is_file():
        return None
    return torch.load(path, map_location="cpu", weights_only=True)


#: Config keys that do not change what a run computes (when it stops, what it records or reports, where
#: it keeps caches, how its processes start and how long they may take, caps): a checkpoint made with
#: other values of them is resumed.
NON_COMPUTING_KEYS = (
    ("resume",), ("logger",), ("cache_root",),
    ("train", "epochs"), ("train", "patience"), ("train", "monitor"), ("train", "target_val_acc"),
    ("train", "memory_limit_gb"), ("train", "checkpoint_every"),
    ("engine", "timeout_s"), ("engine", "memory_limit_gb"), ("engine", "timeline"), ("engine", "trace_epoch"),
    ("engine", "threads"), ("engine", "launcher"), ("engine", "start_method"),
    ("microbatch", "cache"), ("data", "cache"),
)
#: Config keys holding a path: compared as the folder they resolve to (``data/`` and ``./data`` agree).
PATH_KEYS = (("data", "root"),)


#: Datasets that never read ``data.root`` (generated graphs): where it points does not matter to them.
GENERATED_DATASETS = ("synthetic",)
#: ``data.features`` values that hold the same numbers (the exactness tests: a feature file gives
#: bit-identical results to memory); ``sparse`` (a CSR matrix) rounds otherwise and stays a difference.
DENSE_FEATURES = ("memory", "disk")


def _resolve_backend(engine: dict[str, Any]) -> str | None:
    """``engine.backend=auto`` as the run resolves it (gloo on CPU, nccl where every rank has its own
    GPU), or None when it cannot be resolved here."""
    try:
        from pipegnn.runconfig import group_config
        from pipegnn.training.processes.backend import dist_backend

        return dist_backend(group_config("engine", engine))
    except Exception:  # an old or odd engine section: compared as written
        return None


def _computation(plain: dict[str, Any]) -> dict[str, Any]:
    """``plain`` (a config's plain form) without `NON_COMPUTING_KEYS`, `PATH_KEYS` resolved; ``data.root``
    left out for `GENERATED_DATASETS`, ``engine.backend=auto`` resolved, and ``data.features`` one of
    `DENSE_FEATURES` read as ``dense`` (the same numbers either way)."""
    plain = json.loads(json.dumps(plain))
    dataset, data, engine = (plain.get(k) for k in ("dataset", "data", "engine"))
    if isinstance(data, dict):
        if isinstance(dataset, dict) and dataset.get("name") in GENERATED_DATASETS:
            data.pop("root", None)
        if data.get("features", "memory") in DENSE_FEATURES:
            data["features"] = "dense"
    if isinstance(engine, dict) and engine.get("backend") == "auto":
        engine["backend"] = _resolve_backend(engine) or "auto"
    for *parents, key in NON_COMPUTING_KEYS:
        section: Any = plain
        for name in parents:
            section = section.get(name) if isinstance(section, dict) else None
        if isinstance(section, dict):
            section.pop(key, None)
    for *parents, key in PATH_KEYS:
        section = plain
        for name in parents:
            section = section.get(name) if isinstance(section, dict) else None
        if isinstance(section, dict) and isinstance(section.get(key), str) and section[key]:
            section[key] = str(Path(section[key]).expanduser().resolve())
    return plain


def config_key(config: Config) -> str:
    """What a checkpoint must have been made with to be resumed: the resolved config as JSON, without
    the keys that do not change what a run computes (`NON_COMPUTING_KEYS` and those of
    [`pipegnn.runconfig.comparable_config`][pipegnn.runconfig.comparable_config]), paths resolved
    (`PATH_KEYS`)."""
    return json.dumps(_computation(comparable_config(config_container(config))), sort_keys=True)


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        return {k: v for name, x in value.items() for k, v in _flat(x, f"{prefix}{name}.").items()}
    return {prefix[:-1]: value}


def config_difference(stored: str, config: Config) -> str | None:
    """The keys (with both values) in which a checkpoint's ``stored`` key differs from ``config``'s, as
    one line; None when they agree. A key stored by an older version is compared as
    [`config_key`][pipegnn.training.preemption.config_key] makes it now (the keys that do not change the
    computation are left out of both)."""
    try:
        then = _computation(json.loads(stored))
    except (TypeError, ValueError):
        return "its configuration cannot be read"
    now = json.loads(config_key(config))
    if then == now:
        return None
    a, b = _flat(then), _flat(now)
    keys = sorted(k for k in a.keys() | b.keys() if a.get(k, "<none>") != b.get(k, "<none>"))
    shown = ", ".join(f"{k}={a.get(k, '<none>')!r} in it, {b.get(k, '<none>')!r} now" for k in keys[:6])
    more = f" and {len(keys) - 6} more" if len(keys) > 6 else ""
    return f"made with another configuration: {shown}{more}"


def training_state(config: Config, model: StagedGNN, optimizer: torch.optim.Optimizer | None,
                   epochs: list[dict[str, Any]], trace: Any = None) -> dict[str, Any]:
    """One process's training state after ``epochs`` (the record's entries, from which the best
    validation epoch and early stopping are computed): parameters, optimizer, RNG states, each history
    cache's rows, write steps and step counter (by unit name), and the stage timeline's trace once
    recorded (``engine.trace_epoch``: a resumed run writes it too)."""
    return {"config": config_key(config), "epochs": epochs,
            "trace": None if trace is None else json.dumps(trace, default=str),  # (plain: weights_only)
            "model": model.state_dict(),
            "optimizer": None if optimizer is None else optimizer.state_dict(),
            "rng": {"cpu": torch.get_rng_state(),
                    "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []},
            "history": {u.name: u.history.state() for u in model.transforms() if u.history is not None}}


#: What a checkpoint holds ([`training_state`][pipegnn.training.preemption.training_state]).
_STATE_KEYS = ("config", "epochs", "model", "optimizer", "rng", "history")


def _unusable(state: Any, config: Config) -> str | None:
    """Why a loaded checkpoint cannot be resumed from in a run of ``config`` (None if it can)."""
    why = unsealed(state)
    if why is not None:
        return why
    missing = [k for k in _STATE_KEYS if k not in state]
    if missing:
        return f"no {', '.join(missing)} in it"
    if not isinstance(state["epochs"], list) or not state["epochs"]:
        return "no finished epochs in it"
    differs = config_difference(state["config"], config)
    if differs is not None:
        return differs
    if len(state["epochs"]) > config.train.epochs:
        return f"{len(state['epochs'])} finished epochs, more than train.epochs={config.train.epochs}"
    return None


def _candidate(config: Config, path: Path) -> tuple[int, dict[str, Any]] | None:
    """The checkpoint at ``path`` as ``(finished epochs, state)``, or None when there is none there or
    it cannot be resumed from (then it is set aside as ``<path>.unusable`` with a warning)."""
    why: str | None
    try:
        state = load(path)
    except Exception as e:  # damaged, or not ours (weights_only refuses anything that would run code)
        why = f"it cannot be read: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    else:
        if state is None:
            return None
        why = _unusable(state, config)
        if why is None:
            return len(state["epochs"]), state
    _set_aside(path, why)
    return None


def _set_aside(path: Path, why: str) -> None:
    """Move ``path`` to ``<path>.unusable`` (replacing an older set-aside file), or, where something
    that is not a regular file holds that name, to the first free ``<path>.unusable.<n>``."""
    aside = Path(f"{path}.unusable")
    n = 0
    while aside.is_symlink() or (aside.exists() and not aside.is_file()):
        n += 1
        aside = Path(f"{path}.unusable.{n}")
    os.replace(path, aside)
    log.warning("resume: the checkpoint %s cannot be resumed from (%s); set aside as %s", path, why,
                aside.name)


def _agree(mine: set[int]) -> tuple[int | None, list[list[int]]]:
    """The newest resume point (a number of finished epochs) that every rank of the process group has
    (this process alone when there is none), and every rank's points."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return (max(mine) if mine else None), [sorted(mine)]
    ranks: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, sorted(mine))
    common = set.intersection(*(set(r) for r in ranks))
    return (max(common) if common else None), ranks


def _all_ranks(ok: bool) -> bool:
    """Whether ``ok`` holds on every rank of the process group (this process alone when there is none)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return ok
    ranks: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, ok)
    return all(ranks)


def resume(config: Config, path: str | Path, model: StagedGNN,
           optimizer: torch.optim.Optimizer | None) -> list[dict[str, Any]]:
    """[`resume_from`][pipegnn.training.preemption.resume_from]'s finished epochs."""
    return resume_from(config, path, model, optimizer).epochs


class Resumed(NamedTuple):
    """What [`resume_from`][pipegnn.training.preemption.resume_from] put back: the finished epochs' entries,
    the checkpoint they came from (None: none) and the stage timeline's trace it held (None: none)."""

    epochs: list[dict[str, Any]]
    file: Path | None
    trace: Any = None


def resume_from(config: Config, path: str | Path, model: StagedGNN,
                optimizer: torch.optim.Optimizer | None) -> Resumed:
    """The finished epochs of the resume point every rank agrees on (see the module doc), its state put
    back ([`restore`][pipegnn.training.preemption.restore]) from the checkpoint at ``path`` or the one before
    it ([`previous_path`][pipegnn.training.preemption.previous_path]); none when there is no checkpoint or no
    point every rank can resume from, and the model and optimizer are then as they were. A checkpoint that
    cannot be resumed from is set aside (``<file>.unusable``) with a warning. In a pipeline every rank calls
    it (it exchanges the ranks' resume points). Returns the epochs and the file they came from (None:
    none)."""
    path = Path(path)
    found: dict[int, tuple[Path, dict[str, Any]]] = {}
    for file in (path, previous_path(path)):
        got = _candidate(config, file)
        if got is not None and got[0] not in found:
            found[got[0]] = (file, got[1])
    before = copy.deepcopy(training_state(config, model, optimizer, []))
    while True:  # a point one rank cannot restore after all: set it aside, agree on the next one
        point, ranks = _agree(set(found))
        for count, (file, _) in sorted(found.items()):
            if point is None or count > point:  # past the agreed point: not this run's future any more
                file.unlink(missing_ok=True)
                log.warning("resume: %s (%d finished epochs) is removed: the ranks' checkpoints have %s in "
                            "common", file, count, "no epoch" if point is None else f"{point} epochs at most")
        found = {c: v for c, v in found.items() if point is not None and c <= point}
        if point is None:
            if any(ranks):
                log.warning("resume: no epoch every rank can resume from (finished epochs per rank: %s); "
                            "training from epoch 0", ranks)
            return Resumed([], None)
        file, state = found[point]
        why: str | None = None
        try:
            epochs = restore(state, model, optimizer)
        except (KeyError, IndexError, TypeError, ValueError, RuntimeError) as e:  # content of another shape
            why = f"its state does not fit this model: {type(e).__name__}: {str(e).splitlines()[0]}"
        if _all_ranks(why is None):
            break
        restore(before, model, optimizer)  # as it was, for the next point (or epoch 0)
        if why is not None:
            _set_aside(file, why)
            del found[point]
        log.warning("resume: a rank's checkpoint of %d finished epochs does not fit its model; the ranks "
                    "agree on another point", point)
    log.info("resume: continuing after epoch %d from %s", len(epochs) - 1, file)
    trace = state.get("trace")
    return Resumed(epochs, file, json.loads(trace) if isinstance(trace, str) else None)


def restore(state: dict[str, Any], model: StagedGNN,
            optimizer: torch.optim.Optimizer | None) -> list[dict[str, Any]]:
    """Put [`training_state`][pipegnn.training.preemption.training_state]'s ``state`` back into ``model`` and
    ``optimizer`` (and the RNGs); returns the finished epochs' entries."""
    model.load_state_dict(state["model"])
    if optimizer is not None:
        optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"]["cpu"])
    if state["rng"]["cuda"]:
        torch.cuda.set_rng_state_all(state["rng"]["cuda"])
    for unit in model.transforms():
        if unit.history is not None:
            unit.history.load_state(state["history"][unit.name])
    return list(state["epochs"])
