"""pipegnn.schema: the config folder, from $PIPEGNN_CONF or the checkout, and composing with it."""
from __future__ import annotations

import pytest

from pipegnn.errors import ConfigError
from pipegnn.schema import compose_config, config_dir

from tests.helpers import CONF


def test_config_dir_from_environment_or_checkout(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("PIPEGNN_CONF", raising=False)
    assert config_dir() == CONF
    monkeypatch.setenv("PIPEGNN_CONF", str(tmp_path))
    with pytest.raises(ConfigError, match=f"no config.yaml in {tmp_path}.*PIPEGNN_CONF"):
        compose_config(["chunks=2"])
