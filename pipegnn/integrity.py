"""Content checksums of the files a run caches and reads back (plans, graphs, feature files and their
row order, checkpoints): a file damaged in place, its size unchanged, is found when it is read and is
rebuilt or refused, never trained on.

CRC-32 (``zlib.crc32``, streaming): it finds damage (flipped or overwritten bytes, another file's
content), not a forger; no cached file can run code anyway (``weights_only=True``, JSON, raw bytes).
Measured here on a 6 GiB feature file (``benchmarks/integrity.py``, ``results/benchmarks/integrity.txt``):
checking it takes 6.5 s from the page cache (a plain read 4.8 s) and 8.8 s from disk (a plain read
8.8-10.1 s: the disk dominates); BLAKE2b took 13.8 and 17.0 s.
"""
from __future__ import annotations

import sys
import zlib
from pathlib import Path
from typing import Any, Iterable

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

#: The key under which a stored state keeps its own checksum.
CHECKSUM = "checksum"
#: Bytes read at a time when a file is checked.
BLOCK_BYTES = 64 << 20


def crc32(chunks: Iterable[Any], crc: int = 0) -> int:
    """CRC-32 of byte chunks (anything with the buffer protocol), continuing from ``crc``."""
    for chunk in chunks:
        crc = zlib.crc32(chunk, crc)
    return crc


def _name(crc: int) -> str:
    return f"crc32:{crc:08x}"


def _walk(obj: Any, crc: int) -> int:
    """Fold ``obj`` into ``crc``: dicts by sorted key, sequences in order, tensors by dtype, shape and
    bytes, anything else by its ``repr``."""
    if isinstance(obj, dict):
        for key in sorted(obj, key=str):
            crc = _walk(obj[key], zlib.crc32(f"<{key!r}>".encode(), crc))
        return crc
    if isinstance(obj, (list, tuple)):
        crc = zlib.crc32(f"[{len(obj)}".encode(), crc)
        for item in obj:
            crc = _walk(item, crc)
        return crc
    torch = sys.modules.get("torch")  # no object is a tensor before torch is imported: JSON needs none
    if torch is not None and isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous()
        crc = zlib.crc32(f"{t.dtype}{tuple(t.shape)}".encode(), crc)
        return zlib.crc32(t.view(-1).view(torch.uint8).numpy(), crc) if t.numel() else crc
    return zlib.crc32(repr(obj).encode(), crc)


def content_checksum(obj: Any) -> str:
    """The checksum of a state of dicts, lists, tensors and scalars (``crc32:`` and 8 hex digits)."""
    return _name(_walk(obj, 0))


def seal(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with its checksum under `CHECKSUM`, to be saved as is."""
    body = {k: v for k, v in state.items() if k != CHECKSUM}
    return {**body, CHECKSUM: content_checksum(body)}


def unsealed(state: Any) -> str | None:
    """Why a loaded state does not carry its own content (None if it does): not a dict, no checksum
    (written before checksums, or cut), or a checksum that its content does not give."""
    if not isinstance(state, dict):
        return f"not a stored state ({type(state).__name__})"
    stored = state.get(CHECKSUM)
    if stored is None:
        return "no content checksum"
    actual = content_checksum({k: v for k, v in state.items() if k != CHECKSUM})
    if actual != stored:
        return f"content checksum {actual}, stored {stored}: the file was damaged after it was written"
    return None


def file_checksum(path: str | Path) -> str:
    """The checksum of a file's bytes, read `BLOCK_BYTES` at a time."""
    with open(path, "rb") as f:
        return _name(crc32(iter(lambda: f.read(BLOCK_BYTES), b"")))


def stream_checksum(chunks: Iterable[Any]) -> str:
    """The checksum that [`file_checksum`][pipegnn.integrity.file_checksum] gives a file made of
    ``chunks``."""
    return _name(crc32(chunks))
