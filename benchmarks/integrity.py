"""What the content checksums of the feature files cost (pipegnn.integrity): a feature file of a given
size written through the store (the checksum computed while writing), then read back three ways, side by
side: plain reads of the whole file (the I/O alone), the store's check (the same reads and the CRC-32),
and BLAKE2b over the same reads (the alternative the checksum was chosen against).

    python benchmarks/integrity.py --gib 6 --drop-caches | tee results/benchmarks/integrity.txt
    python benchmarks/integrity.py --gib 6 | tee -a results/benchmarks/integrity.txt

The file is read from the page cache when the machine's memory holds it (as on a machine that just wrote
or read it); ``--drop-caches`` asks the kernel to drop it first (root, where allowed).
"""
from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import time
from pathlib import Path

import torch

from pipegnn.data.features import DiskFeatureStore
from pipegnn.data.features.files import verify_files
from pipegnn.integrity import BLOCK_BYTES


def _blocks(rows: int, cols: int, block_rows: int):
    generator = torch.Generator().manual_seed(0)
    for start in range(0, rows, block_rows):
        yield torch.randn(min(block_rows, rows - start), cols, generator=generator)


def _drop_caches() -> str:
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return "dropped"
    except OSError as e:
        return f"not dropped ({e.strerror})"


def _timed(work) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def _read(path: Path, digest=None) -> None:
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(BLOCK_BYTES), b""):
            if digest is not None:
                digest.update(chunk)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=6.0, help="size of the feature file")
    parser.add_argument("--cols", type=int, default=500, help="features per row (float32)")
    parser.add_argument("--folder", type=Path, default=Path("/tmp/pipegnn-integrity"))
    parser.add_argument("--drop-caches", action="store_true")
    args = parser.parse_args(argv)
    rows = int(args.gib * 2**30 / (4 * args.cols))
    store = DiskFeatureStore(args.folder)
    block_rows = max(1, (64 << 20) // (4 * args.cols))
    write_s = _timed(lambda: store.write(_blocks(rows, args.cols, block_rows), rows=rows, cols=args.cols,
                                         dtype=torch.float32, key="benchmark"))
    path = store.file()
    size = path.stat().st_size
    print(f"feature file: {rows} rows x {args.cols} float32 = {size / 2**30:.2f} GiB, written with its "
          f"checksum in {write_s:.2f} s ({size / write_s / 1e9:.2f} GB/s; random rows generated on the way)")
    cases = {"plain read": lambda: _read(path),
             "store check (CRC-32)": lambda: verify_files(args.folder, "node", "x"),
             "BLAKE2b": lambda: _read(path, hashlib.blake2b(digest_size=16))}
    print(f"{'case':24s} {'seconds':>8s} {'GB/s':>6s} {'over plain read':>16s}   caches")
    plain = None
    for name, work in cases.items():
        caches = _drop_caches() if args.drop_caches else "kept"
        seconds = _timed(work)
        plain = plain or seconds
        print(f"{name:24s} {seconds:8.2f} {size / seconds / 1e9:6.2f} {seconds / plain:15.2f}x   {caches}")
    shutil.rmtree(args.folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
