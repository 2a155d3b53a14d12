"""What a new user meets first: each preset's header gives its size and time (and they agree with its
sweep), and an interpreter without pipegnn's packages says which one to use."""
from __future__ import annotations

import math
import os
import re
import subprocess
import sys

import pytest
import yaml

from tests.helpers import ROOT

PRESETS = sorted((ROOT / "conf" / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_each_preset_header_gives_its_size_and_time(preset) -> None:
    """The header (the leading comments) names the sweep's job count and a time (or says it is untimed);
    a preset with a '# Size and time:' line is in docs/sweeps.md's table too."""
    text = preset.read_text()
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    params = (yaml.safe_load(text).get("hydra") or {}).get("sweeper", {}).get("params", {})
    jobs = math.prod(len(str(v).split(",")) for v in params.values())
    said = {int(n) for n in re.findall(r"(\d+) jobs?\b", header)}
    assert jobs in said, f"{preset.name}: its header names no '{jobs} jobs' (its sweep's size)"
    timed = re.search(r"\d\s?(s|min|h)\b|\b(seconds?|minutes?|hours?)\b|not timed", header)
    assert timed, f"{preset.name}: its header gives no time"
    if "# Size and time:" in header:
        table = (ROOT / "docs" / "sweeps.md").read_text().split("## Preset sizes and times")[1]
        assert f"| `{preset.stem}` | {jobs} |" in table


def test_train_py_without_the_packages_names_the_venv() -> None:
    """-S: no site-packages, as a system python without the project's packages."""
    done = subprocess.run([sys.executable, "-S", str(ROOT / "experiments" / "train.py")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert ".venv/bin/python" in done.stderr and "make setup" in done.stderr, done.stderr


def test_importing_pipegnn_without_its_packages_names_the_venv() -> None:
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); import pipegnn"
    done = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert "lacks" in done.stderr and ".venv/bin/python" in done.stderr and "make setup" in done.stderr


@pytest.mark.parametrize("module", ["pipegnn.results", "pipegnn.results.archive"])
def test_a_command_line_without_the_packages_says_which_interpreter_in_one_line(module: str) -> None:
    """``python3 -m pipegnn.results`` with a bare interpreter: a warning, then pandas' traceback. Now one
    line, as experiments/train.py says it, and exit 1."""
    done = subprocess.run([sys.executable, "-S", "-m", module, "results"], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert "lacks" in done.stderr and ".venv/bin/python" in done.stderr


def test_importing_pipegnn_with_its_packages_warns_nothing() -> None:
    done = subprocess.run([sys.executable, "-W", "error", "-c", "import pipegnn"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and not done.stderr


def _train(tmp_path, *overrides: str) -> str:
    done = subprocess.run([sys.executable, str(ROOT / "experiments" / "train.py"), *overrides],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    return done.stdout + done.stderr


def test_an_invalid_run_says_its_error_once(tmp_path) -> None:
    out = _train(tmp_path, "chunks=0", f"hydra.run.dir={tmp_path}/run")
    assert out.count("chunks must be an integer >= 1, got 0") == 1, out
    assert "run invalid (the error above; record in" in out


def test_a_gpipe_sweep_on_cpu_notes_once_that_stages_cannot_overlap(tmp_path) -> None:
    """The smoke preset (GPipe's 2 stages on one CPU): one note for the sweep at INFO, no job warns."""
    out = _train(tmp_path, "-m", "experiment=smoke", "train.epochs=1", f"hydra.sweep.dir={tmp_path}/sweep")
    assert "4 jobs: 4 completed" in out, out[-3000:]
    assert out.count("pipeline stages cannot overlap") == 1 and "WARNING" not in out, out[-3000:]
