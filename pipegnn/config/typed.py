"""A run's config as one typed object, and as records keep it.

[`run_config`][pipegnn.config.typed.run_config] turns a composed config (or its plain form) into a
[`Config`][pipegnn.config.schema.Config] whose group nodes are their schema's objects, chosen by each node's
``name``; [`group_config`][pipegnn.config.typed.group_config] types one group's node from a few keys over its
option's YAML. [`config_container`][pipegnn.config.typed.config_container] gives a config back as records and
checkpoints keep it (how two of them compare: [`compare`][pipegnn.config.compare]). OmegaConf's complaints
become one [`ConfigError`][pipegnn.errors.ConfigError] naming the key and what is valid.
"""
from __future__ import annotations

import dataclasses
import typing
from enum import Enum
from typing import Any, Mapping, cast

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from pipegnn.config.schema import (
    GROUP_SCHEMAS,
    Config,
    LoggerConfig,
    config_dir,
)
from pipegnn.errors import ConfigError

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


def run_config(cfg: Config | DictConfig | Mapping[str, Any]) -> Config:
    """The typed run config of ``cfg`` (a composed config or its plain form): a
    [`Config`][pipegnn.config.schema.Config] whose group nodes are their schema's objects (``cfg.model`` a
    `GATConfig` for a GAT), every choice its enum member, every interpolation resolved.

    Raises:
        ConfigError: a group's ``name`` without a schema, a key no schema has, a value of the wrong type
            or not one of its key's choices, or a missing value; naming the key and what is valid.
    """
    if isinstance(cfg, Config):
        return cfg
    plain = _container(cfg) if isinstance(cfg, DictConfig) else dict(cfg)
    nodes = {group: OmegaConf.structured(_schema(group, plain.get(group))) for group in GROUP_SCHEMAS}
    if plain.get("logger") is not None:  # the trackers chosen (composition leaves the group untyped)
        nodes["logger"] = OmegaConf.structured(LoggerConfig)
    return _typed(lambda: OmegaConf.merge(OmegaConf.structured(Config), nodes, plain))


def config_container(cfg: Config | DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    """A run config as records and checkpoints keep it: plain containers, interpolations resolved,
    choices as their spellings."""
    if isinstance(cfg, (Config, DictConfig)):
        return _container(OmegaConf.structured(cfg) if isinstance(cfg, Config) else cfg, enum_to_str=True)
    return dict(cfg)


def _container(cfg: DictConfig, enum_to_str: bool = False) -> dict[str, Any]:
    """A config node's plain form, interpolations resolved (a DictConfig's is a dict keyed by strings)."""
    return cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=True, enum_to_str=enum_to_str))


def group_config(group: str, node: Any) -> Any:
    """One config group's node (``dataset``, ``model``, ``framework``, ``engine``) typed by the schema of
    its ``name``; keys it leaves out come from the group's option of that name (``conf/<group>/<name>.yaml``),
    so ``group_config("model", {"name": "gat", "hidden": 4})`` is ``model=gat`` with ``model.hidden=4``.
    A typed node is returned as it is.

    Raises:
        ConfigError: as [`run_config`][pipegnn.config.typed.run_config].
    """
    if not isinstance(node, (Mapping, DictConfig)):
        return node
    schema = _schema(group, node)
    option = config_dir() / group / f"{node['name']}.yaml"
    base: DictConfig | ListConfig | dict[str, Any] = OmegaConf.load(option) if option.is_file() else {}
    if isinstance(base, DictConfig):
        base.pop("defaults", None)
    return _typed(lambda: OmegaConf.merge(OmegaConf.structured(schema), base, node), prefix=f"{group}.")


def _schema(group: str, node: Any) -> type:
    """The schema of a group's node, by its ``name``."""
    schemas = GROUP_SCHEMAS[group]
    name = node.get("name") if isinstance(node, (Mapping, DictConfig)) else None
    if name not in schemas:
        raise ConfigError(f"{group}.name={name!r} is not valid; valid: {', '.join(schemas)}")
    return schemas[name]


def _typed(merged: Any, prefix: str = "") -> Any:
    """``merged()``'s object (`OmegaConf.to_object`), OmegaConf's complaints as a ConfigError."""
    try:
        return OmegaConf.to_object(merged())
    except OmegaConfBaseException as e:
        raise ConfigError(_problem(e, prefix)) from e


def _problem(e: Any, prefix: str = "") -> str:
    """OmegaConf's complaint as one line naming the key (and what is valid there)."""
    key = f"{prefix}{e.full_key}"
    owner = e.object_type  # a class, or None
    schema = owner if isinstance(owner, type) and dataclasses.is_dataclass(owner) else None
    if isinstance(e, ConfigKeyError) and schema is not None:
        keys = ", ".join(f.name for f in dataclasses.fields(schema))
        return f"{key} is not a key of {schema.__name__}; its keys: {keys}"
    hint = typing.get_type_hints(schema).get(e.key) if schema is not None and e.key else None
    for kind in (hint, *typing.get_args(hint)):  # Optional[Choice] too
        if isinstance(kind, type) and issubclass(kind, Enum):
            return f"{key}={e.value!r} is not valid; valid: {', '.join(m.value for m in kind)}"
    return f"{key}: {str(e.msg).splitlines()[0]}"
