"""The package's docstrings cross-reference in mkdocstrings' syntax, never with Sphinx roles.

The API pages (docs/gen_api_pages.py, mkdocstrings) render a role such as ``:func:`run_config``` as raw
text, and ``mkdocs build --strict`` does not notice it; a reference written as mkdocstrings' Markdown link,
``[`run_config`][pipegnn.runconfig.run_config]``, renders as a link, and the strict build fails when its
target does not resolve. This test finds any role left in a docstring or comment of ``pipegnn/``.
"""
from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

from tests.helpers import ROOT

#: Being converted: files and folders (ending in /) whose roles are still to be rewritten; remove each
#: entry once ``.cache/convert_roles.py`` (or a hand edit) has converted it.
EXCLUDED = (
    "pipegnn/training/",
    "pipegnn/config.py",
    "pipegnn/runconfig.py",
    "pipegnn/data/planetoid.py",
    "pipegnn/data/features/",
)

#: A Sphinx cross-reference role (``:func:`x```, ``:py:class:`~x```, ...).
ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|attr|data|const|exc|obj|any|ref):`[^`]*`")

_TEXT_TOKENS = {tokenize.STRING, tokenize.COMMENT} | (
    {tokenize.FSTRING_MIDDLE} if hasattr(tokenize, "FSTRING_MIDDLE") else set())


def role_lines(source: str) -> list[tuple[int, str]]:
    """(line, role) of every role in the strings and comments of a module's source."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in _TEXT_TOKENS:
            for match in ROLE.finditer(token.string):
                found.append((token.start[0] + token.string.count("\n", 0, match.start()), match.group()))
    return found


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _excluded(relative: str) -> bool:
    return any(relative.startswith(entry) if entry.endswith("/") else relative == entry for entry in EXCLUDED)


def test_no_sphinx_roles_in_package_docstrings() -> None:
    leftovers = [f"{_relative(path)}:{line}: {role}"
                 for path in sorted((ROOT / "pipegnn").rglob("*.py")) if not _excluded(_relative(path))
                 for line, role in role_lines(path.read_text(encoding="utf-8"))]
    assert not leftovers, (
        "Sphinx roles render as raw text on the API pages; write [`shown`][pipegnn.full.path] (a link "
        "that mkdocs build --strict checks) or `shown` (plain code) instead:\n" + "\n".join(leftovers))


def test_excluded_entries_still_hold_roles() -> None:
    """An entry of EXCLUDED without a role left (converted) is to be removed, so that it stays checked."""
    done = []
    for entry in EXCLUDED:
        target = ROOT / entry
        files = sorted(target.rglob("*.py")) if entry.endswith("/") else [target]
        if not any(role_lines(f.read_text(encoding="utf-8")) for f in files if f.exists()):
            done.append(entry)
    assert not done, f"no Sphinx role left in {done}: remove them from EXCLUDED ({_relative(Path(__file__))})"


def test_role_lines_finds_roles_in_docstrings_and_comments() -> None:
    source = (
        'def f():\n'
        '    """Calls :func:`g` and\n'
        '    :class:`~pipegnn.schema.Config`; [`h`][pipegnn.h] and ``:not a role``."""\n'
        '    # see :py:meth:`Engine.step`\n'
        '    return ":mod:`x`"\n'
    )
    assert role_lines(source) == [(2, ":func:`g`"), (3, ":class:`~pipegnn.schema.Config`"),
                                  (4, ":py:meth:`Engine.step`"), (5, ":mod:`x`")]
