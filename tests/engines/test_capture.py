"""``engine.capture=cuda_graph``: refused before training where a step cannot be recorded (any machine),
and on a CUDA device a replayed step computes what the eager step computes (``gpu`` tests)."""
from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from pipegnn import run
from pipegnn.config.schema import Config
from pipegnn.config.typed import run_config
from pipegnn.engines import Replayed
from pipegnn.engines.capture import capture_problems
from pipegnn.errors import ConfigError
from pipegnn.training.launch import check_run

from tests.helpers import assert_close, build_on, make_cfg, model_keys, random_graph

CUDA_NEEDED = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
CAPTURABLE = ["engine=single", "engine.timeline=false", "engine.device=cuda:0", "engine.capture=cuda_graph"]


def _typed(*overrides: str) -> Config:
    return run_config(make_cfg(*overrides))


@pytest.mark.parametrize(("overrides", "reason"), [
    (["engine.device=cpu"], "engine.device=cpu: CUDA graphs need a CUDA device"),
    (["engine.timeline=true"], "engine.timeline=true"),
    (["microbatch.halo=historical"], "microbatch.halo=historical"),
    (["microbatch.halo=sampled", "microbatch.fanouts=[5,5]"], "microbatch.halo=sampled"),
    (["microbatch.evaluation=layerwise"], "microbatch.evaluation=layerwise"),
    (["framework=dgl"], "framework=dgl"),
    (["model=gcn", "model.aggregation=sparse"], "model.aggregation=sparse"),
    (["train.precision=bf16"], "train.precision=bf16"),
])
def test_each_problem_is_named(overrides: list[str], reason: str) -> None:
    problems = capture_problems(_typed(*CAPTURABLE, *overrides))
    assert len(problems) == 1 and problems[0].startswith(reason), problems


def test_pipeline_engines_are_refused() -> None:
    for engine in ("gpipe", "pipelining"):
        problems = capture_problems(_typed(f"engine={engine}", "engine.timeline=false",
                                           "engine.capture=cuda_graph"))
        assert len(problems) == 1 and problems[0].startswith(f"engine={engine}: only the single engine")


def test_a_capturable_config_has_no_problem() -> None:
    assert capture_problems(_typed(*CAPTURABLE)) == []


def test_refused_before_training_as_an_invalid_record() -> None:
    """On a machine without CUDA, as on one with it: one error naming every problem, no training."""
    with pytest.raises(ConfigError, match="engine.capture=cuda_graph cannot record") as e:
        check_run(make_cfg("engine=single", "engine.capture=cuda_graph"))
    assert "CUDA graphs need a CUDA device" in str(e.value) and "engine.timeline=true" in str(e.value)
    record = run(make_cfg("engine=gpipe", "engine.capture=cuda_graph"))
    assert record["status"] == "invalid" and "engine=gpipe: only the single engine" in record["error"]
    assert not record.get("epochs")
    plain = OmegaConf.to_container(make_cfg(), resolve=True)
    plain["engine"]["capture"] = "compile"  # (composition refuses it: the schema's enum)
    with pytest.raises(ConfigError, match="engine.capture='compile' is not valid; valid: none, cuda_graph"):
        check_run(plain)


def _steps(kind: dict, chunks: int, captured: bool, steps: int = 4,
           device: str = "cuda:0") -> tuple[list[float], torch.Tensor, list[torch.Tensor]]:
    """Losses of ``steps`` training steps (Adam), the evaluation logits after them and the parameters,
    float64 on ``device``, eager or replayed; the model, plan (every node, random parts) and engine built
    by ``pipegnn.build``."""
    torch.manual_seed(0)
    graph = random_graph(num_nodes=80, num_edges=300)
    graph.x = graph.x.double()
    group, values = model_keys(kind)
    trainee = build_on(graph, ["framework=pyg", *group, "engine=single"],
                       {**values, "chunks": chunks, "microbatch.halo": "exact", "microbatch.targets": "all",
                        "microbatch.partition": "random", "engine.device": device, "engine.timeline": False})
    engine, ids = trainee.engine, trainee.training.ids
    labels, labelled = trainee.train_labels()
    optimizer = torch.optim.Adam(engine.model.parameters(), lr=0.01, capturable=captured)
    replayed = Replayed(engine, optimizer, ids, labels, labelled, ids)
    losses = []
    for _ in range(steps):
        engine.model.train()
        if captured:
            losses.append(replayed.train_step())
        else:
            optimizer.zero_grad(set_to_none=True)
            losses.append(engine.train_step(ids, labels, labelled))
            optimizer.step()
        engine.model.eval()
        logits = (replayed.predict() if captured else engine.predict(ids)).clone()
    return losses, logits.cpu(), [p.detach().cpu() for p in engine.model.parameters()]


@pytest.mark.gpu
@CUDA_NEEDED
@pytest.mark.usefixtures("float64")
@pytest.mark.parametrize("chunks", [1, 8])
@pytest.mark.parametrize("kind", [
    dict(name="gat", hidden=4, heads=2, out_heads=1, layers=2, dropout=0.0),
    dict(name="gcn2", hidden=8, layers=4, alpha=0.1, theta=0.5, dropout=0.0),
], ids=["gat", "gcn2"])
def test_replayed_steps_equal_eager_steps(kind: dict, chunks: int) -> None:
    """float64, dropout 0: four steps recorded once and replayed train as four eager steps do."""
    eager = _steps(kind, chunks, captured=False)
    replayed = _steps(kind, chunks, captured=True)
    assert replayed[0] == pytest.approx(eager[0], rel=1e-9)
    assert_close(replayed[1], eager[1])
    for a, b in zip(replayed[2], eager[2]):
        assert_close(a, b)


@pytest.mark.gpu
@CUDA_NEEDED
def test_a_captured_run_trains() -> None:
    """Through the epoch loop: the same losses as the eager run (float32, dropout 0), timing medians
    without the recording epoch."""
    common = ["engine=single", "model.dropout=0", "train.epochs=5", "engine.timeline=false",
              "engine.device=cuda:0"]
    eager = run(make_cfg(*common))
    captured = run(make_cfg(*common, "engine.capture=cuda_graph"))
    assert captured["status"] == "completed", captured.get("error")
    for a, b in zip(captured["epochs"], eager["epochs"]):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-4)
