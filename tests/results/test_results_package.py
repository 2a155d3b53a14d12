"""The package pipegnn.results (pipegnn/results/__init__.py): every module's public names, loaded on use."""
from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from pipegnn import results


def test_every_public_name_of_every_module_is_exported() -> None:
    exported = []
    for name in ("record_files", "rows", "table", "stats", "figures", "timeline_plot", "leaderboard_plot",
                 "tta_plot", "sweep", "sweep_plan", "hydra_files", "reproduce"):
        module = importlib.import_module(f"pipegnn.results.{name}")
        assert module.__all__, name
        for attribute in module.__all__:
            assert getattr(results, attribute) is getattr(module, attribute), (name, attribute)
        exported += module.__all__
    assert sorted(results.__all__) == sorted(exported) and len(set(exported)) == len(exported)
    assert set(results.__all__) <= set(dir(results))
    with pytest.raises(AttributeError, match="no attribute 'analysis'"):
        results.analysis  # noqa: B018
    with pytest.raises(AttributeError, match="no attribute 'main'"):  # the command line is not re-exported
        results.main  # noqa: B018


def test_importing_a_module_loads_no_other_module_of_the_package() -> None:
    """Reading one record pulls in neither pandas, matplotlib nor Hydra."""
    code = ("import sys, pipegnn.results.record_files; "
            "print(sorted(m for m in sys.modules if m.startswith(('pipegnn.results', 'pandas', 'matplotlib', "
            "'hydra'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['pipegnn.results', 'pipegnn.results.record_files']"
