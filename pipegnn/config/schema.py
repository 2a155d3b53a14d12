"""Typed schemas behind the YAML config groups, registered in Hydra's ConfigStore.

The YAML files under ``conf/`` stay the source of every default; these dataclasses only give the keys
and their types (fields are ``MISSING``, filled from the YAML; ``None`` only for an optional key a
YAML may leave out; every choice an enum of [`pipegnn.config.choices`][pipegnn.config.choices]), so that
composition itself rejects a misspelt key (``model.hiden=8``), a value of the wrong type (``chunks=abc``) or
one that is not among its key's choices (``microbatch.halo=fancy``) with Hydra's error. They are also the
runtime type of a run's config ([`run_config`][pipegnn.config.typed.run_config]).

Checks that involve several fields (balance vs layers, chunks vs targets, ...) are made beside what
they protect ([`pipegnn.training.launch.check_run`][pipegnn.training.launch.check_run] runs them all), which
record them as ``invalid`` runs with one clear message.

Call [`register`][pipegnn.config.schema.register] before composing (``experiments/train.py`` does at
import, the tests' ``make_cfg`` does too); without it everything composes as before, untyped. The schemas
are stored under ``schema/<group>/<option>`` and ``conf/config.yaml`` pulls each one in *before* the
option's YAML (``optional schema/model@model: ${model}``), so the YAML's values fill the schema (Hydra's
merge order for "structured config schema for YAML files", without touching the option files). An option
without a schema (e.g. a newly added dataset preset) composes untyped; Hydra's struct mode still rejects
misspelt keys there, only the types go unchecked.

Registered (ConfigStore group: names):

- ``schema``: ``config``, the primary config (chunks, microbatch, train, data, cache_root, resume)
- ``schema/dataset``: every dataset name (``name`` only; ``pubmed_topology``, ``synthetic``: their keys)
- ``schema/model``: ``gat``, ``gcn``, ``sage``, ``gcn2``
- ``schema/framework``: ``pyg``, ``dgl``
- ``schema/engine``: ``single``, ``gpipe``, ``pipelining``, ``dgl_loader``

The ``devices`` presets set ``engine.*`` (package ``_global_``), so the engine's schema types them too.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Optional, Sequence

from omegaconf import MISSING, DictConfig, OmegaConf

from pipegnn.config.choices import (
    STUDY_GRAPHS,
    Aggregation,
    Capture,
    Checkpoint,
    DatasetName,
    DistBackend,
    EdgeStorage,
    EngineName,
    Evaluation,
    FirstTransform,
    FrameworkName,
    Halo,
    HaloDropout,
    Launcher,
    ModelName,
    Monitor,
    Partitioner,
    Precision,
    Schedule,
    Split,
    StartMethod,
    Storage,
    Targets,
)

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

# Postponed annotations (from __future__) are resolved by OmegaConf through typing.get_type_hints, so
# the typing names above must stay importable from this module.


@dataclass
class DatasetConfig:
    """``dataset=cora|citeseer|pubmed|ogbn-arxiv|ogbn-products|reddit``: the name only (their split is
    the published one)."""

    name: DatasetName = MISSING


@dataclass
class PubmedTopologyConfig(DatasetConfig):
    """``dataset=pubmed_topology``: PubMed's graph with seeded random features."""

    seed: int = MISSING  # of the random features


@dataclass
class StudyGraphConfig(DatasetConfig):
    """``dataset=amazon_computers|amazon_photo|coauthor_cs|coauthor_physics``: the split drawn per seed."""

    split: Split = MISSING
    split_seed: int = MISSING  # ${train.seed} unless set: a seed is a split x an initialisation
    train_per_class: int = MISSING  # split=per_class
    val_per_class: int = MISSING  # split=per_class
    train_fraction: float = MISSING  # split=random
    val_fraction: float = MISSING  # split=random


@dataclass
class SyntheticConfig(DatasetConfig):
    """``dataset=synthetic`` (and its presets):
    [`pipegnn.data.synthetic.SyntheticSpec`][pipegnn.data.synthetic.SyntheticSpec]'s fields."""

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

    name: ModelName = MISSING
    layers: int = MISSING
    hidden: int = MISSING
    dropout: float = MISSING
    residual: bool = MISSING
    aggregation: Aggregation = MISSING
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
    name: FrameworkName = MISSING


@dataclass
class EngineConfig:
    """What every engine has (``conf/engine/*.yaml``)."""

    name: EngineName = MISSING
    threads: Optional[int] = MISSING
    timeline: bool = MISSING
    trace_epoch: Optional[int] = MISSING
    capture: Capture = MISSING


@dataclass
class SingleEngineConfig(EngineConfig):
    """``engine=single``: the whole model on one device."""

    device: str = MISSING


@dataclass
class LoaderEngineConfig(EngineConfig):
    """``engine=dgl_loader``: DGL's own sampled training loop on one device, no pipegnn model."""

    device: str = MISSING


@dataclass
class StagedEngineConfig(EngineConfig):
    """A pipeline's engine: one device per stage (or per process) and the units each one runs."""

    devices: List[str] = MISSING
    # null, a list of layers or units per device, or "auto" (checked in pipegnn.engines.checks)
    balance: Any = MISSING


@dataclass
class GPipeEngineConfig(StagedEngineConfig):
    """``engine=gpipe`` (torchgpipe, one process)."""

    checkpoint: Checkpoint = MISSING


@dataclass
class PipeliningEngineConfig(StagedEngineConfig):
    """``engine=pipelining`` (torch.distributed.pipelining, one process per stage)."""

    schedule: Schedule = MISSING
    virtual_stages: int = MISSING
    data_parallel: int = MISSING
    memory_limit_gb: Optional[float] = MISSING
    launcher: Launcher = MISSING
    start_method: StartMethod = MISSING
    backend: DistBackend = MISSING
    timeout_s: float = MISSING


@dataclass
class MicrobatchConfig:
    halo: Halo = MISSING
    halo_dropout: HaloDropout = MISSING
    first_transform: FirstTransform = MISSING
    partition: Partitioner = MISSING
    targets: Targets = MISSING  # ${targets_for_halo:${microbatch.halo}} unless set
    seed: int = MISSING
    cache: Optional[str] = MISSING
    fanouts: Optional[List[int]] = MISSING
    draw_ahead: bool = MISSING
    evaluation: Evaluation = MISSING


@dataclass
class TrainConfig:
    epochs: int = MISSING
    lr: float = MISSING
    weight_decay: float = MISSING
    conv_weight_decay: Optional[float] = MISSING
    seed: int = MISSING
    patience: Optional[int] = MISSING
    monitor: Monitor = MISSING
    target_val_acc: Optional[float] = MISSING
    memory_limit_gb: Optional[float] = MISSING
    precision: Precision = MISSING
    checkpoint_every: Optional[int] = MISSING


@dataclass
class DataConfig:
    root: Optional[str] = MISSING
    cache: str = MISSING
    features: Storage = MISSING
    edges: EdgeStorage = MISSING


@dataclass
class TrackerConfig:
    """``logger=csv`` and ``logger=tensorboard``: the folder under the run's output directory."""

    dir: str = MISSING


@dataclass
class MLflowConfig(TrackerConfig):
    """``logger=mlflow``: where the MLflow run goes (null ``tracking_uri``: a SQLite store in ``dir``)."""

    tracking_uri: Optional[str] = MISSING
    experiment: str = MISSING
    run_name: Optional[str] = MISSING


@dataclass
class LoggerConfig:
    """The ``logger`` group: the trackers chosen (``logger=[csv,tensorboard]``), None for the others."""

    csv: Optional[TrackerConfig] = None
    tensorboard: Optional[TrackerConfig] = None
    mlflow: Optional[MLflowConfig] = None


@dataclass
class Config:
    """The primary config (``conf/config.yaml``). The group nodes are ``Any`` at composition because each
    group option brings its own schema (a GAT has heads, a GCN has not); in a run's config
    ([`run_config`][pipegnn.config.typed.run_config]) they hold that schema's object."""

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


#: Each config group's schema by the ``name`` of its node: the option of that name composes on it, and a
#: run's config ([`run_config`][pipegnn.config.typed.run_config]) types a node by its name (a
#: preset such as ``dataset=synthetic_density``, which has no schema of its own, by ``synthetic``).
GROUP_SCHEMAS: dict[str, dict[str, type]] = {
    "dataset": {**{name: DatasetConfig for name in DatasetName},
                DatasetName.pubmed_topology: PubmedTopologyConfig, DatasetName.synthetic: SyntheticConfig,
                **{name: StudyGraphConfig for name in STUDY_GRAPHS}},
    "model": {ModelName.gat: GATConfig, ModelName.gcn: ModelConfig, ModelName.sage: ModelConfig,
              ModelName.gcn2: GCN2Config},
    "framework": {name: FrameworkConfig for name in FrameworkName},
    "engine": {EngineName.single: SingleEngineConfig, EngineName.gpipe: GPipeEngineConfig,
               EngineName.pipelining: PipeliningEngineConfig, EngineName.dgl_loader: LoaderEngineConfig},
}
#: (ConfigStore group, name, schema). The primary config's defaults list pulls ``schema/<group>`` in
#: with the group's choice as the name (``optional schema/model@model: ${model}``), after the option's
#: YAML, so the YAML's values stay and the node takes the schema's types and keys. An option without a
#: schema here (a new preset) composes untyped, exactly as before.
SCHEMAS: list[tuple[str, str, type]] = [
    ("schema", "config", Config),
    *((f"schema/{group}", str(name), schema) for group, by_name in GROUP_SCHEMAS.items()
      for name, schema in by_name.items()),
]


def config_dir() -> Path:
    """The folder of pipegnn's YAML configs: ``$PIPEGNN_CONF`` if set, else the source checkout's
    ``conf/`` (beside the ``pipegnn`` package).

    Raises:
        ConfigError: neither holds a ``config.yaml`` (e.g. a non-editable install without the checkout).
    """
    from pipegnn.errors import ConfigError

    env = os.environ.get("PIPEGNN_CONF")
    folder = Path(env) if env else Path(__file__).resolve().parents[2] / "conf"
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


def layerwise_unless_none(halo: str) -> str:
    """``microbatch.evaluation`` for sweeps over halos (``${layerwise_unless_none:${microbatch.halo}}``):
    ``layerwise`` (each layer computes each node once) for the halos that evaluate on full neighbourhoods,
    ``plan`` for ``none``, which evaluates its own induced subgraphs."""
    return "plan" if halo == "none" else "layerwise"


# Registered at import: every module that reads a run config (pipegnn.config.checks) imports this one.
OmegaConf.register_new_resolver("targets_for_halo", targets_for_halo, replace=True)
OmegaConf.register_new_resolver("layerwise_unless_none", layerwise_unless_none, replace=True)


def compose_config(overrides: Sequence[str] = (), return_hydra_config: bool = False) -> DictConfig:
    """The run configuration Hydra composes from [`config_dir`][pipegnn.config.schema.config_dir] with
    ``overrides`` (schemas registered), as ``experiments/train.py`` would, for scripts, benchmarks and
    tests."""
    from hydra import compose, initialize_config_dir

    register()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=return_hydra_config)


def register() -> None:
    """Store every schema in Hydra's ConfigStore (idempotent; call before composing), and make a
    misspelt key's composition error name the valid keys
    ([`pipegnn.config.key_hints.install`][pipegnn.config.key_hints.install])."""
    from hydra.core.config_store import ConfigStore

    from pipegnn.config.key_hints import install

    install()

    cs = ConfigStore.instance()
    for group, name, node in SCHEMAS:
        cs.store(group=group, name=name, node=node)
