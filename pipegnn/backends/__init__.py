"""Framework adapters: everything framework-specific lives in one adapter per framework."""
from __future__ import annotations

from pipegnn.backends.pyg import PygBackend
from pipegnn.errors import ConfigError

__all__ = ["FRAMEWORKS", "get_backend"]

FRAMEWORKS = ("pyg",)


def get_backend(name: str) -> type[PygBackend]:
    """The adapter class of framework ``name``."""
    if name == "pyg":
        return PygBackend
    raise ConfigError(f"unknown framework {name!r}; valid: {', '.join(FRAMEWORKS)}")
