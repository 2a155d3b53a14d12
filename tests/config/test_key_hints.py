"""A misspelt key fails at composition naming the nearest valid key and every valid key of its node
(pipegnn.config.key_hints), through compose_config and through experiments/train.py, single run and sweep."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException

from pipegnn.config.schema import compose_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("override, nearest, node", [
    ("model.hiden=8", "model.hidden", "model's keys: name, layers, hidden,"),
    ("train.epocs=3", "train.epochs", "train's keys: epochs, lr,"),
    ("microbatch.halo_dropt=node", "microbatch.halo_dropout", "microbatch's keys: halo, halo_dropout,"),
    ("modle.layers=3", "model", "the config's keys: hydra, dataset, model,"),
])
def test_a_misspelt_key_names_the_nearest_and_the_valid_keys(override: str, nearest: str, node: str) -> None:
    with pytest.raises(ConfigCompositionException) as info:
        compose_config([override])
    message = str(info.value)
    assert f"did you mean {nearest}?" in message
    assert node in message
    assert info.value.__cause__ is not None  # OmegaConf's own error, which Hydra prints beneath, stays


def test_a_key_near_nothing_still_lists_the_valid_keys() -> None:
    with pytest.raises(ConfigCompositionException) as info:
        compose_config(["train.zzzzzz=1"])
    assert "did you mean" not in str(info.value)
    assert "train's keys: epochs," in str(info.value)


def test_other_composition_errors_are_unchanged() -> None:
    with pytest.raises(ConfigCompositionException) as info:
        compose_config(["microbatch.halo=fancy"])
    assert "keys:" not in str(info.value)


@pytest.mark.parametrize("sweep", [[], ["-m"]])
def test_train_py_prints_the_hint(tmp_path: Path, sweep: list[str]) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "experiments" / "train.py"), *sweep, "model.hiden=8",
                           f"hydra.run.dir={tmp_path}/run", f"hydra.sweep.dir={tmp_path}/sweep"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 1
    assert "did you mean model.hidden? model's keys: name, layers, hidden" in done.stderr
