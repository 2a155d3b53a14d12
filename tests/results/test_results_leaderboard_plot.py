"""The OGB-style table as a figure (pipegnn/results/leaderboard_plot.py), checked on its Axes."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.collections import LineCollection

from pipegnn.results.figures import NoData
from pipegnn.results.leaderboard_plot import plot_leaderboard

from tests.helpers import legend_texts, make_frame, make_record


def test_plot_leaderboard_one_row_per_setting_and_the_published_band(tmp_path: Path) -> None:
    """Per dataset a panel; per setting a point at the mean over seeds with the std as its bar, named by
    the settings that vary there; the published (mean, std) as a band."""
    records = [make_record(dataset=d, devices=dev, chunks=c, halo=h, seed=s,
                           test_acc_at_best_val=base + 0.01 * s, best_val_acc=0.7)
               for d in ("cora", "citeseer")
               for dev, c, h, base in (("cpu", 1, "none", 0.84), ("cpu2", 4, "exact", 0.82))
               for s in (0, 1, 2)]
    records.append(make_record(status="failed", dataset="cora", chunks=8, halo="exact"))  # not a row
    fig = plot_leaderboard(make_frame(*records), tmp_path / "b.png", reference={"cora": (85.5, 0.5)})
    citeseer, cora = fig.axes
    assert [t.get_text() for t in cora.get_yticklabels()] == [
        "gpipe, cpu,cpu, k=4, halo=exact (3 seeds)", "single, cpu, k=1, halo=none (3 seeds)"]
    (xs, ys), = [line.get_data() for line in cora.lines if line.get_marker() == "o"]
    np.testing.assert_allclose(xs, [83.0, 85.0])  # means of 82, 83, 84 and 84, 85, 86
    bars = [c for c in cora.collections if isinstance(c, LineCollection)]
    (low, _), (high, _) = bars[0].get_segments()[0]
    assert (low, high) == pytest.approx((82.0, 84.0))
    assert legend_texts(cora) == ["published 85.5 ± 0.5"] and citeseer.get_legend() is None
    assert cora.patches[0].get_x() == pytest.approx(85.0)  # the band from mean - std
    assert (tmp_path / "b.png").stat().st_size > 5_000
    with pytest.raises(NoData):
        plot_leaderboard(make_frame(records[-1]))
