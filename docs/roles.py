"""Sphinx cross-reference roles (``:func:`run_config```) left in the package's docstrings and comments.

The API pages (mkdocstrings) would show such a role as raw text, which ``mkdocs build --strict`` does not
notice; references are mkdocstrings' Markdown links (``[`run_config`][pipegnn.config.typed.run_config]``),
which it does check. ``docs/gen_api_pages.py`` stops the build on a role; ``tests/test_docstring_refs.py``
runs the same scan in ``make test``.
"""
import io
import re
import tokenize
from pathlib import Path

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


def leftover_roles(package: Path, root: Path) -> list[str]:
    """``file:line: role`` for every role in the ``.py`` files under ``package`` (paths from ``root``)."""
    return [f"{path.relative_to(root).as_posix()}:{line}: {role}"
            for path in sorted(package.rglob("*.py"))
            for line, role in role_lines(path.read_text(encoding="utf-8"))]


MESSAGE = ("Sphinx roles render as raw text on the API pages; write [`shown`][pipegnn.full.path] (a link "
           "that mkdocs build --strict checks) or `shown` (plain code) instead:\n")
