"""Runs that survive preemption: a signal ends a run with a record, and a checkpoint lets it continue.

- :func:`interruptible`: while a run trains, SIGTERM (a scheduler's preemption or time limit) and SIGINT
  (Ctrl-C) raise :class:`Interrupted` in the main thread, so the run unwinds, records ``status:
  interrupted`` with the epochs finished so far and the signal, and then ends (exit code 128 + signal,
  as a process killed by it reports). Later signals while the run unwinds, and any while it writes its
  record, wait for the record.
- :func:`save` / :func:`load`: the training state of one process (``train.checkpoint_every``):
  parameters, optimizer, the finished epochs' entries (best-validation bookkeeping is computed from
  them), RNG states and history caches, written atomically beside the record as
  ``checkpoint-rank<r>.pt`` (one per pipeline rank: each holds its own stages' state) with their content
  checksum (:mod:`pipegnn.integrity`). They are read with ``torch.load(weights_only=True)``, which
  builds tensors and plain containers only, never code.
- :func:`resume`: a checkpoint that cannot be resumed from (unreadable, damaged, incomplete, made with
  another configuration, or holding more epochs than ``train.epochs``) is set aside as
  ``checkpoint-rank<r>.pt.unusable`` with a warning, and the run trains from epoch 0. The epoch budget
  is not part of a checkpoint's configuration: a run resumed with a larger ``train.epochs`` trains on.
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
from typing import TYPE_CHECKING, Any, Iterator

import torch

from pipegnn.atomic import atomic_file
from pipegnn.integrity import seal, unsealed
from pipegnn.record import RunRecord
from pipegnn.runconfig import comparable_config, config_container
from pipegnn.schema import Config

if TYPE_CHECKING:
    from pipegnn.models import StagedGNN

__all__ = ["SIGNALS", "Guard", "Interrupted", "checkpoint_path", "config_key", "interruptible", "load",
           "restore", "resume", "save", "training_state"]

log = logging.getLogger(__name__)

#: The signals that end a run with a record.
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(BaseException):
    """The run was stopped by a signal (``signum``). A BaseException, as KeyboardInterrupt is, so that
    no ``except Exception`` on the way records it as a failure; :func:`pipegnn.run` records it and
    raises it again with the record attached (``record``)."""

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
    """The signal handling of one :func:`interruptible` block: ``signum`` of the first signal (None if
    none came) and whether it raises now or is held (:meth:`hold`)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.held = False

    def handler(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            return  # the run is already unwinding: let it write its record
        self.signum = signum
        if not self.held:
            raise Interrupted(signum)

    def hold(self) -> None:
        """From now on a signal is only noted in ``signum`` (the caller is writing the record, and raises
        :class:`Interrupted` for it afterwards)."""
        self.held = True


@contextmanager
def interruptible() -> Iterator[Guard]:
    """Inside the block the first SIGTERM or SIGINT raises :class:`Interrupted` (later ones are ignored,
    so that the record gets written); after :meth:`Guard.hold` it is only noted in the guard. Off the
    main thread, where Python cannot install signal handlers, nothing changes."""
    guard = Guard()
    if threading.current_thread() is not threading.main_thread():
        yield guard
        return
    previous = {s: signal.signal(s, guard.handler) for s in SIGNALS}
    try:
        yield guard
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def checkpoint_path(directory: str | Path, rank: int = 0) -> Path:
    """Where rank ``rank``'s training state is kept in ``directory`` (the run's output directory)."""
    return Path(directory) / f"checkpoint-rank{rank}.pt"


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


def save(path: str | Path, state: dict[str, Any]) -> None:
    """Write ``state`` (tensors, numbers, strings, lists and dicts of them) to ``path`` atomically: a
    reader, or a run killed while writing, never sees half a file.

    Raises:
        OSError: naming ``path`` and the cause (``No space left on device``).
    """
    with atomic_file(path, "wb") as f:
        out = _Writes(f)
        try:
            # torch writes to any object with write and flush (its docs); its hint names files only
            torch.save(seal(state), out)  # type: ignore[arg-type]
        except RuntimeError:
            if out.error is None:
                raise
            raise out.error from None


def load(path: str | Path) -> dict[str, Any] | None:
    """The state :func:`save` wrote at ``path`` (None when there is none), read with
    ``weights_only=True``: tensors and plain containers, nothing that runs code."""
    path = Path(path)
    if not path.is_file():
        return None
    return torch.load(path, map_location="cpu", weights_only=True)


def config_key(config: Config) -> str:
    """What a checkpoint must have been made with to be resumed: the resolved config as JSON, without
    the keys that do not change what a run computes (:func:`pipegnn.runconfig.comparable_config`)
    and without the epoch budget (``train.epochs``: a longer run trains on from a shorter one's epochs)."""
    plain = comparable_config(config_container(config))
    plain["train"] = {k: v for k, v in plain["train"].items() if k != "epochs"}
    return json.dumps(plain, sort_keys=True)


def training_state(config: Config, model: StagedGNN, optimizer: torch.optim.Optimizer | None,
                   epochs: list[dict[str, Any]]) -> dict[str, Any]:
    """One process's training state after ``epochs`` (the record's entries, from which the best
    validation epoch and early stopping are computed): parameters, optimizer, RNG states, and each
    history cache's rows, write steps and step counter (by unit name)."""
    return {"config": config_key(config), "epochs": epochs, "model": model.state_dict(),
            "optimizer": None if optimizer is None else optimizer.state_dict(),
            "rng": {"cpu": torch.get_rng_state(),
                    "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []},
            "history": {u.name: u.history.state() for u in model.transforms() if u.history is not None}}


#: What a checkpoint holds (:func:`training_state`).
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
    if state["config"] != config_key(config):
        return "made with another configuration"
    if len(state["epochs"]) > config.train.epochs:
        return f"{len(state['epochs'])} finished epochs, more than train.epochs={config.train.epochs}"
    return None


def resume(config: Config, path: str | Path, model: StagedGNN,
           optimizer: torch.optim.Optimizer | None) -> list[dict[str, Any]]:
    """The finished epochs of the checkpoint at ``path``, its state put back (:func:`restore`); none when
    there is no checkpoint there, or when it cannot be resumed from (see the module doc), which is set
    aside (``<path>.unusable``) with a warning; the model and optimizer are then as they were."""
    why: str | None
    try:
        state = load(path)
    except Exception as e:  # damaged, or not ours (weights_only refuses anything that would run code)
        why = f"it cannot be read: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    else:
        if state is None:
            return []
        why = _unusable(state, config)
    if why is None:
        assert state is not None  # read, and usable
        before = copy.deepcopy(training_state(config, model, optimizer, []))
        try:
            epochs = restore(state, model, optimizer)
            log.info("resume: continuing after epoch %d from %s", len(epochs) - 1, path)
            return epochs
        except (KeyError, IndexError, TypeError, ValueError, RuntimeError) as e:  # content of another shape
            restore(before, model, optimizer)  # as it was: training starts from epoch 0
            why = f"its state does not fit this model: {type(e).__name__}: {str(e).splitlines()[0]}"
    aside = Path(f"{path}.unusable")
    os.replace(path, aside)
    log.warning("resume: the checkpoint %s cannot be resumed from (%s); set aside as %s, training from "
                "epoch 0", path, why, aside.name)
    return []


def restore(state: dict[str, Any], model: StagedGNN,
            optimizer: torch.optim.Optimizer | None) -> list[dict[str, Any]]:
    """Put :func:`training_state`'s ``state`` back into ``model`` and ``optimizer`` (and the RNGs);
    returns the finished epochs' entries."""
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
