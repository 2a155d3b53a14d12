"""The checkout's sizes the README quotes: the committed results' archives (results/reference and
results/superseded: how many, how large, how many split into parts) and the tracked files, as the
README's sentence says them.

    .venv/bin/python experiments/sizes.py

Counted from git's index (tracked files only, as a clone holds them); ``tests/test_readme_sizes.py``
checks that the README says what this prints.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: A sweep's archive, or a later part of one (records-2.jsonl.gz, ...).
_PART = re.compile(r"records(-(?P<part>\d+))?\.jsonl\.gz")


def sizes(root: Path = ROOT) -> str:
    """``"<n> archives, <MB> MB, <k> of them in two parts ...; a checkout's tracked files are <MB> MB"``."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=root, check=True, capture_output=True,
                           text=True).stdout.split("\0")
    tracked = [root / f for f in files if f and (root / f).is_file()]
    archives: dict[Path, list[int]] = {}
    for path in tracked:
        m = _PART.fullmatch(path.name)
        if m is not None and path.parent.parent.name in ("reference", "superseded"):
            archives.setdefault(path.parent, []).append(path.stat().st_size)
    parts = sorted({len(p) for p in archives.values() if len(p) > 1})
    split = sum(1 for p in archives.values() if len(p) > 1)
    mb = sum(map(sum, archives.values())) / 1e6
    total = sum(p.stat().st_size for p in tracked) / 1e6
    return (f"{len(archives)} archives, {mb:.1f} MB, {split} in {'/'.join(map(str, parts)) or 'no'} parts; "
            f"a checkout's tracked files are {total:.1f} MB")


if __name__ == "__main__":
    print(sizes())
    sys.exit(0)
