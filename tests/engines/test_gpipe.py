"""GPipe's partitions are told their micro-batch from host metadata (torchgpipe's per-micro-batch skip
tracker and the chunk's position in the step): in every checkpoint mode, recomputations included, two
partitions compute the single engine's outputs and gradients (float64, dropout 0)."""
from __future__ import annotations

import pytest

from pipegnn.models import units_per_layer

from tests.helpers import assert_close, assert_grads_close, build_on, model_keys, random_graph


@pytest.mark.usefixtures("float64")
@pytest.mark.parametrize("checkpoint", ["always", "except_last", "never"])
@pytest.mark.parametrize("kind", [dict(name="gat", hidden=4, heads=2, out_heads=1, layers=2, dropout=0.0),
                                  dict(name="gcn2", hidden=8, layers=3, alpha=0.1, theta=0.5, dropout=0.0)],
                         ids=["gat", "gcn2"])
def test_every_checkpoint_mode_computes_the_single_engines_step(kind: dict, checkpoint: str) -> None:
    graph = random_graph(num_nodes=80, num_edges=300)
    graph.x = graph.x.double()
    group, keys = model_keys(kind)
    stages = {"engine.checkpoint": checkpoint, "engine.balance": [3, sum(units_per_layer(kind)) - 3]}
    results, weights = [], None
    for engine in ("single", "gpipe"):
        trainee = build_on(graph, ["framework=pyg", *group, f"engine={engine}"],
                           {**keys, "chunks": 4, "microbatch.halo": "exact", "microbatch.targets": "all",
                            "microbatch.partition": "random", "engine.timeline": False,
                            **(stages if engine == "gpipe" else {})})
        staged, runner, ids = trainee.model, trainee.engine, trainee.training.ids
        if weights is None:
            weights = staged.state_dict()
        staged.load_state_dict(weights)  # the same seed gives the same weights: made sure
        logits = runner.predict(ids)
        loss = runner.train_step(ids, *trainee.train_labels())
        results.append((logits, loss, [p.grad for p in staged.parameters()]))
    (single, single_loss, single_grads), (piped, piped_loss, piped_grads) = results
    assert_close(piped, single)
    assert piped_loss == pytest.approx(single_loss, rel=1e-12)
    assert_grads_close(piped_grads, single_grads)
