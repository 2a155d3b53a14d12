"""The README's sizes of the checkout are what ``experiments/sizes.py`` prints: the archives' count and
parts exactly, the megabytes within 5% (they move a little with every commit), and a checkout stays under
40 MB (the committed figures were re-compressed once with oxipng, pixels, mode and text chunks unchanged:
``tests/results/test_regenerate.py`` compares pixels, not bytes)."""
from __future__ import annotations

import re
import subprocess
import sys

from tests.helpers import ROOT

#: What a clone may carry, tracked files in all (the results stay small enough to clone with the code).
CHECKOUT_MB = 40

_SENTENCE = re.compile(r"(\d+) archives, ([\d.]+) MB, (\d+) in (\S+) parts; a checkout's\s+tracked files are "
                       r"([\d.]+) MB")


def test_the_readme_quotes_the_sizes_the_command_prints() -> None:
    printed = subprocess.run([sys.executable, str(ROOT / "experiments" / "sizes.py")], capture_output=True,
                             text=True, check=True, timeout=60).stdout
    now = _SENTENCE.search(printed)
    said = _SENTENCE.search((ROOT / "README.md").read_text())
    assert now is not None and said is not None, printed
    assert now.group(1, 3, 4) == said.group(1, 3, 4), (printed, said.group(0))
    assert float(now.group(5)) < CHECKOUT_MB, printed
    for group in (2, 5):
        assert abs(float(said.group(group)) / float(now.group(group)) - 1) <= 0.05, (printed, said.group(0))
