"""Composition errors that name the valid keys: a misspelt key (``model.hiden=8``) fails with Hydra's
"Could not override 'model.hiden'" followed by the node's valid keys and the nearest one
(`difflib`), e.g. ``did you mean model.hidden? model's keys: name, layers, hidden, ...``.

Hydra composes inside ``hydra.main`` (and ``hydra.compose``), where no hook of the app can see the
error before Hydra prints it, so [`install`][pipegnn.config.key_hints.install] wraps the loader's
``load_configuration`` (the one entry of a run's, a sweep's and each sweep job's composition): a
``ConfigCompositionException`` caused by an unknown key is raised again with
[`key_hint`][pipegnn.config.key_hints.key_hint]'s line added, its cause (OmegaConf's error, which Hydra
prints beneath) unchanged. [`register`][pipegnn.config.schema.register] installs it, so
``experiments/train.py`` and [`compose_config`][pipegnn.config.schema.compose_config] both give the hint.
"""
from __future__ import annotations

import difflib
import functools
from typing import Any

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

_MARK = "_pipegnn_key_hint"


def key_hint(error: BaseException) -> str | None:
    """The line naming the nearest valid key and every valid key of the node an unknown key was set on,
    from ``error`` or an error in its cause chain (OmegaConf's ``ConfigKeyError`` or
    ``ConfigAttributeError``, which carry the node and the key); None when no error there is about an
    unknown key."""
    from omegaconf import DictConfig
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, (ConfigKeyError, ConfigAttributeError)):
            node, key = getattr(cause, "parent_node", None), getattr(cause, "key", None)
            if isinstance(node, DictConfig) and isinstance(key, str) and key not in node:
                return _hint(node, key, str(getattr(cause, "full_key", "") or key))
        cause = cause.__cause__ or cause.__context__
    return None


def _hint(node: Any, key: str, full_key: str) -> str:
    valid = [str(k) for k in node.keys()]
    prefix = full_key[: -len(key)] if full_key.endswith(key) else ""
    where = prefix.rstrip(".") or "the config"
    nearest = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    guess = f"did you mean {prefix}{nearest[0]}? " if nearest else ""
    return f"{guess}{where}'s keys: {', '.join(valid)}"


def install() -> None:
    """Wrap Hydra's ``ConfigLoaderImpl.load_configuration`` so that its composition errors about an
    unknown key carry [`key_hint`][pipegnn.config.key_hints.key_hint]'s line (idempotent; a Hydra without that
    method is left as it is)."""
    try:
        from hydra._internal.config_loader_impl import ConfigLoaderImpl
        from hydra.errors import ConfigCompositionException
    except ImportError:  # another Hydra layout: its own message stands
        return
    load = getattr(ConfigLoaderImpl, "load_configuration", None)
    if load is None or getattr(load, _MARK, False):
        return

    @functools.wraps(load)
    def load_configuration(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return load(self, *args, **kwargs)
        except ConfigCompositionException as error:
            hint = key_hint(error)
            if hint is None or hint in str(error):
                raise
            raise ConfigCompositionException(f"{error}\n{hint}").with_traceback(
                error.__traceback__) from error.__cause__

    setattr(load_configuration, _MARK, True)
    ConfigLoaderImpl.load_configuration = load_configuration  # type: ignore[method-assign]
