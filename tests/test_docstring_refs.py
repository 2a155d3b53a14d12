"""The package's docstrings cross-reference in mkdocstrings' syntax, never with Sphinx roles (docs/roles.py:
the API pages would show a role as raw text; the docs build stops on one too)."""
from __future__ import annotations

import importlib.util

from tests.helpers import ROOT

_spec = importlib.util.spec_from_file_location("docs_roles", ROOT / "docs" / "roles.py")
assert _spec is not None and _spec.loader is not None
roles = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(roles)


def test_no_sphinx_roles_in_package_docstrings() -> None:
    leftovers = roles.leftover_roles(ROOT / "pipegnn", ROOT)
    assert not leftovers, roles.MESSAGE + "\n".join(leftovers)


def test_role_lines_finds_roles_in_docstrings_and_comments() -> None:
    source = (
        'def f():\n'
        '    """Calls :func:`g` and\n'
        '    :class:`~pipegnn.config.schema.Config`; [`h`][pipegnn.h] and ``:not a role``."""\n'
        '    # see :py:meth:`Engine.step`\n'
        '    return ":mod:`x`"\n'
    )
    assert roles.role_lines(source) == [(2, ":func:`g`"), (3, ":class:`~pipegnn.config.schema.Config`"),
                                        (4, ":py:meth:`Engine.step`"), (5, ":mod:`x`")]
