"""The commands of README.md and docs/*.md paste and run as written from a checkout after `make run`.

Every fenced shell block (one whose first command is a `make`, `export`, interpreter or tool line) is
read command by command (backslash continuations joined, comments dropped, `export` applied to the
page's environment with ``$PWD`` the checkout):

- a bare ``python``/``pip`` is refused (outside the venv it lacks every package): commands name
  ``.venv/bin/python``; a `make` target must exist in the Makefile; a script or notebook a command names
  must exist;
- ``experiments/train.py`` commands compose (the first value of each swept list), and one that reads a
  Planetoid graph (Cora, CiteSeer, PubMed) comes after an ``export PIPEGNN_DATA=...`` on its page;
- README.md's own commands run, as the notebooks do (tests/test_notebooks.py): in a temporary folder,
  each training command with ``train.epochs=2`` added, then the results commands on what they wrote.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from pipegnn.config.schema import compose_config

from tests.helpers import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
#: Commands the pages show for other machines or programs (a cluster, a tracker's own venv): not run here.
EXTERNAL = ("torchrun", "srun", "mlflow", "python3 -m venv", "experiments/gpu.sh", "nvidia-smi")
#: Pages another part of the project maintains, whose commands are being moved to the venv's Python.
PENDING: set[str] = set()
PLANETOID = {"cora", "citeseer", "pubmed"}
COMMAND = re.compile(r"^(?:[A-Z_]+=\S+\s+)*"
                     r"(make|export|\.venv/bin/\S+|python3?|pip|torchrun|srun|mlflow)(\s|$)")


def shell_blocks(page: Path) -> list[list[str]]:
    """The commands of each fenced block of ``page`` that holds shell commands."""
    blocks, block, inside = [], [], False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            if inside:
                commands = _commands(block)
                if commands and COMMAND.match(commands[0]):
                    blocks.append(commands)
            inside, block = not inside, []
        elif inside:
            block.append(line)
    return blocks


def _commands(lines: list[str]) -> list[str]:
    joined, current = [], ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        text = _strip_comment(current).strip()
        if text:
            joined.append(text)
        current = ""
    return joined


def _strip_comment(line: str) -> str:
    """``line`` without a trailing ``# ...`` comment (a ``#`` outside quotes, after a space)."""
    quote = None
    for i, char in enumerate(line):
        if char in "'\"" and quote in (None, char):
            quote = None if quote else char
        elif char == "#" and quote is None and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def _env_prefix(words: list[str]) -> tuple[dict[str, str], list[str]]:
    env = {}
    while words and re.match(r"^[A-Z_]+=", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    return env, words


def _expand(value: str, pwd: Path) -> str:
    return os.path.expandvars(value.replace("$PWD", str(pwd)).replace("${PWD}", str(pwd)))


def _first_values(overrides: list[str]) -> list[str]:
    """Each ``key=a,b,c`` of a sweep as ``key=a`` (commas inside brackets kept)."""
    out = []
    for item in overrides:
        key, sep, value = item.partition("=")
        depth, cut = 0, len(value)
        for i, char in enumerate(value):
            depth += char in "[({"
            depth -= char in "])}"
            if char == "," and depth == 0:
                cut = i
                break
        out.append(f"{key}{sep}{value[:cut]}")
    return out


def _makefile_targets() -> set[str]:
    return set(re.findall(r"^([A-Za-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))


def _exports(blocks: list[list[str]]) -> dict[str, str]:
    """The variables the ``export`` lines of ``blocks`` set (``$PWD``: the checkout)."""
    env = {}
    for command in (c for block in blocks for c in block if c.startswith("export ")):
        for item in shlex.split(command)[1:]:
            key, _, value = item.partition("=")
            env[key] = _expand(value, ROOT)
    return env


#: (page, block, what the page exported before the block)
CASES = [pytest.param(page, block, _exports(blocks[:i]), id=f"{page.name}:{i}") for page in PAGES
         for blocks in [shell_blocks(page)] for i, block in enumerate(blocks)]


def test_the_pages_have_shell_blocks() -> None:
    assert any(page.name == "README.md" for page, *_ in (c.values for c in CASES))
    assert len(CASES) >= 10


@pytest.mark.parametrize("page, block, exported", CASES)
def test_each_command_is_runnable_as_written(page: Path, block: list[str], exported: dict[str, str]) -> None:
    if page.name in PENDING and any(re.match(r"^(?:[A-Z_]+=\S+\s+)*python ", c) for c in block):
        pytest.xfail(f"{page.name}: its commands still call a bare python")
    env = dict(exported)
    for command in block:
        if command.startswith(EXTERNAL) or command.startswith("~/"):  # another machine's or venv's program
            continue
        words = shlex.split(command)
        if words[0] == "export":
            for item in words[1:]:
                key, _, value = item.partition("=")
                env[key] = _expand(value, ROOT)
            continue
        _, words = _env_prefix(words)
        program = words[0]
        assert program not in ("python", "python3", "pip", "pytest"), (
            f"{page.name}: `{command}` runs a bare {program}, which outside the venv has none of pipegnn's "
            "packages: write .venv/bin/{program}")
        if program == "make":
            targets = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
            assert set(targets) <= _makefile_targets(), f"{page.name}: `{command}`: no such make target"
            continue
        assert program.startswith(".venv/bin/"), f"{page.name}: `{command}`: unknown program"
        assert (ROOT / program).exists() or not VENV_PYTHON.exists(), f"{page.name}: {program} missing"
        args = words[1:]
        if args[:1] == ["-m"]:
            module = args[1]
            if module == "pytest":
                for path in (a for a in args[2:] if not a.startswith("-")):
                    assert (ROOT / path).exists(), f"{page.name}: `{command}`: {path} missing"
            else:
                import importlib.util
                assert importlib.util.find_spec(module) is not None, f"{page.name}: no module {module}"
            continue
        if args and args[0].endswith(".py"):
            assert (ROOT / args[0]).is_file(), f"{page.name}: `{command}`: {args[0]} missing"
        if args and args[0] == "experiments/train.py":
            _check_composes(page, command, args[1:], env)


def _check_composes(page: Path, command: str, overrides: list[str], env: dict[str, str]) -> None:
    overrides = _first_values([o for o in overrides if o not in ("-m", "--multirun")])
    cfg = compose_config(overrides, return_hydra_config=True)
    if str(cfg.dataset.name) in PLANETOID:
        assert "PIPEGNN_DATA" in env, (
            f"{page.name}: `{command}` reads {cfg.dataset.name}'s raw files, but the page exports no "
            "PIPEGNN_DATA before it (without it the dataset is downloaded, and the run is invalid offline)")


def _readme_commands() -> list[str]:
    return [c for block in shell_blocks(ROOT / "README.md") for c in block if not c.startswith("make ")]


@pytest.mark.slow  # make test-all (30 s: every README command runs); the pages' commands parse in make test
def test_the_readme_commands_run(tmp_path: Path) -> None:
    """README.md's commands, in order, in a temporary folder: exports applied, the venv's Python and the
    checkout's scripts by absolute path, every training command with ``train.epochs=2`` added."""
    if not VENV_PYTHON.exists():
        pytest.skip("no .venv (make setup): the README's commands name it")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    ran = 0
    for command in _readme_commands():
        words = shlex.split(command)
        if words[0] == "export":
            for item in words[1:]:
                key, _, value = item.partition("=")
                env[key] = _expand(value, ROOT)
            continue
        prefix, words = _env_prefix(words)
        checkout = (".venv/", "experiments/", "notebooks/")
        words = [str(ROOT / w) if w.startswith(checkout) else w for w in words]
        if "-m" in words[1:2] and words[2] == "pytest":
            continue  # a notebook: tests/test_notebooks.py runs them
        training = words[1].endswith("experiments/train.py")
        if training:
            cfg = compose_config(_first_values([w for w in words[2:] if w != "-m"]))
            root = env.get("PIPEGNN_DATA")
            if str(cfg.dataset.name) in PLANETOID and not (root and Path(root).is_dir()):
                pytest.skip(f"PIPEGNN_DATA={root}: no raw {cfg.dataset.name} here")
            words.append("train.epochs=2")
        done = subprocess.run(words, cwd=tmp_path, env={**env, **prefix}, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, f"`{command}` exited {done.returncode}:\n{done.stderr[-3000:]}"
        assert "WARNING" not in done.stderr, f"`{command}` warned:\n{done.stderr[-3000:]}"
        ran += 1
    assert ran >= 5
