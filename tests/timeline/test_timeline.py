"""Stage timelines: boxes of every engine, the pipeline section and trace a run records, and the
settings (the figures: test_timeline_figures.py, the trace's format: test_timeline_trace.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pipegnn import ConfigError, run
from pipegnn.data import Graph
from pipegnn.timeline import Box
from pipegnn.training.launch import check_run

from tests.helpers import build_on, make_cfg, model_keys

GAT = dict(name="gat", hidden=4, heads=2, out_heads=1, layers=2, dropout=0.0)


def _engine(graph: Graph, name: str, chunks: int, checkpoint: str = "except_last"):
    """The run's pieces as ``pipegnn.build`` makes them (exact halos over the training nodes; GPipe's
    stages: the first layer's transform, then the rest)."""
    group, keys = model_keys(GAT)
    stages = {"engine.balance": [1, 3], "engine.checkpoint": checkpoint} if name == "gpipe" else {}
    trainee = build_on(graph, ["framework=pyg", *group, f"engine={name}"],
                       {**keys, **stages, "chunks": chunks, "microbatch.halo": "exact",
                        "microbatch.targets": "train"})
    return trainee.engine, trainee.training.ids, trainee.train_labels()[0]


def _step(engine, ids, labels) -> list[Box]:
    engine.train_step(ids, labels, labels.numel())
    return engine.step_boxes()


def _count(boxes: list[Box], stage: int, kind: str) -> list[int]:
    return sorted(b.micro_batch for b in boxes if b.stage == stage and b.kind == kind)


def test_single_engine_boxes_follow_the_micro_batches(graph: Graph) -> None:
    engine, ids, labels = _engine(graph, "single", 3)
    boxes = _step(engine, ids, labels)
    assert _count(boxes, 0, "forward") == _count(boxes, 0, "backward") == [0, 1, 2]
    ordered = sorted(boxes, key=lambda b: b.start)
    # the first layer's transform once for the step, one micro-batch after another, its backward once
    assert [(b.kind, b.micro_batch) for b in ordered] == [
        ("shared_forward", -1), ("forward", 0), ("backward", 0), ("forward", 1), ("backward", 1),
        ("forward", 2), ("backward", 2), ("shared_backward", -1)]
    assert all(a.end <= b.start for a, b in zip(ordered, ordered[1:]))
    assert all(b.end > b.start for b in boxes)
    assert engine.step_boxes() == []  # read once: the next read has nothing until the next step
    engine.predict(ids)  # evaluation is not recorded
    assert engine.step_boxes() == []


@pytest.mark.parametrize("checkpoint, recomputed", [("except_last", [0, 1, 2]), ("never", [])])
def test_gpipe_boxes_per_stage_with_recomputation(graph: Graph, checkpoint: str, recomputed: list) -> None:
    engine, ids, labels = _engine(graph, "gpipe", 4, checkpoint)
    boxes = _step(engine, ids, labels)
    for stage in (0, 1):
        assert _count(boxes, stage, "forward") == _count(boxes, stage, "backward") == [0, 1, 2, 3]
        assert _count(boxes, stage, "recompute") == recomputed  # the last micro-batch is kept
    for m in range(4):  # a micro-batch's backward runs on the last stage before the first
        back = {b.stage: b for b in boxes if b.kind == "backward" and b.micro_batch == m}
        assert back[1].end <= back[0].start + 1e-6
    # both partitions are the same CPU device: one thread, no two boxes overlap
    ordered = sorted(boxes, key=lambda b: b.start)
    assert all(a.end <= b.start + 1e-6 for a, b in zip(ordered, ordered[1:]))
    assert engine.info.overlap_possible is False and "engine=pipelining" in engine.info.overlap_note
    assert engine.info.stage_units == [["transform0"], ["propagate0", "transform1", "propagate1"]]


def test_run_records_the_pipeline_and_writes_the_trace(tmp_path: Path) -> None:
    record = run(make_cfg("engine=gpipe", "chunks=4", "engine.trace_epoch=7", "engine.balance=[1,3]"),
                 output_dir=tmp_path)
    assert record["status"] == "completed", record["error"]
    p = record["pipeline"]
    assert (p["engine"], p["schedule"], p["balance"], p["balance_source"]) == \
        ("gpipe", "gpipe", [1, 3], "config")
    assert p["bubble_theoretical"] == pytest.approx(1 / 5) and p["overlap_possible"] is False
    assert p["trace"] == "trace.json" and p["timeline"] is True
    assert 0 < p["bubble"] < 1 and p["makespan_s"] > 0 and len(p["stages"]) == 2
    # one stage at a time on one CPU thread: the busy times add up to (nearly) the makespan
    assert p["busy_s"] <= p["makespan_s"] * 1.001
    assert all("pipeline" in e for e in record["epochs"])
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert trace["otherData"]["epoch"] == 2  # epoch 7 of a 3-epoch run: the last one
    boxes = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    forwards = [e["name"] for e in boxes if e["tid"] == 1 and e["cat"] == "forward"]
    assert sorted(forwards) == ["F0", "F1", "F2", "F3"]
    assert "trace" not in json.loads((tmp_path / "result.json").read_text())


def test_timeline_can_be_switched_off(tmp_path: Path) -> None:
    record = run(make_cfg("engine=single", "engine.timeline=false"), output_dir=tmp_path)
    assert record["status"] == "completed", record["error"]
    assert record["pipeline"]["timeline"] is False and "bubble" not in record["pipeline"]
    assert not (tmp_path / "trace.json").exists()
    assert all("pipeline" not in e for e in record["epochs"])


@pytest.mark.parametrize("key, value, message", [
    ("timeline", "maybe", "engine.timeline: Value 'maybe' is not a valid bool"),
    ("trace_epoch", -1, "engine.trace_epoch must be an epoch number >= 0"),
])
def test_invalid_timeline_settings(key: str, value: object, message: str) -> None:
    cfg = OmegaConf.to_container(make_cfg("engine=single"), resolve=True)
    cfg["engine"][key] = value
    with pytest.raises(ConfigError, match=message):
        check_run(cfg)


def test_a_run_failing_after_its_traced_epoch_keeps_record_and_trace(tmp_path: Path) -> None:
    record = run(make_cfg("engine=single", "chunks=2", "train.lr=1e30", "engine.trace_epoch=0"),
                 output_dir=tmp_path)
    assert record["status"] == "failed" and "training loss is nan at epoch 1" in record["error"]
    written = json.loads((tmp_path / "result.json").read_text())
    assert written["status"] == "failed" and written["pipeline"] == {"trace": "trace.json"}
    assert json.loads((tmp_path / "trace.json").read_text())["otherData"]["epoch"] == 0
