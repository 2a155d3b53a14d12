"""Errors that end a run before training starts, with a message naming the bad value."""
from __future__ import annotations

__all__ = ["ConfigError", "DatasetUnavailable", "RunFailed"]


class ConfigError(ValueError):
    """A configuration value is invalid; the run is recorded with status ``invalid``."""


class DatasetUnavailable(ConfigError):
    """Dataset files are missing and cannot be downloaded; the message says what to fetch and where."""


class RunFailed(RuntimeError):
    """A run ended without completing; raised after its record was written (non-zero exit)."""
