"""engine=pipelining's configuration checks (pipegnn.engines.checks and the checks beside it): a bad
choice is refused at composition and in a plain config, and an invalid combination gives an ``invalid``
record before any process is started."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pipegnn import run

from tests.helpers import make_cfg


@pytest.mark.parametrize("key, value, valid", [
    ("schedule", "zigzag", "gpipe, 1f1b, interleaved1f1b"),
    ("launcher", "ssh", "spawn, external"),
    ("start_method", "fork", "forkserver, spawn"),
    ("backend", "mpi", "auto, gloo, nccl"),
])
def test_a_bad_engine_choice_is_refused(key: str, value: str, valid: str) -> None:
    """At composition (Hydra's error), and in a plain config handed to ``run`` (an ``invalid`` record)."""
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException) as info:
        make_cfg("engine=pipelining", f"engine.{key}={value}")
    assert f"Invalid value '{value}', expected one of [{valid}]" in str(info.value.__cause__)
    plain = OmegaConf.to_container(make_cfg("engine=pipelining"), resolve=True)
    plain["engine"][key] = value
    record = run(plain)
    assert record["status"] == "invalid"
    assert record["error"] == f"engine.{key}={value!r} is not valid; valid: {valid}"


@pytest.mark.parametrize("overrides, message", [
    (["engine.balance=[2,1]"], "engine.balance=[2, 1] does not match the model"),
    (["engine.balance=[1,1,1]"], "one positive entry per process (2 processes)"),
    (["engine.balance=[1,2]"], "summing to model.layers=2 (whole layers) or to 4 (units"),
    (["engine.devices=[cpu,cpu,cpu,cpu,cpu]"], "has 5 devices but the model has only 4 units"),
    (["model.layers=1", "engine.schedule=interleaved1f1b"],
     "needs >= 2 units per process, but the units per process are [1, 1]"),
    (["engine.schedule=interleaved1f1b", "model.layers=4", "engine.virtual_stages=1"],
     "needs engine.virtual_stages >= 2"),
    (["engine.schedule=1f1b", "chunks=1"], "schedule=1f1b needs chunks >= the number of processes (2)"),
    (["engine.backend=nccl"], "engine.backend=nccl needs CUDA devices"),
    (["engine.data_parallel=2", "engine.devices=[cpu,cpu,cpu]"],
     "engine.data_parallel=2 pipeline replicas need one process per replica and stage, so "
     "len(engine.devices) must be a multiple of 2"),
    (["engine.data_parallel=2", "engine.devices=[cpu,cpu,cpu,cpu]", "chunks=3"],
     "chunks must be a multiple of 2; got chunks=3"),
    (["engine.data_parallel=2", "engine.devices=[cpu,cpu,cpu,cpu]", "chunks=2", "engine.schedule=1f1b"],
     "schedule=1f1b needs chunks >= the number of processes (2) per pipeline replica, got 1 per replica"),
    (["engine.data_parallel=0"], "engine.data_parallel must be"),
    (["engine.timeout_s=0"], "engine.timeout_s must be a finite number of seconds > 0 and <= 1e+09, got 0"),
    (["engine.timeout_s=inf"],
     "engine.timeout_s must be a finite number of seconds > 0 and <= 1e+09, got inf"),
    (["engine.timeout_s=nan"],
     "engine.timeout_s must be a finite number of seconds > 0 and <= 1e+09, got nan"),
    (["engine.memory_limit_gb=nan"], "engine.memory_limit_gb must be a finite number"),
])
def test_invalid_engine_config(tmp_path: Path, overrides: list[str], message: str) -> None:
    record = run(make_cfg("engine=pipelining", *overrides), output_dir=tmp_path)
    assert record["status"] == "invalid", record["error"]
    assert message in record["error"]
    assert "workers" not in record and "launch_s" not in record["timing"]  # no process was started
    assert json.loads((tmp_path / "result.json").read_text())["status"] == "invalid"
