"""Regenerate tests/data/records: the small results set of the figure and notebook tests.

    OMP_NUM_THREADS=1 .venv/bin/python tests/data/make_records.py     # ~1 minute on 2 cores

Every record is the ``result.json`` of a REAL run (``pipegnn.run``) of the tiny synthetic config of
tests/conftest.py (``make_cfg``: 400-node graph, 2-layer GAT) for 2 epochs; nothing is written by hand.
The folder is emptied first, so the set is exactly:

- ``halo/``: pyg, GPipe on 2 CPU stages, METIS: chunks 1,2,4 x halo none,exact,historical x seeds 0,1 (18)
- ``devices/``: halo none, seed 0, chunks 1,2,4 for dgl on GPipe 2xCPU, and pyg and dgl on one CPU
  (devices=cpu, the single engine) (9); with halo/ that is framework x device setup for the poster figure
- ``partition/``: halo exact, seed 0, chunks 2,4 x partition sequential,random (4); metis is in halo/
- ``invalid/``: devices=cpu4 with the 2-layer model, stopped before training (1)

and, apart from them, ``timeline/``: one run with its stage timeline's ``trace.json`` (engine=pipelining,
two CPU ranks, measured balance, 4 chunks, 3 epochs): the run directory the timeline notebook reads.

There are deliberately no scaling runs (one graph size only): the notebooks must say so and skip
that figure. Accuracies after 2 epochs and CPU timings are noise; tests check structure, not values.
"""
from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
RECORDS = HERE / "records"
TIMELINE = HERE / "timeline"
sys.path.insert(0, str(HERE.parent))  # tests/: conftest.make_cfg

from conftest import make_cfg  # noqa: E402

from pipegnn import run  # noqa: E402


def jobs() -> list[tuple[str, list[str]]]:
    """(output folder relative to records/, config overrides) of every run."""
    out = []
    for halo in ("none", "exact", "historical"):
        for chunks in (1, 2, 4):
            for seed in (0, 1):
                out.append((f"halo/{halo}-c{chunks}-s{seed}",
                            ["devices=cpu2", f"chunks={chunks}", f"microbatch.halo={halo}",
                             f"train.seed={seed}"]))
    for framework, devices in (("dgl", "cpu2"), ("pyg", "cpu"), ("dgl", "cpu")):
        for chunks in (1, 2, 4):
            out.append((f"devices/{framework}-{devices}-c{chunks}",
                        [f"framework={framework}", f"devices={devices}", f"chunks={chunks}",
                         "microbatch.halo=none", "train.seed=0"]))
    for partition in ("sequential", "random"):
        for chunks in (2, 4):
            out.append((f"partition/{partition}-c{chunks}",
                        ["devices=cpu2", f"chunks={chunks}", "microbatch.halo=exact",
                         f"microbatch.partition={partition}", "train.seed=0"]))
    out.append(("invalid/cpu4", ["devices=cpu4", "chunks=2", "train.seed=0"]))
    return out


def _run(output_dir: Path, overrides: list[str]) -> None:
    """One real run (2 epochs unless ``overrides`` say otherwise) writing its record to ``output_dir``."""
    cfg = make_cfg("train.epochs=2", "++cache_root=.cache", *overrides)
    choices = {g: cfg[g]["name"] for g in ("dataset", "model", "framework", "engine")}
    devices = next((o.split("=", 1)[1] for o in overrides if o.startswith("devices=")), None)
    record = run(cfg, output_dir=output_dir, choices={**choices, "devices": devices})
    print(f"{output_dir.relative_to(HERE)}: {record['status']} {record['error'] or ''}", flush=True)


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    for folder in (RECORDS, TIMELINE):
        if folder.exists():
            shutil.rmtree(folder)
    with tempfile.TemporaryDirectory(prefix="pipegnn-records-") as tmp:
        os.chdir(tmp)  # the records name the cache folder relatively: .cache/...
        for name, overrides in jobs():
            _run(RECORDS / name, overrides)
        _run(TIMELINE, ["engine=pipelining", "engine.balance=auto", "chunks=4", "train.epochs=3",
                        "train.seed=0"])


if __name__ == "__main__":
    main()
