"""Typed schemas behind the YAML config groups, registered in Hydra's ConfigStore.

The YAML files under ``conf/`` stay the source of every default; these dataclasses only give the keys
and their types (fields are ``MISSING``, filled from the YAML; ``None`` only for an optional key a
YAML may leave out), so that composition itself rejects a misspelt key
(``model.hiden=8``) or a value of the wrong type (``chunks=abc``) with Hydra's error.

Checks that involve several fields or the valid choices (halo names, balance vs layers, ...) stay in
:mod:`pipegnn.config`, which records them as ``invalid`` runs with one clear message.

Call :func:`register` before composing (``experiments/train.py`` does at import, the tests' ``make_cfg``
does too); without it everything composes as before, untyped. The schemas are stored under
``schema/<group>/<option>`` and ``conf/config.yaml`` pulls each one in *before* the option's YAML
(``optional schema/model@model: ${model}``), so the YAML's values fill the schema (Hydra's merge order
for "structured config schema for YAML files", without touching the option files). An option without
a schema (e.g. a newly added dataset preset) composes untyped; Hydra's struct mode
still rejects misspelt keys there, only the types go unchecked.

Registered (ConfigStore group: names):

- ``schema``: ``config``, the primary config (chunks, microbatch, train, data, cache_root, resume)
- ``schema/dataset``: ``cora``, ``citeseer``, ``pubmed`` (``name`` only), ``synthetic``
- ``schema/model``: ``gat``, ``gcn``, ``sage``, ``gcn2``
- ``schema/framework``: ``pyg``, ``dgl``
- ``schema/engine``: ``single``, ``gpipe``, ``pipelining``

The ``devices`` presets set ``engine.*`` (package ``_global_``), so the engine's schema types them too.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Mapping, Optional, Sequence

from omegaconf import MISSING, DictConfig, OmegaConf

__all__ = ["ADDED_KEYS", "Config", "DataConfig", "GATConfig", "GCN2Config", "GPipeEngineConfig",
           "FrameworkConfig", "MicrobatchConfig", "ModelConfig", "PipeliningEngineConfig", "PlanetoidConfig",
           "SingleEngineConfig", "SCHEMAS", "SyntheticConfig", "TrainConfig", "VOLATILE_KEYS",
           "comparable_config", "compose_config", "config_dir", "plain_config", "register",
           "targets_for_halo"]

# Postponed annotations (from __future__) are resolved by OmegaConf through typing.get_type_hints, so
# the typing names above must stay importable from this module.


@dataclass
class PlanetoidConfig:
    """``dataset=cora|citeseer|pubmed``."""

    name: str = MISSING


@dataclass
class SyntheticConfig:
    """``dataset=synthetic``: the fields of :class:`pipegnn.data.synthetic.SyntheticSpec`."""

    name: str = MISSING
    preset: Optional[str] = MISSING
    num_nodes: int = MISSING
    avg_degree: Optional[float] = MISSING
    # Alternative to avg_degree (directed edges / (n * (n - 1))); None when the YAML does not set it.
    density: Optional[float] = None
    num_features: int = MISSING
    num_classes: int = MISSING
    num_communities: int = MISSING
    homophily: float = MISSING
    power_law: Optional[float] = MISSING
    words_per_node: int = MISSING
    signal: float = MISSING
    train_per_class: int = MISSING
    num_val: int = MISSING
    num_test: int = MISSING
    seed: int = MISSING


@dataclass
class ModelConfig:
    """``model=gcn`` and ``model=sage`` (and what every model has)."""

    name: str = MISSING
    layers: int = MISSING
    hidden: int = MISSING
    dropout: float = MISSING
    residual: bool = MISSING
    aggregation: str = MISSING
    lr: float = MISSING
    weight_decay: float = MISSING
    conv_weight_decay: Optional[float] = MISSING


@dataclass
class GATConfig(ModelConfig):
    heads: int = MISSING
    out_heads: int = MISSING


@dataclass
class GCN2Config(ModelConfig):
    """``model=gcn2`` (GCNII): initial residual and identity-mapping strength."""

    alpha: float = MISSING
    theta: float = MISSING


@dataclass
class FrameworkConfig:
    name: str = MISSING


@dataclass
class SingleEngineConfig:
    name: str = MISSING
    device: str = MISSING
    threads: Optional[int] = MISSING
    timeline: bool = MISSING
    trace_epoch: Optional[int] = MISSING
    capture: str = MISSING


@dataclass
class GPipeEngineConfig:
    name: str = MISSING
    devices: List[str] = MISSING
    # null, a list of layers or units per device, or "auto" (checked in pipegnn.config)
    balance: Any = MISSING
    checkpoint: str = MISSING
    threads: Optional[int] = MISSING
    timeline: bool = MISSING
    trace_epoch: Optional[int] = MISSING
    capture: str = MISSING


@dataclass
class PipeliningEngineConfig:
    """``engine=pipelining`` (torch.distributed.pipelining), see conf/engine/pipelining.yaml."""

    name: str = MISSING
    devices: List[str] = MISSING
    balance: Any = MISSING
    schedule: str = MISSING
    virtual_stages: int = MISSING
    data_parallel: int = MISSING
    memory_limit_gb: Optional[float] = MISSING
    launcher: str = MISSING
    start_method: str = MISSING
    backend: str = MISSING
    timeout_s: float = MISSING
    threads: Optional[int] = MISSING
    timeline: bool = MISSING
    trace_epoch: Optional[int] = MISSING
    capture: str = MISSING


@dataclass
class MicrobatchConfig:
    halo: str = MISSING
    halo_dropout: str = MISSING
    first_transform: str = MISSING
    partition: str = MISSING
    targets: str = MISSING  # ${targets_for_halo:${microbatch.halo}} unless set
    seed: int = MISSING
    cache: Optional[str] = MISSING


@dataclass
class TrainConfig:
    epochs: int = MISSING
    lr: float = MISSING
    weight_decay: float = MISSING
    conv_weight_decay: Optional[float] = MISSING
    seed: int = MISSING
    patience: Optional[int] = MISSING
    monitor: str = MISSING
    target_val_acc: Optional[float] = MISSING
    memory_limit_gb: Optional[float] = MISSING
    precision: str = MISSING
    checkpoint_every: Optional[int] = MISSING


@dataclass
class DataConfig:
    root: Optional[str] = MISSING
    cache: str = MISSING
    features: str = MISSING


@dataclass
class Config:
    """The primary config (``conf/config.yaml``). The group nodes are ``Any`` here because each group
    option brings its own schema (a GAT has heads, a GCN has not)."""

    dataset: Any = MISSING
    model: Any = MISSING
    framework: Any = MISSING
    engine: Any = MISSING
    chunks: int = MISSING
    microbatch: MicrobatchConfig = field(default_factory=MicrobatchConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    cache_root: str = MISSING
    data: DataConfig = field(default_factory=DataConfig)
    resume: bool = MISSING
    logger: Any = None  # the trackers chosen in the logger group (none: absent)


#: (ConfigStore group, name, schema). The primary config's defaults list pulls ``schema/<group>`` in
#: with the group's choice as the name (``optional schema/model@model: ${model}``), after the option's
#: YAML, so the YAML's values stay and the node takes the schema's types and keys. An option without a
#: schema here (a new preset) composes untyped, exactly as before.
SCHEMAS: list[tuple[str, str, type]] = [
    ("schema", "config", Config),
    *(("schema/dataset", name, PlanetoidConfig) for name in ("cora", "citeseer", "pubmed")),
    ("schema/dataset", "synthetic", SyntheticConfig),
    ("schema/model", "gat", GATConfig),
    ("schema/model", "gcn", ModelConfig),
    ("schema/model", "sage", ModelConfig),
    ("schema/model", "gcn2", GCN2Config),
    *(("schema/framework", name, FrameworkConfig) for name in ("pyg", "dgl")),
    ("schema/engine", "single", SingleEngineConfig),
    ("schema/engine", "gpipe", GPipeEngineConfig),
    ("schema/engine", "pipelining", PipeliningEngineConfig),
]


def config_dir() -> Path:
    """The folder of pipegnn's YAML configs: ``$PIPEGNN_CONF`` if set, else the source checkout's
    ``conf/`` (beside the ``pipegnn`` package).

    Raises:
        ConfigError: neither holds a ``config.yaml`` (e.g. a non-editable install without the checkout).
    """
    from pipegnn.errors import ConfigError

    env = os.environ.get("PIPEGNN_CONF")
    folder = Path(env) if env else Path(__file__).resolve().parent.parent / "conf"
    if not (folder / "config.yaml").is_file():
        raise ConfigError(f"no config.yaml in {folder}: pipegnn's configs are the source checkout's conf/ "
                          "folder; set $PIPEGNN_CONF to it")
    return folder


def targets_for_halo(halo: str) -> str:
    """``microbatch.targets`` when it is not set (``${targets_for_halo:${microbatch.halo}}``): ``all`` for
    historical halos, whose caches are only as fresh as the rows the micro-batches compute (GCNII 64 on
    Cora lost ten points with ``train``: 73.3 and 74.0 against 84.2 and 83.9 at full batch), ``train``
    for the others (exact halos compute what full batch computes either way, with fewer rows)."""
    return "all" if halo == "historical" else "train"


# Registered at import: every module that reads a run config (pipegnn.config) imports this one.
OmegaConf.register_new_resolver("targets_for_halo", targets_for_halo, replace=True)


def compose_config(overrides: Sequence[str] = (), return_hydra_config: bool = False) -> DictConfig:
    """The run configuration Hydra composes from :func:`config_dir` with ``overrides`` (schemas
    registered), as ``experiments/train.py`` would, for scripts, benchmarks and tests."""
    from hydra import compose, initialize_config_dir

    register()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=return_hydra_config)


def register() -> None:
    """Store every schema in Hydra's ConfigStore (idempotent; call before composing)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    for group, name, node in SCHEMAS:
        cs.store(group=group, name=name, node=node)


#: Top-level config keys that do not change what a run computes, ignored when resuming.
VOLATILE_KEYS = ("resume",)
#: Config keys added after records were written, with the value that trains as those records did: a
#: config holding that value compares equal to one without the key, so a resumed sweep keeps its jobs.
ADDED_KEYS = {("engine", "capture"): "none"}


def plain_config(value: Any) -> Any:
    """``value`` as JSON would give it back (lists for tuples, str for odd objects)."""
    return json.loads(json.dumps(value, default=str))


def comparable_config(config: Mapping[str, Any] | DictConfig,
                      output_dir: str | Path | None = None) -> dict[str, Any]:
    """The resolved config as two runs of the same computation hold it, to compare a sweep's job with
    its record: without :data:`VOLATILE_KEYS` (nor :data:`ADDED_KEYS` at their old behaviour's value);
    string values that contain the job's output directory (a path embedding Hydra's timestamp) have it
    replaced by ``<output_dir>``."""
    if isinstance(config, DictConfig):
        config = OmegaConf.to_container(config, resolve=True)
    plain = {k: v for k, v in plain_config(dict(config)).items() if k not in VOLATILE_KEYS}
    for (*parents, key), value in ADDED_KEYS.items():
        section = plain
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
