"""A run's checkpoints: the training state of one process (``train.checkpoint_every``) on disk.

[`save`][pipegnn.training.checkpoints.save] / [`load`][pipegnn.training.checkpoints.load] write and read the
[`training_state`][pipegnn.training.checkpoints.training_state] (parameters, optimizer, the finished epochs'
entries, from which best-validation bookkeeping is computed, RNG states and history caches) atomically beside
the record as ``checkpoint-rank<r>.pt`` (one per pipeline rank: each holds its own stages' state) with their
content checksum ([`pipegnn.integrity`][pipegnn.integrity]). They are read with
``torch.load(weights_only=True)``, which builds tensors and plain containers only, never code. Each rank keeps
its newest checkpoint and the one before it
([`previous_path`][pipegnn.training.checkpoints.previous_path]: a save moves the newest there just before its
own file takes the newest's place); which one a run resumes from is [`resume`][pipegnn.training.resume]'s.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from pipegnn.atomic import atomic_file
from pipegnn.config.schema import Config
from pipegnn.integrity import seal
from pipegnn.jsonfile import open_regular
from pipegnn.measure import allocatable_bytes
from pipegnn.training.resume_config import config_key

if TYPE_CHECKING:
    from pipegnn.models import StagedGNN

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


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
    was at ``path`` becomes [`previous_path`][pipegnn.training.checkpoints.previous_path] once the new one is
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
    """The state [`save`][pipegnn.training.checkpoints.save] wrote at ``path`` (None when there is none), read
    with ``weights_only=True``: tensors and plain containers, nothing that runs code.

    Raises:
        ValueError: the file is larger than this process can still allocate (a checkpoint in a writable
            folder may be anything: a sparse file of 20 GB, a storage declared that large), before it is
            read.
        OSError: it cannot be read.
    """
    path = Path(path)
    if not path.is_file():
        return None
    with open_regular(path) as f:  # the file measured is the file read
        size, room = os.fstat(f.fileno()).st_size, allocatable_bytes()
        if size > room:
            raise ValueError(f"{path} holds {size:,} bytes, more than this process can still allocate "
                             f"({room:,}): not read")
        return torch.load(f, map_location="cpu", weights_only=True)


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


def _check_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """Every tensor of the optimizer's state of a parameter (Adam's moments) has that parameter's shape:
    ``load_state_dict`` does not check it, and a state of another shape failed at the first step, on every
    resume.

    Raises:
        ValueError: naming the first that does not.
    """
    for group in optimizer.param_groups:
        for p in group["params"]:
            for key, value in optimizer.state.get(p, {}).items():
                if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape != p.shape:
                    raise ValueError(f"the optimizer's {key} has shape {tuple(value.shape)}, its parameter "
                                     f"{tuple(p.shape)}")


def restore(state: dict[str, Any], model: StagedGNN,
            optimizer: torch.optim.Optimizer | None) -> list[dict[str, Any]]:
    """Put [`training_state`][pipegnn.training.checkpoints.training_state]'s ``state`` back into ``model`` and
    ``optimizer`` (and the RNGs); returns the finished epochs' entries."""
    model.load_state_dict(state["model"])
    if optimizer is not None:
        optimizer.load_state_dict(state["optimizer"])
        _check_optimizer_state(optimizer)
    torch.set_rng_state(state["rng"]["cpu"])
    if state["rng"]["cuda"]:
        torch.cuda.set_rng_state_all(state["rng"]["cuda"])
    for unit in model.transforms():
        if unit.history is not None:
            unit.history.load_state(state["history"][unit.name])
    return list(state["epochs"])
