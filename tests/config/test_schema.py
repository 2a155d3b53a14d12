"""pipegnn.config.schema: the config folder, from $PIPEGNN_CONF or the checkout, and composing with it."""
from __future__ import annotations

import pytest

from pipegnn.config.schema import compose_config, config_dir
from pipegnn.errors import ConfigError

from tests.helpers import CONF, make_cfg


def test_config_dir_from_environment_or_checkout(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("PIPEGNN_CONF", raising=False)
    assert config_dir() == CONF
    monkeypatch.setenv("PIPEGNN_CONF", str(tmp_path))
    with pytest.raises(ConfigError, match=f"no config.yaml in {tmp_path}.*PIPEGNN_CONF"):
        compose_config(["chunks=2"])


@pytest.mark.parametrize("overrides, model, engine, dataset", [
    ([], "GATConfig", "GPipeEngineConfig", "SyntheticConfig"),
    (["model=gcn2", "engine=single", "dataset=cora"], "GCN2Config", "SingleEngineConfig", "DatasetConfig"),
    (["model=sage", "engine=pipelining", "dataset=pubmed_topology"], "ModelConfig", "PipeliningEngineConfig",
     "PubmedTopologyConfig"),
    (["dataset=synthetic_density"], "GATConfig", "GPipeEngineConfig", "SyntheticConfig"),  # a preset: by name
])
def test_run_config_types_every_group_by_its_name(overrides: list[str], model: str, engine: str,
                                                  dataset: str) -> None:
    """A run's config is the schemas' objects, each group by its ``name`` (a preset without a schema of
    its own too), every choice its enum member; the same from the composed config and its plain form."""
    from omegaconf import OmegaConf

    from pipegnn.config.choices import Halo, Targets
    from pipegnn.config.schema import Config
    from pipegnn.config.typed import run_config

    composed = make_cfg(*overrides)
    cfg = run_config(composed)
    assert isinstance(cfg, Config)
    assert [type(cfg.model).__name__, type(cfg.engine).__name__, type(cfg.dataset).__name__] == \
        [model, engine, dataset]
    assert cfg.microbatch.halo is Halo.exact and cfg.microbatch.targets is Targets.train
    assert run_config(OmegaConf.to_container(composed, resolve=True)) == cfg
    assert run_config(cfg) is cfg


def test_config_container_is_what_records_hold() -> None:
    """``config_container`` of a composed config is its resolved plain form, choices as strings (what a
    record's ``config`` holds and resume compares); of a typed config, the same values, so a spawned rank's
    typed config reads back as the launcher's."""
    import json
    import pickle

    from omegaconf import OmegaConf

    from pipegnn.config.typed import config_container, run_config

    composed = make_cfg("model=gcn2", "microbatch.halo=historical")
    plain = config_container(composed)
    assert plain == OmegaConf.to_container(composed, resolve=True)
    assert json.loads(json.dumps(plain)) == plain and plain["microbatch"]["targets"] == "all"
    typed = run_config(composed)
    assert run_config(config_container(typed)) == typed
    assert pickle.loads(pickle.dumps(typed)) == typed  # what a spawned worker receives


def test_group_config_fills_from_the_option_yaml() -> None:
    """One group's node from a few keys: the rest from ``conf/<group>/<name>.yaml``; a typo or a bad
    choice is one ConfigError naming the key."""
    from pipegnn.config.choices import Aggregation
    from pipegnn.config.schema import GATConfig
    from pipegnn.config.typed import group_config

    gat = group_config("model", {"name": "gat", "hidden": 4, "heads": 2})
    assert isinstance(gat, GATConfig)
    assert (gat.hidden, gat.heads, gat.out_heads, gat.dropout, gat.residual) == (4, 2, 1, 0.6, False)
    assert gat.aggregation is Aggregation.messages
    assert group_config("model", gat) is gat
    with pytest.raises(ConfigError, match=r"^model\.hiden is not a key of GATConfig; its keys: name, "):
        group_config("model", {"name": "gat", "hiden": 4})
    with pytest.raises(ConfigError, match=r"^model\.name='gatt' is not valid; valid: gat, gcn, sage, gcn2$"):
        group_config("model", {"name": "gatt"})
    with pytest.raises(ConfigError, match=r"^model\.layers: Value 'x' of type 'str' could not be converted"):
        group_config("model", {"name": "gcn", "layers": "x"})


def test_every_choice_has_its_implementation() -> None:
    """Each choice the config offers maps to what implements it: a schedule class, a framework adapter,
    a dataset loader."""
    from pipegnn.backends import get_backend
    from pipegnn.config.choices import FrameworkName, Schedule, names
    from pipegnn.data import DATASETS, LARGE_NAMES
    from pipegnn.data.planetoid import PLANETOID_NAMES
    from pipegnn.data.study_graphs import STUDY_FILES
    from pipegnn.engines import SCHEDULES

    assert tuple(SCHEDULES) == names(Schedule)
    assert [get_backend(name).name for name in FrameworkName] == list(names(FrameworkName))
    assert set(DATASETS) == {*PLANETOID_NAMES, "pubmed_topology", *LARGE_NAMES, *STUDY_FILES, "synthetic"}
