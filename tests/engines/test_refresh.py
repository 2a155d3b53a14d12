"""Historical halos across ranks (pipegnn.engines.refresh): every replica refreshes its history caches over
all micro-batches, and during training each replica's caches get only its own micro-batches' pushes."""
from __future__ import annotations

from tests.helpers import run_no_dropout


def test_pipeline_replicas_record_the_staleness_of_their_own_caches() -> None:
    """Historical halos with 2 replicas: each keeps its own caches (its micro-batches' pushes only, the
    other replica's rows refreshed by the evaluation), so the rows pulled are older than with one
    pipeline, and the record says so per replica and stage."""
    common = ("model.dropout=0", "chunks=4", "microbatch.halo=historical", "microbatch.targets=all",
              "engine=pipelining")
    one = run_no_dropout(*common)
    two = run_no_dropout(*common, "engine.data_parallel=2", "engine.devices=[cpu,cpu,cpu,cpu]")
    assert two["status"] == "completed", (two["error"], two.get("traceback"))
    stages = two["microbatch"]["history_per_stage"]
    assert [s["caches"] for s in stages] == [0, 1, 0, 1]
    assert all(s["pulled_rows"] > 0 and s["pushed_rows"] > 0 for s in stages[1::2])
    assert two["epochs"][-1]["staleness"] > one["epochs"][-1]["staleness"] > 0
