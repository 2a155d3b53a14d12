"""A run's config as two runs of the same computation hold it: what ``resume=true`` compares with a
job's record, and what ``python -m pipegnn.results --recompose`` compares a record's overrides composed
now with ([`comparable_config`][pipegnn.config.compare.comparable_config]); keys added since records were
written, at the value that trains as those records did (`ADDED_KEYS`)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence, cast

from omegaconf import DictConfig, OmegaConf

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


#: Top-level config keys that do not change what a run computes, ignored when resuming.
VOLATILE_KEYS = ("resume",)
#: Config keys added after records were written, with the value that trains as those records did: a
#: config holding that value compares equal to one without the key, so a resumed sweep keeps its jobs and
#: an older record recomposes (``python -m pipegnn.results --recompose``). ``microbatch.draw_ahead``
#: changes when an epoch's neighbourhoods are drawn, never what is drawn (the same losses: a test).
#: ``microbatch.halo_dropout``: every record before the key drew a mask per read, but those of commit b66bf9b,
#: where the per-node mask was unconditional (its two sweeps are in results/superseded/, not the reference
#: set).
ADDED_KEYS = {("engine", "capture"): "none", ("engine", "threads"): None, ("engine", "data_parallel"): 1,
              ("data", "edges"): "memory", ("data", "features"): "memory", ("microbatch", "fanouts"): None,
              ("microbatch", "evaluation"): "plan", ("microbatch", "draw_ahead"): True,
              ("microbatch", "halo_dropout"): "read", ("model", "residual"): False,
              ("model", "conv_weight_decay"): None, ("train", "conv_weight_decay"): None,
              ("train", "monitor"): "val_acc", ("train", "patience"): None, ("train", "target_val_acc"): None,
              ("train", "precision"): "fp32"}


def plain_config(value: Any) -> Any:
    """``value`` as JSON would give it back (lists for tuples, str for odd objects)."""
    return json.loads(json.dumps(value, default=str))


def drop_keys(plain: dict[str, Any], keys: Sequence[Sequence[str]]) -> dict[str, Any]:
    """``plain`` (a config's plain form) without each of ``keys`` (paths of names), changed in place."""
    for *parents, key in keys:
        section: Any = plain
        for name in parents:
            section = section.get(name) if isinstance(section, dict) else None
        if isinstance(section, dict):
            section.pop(key, None)
    return plain


def comparable_config(config: Mapping[str, Any] | DictConfig,
                      output_dir: str | Path | None = None) -> dict[str, Any]:
    """The resolved config as two runs of the same computation hold it, to compare a sweep's job with
    its record: without `VOLATILE_KEYS` (nor `ADDED_KEYS` at their old behaviour's value);
    string values that contain the job's output directory (a path embedding Hydra's timestamp) have it
    replaced by ``<output_dir>``."""
    if isinstance(config, DictConfig):
        config = cast(dict[str, Any], OmegaConf.to_container(config, resolve=True))
    plain = {k: v for k, v in plain_config(dict(config)).items() if k not in VOLATILE_KEYS}
    for (*parents, key), value in ADDED_KEYS.items():
        section: dict[str, Any] | None = plain
        for name in parents:
            section = section.get(name) if isinstance(section, dict) else None
        if isinstance(section, dict) and section.get(key, value) == value:
            section.pop(key, None)
    if output_dir is None:
        return plain
    out = str(Path(output_dir).resolve())

    def strip(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items()}
        if isinstance(v, list):
            return [strip(x) for x in v]
        return v.replace(out, "<output_dir>") if isinstance(v, str) else v

    return strip(plain)
