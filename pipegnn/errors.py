"""Errors that end a run before training starts, with a message naming the bad value."""
from __future__ import annotations

from typing import Any, Sequence

__all__ = ["ConfigError", "DatasetUnavailable", "check_choice"]


class ConfigError(ValueError):
    """A configuration value is invalid; the run is recorded with status ``invalid``."""


class DatasetUnavailable(ConfigError):
    """Dataset files are missing and cannot be downloaded; the message says what to fetch and where."""


def check_choice(value: Any, valid: Sequence[str], key: str) -> None:
    """Raise ConfigError naming ``key``, ``value`` and the ``valid`` choices unless ``value`` is one of
    them (the one check of a value against its choices)."""
    if value not in valid:
        raise ConfigError(f"{key}={value!r} is not valid; valid: {', '.join(valid)}")
