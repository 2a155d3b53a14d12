"""Hydra's files of a sweep and its jobs (``multirun.yaml``, ``.hydra/*.yaml``), read as data.

Reading them runs nothing they name: they are parsed as YAML data (PyYAML's safe loader, through OmegaConf),
only when they are regular files (a FIFO never makes the reader wait) of at most `MAX_YAML_BYTES` without a
YAML alias (Hydra writes none; aliases of aliases, a few hundred bytes, would expand to billions of nodes);
and interpolations are resolved only between the file's own keys (``${chunks}``): one that calls a resolver
(``${oc.env:HOME}``, ``${now:...}``, any registered one) stays as its text. Their readers are
[`sweep`][pipegnn.results.sweep] (a sweep's jobs) and [`sweep_plan`][pipegnn.results.sweep_plan] (the jobs
it planned).
"""
from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from pipegnn.jsonfile import read_regular

__all__ = ["MAX_RESOLVED_CHARS", "MAX_YAML_BYTES", "read_hydra_file"]

#: The largest Hydra file (``multirun.yaml``, ``.hydra/*.yaml``) a reader parses: Hydra writes a few
#: kilobytes (this project's sweeps: at most 6 KB); OmegaConf's pure-Python YAML loader takes about 4 s a
#: MiB here (a 4 MB plan took 83 s and 814 MB through OmegaConf.load).
MAX_YAML_BYTES = 64 << 10
#: Where a string calls a resolver: an interpolation whose text before its first brace holds a colon
#: (``${oc.env:X}``, ``${a.${now:%H}}``); a key of a node interpolation never holds one.
_RESOLVER_CALL = re.compile(r"\$\{[^{}]*:")
_ESCAPABLE = re.compile(r"(\\*)\$\{")


def _plain(node: Any, resolve: bool = False) -> Any:
    """``OmegaConf.to_container(node)``: a config as plain data, typed Any (its readers check what they
    use, or catch)."""
    return OmegaConf.to_container(node, resolve=resolve)


def read_hydra_file(path: Path) -> Any:
    """What the Hydra file ``path`` holds, as plain data with its interpolations as written: read only
    when it is a regular file of at most `MAX_YAML_BYTES`, parsed by OmegaConf's safe YAML loader.

    Raises:
        OSError: it cannot be read (FileNotFoundError: there is none or a link to nothing;
            NotRegularFileError: a FIFO, a folder, a device).
        Exception: it is too large, holds a YAML alias (``*name``, see `_refuse_aliases`), or is not
            YAML that OmegaConf takes.
    """
    import yaml
    from omegaconf._utils import get_yaml_loader

    data = read_regular(path, MAX_YAML_BYTES)
    _refuse_aliases(path, data)
    # OmegaConf's own loader, as OmegaConf.load reads: its values as plain data without building the
    # config's nodes (what OmegaConf.load then to_container took, 2.3x the time)
    value = yaml.load(io.BytesIO(data), Loader=get_yaml_loader())
    _check_kinds(path, value)
    return {} if value is None else value


def read_override_list(path: Path) -> list[str] | None:
    """A job's ``.hydra/overrides.yaml`` (a list of ``key=value`` strings), within the same bounds as
    [`read_hydra_file`][pipegnn.results.hydra_files.read_hydra_file] but parsed by libyaml where PyYAML
    has it: a listing reads one per job (200 folders of 64 KiB lists took 68 s with the pure-Python
    loader). Every item is text that no loader reads otherwise; None when the file is not a list of
    scalars.

    Raises:
        OSError: it cannot be read (as for `read_hydra_file`).
        ValueError: it is too large, or holds a YAML alias.
        Exception: it is not YAML."""
    import yaml

    data = read_regular(path, MAX_YAML_BYTES)
    _refuse_aliases(path, data)
    value = yaml.load(io.BytesIO(data), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    if not isinstance(value, list) or any(isinstance(o, (dict, list)) for o in value):
        return None
    return [str(o) for o in value]


#: What a Hydra file's values are (OmegaConf's loader also gives ``pathlib.Path`` for its tag).
_KINDS = (dict, list, str, int, float, bool, type(None), Path)


def _check_kinds(path: Path, value: Any) -> None:
    """Raise ValueError naming ``path`` when ``value`` is no mapping or list, or holds a value OmegaConf
    takes no config of (an explicit ``!!set``, ``!!binary`` or ``!!timestamp``): what OmegaConf.load
    refused. Iterative: a file's nesting is bounded by its size only."""
    if not isinstance(value, (dict, list, type(None))):
        raise ValueError(f"{path}: holds a {type(value).__name__}, not a config")
    stack = [value]
    while stack:
        node = stack.pop()
        if not isinstance(node, _KINDS):
            raise ValueError(f"{path}: holds a value of type {type(node).__name__}, which no Hydra file does")
        if isinstance(node, dict):
            odd = next((k for k in node if not isinstance(k, (str, int, float, bool))), None)
            if odd is not None or None in node:
                raise ValueError(f"{path}: holds a key {odd!r}, which no config does")
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def _refuse_aliases(path: Path, data: bytes) -> None:
    """Raise ValueError naming ``path`` when its YAML holds an alias (``*name``): Hydra writes none, and a
    few hundred bytes of aliases of aliases expand to billions of nodes (a "billion laughs"). Read as
    events, before anything is built: one pass over the text."""
    import yaml

    # libyaml's parser where PyYAML has it (an alias is the same event to both; 10x faster than Python's)
    parser = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    for event in yaml.parse(io.BytesIO(data), Loader=parser):
        if isinstance(event, yaml.AliasEvent):
            raise ValueError(f"{path}: holds a YAML alias (*{event.anchor}), which no Hydra file does: not "
                             "read (aliases of aliases expand past any memory)")


def _inert(value: Any) -> Any:
    """``value`` (plain data) with every string that calls a resolver escaped, so that OmegaConf reads
    it as the literal text it is: resolving it then calls nothing."""
    if isinstance(value, dict):
        return {k: _inert(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_inert(v) for v in value]
    if isinstance(value, str) and _RESOLVER_CALL.search(value):
        # n backslashes before "${" stand for n/2 of them and an interpolation: 2n + 1 for n and the text
        return _ESCAPABLE.sub(lambda m: m.group(1) * 2 + "\\${", value)
    return value


#: The most characters a Hydra file's values may resolve to, all together: interpolations of
#: interpolations (``a1: ${a0}${a0}``, twenty lines) double at each step.
MAX_RESOLVED_CHARS = 1 << 20
#: An interpolation of one of the file's own keys, whole (``${model.lr}``).
_REFERENCE = re.compile(r"\$\{([^{}:]+)\}")


def _resolved_size(data: Any) -> int:
    """An upper bound of the characters ``data``'s strings resolve to (each reference of a key counted as
    what that key resolves to, each once per use; a cycle as unbounded), stopping past
    `MAX_RESOLVED_CHARS`."""
    leaves: dict[str, Any] = {}

    def walk(value: Any, prefix: str) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{prefix}{k}.")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, f"{prefix}{i}.")
        leaves[prefix[:-1]] = value

    walk(data, "")
    sizes: dict[str, int] = {}

    def size(key: str, depth: int) -> int:
        if key in sizes:
            return sizes[key]
        if depth > 64:  # a cycle, or a chain deeper than any config's
            return MAX_RESOLVED_CHARS + 1
        value = leaves.get(key)
        if not isinstance(value, str):
            total = len(str(value))
        else:
            total = len(value)
            for ref in _REFERENCE.findall(value):
                # a relative one (${.a}: no Hydra file writes one) is not followed here: unbounded
                total += size(ref.strip(), depth + 1) if not ref.strip().startswith(".") else \
                    MAX_RESOLVED_CHARS + 1
                if total > MAX_RESOLVED_CHARS:
                    break
        sizes[key] = min(total, MAX_RESOLVED_CHARS + 1)
        return sizes[key]

    total = 0
    for key, value in leaves.items():
        if isinstance(value, str):
            total += size(key, 0)
            if total > MAX_RESOLVED_CHARS:
                break
    return total


def _resolved(data: Any) -> Any:
    """``data`` (a Hydra file's plain data) with its interpolations between its own keys resolved
    (``${model.lr}``); one that calls a resolver stays as its text (see `_inert`), and ``data``
    stays as written where they cannot be resolved, or would resolve to more than `MAX_RESOLVED_CHARS`."""
    if _resolved_size(data) > MAX_RESOLVED_CHARS:
        return data
    try:
        return _plain(OmegaConf.create(_inert(data)), resolve=True)
    except Exception:  # noqa: BLE001 - a key that is not there, a cycle (RecursionError), ...
        return data


def _get(data: Any, *keys: str) -> Any:
    """``data[k1][k2]...``, None where a level is not a mapping or lacks the key."""
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data
