"""Errors that end a run before training starts, with a message naming the bad value."""
from __future__ import annotations

import math
from typing import Any, Sequence

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


class ConfigError(ValueError):
    """A configuration value is invalid; the run is recorded with status ``invalid``."""


class DatasetUnavailable(ConfigError):
    """Dataset files are missing and cannot be downloaded; the message says what to fetch and where."""


class FolderTaken(RuntimeError):
    """A run's, a sweep's or a job's folder belongs to another run, sweep or job, or what Hydra would write
    there lies elsewhere (named in the message); the command stops before anything is written."""


def check_choice(value: Any, valid: Sequence[str], key: str) -> None:
    """Raise ConfigError naming ``key``, ``value`` and the ``valid`` choices unless ``value`` is one of
    them (the one check of a value against its choices)."""
    if value not in valid:
        raise ConfigError(f"{key}={value!r} is not valid; valid: {', '.join(valid)}")


def check_positive_int(value: Any, key: str, null: str | None = None) -> int | None:
    """``value`` if it is an integer >= 1 (or None where ``null`` says what None means)."""
    if value is None and null is not None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        alternative = f", or null for {null}" if null is not None else ""
        raise ConfigError(f"{key} must be an integer >= 1{alternative}, got {value!r}")
    return value


def check_positive_finite(value: Any, key: str, what: str, null: str | None = None,
                          most: float | None = None) -> None:
    """A finite number > 0 (a limit, where infinity and NaN mean nothing: null says "no limit"), and at
    most ``most`` when given (what the code it reaches can hold)."""
    if value is None and null is not None:
        return
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or value <= 0 or (most is not None and value > most)):
        alternative = f", or null for {null}" if null is not None else ""
        bound = f" and <= {most:g}" if most is not None else ""
        raise ConfigError(f"{key} must be a finite number of {what} > 0{bound}{alternative}, got {value!r}")
