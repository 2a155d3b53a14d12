"""Generate one API reference page per public module of the ``pipegnn`` package (mkdocs-gen-files).

Walks ``pipegnn/``: every ``.py`` file whose dotted path has no part starting with ``_`` (a package's
``__init__.py`` is the package's page; ``__main__.py`` is the command line's page) becomes
``api/<dotted path>.md`` with one ``:::`` directive for mkdocstrings, and ``api/SUMMARY.md`` lists them
as a nested navigation for mkdocs-literate-nav, in two parts: the public modules (a non-empty ``__all__``)
and the internal ones (an empty ``__all__``, or none: each page says so). mkdocstrings reads the sources
statically (griffe): nothing is imported or executed. Before that, a Sphinx role left in a docstring or
comment fails the build (``docs/roles.py``).
"""
import ast
import sys
from pathlib import Path

import mkdocs_gen_files

sys.path.insert(0, str(Path(__file__).resolve().parent))
from roles import MESSAGE, leftover_roles  # noqa: E402 - docs/roles.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pipegnn"

leftovers = leftover_roles(PACKAGE, ROOT)
if leftovers:
    raise RuntimeError(MESSAGE + "\n".join(leftovers))

def _public(path: Path) -> bool:
    """Whether the module at ``path`` is public: its ``__all__`` names something, or is computed
    (``pipegnn.results``'); internal modules' is empty or absent (``pipegnn/__init__.py`` says which are
    public). Read statically, as mkdocstrings reads the sources."""
    for node in ast.parse(path.read_text()).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if getattr(target, "id", None) == "__all__" and getattr(node, "value", None) is not None:
            try:
                return bool(ast.literal_eval(node.value))
            except ValueError:  # computed from the modules it re-exports
                return True
    return False


nav = mkdocs_gen_files.Nav()
for path in sorted(PACKAGE.rglob("*.py")):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if any(part.startswith("_") and part != "__main__" for part in parts):
        continue
    identifier = ".".join(parts)
    doc_path = Path("api", *parts[:-1], f"{parts[-1]}.md")
    if path.name == "__init__.py" and parts != ["pipegnn"]:
        doc_path = Path("api", *parts, "index.md")
    elif parts == ["pipegnn"]:
        doc_path = Path("api", "index.md")
    # "__main__" escaped: the navigation is Markdown, where it would read as bold "main"
    public = _public(path)
    shown = tuple(part.replace("_", "\\_") if part.startswith("__") else part for part in parts)
    nav[("public" if public else "internal", *shown)] = doc_path.relative_to("api").as_posix()
    note = "" if public else ("!!! note \"Internal\"\n    Not part of pipegnn's public API (its `__all__` is "
                              "empty): its names may change from one commit to the next.\n\n")
    with mkdocs_gen_files.open(doc_path, "w") as page:
        page.write(f"# `{identifier}`\n\n{note}::: {identifier}\n")

with mkdocs_gen_files.open("api/SUMMARY.md", "w") as summary:
    summary.writelines(nav.build_literate_nav())
