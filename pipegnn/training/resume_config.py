"""What configuration a checkpoint must have been made with to be resumed.

A checkpoint's configuration covers what changes the computation only: `NON_COMPUTING_KEYS` are left out
(the epoch budget, early stopping, checkpoints, caps, deadlines, trackers, caches), `PATH_KEYS` are compared
resolved, ``data.root`` of `GENERATED_DATASETS` is left out and ``data.features`` of `DENSE_FEATURES` reads
as one value; so a run resumed with a larger ``train.epochs`` trains on.
[`config_difference`][pipegnn.training.resume_config.config_difference] names the keys that differ, which
[`resume`][pipegnn.training.resume] gives as the reason a checkpoint is set aside.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipegnn.config.compare import comparable_config, drop_keys
from pipegnn.config.schema import Config
from pipegnn.config.typed import config_container

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


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
    ("microbatch", "draw_ahead"),  # when each epoch is drawn: the same draws (tests/training/test_epochs.py)
    ("data", "edges"),  # where the edges are read from: the same blocks (tests/data/test_graph_store.py)
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
        from pipegnn.config.typed import group_config
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
    drop_keys(plain, NON_COMPUTING_KEYS)
    for *parents, key in PATH_KEYS:
        section: Any = plain
        for name in parents:
            section = section.get(name) if isinstance(section, dict) else None
        if isinstance(section, dict) and isinstance(section.get(key), str) and section[key]:
            section[key] = str(Path(section[key]).expanduser().resolve())
    return plain


def config_key(config: Config) -> str:
    """What a checkpoint must have been made with to be resumed: the resolved config as JSON, without
    the keys that do not change what a run computes (`NON_COMPUTING_KEYS` and those of
    [`pipegnn.config.compare.comparable_config`][pipegnn.config.compare.comparable_config]), paths resolved
    (`PATH_KEYS`)."""
    return json.dumps(_computation(comparable_config(config_container(config))), sort_keys=True)


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        return {k: v for name, x in value.items() for k, v in _flat(x, f"{prefix}{name}.").items()}
    return {prefix[:-1]: value}


def config_difference(stored: str, config: Config) -> str | None:
    """The keys (with both values) in which a checkpoint's ``stored`` key differs from ``config``'s, as
    one line; None when they agree. A key stored by an older version is compared as
    [`config_key`][pipegnn.training.resume_config.config_key] makes it now (the keys that do not change the
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
