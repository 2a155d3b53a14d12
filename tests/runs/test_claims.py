"""What claims are made of (pipegnn/runs/claims.py): a claim read from a folder that may hold anything."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipegnn.runs.claims import read_claim


@pytest.mark.parametrize("content, expected", [
    (None, None),  # no claim
    (b'{"pid": 7, "overrides": ["a=1"]}', {"pid": 7, "overrides": ["a=1"]}),
    (b"[1, 2]", {}),  # not an object
    (b"{", {}),  # not JSON
    (b"[" * 100_000 + b"]" * 100_000, {}),  # nested past the parser: was a RecursionError traceback
    (b'{"x": "' + b"a" * (2 << 20) + b'"}', {}),  # past the bound: never read whole
    ("fifo", {}),  # never waited on
])
def test_a_claim_is_read_as_data_within_bounds(tmp_path: Path, content: bytes | str | None,
                                                expected: dict | None) -> None:
    path = tmp_path / ".pipegnn-run.json"
    if content == "fifo":
        os.mkfifo(path)
    elif content is not None:
        path.write_bytes(content)
    assert read_claim(path) == expected
