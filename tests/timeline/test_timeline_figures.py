"""pipegnn.timeline.figures: theoretical bubbles, and the figures (makespan, bubble, ideal speedup,
imbalance) and medians of hand-made step timelines."""
from __future__ import annotations

import pytest

from pipegnn.timeline import Box, medians, step_figures, theoretical_bubble

from tests.helpers import pipeline_info


def test_theoretical_bubbles() -> None:
    assert theoretical_bubble("gpipe", 2, 8) == pytest.approx(1 / 9)
    assert theoretical_bubble("1f1b", 4, 4) == pytest.approx(3 / 7)
    assert theoretical_bubble("interleaved1f1b", 2, 4, per_lane=2) == pytest.approx(1 / 9)
    assert theoretical_bubble("single", 1, 8) == 0.0


def test_figures_of_a_perfect_gpipe_schedule() -> None:
    """Two balanced stages, 4 micro-batches of 1 s forward and 2 s backward each, fill-drain: the
    measured bubble is the theoretical one and the ideal makespan is the measured one."""
    boxes = []
    for m in range(4):
        boxes += [Box(0, 0, m, "forward", m, m + 1), Box(1, 1, m, "forward", m + 1, m + 2)]
        boxes += [Box(1, 1, m, "backward", 5 + 2 * m, 7 + 2 * m),
                  Box(0, 0, m, "backward", 7 + 2 * m, 9 + 2 * m)]
    boxes.append(Box(1, 1, 0, "recv_forward", 0, 1))
    info = pipeline_info()
    fig = step_figures(boxes, info)
    assert fig["makespan_s"] == 15 and fig["busy_s"] == 24 and fig["communication_s"] == 1
    assert fig["bubble"] == pytest.approx(1 - 24 / 30)
    assert fig["bubble"] == pytest.approx(theoretical_bubble("gpipe", 2, 4))
    assert fig["ideal_makespan_s"] == pytest.approx(15) and fig["ideal_speedup"] == pytest.approx(24 / 15)
    assert fig["bubble_ideal"] == pytest.approx(fig["bubble"])
    assert fig["imbalance"] == pytest.approx(1.0)
    assert fig["stages"][1] == {"forward_s": 4, "backward_s": 8, "recompute_s": 0, "shared_forward_s": 0,
                                "shared_backward_s": 0, "communication_s": 1, "busy_s": 12}
    slow = step_figures([Box(b.stage, b.lane, b.micro_batch, b.kind, b.start, b.end * 2) for b in boxes[:2]],
                        info)
    assert medians([fig, fig, slow])["makespan_s"] == 15
    assert medians([fig, slow, slow])["stages"][0]["forward_s"] == slow["stages"][0]["forward_s"]


def test_no_overlap_means_no_ideal_speedup() -> None:
    boxes = [Box(0, 0, 0, "forward", 0, 1), Box(1, 1, 0, "forward", 1, 3)]
    fig = step_figures(boxes, pipeline_info(engine="gpipe", overlap_possible=False, chunks=1))
    assert fig["ideal_speedup"] == 1.0 and fig["imbalance"] == pytest.approx(2 / 1.5)
    assert fig["bubble"] == pytest.approx(0.5) and fig["bubble_ideal"] == pytest.approx(0.5)


def test_imbalance_shows_in_the_ideal_bubble() -> None:
    """Stage 0 takes 3 s per micro-batch, stage 1 takes 1 s (forward only), 2 micro-batches: the ideal
    makespan is 4 + 3 = 7 s and its bubble 1 - 8 / 14, far above the schedule's 1/3."""
    boxes = [Box(0, 0, 0, "forward", 0, 3), Box(0, 0, 1, "forward", 3, 6),
             Box(1, 1, 0, "forward", 3, 4), Box(1, 1, 1, "forward", 6, 7)]
    fig = step_figures(boxes, pipeline_info(chunks=2))
    assert fig["ideal_makespan_s"] == pytest.approx(7) and fig["makespan_s"] == 7
    assert fig["bubble_ideal"] == pytest.approx(1 - 8 / 14) == pytest.approx(fig["bubble"])
    assert fig["imbalance"] == pytest.approx(1.5)
