"""Resuming a run from its checkpoints: one resume point for every rank.

[`resume_from`][pipegnn.training.resume.resume_from]: a checkpoint that cannot be resumed from (unreadable,
damaged, incomplete, made with another configuration, see [`resume_config`][pipegnn.training.resume_config],
or holding more epochs than ``train.epochs``) is set aside as ``<file>.unusable`` with a warning naming the
keys that differ.

Each rank keeps its newest checkpoint and the one before it
([`previous_path`][pipegnn.training.checkpoints.previous_path]), so a pipeline killed between two ranks' saves
still has an epoch every rank can resume from. Before any rank trains, the ranks exchange the epochs they can
resume from (through the process group) and all resume from the newest one they have in common, or all train
from epoch 0 when there is none; a rank's files of later epochs are removed then (they belong to a future the
run no longer has).
"""
from __future__ import annotations

import copy
import json
import logging
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
import torch.distributed as dist

from pipegnn.completion import epochs_problem
from pipegnn.config.schema import Config
from pipegnn.integrity import unsealed
from pipegnn.training.checkpoints import load, previous_path, restore, training_state
from pipegnn.training.resume_config import config_difference

if TYPE_CHECKING:
    from pipegnn.models import StagedGNN

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

log = logging.getLogger(__name__)


#: What a checkpoint holds ([`training_state`][pipegnn.training.checkpoints.training_state]).
_STATE_KEYS = ("config", "epochs", "model", "optimizer", "rng", "history")
#: What every finished epoch's entry holds, each a finite number (an accuracy from 0 to 1), whatever the
#: run's settings: what the run's end reads from every epoch.
_EPOCH_KEYS = ("epoch", "train_loss", "train_acc", "val_acc", "val_loss", "test_acc", "epoch_time_s",
               "eval_time_s")


#: Bounds of what a checkpoint may hold, checked before its checksum walks it: items (a training state of
#: a deep model on a large graph holds some thousands: parameters, optimizer moments, every epoch's
#: entries) and nesting (a few levels). A state of lists shared a thousand times over, or nested past them,
#: is no run's (2**64 items in 1,891 bytes held the checksum's walk for ever).
_MAX_ITEMS = 10_000_000
_MAX_DEPTH = 64


def _too_large(state: Any) -> str | None:
    """Why ``state`` holds more than a run's checkpoint can (None if it does not): more than `_MAX_ITEMS`
    items counted as its checksum walks them (shared containers once per reference), nesting past
    `_MAX_DEPTH`, or a tensor that views more bytes than its storage holds (a stride-0 view of 2**40
    elements in 1.8 KB: the checksum would make it whole)."""
    import torch

    items, stack = 0, [(state, 0)]
    while stack:
        value, depth = stack.pop()
        items += 1
        if items > _MAX_ITEMS:
            return f"it holds more than {_MAX_ITEMS:,} items, more than any run's checkpoint"
        if depth > _MAX_DEPTH:
            return f"it is nested more than {_MAX_DEPTH} deep, deeper than any run's checkpoint"
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend((v, depth + 1) for v in value)
        elif isinstance(value, torch.Tensor):
            if value.numel() * value.element_size() > value.untyped_storage().nbytes():
                return (f"a tensor of shape {tuple(value.shape)} views more bytes than its storage holds "
                        f"({value.untyped_storage().nbytes():,}): no run's parameter or state")
    return None


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
    problem = epochs_problem(state["epochs"], _EPOCH_KEYS)
    if problem is None and [e["epoch"] for e in state["epochs"]] != list(range(len(state["epochs"]))):
        problem = "its epochs are not numbered 0, 1, ... in order"
    if problem is None and not all(_finite(e["ended_at"]) for e in state["epochs"] if "ended_at" in e):
        problem = "an epoch's ended_at is no time (a finite number)"  # the run's wall times read it
    if problem is not None:  # a checksum that holds over content no run writes
        return f"its epochs are not a run's: {problem}"
    trace = state.get("trace")
    if trace is not None and _json(trace) is None:
        return "its trace is no JSON text"
    if not isinstance(state["config"], str) or not isinstance(_json(state["config"]), dict):
        return "its configuration is no JSON object"
    model = state["model"] if isinstance(state["model"], dict) else {}
    if not all(bool(torch.isfinite(t).all()) for t in model.values()
               if isinstance(t, torch.Tensor) and t.is_floating_point()):
        return "its parameters hold NaN or inf (no run saves them: its loss would not be finite)"
    differs = config_difference(state["config"], config)
    if differs is not None:
        return differs
    if len(state["epochs"]) > config.train.epochs:
        return f"{len(state['epochs'])} finished epochs, more than train.epochs={config.train.epochs}"
    return None


def _finite(value: Any) -> bool:
    """Whether ``value`` is a finite number (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _json(text: Any) -> Any:
    """The JSON value of the text ``text``, None when it is no text or no JSON (nested too deeply
    included)."""
    if not isinstance(text, str):
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
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
        try:
            why = _too_large(state) or _unusable(state, config)
        except Exception as e:  # noqa: BLE001 - content of a shape no check foresaw: set aside, named
            first = str(e).splitlines()[0] if str(e) else ""
            why = f"its content cannot be checked: {type(e).__name__}: {first}"
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
    """[`resume_from`][pipegnn.training.resume.resume_from]'s finished epochs."""
    return resume_from(config, path, model, optimizer).epochs


class Resumed(NamedTuple):
    """What [`resume_from`][pipegnn.training.resume.resume_from] put back: the finished epochs' entries,
    the checkpoint they came from (None: none) and the stage timeline's trace it held (None: none)."""

    epochs: list[dict[str, Any]]
    file: Path | None
    trace: Any = None


def resume_from(config: Config, path: str | Path, model: StagedGNN,
                optimizer: torch.optim.Optimizer | None) -> Resumed:
    """The finished epochs of the resume point every rank agrees on (see the module doc), its state put
    back ([`restore`][pipegnn.training.checkpoints.restore]) from the checkpoint at ``path`` or the one before
    it ([`previous_path`][pipegnn.training.checkpoints.previous_path]); none when there is no checkpoint or no
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
        except Exception as e:  # noqa: BLE001 - content of another shape (an optimizer state "x")
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
    return Resumed(epochs, file, _json(state.get("trace")))
