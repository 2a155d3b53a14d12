"""experiments/gpu.sh check: the script a session lent a GPU runs first, dry-run here on the CPU (cpu for
cuda:0, a tiny graph, two epochs) so that it cannot rot between the rare sessions that have a GPU."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT


@pytest.mark.slow  # the check's default parts on CPU: about 2 minutes (make test-all runs it)
def test_gpu_check_dry_run_writes_every_part_as_it_goes_and_every_part_passes(tmp_path: Path) -> None:
    """Every default part runs and exits 0 (the `gpu` tests skip without CUDA), each leaving its log
    under logs/ and its records under records/ as it ends (a run cut short keeps them: nothing is packed at
    the end), and the records are completed runs: the single engine, two pipelining ranks on one device
    (each epoch's loss equal to the single engine's), and the map's slice of Amazon Computers: full batch,
    exact, historical and sampled k=8 (a new draw each epoch). The extra parts run only when named."""
    out = tmp_path / "check"
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(["experiments/gpu.sh", "check", str(out), "--dry-run"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = (out / "summary.txt").read_text()
    parts = dict(re.findall(r"^part (\S+): exit (\d+)", summary, re.M))
    default = ["gpu_tests", "single", "single_graph", "shared_gpu", "tta_full", "tta_exact", "tta_historical",
               "tta_sampled", "host_overhead"]
    assert parts == dict.fromkeys(default, "0"), summary
    assert sorted(p.name for p in (out / "logs").iterdir()) == sorted([*(f"{p}.log" for p in default),
                                                                       "gpu_tests.xml"])
    assert (out / "host_overhead.csv").is_file()
    records = {p.parent.name: json.loads(p.read_text()) for p in (out / "records").glob("*/result.json")}
    assert sorted(records) == ["pipelining_shared", "single", "single_graph", "tta_exact", "tta_full",
                               "tta_historical", "tta_sampled"]
    assert all(r["status"] == "completed" for r in records.values())
    assert records["pipelining_shared"]["workers"] == {"world_size": 2, "start_method": "forkserver",
                                                       "backend": "gloo"}
    assert "pipelining_shared: completed" in summary
    losses = [e["train_loss"] for e in records["pipelining_shared"]["epochs"]]
    assert losses == pytest.approx([e["train_loss"] for e in records["single"]["epochs"]], rel=1e-5)
    for name, halo in (("tta_full", "none"), ("tta_exact", "exact"), ("tta_historical", "historical"),
                       ("tta_sampled", "sampled")):
        config = records[name]["config"]
        assert config["microbatch"]["halo"] == halo and config["train"]["seed"] == 0
        assert records[name]["dataset"]["name"].lower().startswith("amazon")
        assert f"{name}: completed" in summary
    sampled = records["tta_sampled"]
    assert sampled["microbatch"]["fanouts"] == [10, 10]
    assert len({e["sampled_edges"] for e in sampled["epochs"]}) == 2  # a new draw each epoch
    assert "GCNII 64 historical k=8" in summary and "exact k=8" in summary
