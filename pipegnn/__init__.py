"""pipegnn: pipeline-parallel GNN training with graph-aware micro-batches.

What a user calls: [`run`][pipegnn.training.launch.run] (one run of a config, its record returned),
[`compose_config`][pipegnn.config.schema.compose_config] (a run's config from the presets and overrides, as
``experiments/train.py`` composes it), [`build`][pipegnn.training.launch.build] (a run's pieces from a
config: graph, plans, staged model, engine), the errors a bad input raises, and the analysis package
[`pipegnn.results`][pipegnn.results] (records read back, tables, figures; its archives:
[`pipegnn.results.archive`][pipegnn.results.archive]). Every other module is internal (its ``__all__`` is
empty, as torchgpipe's internal modules': its names may change from one commit to the next; the changelog
says when they do).
"""
import importlib.util
import sys
import warnings
from pathlib import Path
from typing import Any

from pipegnn.errors import ConfigError, DatasetUnavailable

__all__ = ["ConfigError", "DatasetUnavailable", "build", "compose_config", "run"]
__version__ = "0.1.0"

#: What every entry point imports (a run, a sweep, reading results), by import name: an interpreter
#: without one of them is not the environment `make setup` made.
_NEEDED = ("numpy", "pandas", "omegaconf", "hydra", "torch", "torch_geometric")


def _missing() -> list[str]:
    return [name for name in _NEEDED if importlib.util.find_spec(name) is None]


def _which_interpreter(missing: list[str]) -> str:
    venv = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "python"
    where = f"the venv's Python, {venv}" if venv.is_file() else "the venv's Python, .venv/bin/python"
    return (f"pipegnn: this interpreter ({sys.executable}) lacks {', '.join(missing)}: pipegnn runs with "
            f"{where}, which `make setup` (or `make run`) creates in the checkout")


_absent = _missing()
if _absent:  # say which interpreter to use before the import that fails names only a module
    if sys.argv[:1] == ["-m"]:  # `python -m pipegnn...` (runpy names the module in argv[0] only later)
        sys.exit(_which_interpreter(_absent))  # one line, as experiments/train.py says it
    warnings.warn(_which_interpreter(_absent), RuntimeWarning, stacklevel=2)


def __getattr__(name: str) -> Any:
    # `run` pulls in torch and the frameworks; loaded on first use so that light entry points
    # (e.g. `python -m pipegnn.results`) start fast.
    if name == "run":
        from pipegnn.training.launch import run
        return run
    if name == "build":
        from pipegnn.training.launch import build
        return build
    if name == "compose_config":
        from pipegnn.config.schema import compose_config
        return compose_config
    raise AttributeError(f"module 'pipegnn' has no attribute {name!r}")
