"""Every import pipegnn makes is declared in pyproject.toml: a module-level import of another
distribution is one of ``[project] dependencies``; an optional one (dgl, ogb, mlflow, tensorboard, ...)
is an extra of ``[project.optional-dependencies]``, imported inside a function or in a module that only
its feature loads (OPTIONAL_MODULES). Import names map to distributions through the installed packages'
metadata (importlib.metadata.packages_distributions)."""
from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from tests.helpers import ROOT

tomllib = pytest.importorskip("tomllib")  # Python 3.11's; on 3.10 the check is skipped

PACKAGE = ROOT / "pipegnn"
#: Modules loaded only for an optional feature (pipegnn.backends loads the DGL backend for framework=dgl).
OPTIONAL_MODULES = {"pipegnn/backends/dgl.py"}
#: Import names that are parts of another distribution, not distributions of their own.
PROVIDED_BY = {"torch.utils.tensorboard": "tensorboard"}


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0]).lower()


def _declared() -> tuple[set[str], set[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    required = {_name(r) for r in project["dependencies"]}
    extras = {_name(r) for reqs in project.get("optional-dependencies", {}).values() for r in reqs}
    return required, extras


def _imports(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(module-level, anywhere) top-level names of absolute imports; TYPE_CHECKING blocks skipped."""
    def names(node: ast.AST) -> set[str]:
        found = set()
        for n in ast.walk(node):
            if isinstance(n, ast.Import):
                found |= {a.name for a in n.names}
            elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module:
                found.add(n.module)
        return found

    module_level: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(stmt, ast.If) and "TYPE_CHECKING" in ast.unparse(stmt.test):
            continue
        module_level |= names(stmt)
    return module_level, names(tree)


@lru_cache(maxsize=1)
def _installed() -> dict[str, list[str]]:
    return dict(importlib.metadata.packages_distributions())


def _distributions(module: str) -> list[str]:
    for prefix, dist in PROVIDED_BY.items():
        if module == prefix or module.startswith(prefix + "."):
            return [dist]
    top = module.split(".")[0]
    if top in sys.stdlib_module_names or top == "pipegnn":
        return []
    dists = _installed().get(top)
    if not dists:
        pytest.skip(f"{top} is not installed here: its distribution is unknown")
    return [_name(d) for d in dists]


FILES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_import_is_a_declared_dependency(path: Path) -> None:
    required, extras = _declared()
    module_level, anywhere = _imports(ast.parse(path.read_text()))
    relative = str(path.relative_to(ROOT))
    for module in sorted(anywhere):
        dists = _distributions(module)
        if not dists:
            continue
        at_module_level = module in module_level and relative not in OPTIONAL_MODULES
        allowed = required if at_module_level else required | extras
        assert any(d in allowed for d in dists), (
            f"{relative} imports {module} ({', '.join(dists)}) "
            + ("at module level: add it to [project] dependencies" if at_module_level else
               "lazily: add it to [project] dependencies or an extra of [project.optional-dependencies]"))


def test_optional_modules_are_loaded_lazily() -> None:
    """No module imports an optional module at module level (it would make its extra required)."""
    optional = {str(Path(m).with_suffix("")).replace("/", ".") for m in OPTIONAL_MODULES}
    for path in FILES:
        module_level, _ = _imports(ast.parse(path.read_text()))
        assert not module_level & optional, f"{path.relative_to(ROOT)} imports {module_level & optional}"


def test_the_docs_and_lint_pin_the_same_tools() -> None:
    """`make docs` and `make lint` install into one venv: a tool both pin has one version."""
    lint = dict(p.split("==") for p in re.search(r"^LINT_PINS := (.*)$", (ROOT / "Makefile").read_text(),
                                                  re.M).group(1).split())
    docs = dict(re.findall(r"^([\w-]+)==(\S+)", (ROOT / "requirements-docs.txt").read_text(), re.M))
    assert {k: v for k, v in docs.items() if k in lint} == {k: v for k, v in lint.items() if k in docs}
