"""experiments/gpu.sh check: the script a session lent a GPU runs first, dry-run here on the CPU (cpu for
cuda:0, a tiny graph, two epochs) so that it cannot rot between the rare sessions that have a GPU."""
from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.helpers import ROOT


@pytest.mark.slow  # the whole check on CPU: about 2.5 minutes of make test's 10 (make test-all runs it)
def test_gpu_check_dry_run_leaves_its_two_files_and_every_part_passes(tmp_path: Path) -> None:
    """Every part runs and exits 0 (the `gpu` tests skip without CUDA), OUTDIR holds only the summary and
    one tarball, and the tarball's records are completed runs: the single engine, two pipelining ranks on
    one device and on CPU stages (each epoch's loss equal to the single engine's), and the real graph."""
    out = tmp_path / "check"
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(["experiments/gpu.sh", "check", str(out), "--dry-run"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["check.tar.gz", "summary.txt"]
    summary = (out / "summary.txt").read_text()
    parts = dict(re.findall(r"^part (\S+): exit (\d+)", summary, re.M))
    assert parts == {"gpu_tests": "0", "single": "0", "single_graph": "0", "shared_gpu": "0",
                     "cpu_stages": "0", "physics_full": "0", "physics_k8": "0", "physics_sampled": "0",
                     "host_overhead": "0",
                     "capacity": "0"}, summary
    with tarfile.open(out / "check.tar.gz") as tar:
        names = tar.getnames()
        records = {Path(n).parent.name: json.load(io.TextIOWrapper(tar.extractfile(n)))
                   for n in names if n.endswith("result.json")}
    assert {"./gpu_tests.xml", "./capacity.csv", "./host_overhead.csv"} <= set(names)
    assert sorted(records) == ["physics_full", "physics_k8", "physics_sampled", "pipelining_cpu",
                               "pipelining_shared", "single", "single_graph"]
    assert all(r["status"] == "completed" for r in records.values())
    for name in ("pipelining_shared", "pipelining_cpu"):
        assert records[name]["workers"] == {"world_size": 2, "start_method": "forkserver", "backend": "gloo"}
        assert f"{name}: completed" in summary
        losses = [e["train_loss"] for e in records[name]["epochs"]]
        single = [e["train_loss"] for e in records["single"]["epochs"]]
        assert losses == pytest.approx(single, rel=1e-5)
    assert records["physics_k8"]["dataset"]["split"] == "random"
    sampled = records["physics_sampled"]
    assert sampled["microbatch"]["fanouts"] == [25, 10]
    assert len({e["sampled_edges"] for e in sampled["epochs"]}) == 2  # a new draw each epoch
    assert "GCNII 64 historical k=8" in summary and "exact k=32" in summary
